"""FLOPs of one training step (forward + backward) per token: dense layers vs. SCALE.

The model behind the benchmark's predictions (tools/bench_scale.py, docs/performance.md). Counted
are the GEMMs only, as Megatron's own MFU formula does: elementwise work (norms, SwiGLU, softmax,
RoPE, residual adds) is left out. One GEMM of an n -> m linear costs 2nm per token; a step runs

    forward 2nm  +  input gradient (dgrad) 2nm  +  weight gradient (wgrad) 2nm, if trainable.

An upscaled linear [[W, W12], [W21, W22]] runs the base block forward and dgrad only (W frozen:
no wgrad), the stored new rows [W21 W22] (m' x (n+n')) fully, and W12 (m x n') fully where Adapt
has it: 4nm + 6m'(n+n') [+ 6mn']. At every size +1/4 that is 5.875 nm against 6 nm for full
fine-tuning of the base (0.98x) and 9.375 nm for the dense expanded layer (0.63x).

Attention's two batched GEMMs (QK^T and AV, 2sk each per head and token, the full s x s that
megatron-core's unfused attention computes) run forward and twice backward: 12 s k per head.
SCALE attends with h + h' heads, as the dense expanded layer does.

The base stream's backward skipped (`skip_base_backward`, Preserve without W12: --scale-base-backward,
model/layers/fused.py), the dead terms leave the count:
    an upscaled linear   the base dgrad 2mn (W^T dy) and the new rows' dgrad into the base
                         features 2m'n (W21^T dy_up): 2mn + 4m'(n+n') + 2m'n' (0.56x full
                         fine-tuning's 6mn at +1/4 sizes, where the full backward costs 0.98x);
    attention            the base heads' backward: 4 s k per base head (forward only), 12 s k per
                         new head;
    the output layer     the frozen W_out's dgrad 2Vd: 2Vd + 6Vd'.
This count is exact for the GEMMs the local path issues (tests/model/test_base_backward.py counts them
at dispatch, with and without the skip, and for full fine-tuning).
"""

from __future__ import annotations

from dataclasses import dataclass

METHODS = ("full_ft", "dense_up", "preserve", "adapt")
"""full_ft: Megatron's dense layer at the base shape, all trained; dense_up: the same at the
expanded shape; preserve / adapt: the SCALE layer (adapt: W12 in qkv and proj)."""


@dataclass(frozen=True, kw_only=True)
class Shape:
    """Base sizes and their expansion (the `*_up` sizes; zero for a plain dense model)."""

    hidden: int
    heads: int
    groups: int
    head_dim: int
    ffn: int
    hidden_up: int = 0
    heads_up: int = 0
    groups_up: int = 0
    ffn_up: int = 0

    def linears(self) -> dict[str, tuple[int, int, int, int]]:
        """(n, n', m, m') of linear_qkv, linear_proj, linear_fc1, linear_fc2."""
        k = self.head_dim
        return {
            "qkv": (self.hidden, self.hidden_up, (self.heads + 2 * self.groups) * k,
                    (self.heads_up + 2 * self.groups_up) * k),
            "proj": (self.heads * k, self.heads_up * k, self.hidden, self.hidden_up),
            "fc1": (self.hidden, self.hidden_up, 2 * self.ffn, 2 * self.ffn_up),
            "fc2": (self.ffn, self.ffn_up, self.hidden, self.hidden_up),
        }


def dense_linear(n: int, m: int, trainable: bool = True) -> int:
    return (6 if trainable else 4) * n * m


def scale_linear(n: int, n_up: int, m: int, m_up: int, adapt: bool, skip_base_backward: bool = False) -> int:
    if skip_base_backward:
        _no_skip_with_w12(adapt)
        # forward 2mn + 2m'(n+n'); dgrad into x_up only, 2m'n'; wgrad of [W21 W22], 2m'(n+n')
        return 2 * n * m + 4 * m_up * (n + n_up) + 2 * m_up * n_up
    return 4 * n * m + 6 * m_up * (n + n_up) + (6 * m * n_up if adapt else 0)


def attention(seq: int, heads: int, head_dim: int, trained: bool = True) -> int:
    """QK^T and AV of `heads` heads per token: forward 4 s k, backward 8 s k unless not `trained`
    (the base heads with the base stream's backward skipped)."""
    return (12 if trained else 4) * seq * heads * head_dim


def _no_skip_with_w12(adapt: bool) -> None:
    if adapt:
        raise ValueError("skip_base_backward with W12 (adapt): W12's gradient needs the base stream's backward")


def layer_flops(method: str, shape: Shape, seq: int, adapt_modules: tuple[str, ...] = ("qkv", "proj"), *,
                skip_base_backward: bool = False) -> int:
    """Training FLOPs per token of one transformer layer under `method` (`skip_base_backward`:
    preserve with the base stream's backward skipped)."""
    lin = shape.linears()
    k = shape.head_dim
    if skip_base_backward:
        _no_skip_with_w12(method != "preserve")
        total = sum(scale_linear(n, nu, m, mu, False, skip_base_backward=True) for n, nu, m, mu in lin.values())
        return total + attention(seq, shape.heads, k, trained=False) + attention(seq, shape.heads_up, k)
    if method == "full_ft":
        return sum(dense_linear(n, m) for n, _, m, _ in lin.values()) + attention(seq, shape.heads, k)
    if method == "dense_up":
        return sum(dense_linear(n + nu, m + mu) for n, nu, m, mu in lin.values()) + attention(
            seq, shape.heads + shape.heads_up, k
        )
    if method in ("preserve", "adapt"):
        total = sum(
            scale_linear(n, nu, m, mu, method == "adapt" and name in adapt_modules)
            for name, (n, nu, m, mu) in lin.items()
        )
        return total + attention(seq, shape.heads + shape.heads_up, k)
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")


def head_flops(method: str, shape: Shape, vocab: int, *, skip_base_backward: bool = False) -> int:
    """Training FLOPs per token of the output layer (the embedding lookup costs no GEMM).
    Full fine-tuning trains W_out; SCALE runs frozen W_out forward and dgrad (forward only with
    `skip_base_backward`), W_out_up fully."""
    d, du = shape.hidden, shape.hidden_up
    if skip_base_backward:
        _no_skip_with_w12(method != "preserve")
        return 2 * d * vocab + dense_linear(du, vocab)
    if method == "full_ft":
        return dense_linear(d, vocab)
    if method == "dense_up":
        return dense_linear(d + du, vocab)
    if method in ("preserve", "adapt"):
        return dense_linear(d, vocab, trainable=False) + dense_linear(du, vocab)
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")


def model_flops(
    method: str, shape: Shape, seq: int, layers: int, vocab: int, adapt_layers: int = 0,
    adapt_modules: tuple[str, ...] = ("qkv", "proj"), *, skip_base_backward: bool = False,
) -> int:
    """Training FLOPs per token of a whole model; `adapt_layers` of the `layers` carry W12;
    `skip_base_backward`: preserve with the base stream's backward skipped."""
    if skip_base_backward:
        return (layers * layer_flops(method, shape, seq, skip_base_backward=True)
                + head_flops(method, shape, vocab, skip_base_backward=True))
    if method == "adapt":
        per = adapt_layers * layer_flops("adapt", shape, seq, adapt_modules)
        per += (layers - adapt_layers) * layer_flops("preserve", shape, seq)
        return per + head_flops(method, shape, vocab)
    return layers * layer_flops(method, shape, seq) + head_flops(method, shape, vocab)
