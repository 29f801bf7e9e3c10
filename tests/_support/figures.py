"""Measured figures a test wants shown (e.g. max/mean error levels), printed once at the end of the
run by the ``pytest_terminal_summary`` hook in tests/conftest.py, whatever the test order.

Tests call ``record(section, line)``; nothing here asserts: the asserting happens in the test that
measured the figure, against its own bound."""
from __future__ import annotations

from collections import defaultdict

_FIGURES: dict[str, list[str]] = defaultdict(list)


def record(section: str, line: str) -> None:
    """Add one printed line under ``section`` (e.g. ``"dali vs reference, levels"``)."""
    _FIGURES[section].append(line)


def collected() -> dict[str, list[str]]:
    return {k: list(v) for k, v in _FIGURES.items()}
