"""Spies for tests: record what a function returns while it keeps working."""
from __future__ import annotations

from typing import Any


def record_returns(monkeypatch: Any, owner: Any, name: str) -> list:
    """Replace ``owner.<name>`` (undone by ``monkeypatch``) with a wrapper that appends each
    return value to the list returned here, e.g. the executors ``fusion.choose`` picks."""
    seen: list = []
    real = getattr(owner, name)

    def spy(*a: Any, **k: Any) -> Any:
        seen.append(real(*a, **k))
        return seen[-1]
    monkeypatch.setattr(owner, name, spy)
    return seen
