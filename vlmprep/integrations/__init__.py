"""Integrations with engines vlmprep runs inside (optional dependencies, imported on use).

- ``vlmprep.integrations.ray``: Ray Data (``pip install vlmprep[ray]``): ``Preprocess`` for
  ``Dataset.map_batches``, ``plan_tokens`` (header-only token counts), ``run_ray`` (the engine of
  ``vlmprep run --engine ray``).

``import vlmprep.integrations`` imports no engine: a submodule loads on first attribute access
(``vlmprep.integrations.ray``) or by ``import vlmprep.integrations.ray``.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ray"]

_SUBMODULES = ("ray",)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        mod = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = mod
        return mod
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SUBMODULES))
