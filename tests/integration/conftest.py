"""The real-engine suite (marker ``engines``): vlmprep's adapters fed to the installed vLLM / SGLang.

Each module skips itself, with the reason, when its engine does not import (the main .venv has
neither); ``make test-engines`` builds build/engines/venv from requirements/engines.txt and runs
``pytest -m engines tests/integration`` there.
"""
from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line("markers", "engines: needs the real vLLM / SGLang (make test-engines)")
