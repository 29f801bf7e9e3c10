"""One registry of backends and lowerings, loud on misses."""
from __future__ import annotations

import pytest

from vlmprep.backends import registry


def test_missing_lowering_names_op_and_owners():
    with pytest.raises(NotImplementedError, match=r"no lowering for op 'pad'; backends that have it: none"):
        registry.get_lowering("reference", "pad")
    import vlmprep.backends.reference  # noqa: F401  (registers its lowerings)
    import vlmprep.backends.torch.tv_match  # noqa: F401  (a match= variant: key "torch:torchvision")
    with pytest.raises(NotImplementedError, match=r"backends that have it: .*'reference'.*'torch' with "
                                                  r"match='torchvision'"):  # as the user asks for it
        registry.get_lowering("nope", "smart_resize")


def test_duplicate_registration_is_loud():
    with pytest.raises(RuntimeError, match="registered twice"):
        registry.register("torch", "x", lambda: None)
    fn = registry.get_lowering("reference", "patchify")
    with pytest.raises(RuntimeError, match="defined twice"):
        registry.lowering("reference", "patchify")(lambda *a: None)
    assert registry.get_lowering("reference", "patchify") is fn


def test_every_op_of_every_preset_has_a_lowering_on_every_backend():
    import vlmprep
    for b in vlmprep.backends.available():
        vlmprep.backends.get(b)
        for name in vlmprep.presets.names():
            for op in vlmprep.presets.get(name):
                if op.name != "pack":
                    assert registry.get_lowering(b, op.name)
