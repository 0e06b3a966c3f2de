"""The training methods as the standard-library side sees them: each --method name with the traits
the recipe and the reports decide by, so that neither compares method names as strings.

megatron_scale/methods/ is where a method is defined (one class each, METHOD_CLASSES), but its
package imports torch; the recipe's launcher runs on a batch host with no site-packages
(`python -S`), and the reports read files. This module is their view of the same list, standard
library only; tests/test_method_catalog.py holds it equal to methods.METHOD_CLASSES, so a method
added there and not here (or the other way round) fails a test.

    name             label               upscaled  variant    routes
    scale-preserve   SCALE-Preserve      yes       preserve   no
    scale-adapt      SCALE-Adapt         yes       adapt      no
    scale-route      SCALE-Route         yes       route      yes
    full             full fine-tuning    no                   no
    freeze           Freeze              no                   no
    llama-pro        LLaMA-Pro           no                   no
    lora             LoRA                no                   no
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Method:
    """One --method value and what the recipe and the reports need to know about it."""

    name: str
    """The training entry's --method value."""
    label: str
    """How tables and plot legends name it."""
    variant: str = ""
    """SCALE's variant (tools/upscale_checkpoint.py --scale-variant); empty for a method that is
    not SCALE. A SCALE method trains from its own upscaled checkpoint, the others from the base."""
    routes: bool = False
    """A router picks a head per token: the recipe sweeps it after training and its calibrated
    checkpoint is the one benchmarked and exported."""

    @property
    def upscaled(self) -> bool:
        """It trains from an upscaled copy of the base (made by tools/upscale_checkpoint.py)."""
        return bool(self.variant)


METHODS: tuple[Method, ...] = (
    Method(name="scale-preserve", label="SCALE-Preserve", variant="preserve"),
    Method(name="scale-adapt", label="SCALE-Adapt", variant="adapt"),
    Method(name="scale-route", label="SCALE-Route", variant="route", routes=True),
    Method(name="full", label="full fine-tuning"),
    Method(name="freeze", label="Freeze"),
    Method(name="llama-pro", label="LLaMA-Pro"),
    Method(name="lora", label="LoRA"),
)
"""Every method, in methods.NAMES' order."""
NAMES: tuple[str, ...] = tuple(m.name for m in METHODS)

PRESERVING = "scale-preserve"
"""The method whose claim is that it keeps the base (the report checks it forgets less than REFERENCE)."""
REFERENCE = "full"
"""Full fine-tuning: every weight trains; the forgetting the others are compared with, and the
method a base is pre-trained with from scratch."""

_BY_NAME = {m.name: m for m in METHODS}


def method(name: str) -> Method:
    """The catalog's entry of a --method value; an unknown name is a ValueError naming the choices."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}: choose from {', '.join(NAMES)}") from None


def label(name: str) -> str:
    """How a table names a method; a name outside the catalog (a curve such as
    "scale-route[cosine]", a table's "base") as it is."""
    m = _BY_NAME.get(name)
    return m.label if m else name


def router(names: tuple[str, ...] | list[str]) -> str | None:
    """The routing method among `names` (the recipe sweeps its router), if any."""
    return next((n for n in names if method(n).routes), None)
