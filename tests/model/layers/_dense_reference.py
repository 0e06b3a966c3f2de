"""Every upscaled module equals a dense reference, forward and backward, at TP=1 and TP=2: the
shared harness of tests/model/layers/test_linear.py, test_norm.py, test_heads.py and test_partition.py.

scale-method.md, "What must hold" 4. For each module the test takes the GLOBAL tensors
(`global_state_dict`, checkpoint keys) and builds the reference from them alone:

    M = [[W, W12 or 0], [W21, W22]]  in a plain torch.nn.Linear(n+n', m+m'), applied to [x; x_up]

and compares what each TP rank's module computes with it, through a global<->local mapping written
apart from partition.py (_tp_index.py):
  - column-parallel (linear_qkv chunks=1, linear_fc1 chunks=2): rank r holds piece r (of tp) of
    each of the `chunks` equal row-chunks of the base block and of the new block; its local output
    is [base chunk0_r, new chunk0_r, base chunk1_r, new chunk1_r, ...];
  - row-parallel (linear_proj, linear_fc2): rank r gets [x[r-th n/tp slice]; x_up[r-th n'/tp
    slice]] and returns the full [y; y_up];
  - vocab-parallel (embedding, output layer): rank r holds rows [V/tp r, V/tp (r+1)) of every table.
Compared, with loss = (out * G).sum() for a fixed random G, to fp32 rounding (ATOL):
  out       the module's (local) output vs. the reference's (mapped) output;
  grad_in   the input gradient (all-reduced over TP for column-parallel inputs);
  grad_W21 / grad_W22 / grad_W12   local blocks of weight_up = [W21_r W22_r] and of W12 vs. the
            matching slices of the dense Linear's weight gradient;
  frozen_*  the frozen base tensor gets no gradient (.grad is None, requires_grad False).
Modules: ScaleColumnParallelLinear as linear_qkv and linear_fc1, ScaleRowParallelLinear as
linear_proj and linear_fc2, each Preserve (W12 absent) and Adapt (W12 set to random nonzero values,
every block random, so every block matters); SplitRMSNorm (reference: the two RMS norms written
out); ScaleVocabParallelEmbedding (reference: nn.Linear(V, d+d') on one-hot ids);
ScaleOutputLayer untied and tied (base weight passed to forward, taken from an embedding), heads
"adapt" (z_a = [W_out W_out_up][h; h_up]) and "preserve" (z_p = [W_out 0][h; h_up], and
W_out_up gets no gradient).
One 2-rank gloo spawn (`results()`, once per test process) runs everything at TP=1 (two identical
data-parallel replicas), then at TP=2. Every rank's max errors come back; each test file checks
its modules' (tp, module, quantity) set is complete (`checked`) and their errors (`errors`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests import _tiny
from tests._dist import run_ranks
from tests.model.layers import _tp_index as tp_index

ATOL = 1e-5
TPS = (1, 2)
S, B = 5, 3  # sequence, batch
D, D_UP, V = 12, 4, 10  # hidden, new hidden, vocab (embedding, norm, output layer)

# name: (parallel, chunks, n, n', m, m'); all distinct, divisible as TP=2 needs.
LINEARS: dict[str, tuple[str, int, int, int, int, int]] = {
    "linear_qkv": ("column", 1, 12, 6, 24, 8),
    "linear_fc1": ("column", 2, 12, 6, 32, 8),
    "linear_proj": ("row", 1, 24, 8, 12, 6),
    "linear_fc2": ("row", 1, 16, 4, 12, 6),
}


def _init(w: torch.Tensor) -> torch.Tensor:
    return torch.nn.init.normal_(w, std=0.1)


def _rand(seed: int, *shape: int, std: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * std


def _dense(weight: torch.Tensor) -> nn.Linear:
    """A plain bias-free torch.nn.Linear holding the full block matrix `weight` [out, in]."""
    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        lin.weight.copy_(weight)
    return lin


# ---- checks (run inside each rank) ----

class _Recorder:
    def __init__(self, tp: int) -> None:
        self.tp = tp
        self.errors: dict[tuple[int, str, str], float] = {}
        self.keys: dict[tuple[int, str], list[str]] = {}

    def err(self, module: str, quantity: str, got: torch.Tensor | None, want: torch.Tensor) -> None:
        if got is None:
            raise AssertionError(f"tp={self.tp} {module} {quantity}: no tensor (gradient missing?)")
        if got.shape != want.shape:
            raise AssertionError(f"tp={self.tp} {module} {quantity}: shape {tuple(got.shape)} != {tuple(want.shape)}")
        self.errors[(self.tp, module, quantity)] = (got.detach() - want.detach()).abs().max().item()

    def frozen(self, module: str, p: torch.Tensor) -> None:
        self.errors[(self.tp, module, "frozen_no_grad")] = 0.0 if (p.grad is None and not p.requires_grad) else 1.0


def _fill(params: list[torch.Tensor | None], seed: int, std: float = 0.3) -> None:
    """Random values (distinct per TP rank via `seed`) in every given local block."""
    with torch.no_grad():
        for i, p in enumerate(params):
            if p is not None:
                p.copy_(_rand(seed * 10 + i, *p.shape, std=std))


def _check_linear(rec: _Recorder, name: str, adapt: bool, r: int, seed: int) -> None:
    from megatron_scale.model.layers.linear import ScaleColumnParallelLinear, ScaleRowParallelLinear
    from megatron_scale.model.layers.partition import BlockSplit
    from megatron_scale.model.weights.state import global_state_dict

    tp = rec.tp
    parallel, chunks, n, n_up, m, m_up = LINEARS[name]
    label = f"{name}[adapt={adapt}]"
    split = BlockSplit(
        parallel=parallel, in_base=n, in_up=n_up, out_base=m, out_up=m_up, chunks=chunks, adapt=adapt  # type: ignore[arg-type]
    )
    cls = ScaleColumnParallelLinear if parallel == "column" else ScaleRowParallelLinear
    mod = cls(n + n_up, m + m_up, split=split, config=_tiny.base_config(tp), init_method=_init)
    assert (mod.weight_12 is not None) == adapt
    _fill([mod.weight, mod.weight_up, mod.weight_12], seed=1000 * seed + r)
    if adapt:
        assert mod.weight_12 is not None and bool((mod.weight_12 != 0).all())

    g = global_state_dict(mod)
    rec.keys[(tp, label)] = sorted(g)
    w = tp_index.swiglu_global(g["weight"], tp) if chunks == 2 else g["weight"]
    w12 = g["weight_12"] if adapt else torch.zeros(m, n_up)
    dense = _dense(torch.cat((torch.cat((w, w12), 1), torch.cat((g["weight_21"], g["weight_22"]), 1)), 0))

    x_full = _rand(seed * 10 + 7, S, B, n + n_up).requires_grad_()
    grad_out = _rand(seed * 10 + 8, S, B, m + m_up)
    y_full = dense(x_full)
    (y_full * grad_out).sum().backward()
    dm = dense.weight.grad
    assert dm is not None

    if parallel == "column":
        x = x_full.detach().clone().requires_grad_()
        out_idx = tp_index.column_out_index(m, m_up, chunks, tp, r)
        out, bias = mod(x)
        assert bias is None
        (out * grad_out[..., out_idx]).sum().backward()
        rec.err(label, "out", out, y_full[..., out_idx])
        rec.err(label, "grad_in", x.grad, x_full.grad)  # type: ignore[arg-type]
        up_rows = m + tp_index.column_rows(m_up, chunks, tp, r)
        base_rows = tp_index.column_rows(m, chunks, tp, r)
        gw = mod.weight_up.grad
        assert gw is not None
        rec.err(label, "grad_W21", gw[:, :n], dm[up_rows][:, :n])
        rec.err(label, "grad_W22", gw[:, n:], dm[up_rows][:, n:])
        if adapt:
            rec.err(label, "grad_W12", mod.weight_12.grad, dm[base_rows][:, n:])
    else:
        in_idx = tp_index.row_in_index(n, n_up, tp, r)
        x = x_full.detach()[..., in_idx].clone().requires_grad_()
        out, bias = mod(x)
        assert bias is None
        (out * grad_out).sum().backward()
        rec.err(label, "out", out, y_full)
        rec.err(label, "grad_in", x.grad, x_full.grad[..., in_idx])  # type: ignore[index]
        pn = n // tp
        gw = mod.weight_up.grad
        assert gw is not None
        rec.err(label, "grad_W21", gw[:, :pn], dm[m:][:, in_idx[:pn]])
        rec.err(label, "grad_W22", gw[:, pn:], dm[m:][:, in_idx[pn:]])
        if adapt:
            rec.err(label, "grad_W12", mod.weight_12.grad, dm[:m][:, in_idx[pn:]])
    rec.frozen(label, mod.weight)


def _check_norm(rec: _Recorder) -> None:
    from megatron_scale.model.layers.norm import SplitRMSNorm
    from megatron_scale.model.weights.state import global_state_dict

    eps = 1e-5
    mod = SplitRMSNorm(_tiny.base_config(rec.tp), D + D_UP, eps, base_hidden=D)
    # replicated over TP: the same gains on every rank
    with torch.no_grad():
        mod.weight.copy_(1 + _rand(31, D, std=0.3))
        mod.weight_up.copy_(1 + _rand(32, D_UP, std=0.3))
    g = global_state_dict(mod)
    rec.keys[(rec.tp, "norm")] = sorted(g)

    gain, gain_up = g["weight"], g["weight_up"].clone().requires_grad_()
    x_full = _rand(33, S, B, D + D_UP).requires_grad_()
    grad_out = _rand(34, S, B, D + D_UP)

    def rms(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * w

    ref = torch.cat((rms(x_full[..., :D], gain), rms(x_full[..., D:], gain_up)), -1)
    (ref * grad_out).sum().backward()

    x = x_full.detach().clone().requires_grad_()
    out = mod(x)
    (out * grad_out).sum().backward()
    rec.err("norm", "out", out, ref)
    rec.err("norm", "grad_in", x.grad, x_full.grad)  # type: ignore[arg-type]
    rec.err("norm", "grad_g_up", mod.weight_up.grad, gain_up.grad)  # type: ignore[arg-type]
    rec.frozen("norm", mod.weight)


def _embedding(tp: int, r: int, seed: int) -> Any:
    from megatron_scale.model.layers.heads import ScaleVocabParallelEmbedding

    emb = ScaleVocabParallelEmbedding(V, D, D_UP, config=_tiny.base_config(tp))
    _fill([emb.weight, emb.weight_up], seed=1000 * seed + r)
    return emb


def _check_embedding(rec: _Recorder, r: int) -> None:
    from megatron_scale.model.weights.state import global_state_dict

    emb = _embedding(rec.tp, r, seed=41)
    g = global_state_dict(emb)
    rec.keys[(rec.tp, "embedding")] = sorted(g)
    table = torch.cat((g["weight"], g["weight_up"]), 1)  # [V, d + d']
    dense = _dense(table.t())  # nn.Linear(V, d + d') on one-hot ids

    ids = torch.randint(0, V, (B, S), generator=torch.Generator().manual_seed(42))
    ids[0, 0], ids[0, 1] = 0, V - 1  # both vocab shards are hit
    grad_out = _rand(43, B, S, D + D_UP)
    ref = dense(F.one_hot(ids, V).float())
    (ref * grad_out).sum().backward()
    dtable = dense.weight.grad.t()  # type: ignore[union-attr]

    out = emb(ids)
    (out * grad_out).sum().backward()
    rows = tp_index.vocab_rows(V, rec.tp, r)
    rec.err("embedding", "out", out, ref)
    rec.err("embedding", "grad_E_up", emb.weight_up.grad, dtable[rows][:, D:])
    rec.frozen("embedding", emb.weight)


def _check_output(rec: _Recorder, r: int, tied: bool, head: str) -> None:
    from megatron_scale.model.layers.heads import ScaleOutputLayer
    from megatron_scale.model.weights.state import global_state_dict

    tp = rec.tp
    label = f"output[tied={tied},head={head}]"
    mod = ScaleOutputLayer(
        V, D, D_UP, config=_tiny.base_config(tp), tied=tied, gather_output=False
    )
    _fill([mod.weight, mod.weight_up], seed=1000 * 51 + r)
    g = global_state_dict(mod)
    rec.keys[(tp, label)] = sorted(g)
    if tied:
        emb = _embedding(tp, r, seed=52)
        base_w = emb.weight
        w_out = global_state_dict(emb)["weight"]
    else:
        base_w = mod.weight
        w_out = g["weight"]
    w_up = g["weight_up"] if head == "adapt" else torch.zeros(V, D_UP)
    dense = _dense(torch.cat((w_out, w_up), 1))  # nn.Linear(d + d', V)

    h_full = _rand(53, S, B, D + D_UP).requires_grad_()
    grad_out = _rand(54, S, B, V)
    ref = dense(h_full)
    (ref * grad_out).sum().backward()
    dw = dense.weight.grad
    assert dw is not None

    mod.train()
    mod.set_head(head)
    h = h_full.detach().clone().requires_grad_()
    out, bias = mod(h, weight=emb.weight if tied else None)
    assert bias is None
    rows = tp_index.vocab_rows(V, tp, r)
    (out * grad_out[..., rows]).sum().backward()
    rec.err(label, "out", out, ref[..., rows])
    rec.err(label, "grad_in", h.grad, h_full.grad)  # type: ignore[arg-type]
    if head == "adapt":
        rec.err(label, "grad_W_out_up", mod.weight_up.grad, dw[rows][:, D:])
    else:  # z_p does not depend on W_out_up: no gradient at all (None or zeros)
        gu = mod.weight_up.grad
        rec.errors[(tp, label, "no_grad_W_out_up")] = 0.0 if gu is None else gu.abs().max().item()
    assert base_w is not None
    rec.frozen(label, base_w)


def _checks(tp: int, r: int) -> _Recorder:
    rec = _Recorder(tp)
    for i, name in enumerate(LINEARS):
        for adapt in (False, True):
            _check_linear(rec, name, adapt, r, seed=10 * i + int(adapt) + 1)
    _check_norm(rec)
    _check_embedding(rec, r)
    for tied in (False, True):
        for head in ("adapt", "preserve"):
            _check_output(rec, r, tied, head)
    return rec


def _body(rank: int, world: int) -> dict[str, Any]:
    from megatron_scale import _mcore as mc
    from megatron_scale.distributed import init_distributed

    errors: dict = {}
    keys: dict = {}
    # Layer math against a dense reference, on host tensors made here: the device audit (which
    # holds the product's paths to the run's device, tests/test_device_audit.py) stays off.
    os.environ["MEGATRON_SCALE_DEVICE_AUDIT"] = "0"
    init_distributed(1, 1, device="cpu", seed=1234)
    for tp in TPS:
        if tp != 1:
            mc.parallel_state.destroy_model_parallel()
            mc.parallel_state.initialize_model_parallel(tp)
            mc.model_parallel_cuda_manual_seed(1234, inference_rng_tracker=True)
        r = mc.parallel_state.get_tensor_model_parallel_rank()
        assert mc.parallel_state.get_tensor_model_parallel_world_size() == tp
        rec = _checks(tp, r)
        errors.update(rec.errors)
        keys.update(rec.keys)
    return {"errors": errors, "keys": keys}


# ---- what must have been checked ----

def _expected() -> tuple[dict[tuple[int, str], set[str]], dict[tuple[int, str], list[str]]]:
    """(quantities per (tp, module), global state-dict keys per (tp, module))."""
    quantities: dict[tuple[int, str], set[str]] = {}
    keys: dict[tuple[int, str], list[str]] = {}
    for tp in TPS:
        for name in LINEARS:
            for adapt in (False, True):
                label = f"{name}[adapt={adapt}]"
                q = {"out", "grad_in", "grad_W21", "grad_W22", "frozen_no_grad"}
                quantities[(tp, label)] = q | ({"grad_W12"} if adapt else set())
                keys[(tp, label)] = sorted(["weight", "weight_21", "weight_22"] + (["weight_12"] if adapt else []))
        quantities[(tp, "norm")] = {"out", "grad_in", "grad_g_up", "frozen_no_grad"}
        keys[(tp, "norm")] = ["weight", "weight_up"]
        quantities[(tp, "embedding")] = {"out", "grad_E_up", "frozen_no_grad"}
        keys[(tp, "embedding")] = ["weight", "weight_up"]
        for tied in (False, True):
            for head in ("adapt", "preserve"):
                label = f"output[tied={tied},head={head}]"
                w = "grad_W_out_up" if head == "adapt" else "no_grad_W_out_up"
                quantities[(tp, label)] = {"out", "grad_in", w, "frozen_no_grad"}
                keys[(tp, label)] = ["weight_up"] if tied else ["weight", "weight_up"]
    return quantities, keys


@functools.cache
def results() -> dict[str, Any]:
    """Max over ranks of every error; the keys each rank saw (one spawn per test process)."""
    per_rank = run_ranks(_body, 2)
    errors: dict[tuple[int, str, str], float] = {}
    for res in per_rank:
        for k, v in res["errors"].items():
            errors[k] = max(errors.get(k, 0.0), v)
    return {"errors": errors, "keys": [res["keys"] for res in per_rank], "ranks": len(per_rank)}


def is_linear(module: str) -> bool:
    return module.split("[")[0] in LINEARS


def is_head(module: str) -> bool:
    return module == "embedding" or module.startswith("output[")


def is_norm(module: str) -> bool:
    return module == "norm"


def checked(res: dict[str, Any], which: Callable[[str], bool]) -> tuple[dict, dict]:
    """(the quantities checked per (tp, module), the ones expected) for the modules `which` picks."""
    want = {k: v for k, v in _expected()[0].items() if which(k[1])}
    got: dict[tuple[int, str], set[str]] = {}
    for tp, module, quantity in res["errors"]:
        if which(module):
            got.setdefault((tp, module), set()).add(quantity)
    assert want, "no module picked"
    return got, want


def errors(res: dict[str, Any], which: Callable[[str], bool], tp: int, quantities: tuple[str, ...]) -> dict:
    """The errors of the modules `which` picks at `tp`, for `quantities`."""
    return {k: v for k, v in res["errors"].items() if k[0] == tp and k[2] in quantities and which(k[1])}


def expected_keys() -> dict[tuple[int, str], list[str]]:
    return _expected()[1]
