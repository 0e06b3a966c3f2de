"""The checks a SCALE geometry must pass and the notes on the sizes it picks, below
scale_config.py (which resolves ScaleConfig into ScaleDims with them): each check raises one
ScaleConfigError naming the setting and its --scale-* flag (the router's and the gate's: scale_options.py).

    resolve_base_backward       auto | skip | full -> what a model runs: skip | full
    check_architecture          a base SCALE can widen (SwiGLU, bias-free, RMSNorm)
    check_tp                    every rank holds an equal share of the base and of the new units
    heads_and_groups            (h', g'): the user's, completed at the base GQA ratio, or the default
    size_notes                  what a default size picked where the quarter rule did not hold
"""

from __future__ import annotations

from typing import Any, TypedDict

ADAPT_MODULES = ("qkv", "proj", "fc1", "fc2")
ROUTER_STATISTICS = ("cosine", "centered-cosine", "max-prob", "certainty")
# Which side of tau keeps the preservation head z_p: "above" (statistic >= tau, the paper's) or
# "below" (statistic <= tau), for a statistic that is lower on old-domain tokens (issue 35).
ROUTER_DIRECTIONS = ("above", "below")
# What one routing decision covers: every token (the paper's), or all the tokens of one UTF-8
# character or of one whitespace-delimited word, which take their unit's first token's decision
# (model/layers/route_units.py; issue 35: a byte-level tokenizer splits a Hangul syllable into byte tokens).
ROUTER_UNITS = ("token", "char", "word")
# which rows of W_out_up train (issue 45): every row (the paper's), or only the vocabulary rows of one
# new script, derived from the tokenizer's bytes (model/layers/output_rows.py)
OUTPUT_ROWS = ("all", "hangul")
# the statistic of z_p alone that gates W_out_up's term (issue 45, model/layers/gate.py): none (the paper's)
GATE_STATISTICS = ("none", "max-prob", "certainty")
# the backward through the frozen base stream (issue 62): auto (skipped wherever no trainable parameter
# is upstream of it, i.e. no W12), skip (asked for: refused where W12 exists), full (always computed)
BASE_BACKWARDS = ("auto", "skip", "full")
BASE_BACKWARD_FLAG = "--scale-base-backward"


class ScaleConfigError(ValueError):
    """A SCALE setting is invalid; the message names the setting (and its CLI flag)."""


def fail(setting: str, msg: str) -> ScaleConfigError:
    flag = "--scale-" + setting.replace("_", "-")
    return ScaleConfigError(f"ScaleConfig.{setting} ({flag}): {msg}")


