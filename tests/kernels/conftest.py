"""The compiled ops are optional: these tests skip (with the reason) when they are not built,
except under VLMPREP_REQUIRE_KERNELS=1 (CI), where a missing build is a failure."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def kernels():
    from vlmprep import kernels as k
    reason = k.why_unavailable()
    if reason is not None:
        if os.environ.get("VLMPREP_REQUIRE_KERNELS"):
            pytest.fail(f"VLMPREP_REQUIRE_KERNELS is set but the kernels did not load: {reason}")
        pytest.skip(f"vlmprep kernels not available: {reason}")
    return k
