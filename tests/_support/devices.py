"""``device`` parameters for tests (import from here, not from ``conftest``: several test
folders have a conftest.py, and ``from conftest import ...`` gets whichever was imported last)."""
from __future__ import annotations

import pytest


def devices() -> list:
    """``device`` parameters: cpu always, cuda marked gpu (skipped centrally without one)."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
