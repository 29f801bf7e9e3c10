"""The one random seed of a test run: ``VLMPREP_TEST_SEED`` when set (to replay a failure), else
fresh per run. conftest.py prints it in the header and exposes it as the ``seed`` fixture; modules
that need it at import time (parametrize lists) import ``SEED`` from here."""
from __future__ import annotations

import os

SEED: int = int(os.environ.get("VLMPREP_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
