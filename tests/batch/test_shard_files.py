"""shards.files.need: a missing optional package is a ValueError naming how to install it."""
from __future__ import annotations

import importlib

import pytest

from vlmprep.batch.shards import files


@pytest.mark.parametrize("module, hint", [
    ("safetensors.torch", "pip install safetensors"),          # no vlmprep extra installs it
    ("pyarrow.parquet", "pip install vlmprep[parquet] (or pip install pyarrow)"),
    ("zarr", "pip install zarr"),
])
def test_need_names_the_install(monkeypatch, module, hint):
    def missing(name, *a, **k):
        raise ImportError(name)
    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(ValueError) as ei:
        files.need(module, "writing shards")
    msg = str(ei.value)
    assert msg.startswith(f"writing shards: expected the {module.split('.')[0]} package")
    assert msg.endswith(hint) and "vlmprep[parquet]" not in msg.replace(hint, "")
