"""Fixtures shared by the loader tests."""
from __future__ import annotations

from pathlib import Path

import pytest
from _support.clips import make_clips


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    """The real clips and broken files of ``_support.clips`` (video loader and cache tests)."""
    return make_clips(tmp_path_factory.mktemp("clips"))
