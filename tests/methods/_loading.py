"""Models as the training entry builds them for its flags and fills them from --load (methods/load.py
load_model with the planned method: each method's load_initial), and the rank body that checks
LoRA's loading (run by tests/training/test_train_entry.py on its trained runs)."""

from __future__ import annotations

from typing import Any

import torch

from megatron_scale.testing.runs import MODEL


class EntryModel:
    """A model the training entry would build for these flags, and its loader (--load)."""

    def __init__(self, method: str, tp: int = 1, *extra: str) -> None:
        from megatron_scale.training.config import parse
        from megatron_scale.training.plan import architecture, build_method

        # --data-path is not read: these helpers only build models
        cfg = parse([*MODEL, "--train-iters", "1", "--data-path", "unused", "--method", method,
                     "--tensor-model-parallel-size", str(tp), *extra])
        self.arch, self.tp = architecture(cfg), tp
        self.method = build_method(cfg, self.arch)

    def build(self) -> Any:
        from megatron_scale.model.build import Kernels, Parallel, build_model

        self.model = build_model(self.arch, self.method, Parallel(tp=self.tp), Kernels(initialize=True))
        return self.model

    def load(self, ckpt: str) -> str:
        """The model built and filled from --load `ckpt` as the training entry does it."""
        from megatron_scale.methods.load import load_model
        from megatron_scale.model.build import Kernels, Parallel

        loaded = load_model(ckpt, Parallel(tp=self.tp), method=self.method, args=self.arch, kernels=Kernels(initialize=True))
        self.model = loaded.model
        return loaded.loaded


def built(method: str, tp: int = 1, *extra: str) -> Any:
    return EntryModel(method, tp, *extra).build()


def loaded(ckpt: str, method: str, tp: int = 1, *extra: str) -> tuple[Any, str]:
    m = EntryModel(method, tp, *extra)
    loaded = m.load(ckpt)
    return m.model, loaded


def lora_checks(rank: int, world: int, base_ckpt: str, lora_ckpt: str) -> dict[str, Any]:
    """Lora's first weights (load_initial through methods/load.py load_model), at TP=1 and TP=2:
    from the base (fresh adapters, the base function bitwise) and from its own checkpoint saved at
    TP=2; the refusals (a LoRA checkpoint into a plain model, other LoRA settings, another base
    shape); dropout off in eval mode. tests/training/test_train_entry.py runs it on its runs."""
    from megatron_scale import _mcore as mc
    from megatron_scale.checkpoint import CheckpointError
    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.layers.lora import is_lora_key
    from megatron_scale.model.weights.state import global_state_dict, sharded_tensors
    from tests import _tiny

    def logits(model: Any) -> torch.Tensor:  # the whole vocabulary at any TP
        with torch.no_grad():
            z = model(b["input_ids"], b["position_ids"], b["attention_mask"])
            return mc.gather_from_tensor_model_parallel_region(z) if z.shape[-1] < _tiny.VOCAB else z

    def refused(fn: Any) -> str:
        try:
            fn()
        except (CheckpointError, ValueError) as e:
            return str(e)
        return ""

    init_distributed(1, 1, device="cpu")  # TP=1 (x DP=2), then TP=2
    b = _tiny.batch(seed=7)
    out: dict[Any, Any] = {}
    for tp in (1, 2):
        if tp == 2:
            mc.parallel_state.destroy_model_parallel()
            mc.parallel_state.initialize_model_parallel(2)
            mc.model_parallel_cuda_manual_seed(1234, inference_rng_tracker=True)
        base = loaded(base_ckpt, "full", tp)[0].to(_tiny.device()).eval()
        fresh, kind = loaded(base_ckpt, "lora", tp)
        fresh = fresh.to(_tiny.device()).eval()
        r: dict[str, Any] = {"kind_base": kind}
        r["bitwise"] = torch.equal(logits(fresh), logits(base))
        keys = {st.key for _, st in sharded_tensors(fresh)}
        r["base_keys_kept"] = {k for k in keys if not is_lora_key(k)} == {st.key for _, st in sharded_tensors(base)}
        r["lora_keys"] = sorted(k for k in keys if is_lora_key(k))
        r["fresh"] = {k: v for k, v in global_state_dict(fresh).items() if is_lora_key(k)}
        trained, r["kind_lora"] = loaded(lora_ckpt, "lora", tp)  # saved at TP=2
        trained = trained.to(_tiny.device()).eval()
        r["trained"] = global_state_dict(trained)
        r["trained_logits"] = logits(trained)
        r["moved"] = float((r["trained_logits"] - logits(base)).abs().max())
        out[tp] = r
    out["into_full"] = refused(lambda: loaded(lora_ckpt, "full", 2))
    out["alpha"] = refused(lambda: loaded(lora_ckpt, "lora", 2, "--lora-alpha", "32"))
    out["rank"] = refused(lambda: loaded(lora_ckpt, "lora", 2, "--lora-rank", "4"))
    # a base checkpoint of another shape: one error naming --load and the offending key
    out["other_shape"] = refused(lambda: loaded(base_ckpt, "full", 2, "--ffn-hidden-size", "64"))
    dropped = loaded(lora_ckpt, "lora", 2, "--lora-dropout", "0.5")[0].to(_tiny.device())
    out["dropout_eval_same"] = torch.equal(logits(dropped.eval()), out[2]["trained_logits"])
    out["dropout_train_differs"] = not torch.equal(logits(dropped.train()), out[2]["trained_logits"])
    return out
