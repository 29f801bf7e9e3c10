"""One registry of backends and of their per-op lowerings; loud on conflicts and misses.

A backend registers a loader (imported lazily, so listing backends imports neither
torch nor DALI) and a probe that says whether it can run here and, if not, why.
Each backend module registers one lowering per op with ``@lowering(backend, op)``, and one
lowering for every sizing op under ``SIZING`` (``base.register_sizing``): a sizing op is looked
up when a Backend is made, by its ``Op.sizing`` flag, so a sizing op defined at any time (after
the backend module was imported, after a Processor exists) runs on every backend. A backend that
runs videos registers its lowering of a planned video under ``VIDEO`` (``backends/video.py``:
``register_video``); one without it refuses videos (``video.lowering_of``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from ..ops import OP_TYPES

__all__ = ["SIZING", "VIDEO", "MATCHES", "register", "lowering", "get_lowering", "has_lowering",
           "get", "names", "available", "why_unavailable", "resolve_auto"]


@dataclass(frozen=True)
class _Entry:
    name: str
    module: str          # imported on first use; must define ``Backend``
    check: Callable[[], str | None]  # -> None when usable here, else the reason


#: The op key of a backend's one lowering of every sizing op (not an op name: ``<`` keeps it
#: apart from them).
SIZING = "<sizing>"
#: The op key of a backend's lowering of one planned video (decode its planned frames -> the
#: family's video rows; ``backends/video.py``). Not an op name either.
VIDEO = "<video>"

#: ``Processor(match=...)``: whose pixels a backend reproduces. "pil": transformers' PIL-backend
#: processors (the models' training pixels), every backend's own. "torchvision": transformers'
#: torchvision-backend processors on the CPU (what vLLM and SGLang run), by the backend module
#: ``_MATCH_MODULES`` names.
MATCHES = ("pil", "torchvision")
_MATCH_MODULES = {("torch", "torchvision"): "vlmprep.backends.torch.tv_match"}

_BACKENDS: dict[str, _Entry] = {}
_LOWERINGS: dict[tuple[str, str], Callable] = {}


def register(name: str, module: str, check: Callable[[], str | None]) -> None:
    if name in _BACKENDS:
        raise RuntimeError(f"backend {name!r} registered twice ({_BACKENDS[name].module}, {module})")
    _BACKENDS[name] = _Entry(name, module, check)


def lowering(backend: str, op: str) -> Callable[[Callable], Callable]:
    """Decorator: ``fn`` executes op ``op`` on backend ``backend``."""
    def deco(fn: Callable) -> Callable:
        key = (backend, op)
        if key in _LOWERINGS and _LOWERINGS[key] is not fn:
            raise RuntimeError(f"lowering of op {op!r} for backend {backend!r} defined twice")
        _LOWERINGS[key] = fn
        return fn
    return deco


def get_lowering(backend: str, op: str) -> Callable:
    """The lowering of op ``op`` on ``backend``: its own, else, for a sizing op (``Op.sizing``,
    looked up in ``ops.OP_TYPES`` now), the backend's ``SIZING`` lowering."""
    sizing = op in OP_TYPES and OP_TYPES[op].sizing
    fn = _LOWERINGS.get((backend, op)) or (_LOWERINGS.get((backend, SIZING)) if sizing else None)
    if fn is not None:
        return fn
    have = sorted({_user_form(b) for (b, o) in _LOWERINGS if o == op or (sizing and o == SIZING)})
    raise NotImplementedError(
        f"backend {_user_form(backend)} has no lowering for op {op!r}; backends that have it: "
        f"{', '.join(have) or 'none'}; pick one of those with backend=... (and match=...)")


def _user_form(key: str) -> str:
    """A lowerings key as the user asks for it: ``"torch:torchvision"`` -> ``'torch' with
    match='torchvision'`` (a ``match=`` variant's key is ``"<backend>:<match>"``)."""
    name, _, match = key.partition(":")
    return f"{name!r} with match={match!r}" if match else repr(name)


def has_lowering(name: str, op: str, match: str = "pil") -> bool:
    """Whether backend ``name``, usable here, has its own lowering of ``op`` for ``match`` (its
    module is imported to know: lowerings register on import). False when it is not usable."""
    try:
        cls: Any = get(name, match)  # a Backend class: its name is its lowerings' key
    except (ValueError, RuntimeError, ImportError):
        return False
    return (cls.name, op) in _LOWERINGS


def names() -> list[str]:
    """Every registered backend name, usable here or not."""
    return list(_BACKENDS)


def why_unavailable(name: str) -> str | None:
    """None when backend ``name`` can run on this machine, else the reason."""
    if name not in _BACKENDS:
        return f"no backend {name!r}; registered: {names()}"
    return _BACKENDS[name].check()


def available() -> list[str]:
    """Backend names usable on this machine, e.g. ``['torch', 'reference']``."""
    return [n for n in _BACKENDS if _BACKENDS[n].check() is None]


def get(name: str, match: str = "pil") -> type:
    """The ``Backend`` class of ``name`` that gives ``match``'s pixels (``MATCHES``); raises with
    what exists when it is missing or unusable."""
    if match not in MATCHES:
        raise ValueError(f"match: expected one of {MATCHES}, got {match!r}")
    if name not in _BACKENDS:
        raise ValueError(f"unknown backend {name!r}; expected one of {names()} "
                         f"(usable here: {available()})")
    reason = _BACKENDS[name].check()
    if reason is not None:
        raise RuntimeError(f"backend {name!r} is not usable here: {reason}; usable here: "
                           f"{available()}")
    if match == "pil":
        return importlib.import_module(_BACKENDS[name].module).Backend
    module = _MATCH_MODULES.get((name, match))
    if module is None:
        have = sorted(b for (b, m) in _MATCH_MODULES if m == match)
        raise ValueError(f"match={match!r}: expected a backend that reproduces it, one of {have}, "
                         f"got backend={name!r}; use backend={have[0]!r} (or 'auto')")
    return importlib.import_module(module).Backend


def resolve_auto(device: str, match: str = "pil", op: str | None = None) -> str:
    """``backend="auto"``: the first usable of dali, torch, reference for this device (for a
    ``match`` other than "pil": of the backends that reproduce it; with ``op``, e.g. ``VIDEO``:
    of the backends that lower it, ``has_lowering``)."""
    prefer = ["dali", "torch", "reference"] if device.startswith("cuda") else ["torch", "reference"]
    if match != "pil":
        prefer = [n for n in prefer if (n, match) in _MATCH_MODULES]
    if op is not None:
        prefer = [n for n in prefer if has_lowering(n, op, match)]
    for n in prefer:
        if n in _BACKENDS and _BACKENDS[n].check() is None and (
                not device.startswith("cuda") or n != "reference"):
            return n
    why = [f"{n}: {_BACKENDS[n].check() or 'CPU only'}" for n in prefer if n in _BACKENDS]
    raise RuntimeError(f"no backend can run on device {device!r}; usable here: {available()}; "
                       f"{'; '.join(why)}")
