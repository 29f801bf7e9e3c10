"""Import an engine for a test module, or skip the module saying why (fail under make test-engines)."""
from __future__ import annotations

import importlib
import os

import pytest


def engine(module: str, name: str):
    """``module`` imported, else the calling module is skipped with the import error; with
    VLMPREP_REQUIRE_ENGINES=1 (set by ``make test-engines``) a failed import fails instead."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        why = (f"{name} does not import ({type(e).__name__}: {e}); `make test-engines` runs this suite "
               f"in build/engines/venv (requirements/engines.txt)")
        if os.environ.get("VLMPREP_REQUIRE_ENGINES"):
            pytest.fail(f"VLMPREP_REQUIRE_ENGINES is set but {why}", pytrace=False)
        pytest.skip(why, allow_module_level=True)
