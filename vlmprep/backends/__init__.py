"""Backends execute a plan. One registry: ``available()``, ``names()``, ``get(name)``."""
from __future__ import annotations

import importlib.util

from .registry import available, get, names, register, resolve_auto, why_unavailable

__all__ = ["available", "get", "names", "why_unavailable", "resolve_auto"]


def _missing(*mods: str) -> str | None:
    for m in mods:
        try:
            if importlib.util.find_spec(m) is None:
                return f"python package {m!r} is not installed (pip install {m})"
        except (ImportError, ValueError) as e:
            return f"python package {m!r} cannot be found ({e})"
    return None


register("torch", "vlmprep.backends.torch", lambda: _missing("torch", "torchvision", "PIL", "numpy"))
register("reference", "vlmprep.backends.reference", lambda: _missing("PIL", "numpy", "torch"))
