"""The step audit (megatron_scale/testing/step_audit.py) over one training step (forward and
backward) of every method, on the CPU: no host sync inside any step (what whole-iteration CUDA
graphs need), and the bytes each step moves without computing, Preserve against full fine-tuning.

The shape keeps Llama-3.2-1B's proportions (head 32 = d/8, KV groups a quarter of the heads, FFN 4d)
at d = 256, 2 layers, 64 tokens; attention is SDPA (the CUDA default; no s x s score copies).
Copies scale with tokens x widths, so the ratios are those of the 1B shape up to the two layers'
share of the embedding, the output layer and the final norm. Bytes are counted, never timed.

What this finds (and holds):
- te_linear.py's composition (--scale-te-linear modules, today's TE path) moves 4.27x full
  fine-tuning's bytes: its sliced inputs made contiguous, the interleaved outputs concatenated and
  the slices' zero-filled gradients (the H200 profile's +19 ms of copies). The audit fails it at
  the budget te_fused.py meets.
- te_fused.py's composition moves 1.12x full fine-tuning's, within the issue's 1.15x: the residual
  stream is planar (planar.py: all tokens' x, then all tokens' x_up, in one tensor), so every norm
  reads its halves as views and every row linear writes y and y_up straight into them. Its own
  bytes are listed (`_fused_copies`): each norm backward joins its two gradients into the planar
  gradient (TE's rmsnorm_bwd takes no output), query, key and value each put the base and the new
  heads side by side (megatron-core's attention reads one tensor each), proj copies its base heads
  for the base GEMM's operand, and the embedding, the output layer and the final norm's backward
  join or split the planes once each. The rest is megatron-core's, as in full fine-tuning
  (unfused RoPE's concatenations, the split of query, key and value), wider by the new heads.
- The local path runs the same composition over torch ops with --scale-local-linear planar
  (torch_ops.py: the same five calls, the final norm written into its planes without a copy on the
  CPU): 1.12x, the same bytes as on TE. fused.py (--scale-local-linear fused, the default, which
  also decodes) moves 2.97x: its interleaved outputs copied into place, the split norm's
  concatenation and its slices' zero-filled gradients; it does not hold the stream planar, so the
  issue's 1.15x is not reached there (`test_the_token_major_local_path_at_1p15x`, a strict xfail).
- These three are measured at --scale-base-backward full (the backward te64 built for). The skip,
  issue 62's default, saves FLOPs, not copies (`test_the_skip_copies_measured`): 1.54x on TE and
  planar, 3.60x on fused.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests._dist import run_ranks

D, HEADS, GROUPS, FFN, SEQ, VOCAB, LAYERS = 256, 8, 2, 1024, 64, 512, 2
BUDGET = 1.15
"""Preserve's copy bytes over full fine-tuning's: the issue's target (te_fused: 1.12x)."""


def _methods(args: Any) -> dict[str, Any]:
    from megatron_scale.methods import Freeze, Full, Lora, Scale
    from megatron_scale.methods.llama_pro import LlamaPro
    from megatron_scale.model.layers.lora import LoraSettings
    from megatron_scale.scale_config import ScaleConfig

    def scale(variant: str, **kw: Any) -> Any:
        return Scale.of(ScaleConfig(variant=variant, init="normal", **kw), args)

    return {"full": Full(), "freeze": Freeze(layers=1), "llama-pro": LlamaPro(blocks=1),
            "lora": Lora(settings=LoraSettings(rank=4)), "scale-preserve": scale("preserve", base_backward="full"),
            "scale-preserve-skip": scale("preserve"),
            "scale-adapt": scale("adapt", adapt_modules=("qkv", "proj", "fc1", "fc2")), "scale-route": scale("route")}


