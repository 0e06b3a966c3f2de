"""megatron_scale/method_catalog.py, the standard-library view of the training methods, agrees with
megatron_scale.methods (METHOD_CLASSES): the same names in the same order, SCALE's variants
exactly its classes' names, and the routing variant the one whose geometry routes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from megatron_scale import method_catalog as catalog
from megatron_scale.methods import METHOD_CLASSES, NAMES, Scale, method_class
from megatron_scale.methods import scale as scale_module


def test_the_catalog_lists_the_method_classes_names_in_order() -> None:
    assert catalog.NAMES == NAMES == tuple(n for cls in METHOD_CLASSES for n in cls.names)
    assert len({m.label for m in catalog.METHODS}) == len(catalog.METHODS)  # tables tell them apart
    assert {catalog.PRESERVING, catalog.REFERENCE} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_each_methods_traits_match_its_class(name: str) -> None:
    m = catalog.method(name)
    assert m.upscaled == (method_class(name) is Scale)
    if m.upscaled:  # the variant Scale builds for this --method (Scale.name is scale-<variant>)
        scale = SimpleNamespace(dims=SimpleNamespace(variant=m.variant))
        assert Scale.name.fget(scale) == name  # type: ignore[attr-defined]
    routed = scale_module.ScaleDims.routed.fget(SimpleNamespace(variant=m.variant))  # type: ignore[attr-defined]
    assert m.routes == (m.upscaled and routed)


def test_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown method 'scale'.*choose from scale-preserve"):
        catalog.method("scale")
    assert catalog.label("scale-route[cosine]") == "scale-route[cosine]" and catalog.label("lora") == "LoRA"
    assert catalog.router(["full", "scale-route"]) == "scale-route" and catalog.router(["full"]) is None