def nearest_multiples(x: float, m: int) -> list[int]:
    """The positive multiples of m either side of x, the nearer first (the smaller on a tie)."""
    lower = int(x // m) * m
    both = [v for v in (lower, lower + m) if v > 0] or [m]
    return sorted(both, key=lambda v: (abs(v - x), v))


def head_choices_text(heads_up: float, ratio: int, tp: int) -> str:
    """The valid (h', g') nearest to h' (whole KV groups of `ratio` heads, g' divisible by TP), as flags."""
    return " or ".join(f"--scale-heads-up {n * ratio} --scale-groups-up {n}"
                       for n in nearest_multiples(heads_up / ratio, tp))


def heads_and_groups(cfg: Any, h: int, ratio: int, tp: int) -> tuple[int, int]:
    """(h', g'): the user's, the one given completed at the base GQA ratio, or the default.

    The default is the quarter rule (h' = h/4, g' = h'/ratio) where that gives whole KV groups
    divisible by TP; otherwise the nearest geometry that does: g' the multiple of TP nearest to
    h/4/ratio (at least one group), h' = g' * ratio."""
    if cfg.heads_up is not None and cfg.groups_up is not None:
        return cfg.heads_up, cfg.groups_up
    if cfg.heads_up is not None:
        h_up = cfg.heads_up
        if h_up % ratio:
            why = f"{h_up} heads are not whole KV groups of {ratio} heads (the base GQA ratio)"
        elif (h_up // ratio) % tp:
            why = (f"{h_up} heads make {h_up // ratio} KV group(s), not divisible by the tensor-parallel size {tp} "
                   "(--tensor-model-parallel-size)")
        else:
            return h_up, h_up // ratio
        raise fail("heads_up", f"{why}; nearest valid: {head_choices_text(h_up, ratio, tp)}")
    if cfg.groups_up is not None:
        g_up = cfg.groups_up
        if g_up % tp:
            raise fail("groups_up", f"{g_up} is not divisible by the tensor-parallel size {tp} "
                        "(--tensor-model-parallel-size); each rank holds an equal share of the new units; "
                        f"nearest valid: {head_choices_text(g_up * ratio, ratio, tp)}")
        return g_up * ratio, g_up
    h_up = h // 4
    g_up = max(1, h_up // ratio)
    if h_up > 0 and h_up == g_up * ratio and g_up % tp == 0:
        return h_up, g_up  # the quarter rule works: unchanged
    g_up = nearest_multiples(h / 4 / ratio, tp)[0]
    return g_up * ratio, g_up


def size_notes(cfg: Any, dims: Any, tp: int = 1) -> list[str]:
    """One line per default size that is not the plain quarter of the base (what was picked, and
    why), for callers to print beside the geometry; empty where the quarter rule held."""
    notes = []
    if cfg.hidden_up is None and dims.hidden_up != dims.hidden // 4:
        notes.append(f"hidden_up (--scale-hidden-up) = {dims.hidden_up}: d/4 = {dims.hidden}/4 rounds to 0")
    if cfg.heads_up is None and cfg.groups_up is None:
        ratio = dims.heads // dims.groups
        quarter = (dims.heads // 4, max(1, dims.heads // 4 // ratio))
        if (dims.heads_up, dims.groups_up) != quarter:
            notes.append(
                f"heads_up, groups_up (--scale-heads-up, --scale-groups-up) = {dims.heads_up}, {dims.groups_up}: "
                f"h/4 = {dims.heads}/4 = {dims.heads / 4:g} heads is not a whole number of KV groups of {ratio} "
                f"heads (the base GQA ratio {dims.heads}/{dims.groups}) divisible by the tensor-parallel size {tp}; "
                f"the nearest such geometry is {dims.groups_up} group(s) of {ratio}")
    if cfg.ffn_up is None and dims.ffn_up != dims.ffn // 4:
        notes.append(f"ffn_up (--scale-ffn-up) = {dims.ffn_up}: f/4 = {dims.ffn}/4 = {dims.ffn / 4:g} is not a "
                     f"positive multiple of the tensor-parallel size {tp}; the nearest one")
    return notes


class BaseSizes(TypedDict):
    """The base sizes of a ScaleDims, by its field names (so `ScaleDims(**sizes, ...)` type-checks)."""

    num_layers: int
    hidden: int
    heads: int
    groups: int
    head_dim: int
    ffn: int


def base_sizes(base: object) -> BaseSizes:
    """The base sizes a ScaleDims records, read from a TransformerConfig-like object."""
    d = int(base.hidden_size)
    h = int(base.num_attention_heads)
    return {
        "num_layers": int(base.num_layers), "hidden": d, "heads": h,
        "groups": int(getattr(base, "num_query_groups", None) or h),
        "head_dim": int(getattr(base, "kv_channels", None) or d // h),
        "ffn": int(base.ffn_hidden_size),
    }


def check_architecture(base: object) -> None:
    if not getattr(base, "gated_linear_unit", True):
        raise ScaleConfigError("base TransformerConfig.gated_linear_unit must be True (SwiGLU FFN)")
    if getattr(base, "add_bias_linear", False) or getattr(base, "add_qkv_bias", False):
        raise ScaleConfigError(
            "base TransformerConfig.add_bias_linear/add_qkv_bias: SCALE layers are bias-free "
            "(Llama family); set both to False"
        )
    if getattr(base, "normalization", "RMSNorm") != "RMSNorm":
        raise ScaleConfigError("base TransformerConfig.normalization must be 'RMSNorm' (split RMSNorm)")


def check_tp(tp: int, ups: dict[str, int], base: BaseSizes) -> None:
    """Every rank holds an equal share of the base and of the new units (ups: the *_up sizes)."""
    if tp < 1:
        raise ScaleConfigError(f"tensor-parallel size must be >= 1, got {tp}")
    for name, value in ups.items():
        if name != "hidden_up" and value % tp:
            raise fail(
                name,
                f"{value} is not divisible by the tensor-parallel size {tp} "
                "(--tensor-model-parallel-size); each rank holds an equal share of the new units",
            )
    for name, value in (("num_attention_heads", base["heads"]), ("num_query_groups", base["groups"]),
                        ("ffn_hidden_size", base["ffn"])):
        if value % tp:
            raise ScaleConfigError(
                f"base {name}={value} is not divisible by --tensor-model-parallel-size {tp}"
            )


def resolve_base_backward(setting: object, w12: bool, variant: str = "") -> str:
    """What the base stream's backward is (`skip` | `full`) for `setting` (--scale-base-backward)
    on a model that has W12 somewhere (`w12`) or none: auto skips it wherever that is exact, which
    is wherever no W12 exists (Preserve, Route on Preserve: no trainable parameter is upstream of
    the base stream, so no trainable gradient reads its gradient); skip asked for where W12
    exists is refused: W12's gradient (and everything below it) needs the gradient of the base
    features its output joins."""
    if setting not in BASE_BACKWARDS:
        raise ScaleConfigError(f"{BASE_BACKWARD_FLAG}: unknown {setting!r}; choose one of {', '.join(BASE_BACKWARDS)}")
    if setting == "auto":
        return "full" if w12 else "skip"
    if setting == "skip" and w12:
        which = f"SCALE-{variant}'s W12" if variant else "W12"
        raise ScaleConfigError(
            f"{BASE_BACKWARD_FLAG} skip: {which} is a trainable parameter upstream of the base stream (it adds the new "
            "features into the base outputs), so its gradient and those below it need the base stream's backward; "
            f"leave {BASE_BACKWARD_FLAG} at auto (the full backward here) or give full"
        )
    return str(setting)