def _body(rank: int, world: int) -> dict[str, Any]:
    import torch

    from megatron_scale.distributed import init_distributed
    from megatron_scale.model.args import LlamaArgs
    from megatron_scale.model.build import Kernels, build_model, build_scale_gpt
    from megatron_scale.model.inputs import causal_mask
    from megatron_scale.model.layers import te
    from megatron_scale.model.layers.sdpa import SDPAttention
    from megatron_scale.model.layers.spec import te_backend
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.testing.step_audit import audited
    from tests.model import _te_standin

    dev = init_distributed(1, 1, device="cpu", seed=1)
    te.use_stand_in(_te_standin)
    args = LlamaArgs(num_layers=LAYERS, hidden_size=D, num_attention_heads=HEADS, num_query_groups=GROUPS,
                     ffn_hidden_size=FFN, kv_channels=D // HEADS, vocab_size=VOCAB, max_position_embeddings=SEQ)
    kernels = Kernels(initialize=True, attention_backend="sdpa")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (1, SEQ + 1), generator=g).to(dev)
    pos, mask = torch.arange(SEQ, device=dev)[None], causal_mask(SEQ, dev)

    def step(model: Any) -> None:
        model(ids[:, :-1], pos, mask, labels=ids[:, 1:]).float().mean().backward()

    models = {name: build_model(args, m, kernels=kernels).to(dev) for name, m in _methods(args).items()}
    for name, linear, backward in (("te_modules", "modules", "full"), ("te_fused", "fused", "full"),
                                   ("te_fused_skip", "fused", "auto")):
        models[name] = build_scale_gpt(
            args.transformer_config(initialize=True), ScaleConfig(variant="preserve", init="normal", base_backward=backward),
            vocab_size=VOCAB, max_sequence_length=SEQ, backend=te_backend(core_attention=SDPAttention, linear=linear),
            position_embedding_type="rope").to(dev)
    planar = Kernels(initialize=True, attention_backend="sdpa", local_linear="planar")
    for name, m in (("local_planar", "scale-preserve"), ("local_planar_skip", "scale-preserve-skip")):
        models[name] = build_model(args, _methods(args)[m], kernels=planar).to(dev)
    out: dict[str, Any] = {}
    for name, model in models.items():
        step(model)  # lazily built state (rotary caches, ...) outside the audited step
        _, a = audited(step, model, sites=True)
        out[name] = {"bytes": a.total_copy_bytes, "syncs": a.syncs, "sites": dict(a.copy_sites),
                     "summary": a.summary()}
    dims = models["te_fused"].scale_dims
    out["dims"] = {"width": dims.hidden + dims.hidden_up, "qkv": dims.qkv_rows(False) + dims.qkv_rows(True),
                   "heads": dims.heads * dims.head_dim}

    with torch.no_grad():  # a sync the audit must see: .item() inside a step
        _, a = audited(lambda: float(models["full"](ids[:, :-1], pos, mask).sum()))
    out["item_seen"] = [op for op, _ in a.syncs]
    return out


@pytest.fixture(scope="module")
def audit() -> dict[str, Any]:
    return run_ranks(_body, 1)[0]


def _fused_copies(dims: dict[str, int]) -> int:
    """te_fused.py's and planar.py's own bytes per step (fp32, forward and backward), by construction."""
    w, qkv, heads = dims["width"], dims["qkv"], dims["heads"]
    per_layer = 2 * w + qkv + heads  # two norm backwards' joins, q/k/v side by side, proj's base heads
    once = 3 * w  # the embedding's join, the output layer's split backward, the final norm backward's join
    return (per_layer * LAYERS + once) * SEQ * 4


OWN = ("te_fused.py", "planar.py", "torch_ops.py", "_NormColumnBackward", "_RowBackward", "_SwiGLUPairBackward", "_PlanesBackward",
       "_JoinBackward", "_PlanarNormBackward")
"""Copy sites of the one-node composition's own code (its files and its autograd nodes)."""


def test_no_method_syncs_the_host_inside_its_step(audit: dict[str, Any]) -> None:
    for name, r in audit.items():
        if name not in ("dims", "item_seen"):
            assert r["syncs"] == [], (name, r["summary"])
    assert "_local_scalar_dense" in audit["item_seen"]  # the audit does see one


