"""Progress bars for long calls (a DataLoader epoch, ``vlmprep bench``): tqdm when it is wanted.

A bar is shown when all hold: ``enabled`` is not False, the environment variable
``VLMPREP_PROGRESS`` is not ``0`` (``1`` shows it even when stderr is not a terminal), stderr is
a terminal, and tqdm is installed (an optional dependency: without it, no bar and no error).
Otherwise ``bar()`` returns a stand-in whose methods do nothing.
"""
from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["bar", "wanted", "shown"]

ENV = "VLMPREP_PROGRESS"


class _NoBar:
    """What ``bar()`` returns when no bar is shown: the tqdm methods the library calls."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def set_description_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def wanted(enabled: bool | None = None) -> bool:
    """Whether a bar would be shown (see the module docstring); tqdm itself is not checked."""
    if enabled is False:
        return False
    env = os.environ.get(ENV, "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if enabled or env in ("1", "true", "yes", "on"):
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def shown(enabled: bool | None = None) -> bool:
    """Whether ``bar(enabled=enabled)`` would draw a tqdm bar (wanted, and tqdm installed)."""
    import importlib.util
    return wanted(enabled) and importlib.util.find_spec("tqdm") is not None


def bar(total: int | None, desc: str, unit: str = "it", enabled: bool | None = None) -> Any:
    """A tqdm bar on stderr, or a stand-in with ``update``, ``set_postfix_str``,
    ``set_description_str`` and ``close`` (all doing nothing) when no bar is wanted or tqdm is
    not installed."""
    if not wanted(enabled):
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
                dynamic_ncols=True)
