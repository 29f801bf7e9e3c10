"""The hostile-input guarantees, for every CPU backend that runs here and three entry points.

The generated corpus (hostile_corpus.py) runs in child processes (hostile_runner.py ->
hostile_worker.py), once per session; each test here is one
(group, backend, mode) slice and fails listing every case that broke a guarantee:
no crash, no hang (watchdog), only ImageError for bad items at the right index, good images
bit-exact with a batch of only them, the Processor / Batcher / DataLoader usable after, peak
memory within the bound hostile_worker._bound states (proc mode).

    VLMPREP_HOSTILE_FULL=1       denser truncation sweeps, issue-sized bombs (minutes)
    VLMPREP_HOSTILE_GROUPS=a,b   only these groups
    VLMPREP_HOSTILE_WATCHDOG=30  seconds a step may take before it counts as a hang
    VLMPREP_HOSTILE_REPORT=path  also write every result as JSON there (hostile_status.py reads it)
"""
from __future__ import annotations

import json
import os

import pytest
from hostile_corpus import ALL_MODES, GROUP_MODES, GROUP_NAMES
from hostile_runner import run_groups


def _backends() -> list[str]:
    import vlmprep
    # the CPU backends usable here (dali runs on the CPU too when nvidia-dali is installed)
    return [b for b in ("reference", "torch", "dali") if b in vlmprep.backends.available()]


def _groups() -> list[str]:
    sel = os.environ.get("VLMPREP_HOSTILE_GROUPS")
    return [g for g in GROUP_NAMES if not sel or g in sel.split(",")]


_RESULTS: dict = {}


def _run(session) -> dict:
    """Every group this session's tests ask for (``-k`` selections included), once, in one
    chain of child processes."""
    if not _RESULTS:
        wanted = {it.callspec.params["group"] for it in session.items
                  if getattr(it, "originalname", "") == "test_hostile" and hasattr(it, "callspec")}
        _RESULTS.update(run_groups([g for g in _groups() if g in wanted], _backends()))
        path = os.environ.get("VLMPREP_HOSTILE_REPORT")
        if path:
            report: dict = {}
            for (g, case, b, m), r in _RESULTS.items():
                report.setdefault(g, []).append([case, b, m, r])
            with open(path, "w") as f:
                json.dump(report, f, indent=0)
    return _RESULTS


_PARAMS = [(g, b, m) for g in _groups() for b in _backends() for m in GROUP_MODES.get(g, ALL_MODES)]


@pytest.mark.slow  # the whole corpus in child processes: ~2 minutes
@pytest.mark.parametrize("group,backend,mode", _PARAMS, ids=["-".join(p) for p in _PARAMS])
def test_hostile(request, group, backend, mode):
    res = _run(request.session)
    mine = {case: r for (g, case, b, m), r in res.items() if (g, b, m) == (group, backend, mode)}
    assert mine, f"no steps ran for {group}/{backend}/{mode}"
    bad = {case: r["problems"] for case, r in mine.items() if r.get("problems")}
    lines = [f"{case}: {p}" for case, ps in bad.items() for p in ps]
    assert not bad, (f"{len(bad)} of {len(mine)} cases of group {group!r} broke a guarantee on "
                     f"backend {backend!r} ({mode}):\n" + "\n".join(lines))
