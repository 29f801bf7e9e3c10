"""Markers and central skips. Devices are test parameters; skipping says why, in one place.

Markers: gpu (needs CUDA), dali (needs nvidia-dali), hf (needs transformers as the oracle),
slow (long: the hostile corpus, the batcher soak, real bench runs, the GPU check's own harness).
Slow tests are left out of the default suite (``make test``: under 15 minutes on 2 cores) and
run by ``make test-slow`` (``-m slow`` or VLMPREP_SLOW=1 selects them; CI runs both).
stress (opt-in, ``make stress``: thread races beside CPU burners, peak-memory runs, the docs' Ray
example): skipped unless VLMPREP_STRESS=1, so the default suite stays under 15 minutes on 2 cores.
Random tests take the ``seed`` fixture (one seed per run, printed in the header;
VLMPREP_TEST_SEED replays it). Figures a test measured (tests/_support/figures.py ``record``)
are printed in the terminal summary. Shared helpers (test photos and encoders, the seed, the
figures) live in tests/_support/.
"""
from __future__ import annotations

import importlib.util
import os

import pytest
from _support import figures
from _support.seed import SEED

MARKERS = {
    "gpu": "needs a CUDA GPU",
    "dali": "needs nvidia-dali importable",
    "hf": "needs transformers (the oracle)",
    "slow": "long-running",
    "stress": "opt-in stress / peak-memory run (make stress, VLMPREP_STRESS=1)",
    "arm64": "aarch64 kernels under qemu-user (make test-arm64; skips without the cross tools)",
}


def pytest_configure(config):
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


def pytest_report_header(config):
    return f"vlmprep test seed: {SEED} (replay with VLMPREP_TEST_SEED={SEED})"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    # The header is hidden under -q (make test): the seed is repeated here so a failure can be replayed.
    terminalreporter.write_line(f"vlmprep test seed: {SEED} (replay with VLMPREP_TEST_SEED={SEED})")
    got = figures.collected()
    if not got:
        return
    terminalreporter.section("measured figures")
    for section, lines in sorted(got.items()):
        terminalreporter.write_line(section)
        for line in lines:
            terminalreporter.write_line(f"  {line}")


@pytest.fixture(scope="session")
def seed() -> int:
    """This run's random seed (see tests/_support/seed.py)."""
    return SEED


def _cuda() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    return None if torch.cuda.is_available() else "no CUDA GPU on this machine"


def _has(mod: str) -> str | None:
    return None if importlib.util.find_spec(mod) is not None else f"{mod} is not installed"


_SKIP = {"gpu": _cuda,
         "dali": lambda: _has("nvidia.dali") if _has("nvidia") is None else "nvidia-dali is not installed",
         "hf": lambda: _has("transformers"),
         "stress": lambda: None if os.environ.get("VLMPREP_STRESS") else "opt-in: make stress "
                                                                        "(VLMPREP_STRESS=1)"}


def _skip_slow(config, items) -> None:
    """Slow tests run when asked for: ``-m slow`` (make test-slow) or VLMPREP_SLOW=1 (make
    wheel-check); ``make test`` leaves them out."""
    if os.environ.get("VLMPREP_SLOW") == "1" or "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: make test-slow runs it (or -m slow / VLMPREP_SLOW=1)")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


def pytest_collection_modifyitems(config, items):
    _skip_slow(config, items)
    reasons: dict[str, str | None] = {}
    for item in items:
        for name, check in _SKIP.items():
            if item.get_closest_marker(name) is None:
                continue
            if name not in reasons:
                reasons[name] = check()
            if reasons[name]:
                item.add_marker(pytest.mark.skip(reason=f"[{name}] {reasons[name]}"))


@pytest.fixture(scope="session")
def kernels():
    """``vlmprep.kernels`` when the compiled ops load; skips (with the reason) when they are not
    built, except under VLMPREP_REQUIRE_KERNELS=1 (CI), where a missing build is a failure."""
    import os

    from vlmprep import kernels as k
    reason = k.why_unavailable()
    if reason is not None:
        if os.environ.get("VLMPREP_REQUIRE_KERNELS"):
            pytest.fail(f"VLMPREP_REQUIRE_KERNELS is set but the kernels did not load: {reason}")
        pytest.skip(f"vlmprep kernels not available: {reason}")
    return k
