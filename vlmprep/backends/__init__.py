"""Backends execute a plan. One registry: ``available()``, ``names()``, ``get(name)``.

    registry.py       backends and their per-op lowerings (loud on conflicts and misses)
    base.py           Backend: one image at a time, by the executor fusion.py chooses
    fusion.py         which executor runs an image (op by op or a fused kernel): the one table
    fused.py          the fused executors' kernel calls
    normalize_lut.py  the normalize lut (one builder, used by every backend and the adapters)
    reference/ torch/ dali/   the backends
"""
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


def _dali() -> str | None:
    """nvidia.dali installed and importable (imported once, on the first question)."""
    global _dali_reason
    if _dali_reason is None:
        why = _missing("torch", "numpy")
        if why is None and _missing("nvidia.dali"):
            why = ("python package 'nvidia.dali' is not installed (pip install "
                   "nvidia-dali-cuda130, or the nvidia-dali wheel for your CUDA)")
        if why is None:
            try:
                import nvidia.dali  # noqa: F401
            except Exception as e:  # a broken install raises more than ImportError
                why = f"nvidia.dali is installed but cannot be imported ({type(e).__name__}: {e})"
        _dali_reason = why or ""
    return _dali_reason or None


_dali_reason: str | None = None
register("dali", "vlmprep.backends.dali", _dali)
register("torch", "vlmprep.backends.torch", lambda: _missing("torch", "torchvision", "PIL", "numpy"))
register("reference", "vlmprep.backends.reference", lambda: _missing("PIL", "numpy", "torch"))