@pytest.mark.parametrize("name", ["te_fused", "local_planar"])
def test_the_one_node_copies_are_its_listed_ones_and_within_budget(audit: dict[str, Any], name: str) -> None:
    """On TE (the stand-in) and on the local path (--scale-local-linear planar: torch_ops.py)."""
    fused, full = audit[name], audit["full"]
    own = sum(v for k, v in fused["sites"].items() if any(o in k for o in OWN))
    assert own == _fused_copies(audit["dims"]), fused["summary"]
    assert fused["bytes"] <= BUDGET * full["bytes"], (fused["bytes"] / full["bytes"], fused["summary"])


def test_the_audit_fails_te_linear_at_that_budget(audit: dict[str, Any]) -> None:
    """Today's TE composition (two or three te.Linear per upscaled linear): the copies the H200
    profile found, over twice the one-node composition's."""
    modules, fused, full = audit["te_modules"], audit["te_fused"], audit["full"]
    assert modules["bytes"] > BUDGET * full["bytes"] and modules["bytes"] > 2 * fused["bytes"], modules["summary"]
    assert any("interleave_chunks" in k for k in modules["sites"]), modules["summary"]


def test_the_local_path_copies_measured(audit: dict[str, Any]) -> None:
    """fused.py (skip62's and the local path's files): 2.97x today; te_fused's planar stream
    (planar.py) would bring it near te_fused's."""
    local, full = audit["scale-preserve"], audit["full"]
    assert 2.5 * full["bytes"] < local["bytes"] < 3.5 * full["bytes"], local["summary"]


@pytest.mark.xfail(strict=True, reason="fused.py (--scale-local-linear fused, the default) holds the stream token-major: "
                   "its interleaved outputs, the split norm's concatenation and the slices' zero-fills stay, 2.97x; "
                   "--scale-local-linear planar is within (test_the_one_node_copies_...)")
def test_the_token_major_local_path_at_1p15x(audit: dict[str, Any]) -> None:
    assert audit["scale-preserve"]["bytes"] <= 1.15 * audit["full"]["bytes"]


def test_the_skip_copies_measured(audit: dict[str, Any]) -> None:
    """The skip (issue 62, the default) saves FLOPs, not copies: split_attention.py copies the new
    heads apart and joins the base heads' output back, and the base halves' gradients are zeros
    written where the full backward wrote results (the norms', the row linears'; the local path's
    gemms), and proj's W22 made contiguous for its dgrad. Measured: te_fused and local_planar 1.54x full fine-tuning's bytes (1.37x its full backward's), the
    local path 3.60x (1.21x)."""
    full = audit["full"]["bytes"]
    for name, skip_name, bound in (("te_fused", "te_fused_skip", 1.45), ("local_planar", "local_planar_skip", 1.45),
                                   ("scale-preserve", "scale-preserve-skip", 1.25)):
        with_full, skip = audit[name], audit[skip_name]
        assert with_full["bytes"] < skip["bytes"] < bound * with_full["bytes"], (name, skip["summary"])
        grew = {k for k in set(skip["sites"]) | set(with_full["sites"])
                if skip["sites"].get(k, 0) > with_full["sites"].get(k, 0)}
        assert all("split_attention.py" in k or "norm.py" in k or "_NewHeadsBackward" in k
                   or k.startswith(("zero_", "copy_", "slice_backward")) or k == "clone at backward of _RowBackward"
                   for k in grew), (name, grew)
        assert any("split_attention.py" in k for k in grew), (name, grew)
    assert audit["te_fused_skip"]["bytes"] <= 1.6 * full and audit["local_planar_skip"]["bytes"] <= 1.6 * full


def table(audit: dict[str, Any]) -> str:
    """Every composition's copy bytes per step, and as a multiple of full fine-tuning's."""
    full = audit["full"]["bytes"]
    rows = [(k, v["bytes"]) for k, v in audit.items() if isinstance(v, dict) and "bytes" in v]
    lines = ["| composition | copy bytes per step | x full fine-tuning |", "|---|---:|---:|"]
    lines += [f"| {k} | {b:,} | {b / full:.3f}x |" for k, b in rows]
    return "\n".join(lines)


if __name__ == "__main__":  # python -m tests.model.test_step_audit: the table docs/performance.md quotes
    print(table(run_ranks(_body, 1)[0]))
