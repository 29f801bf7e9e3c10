"""Runs the atheris harnesses for a time budget; saves crashes with a command to reproduce.

    .venv/bin/python fuzz/run.py --seconds 900             # make fuzz (FUZZ_SECONDS)
    .venv/bin/python fuzz/run.py --seconds 48              # make fuzz-short (CI)
    .venv/bin/python fuzz/run.py --seconds 60 --only probe
    .venv/bin/python fuzz/run.py --seconds 7200 --only parquet --executions 1000000  # stop at 1M

The budget is split evenly over the harnesses (probe, pipeline, kernels, tar, parquet, data_uri,
animated, document). Each runs on its growing corpus fuzz/corpus/<name>/ (gitignored) plus the
committed seeds fuzz/seeds/<name>/.
libFuzzer stops at the first crash; the harness is then restarted on the same corpus until its
time is spent, so one run can find several distinct crashes. Each crash (an uncaught exception
other than the harness's clean ones, a signal, an input over -timeout seconds or over
-rss_limit_mb) is written to fuzz/crashes/<name>-crash-<sha1> (or -timeout-, -oom-) with its
log beside it, and printed with the command that replays it. Inputs slower than 10 s but under
the timeout (libFuzzer's slow-unit-*) are listed, not counted as failures; so is an out-of-memory
stop whose input then runs alone within the limit (the fuzzing process grew, not the input's work:
the run restarts). With --executions N a harness stops once it has run N inputs (libFuzzer's
-runs, carried over restarts) or its time is spent, whichever comes first. The figures go to
fuzz/crashes/last_run.json. Exit status 1 when anything crashed.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HARNESSES = {
    # name: (max input length, per-input timeout s)
    "probe": (65536, 10),
    "pipeline": (65536, 30),
    "kernels": (4096, 30),
    "tar": (65536, 10),
    "parquet": (65536, 10),
    "data_uri": (16384, 10),  # the chunk logic needs no longer text; long ones cost the rate
    "animated": (65536, 30),  # the harness itself fails an input past timeout_s + 3 s (4 s)
    "document": (65536, 30),  # the harness fails a call past 1 s a page (8 at most) + 5 s
}
RSS_LIMIT_MB = 2048  # libFuzzer's default; the harnesses bound honest work well below it


def _stat(out: str, key: str) -> int | None:
    m = re.findall(rf"stat::{key}:\s*(\d+)", out)
    return int(m[-1]) if m else None


def _cov(out: str) -> int | None:
    m = re.findall(r"cov: (\d+)", out)
    return int(m[-1]) if m else None


def _summary(out: str) -> str:
    """One line that names the failure (for de-duplication and the report)."""
    for pat in (r"=== Uncaught Python exception: ===\n(.+)", r"(AssertionError.*)", r"(==\d+== ERROR: .+)",
                r"(Fatal Python error: .+)", r"(ALARM: working on the last Unit for \d+ seconds)",
                r"(out-of-memory \(used: \d+Mb; exceeds: \d+Mb\))", r"(deadly signal)"):
        m = re.search(pat, out)
        if m:
            return m.group(1).strip()[:300]
    return out.strip().splitlines()[-1][:300] if out.strip() else "?"


def _replays(python: str, script: str, art: str) -> bool:
    """Whether the input ``art`` runs alone, within the memory limit, without failing."""
    try:
        p = subprocess.run([python, script, art, f"-rss_limit_mb={RSS_LIMIT_MB}"], cwd=ROOT,
                           capture_output=True, timeout=300)
    except subprocess.TimeoutExpired:
        return False
    return p.returncode == 0


def run_one(name: str, seconds: float, python: str, executions: int = 0) -> dict:
    max_len, timeout = HARNESSES[name]
    corpus = os.path.join(HERE, "corpus", name)
    seeds = os.path.join(HERE, "seeds", name)
    crashes = os.path.join(HERE, "crashes")
    os.makedirs(corpus, exist_ok=True)
    os.makedirs(crashes, exist_ok=True)
    script = os.path.join(HERE, f"fuzz_{name}.py")
    deadline = time.monotonic() + seconds
    res = {"harness": name, "seconds": 0.0, "executions": 0, "runs": 0, "crashes": [], "slow_units": [],
           "rss_growth": [], "coverage": None, "corpus_files": 0}
    while True:
        left = int(deadline - time.monotonic())
        if left < 3 or (executions and res["executions"] >= executions):
            break
        before = set(glob.glob(os.path.join(crashes, f"{name}-*")))
        cmd = [python, script, corpus, seeds, f"-max_total_time={left}", f"-timeout={timeout}",
               f"-rss_limit_mb={RSS_LIMIT_MB}", f"-max_len={max_len}", "-print_final_stats=1",
               f"-artifact_prefix={os.path.join(crashes, name)}-"]
        if executions:
            cmd.append(f"-runs={executions - res['executions']}")
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=left + 120)
            out, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
            rc = "killed (ran past its time budget)"
        res["seconds"] += time.monotonic() - t0
        res["runs"] += 1
        res["executions"] += _stat(out, "number_of_executed_units") or 0
        res["coverage"] = _cov(out) or res["coverage"]
        made = set(glob.glob(os.path.join(crashes, f"{name}-*"))) - before
        made -= {f for f in made if f.endswith(".log")}
        # libFuzzer also saves inputs slower than -report_slow_units (10 s): not a failure
        # (the -timeout is), but worth a look
        slow = sorted(f for f in made if os.path.basename(f).startswith(f"{name}-slow-unit-"))
        res["slow_units"] += [os.path.relpath(f, ROOT) for f in slow]
        new = sorted(made - set(slow))
        # an out-of-memory stop whose input replays alone within the limit is the fuzzing process's
        # own growth (atheris's data_uri run grows ~3.7 KB an execution; the same inputs in a plain
        # loop do not): listed and restarted, not a failure
        grown = [f for f in new if os.path.basename(f).startswith(f"{name}-oom-") and _replays(python, script, f)]
        res["rss_growth"] += [os.path.relpath(f, ROOT) for f in grown]
        new = [f for f in new if f not in grown]
        if grown and not new:
            continue
        if rc == 0 and not new:
            break  # the time is spent
        summary = _summary(out)
        for art in new or [None]:
            log = (art or os.path.join(crashes, f"{name}-run{res['runs']}")) + ".log"
            with open(log, "w") as f:
                f.write(out[-20000:])
            res["crashes"].append({"summary": summary, "artifact": os.path.relpath(art, ROOT) if art else None,
                                   "log": os.path.relpath(log, ROOT), "exit": rc,
                                   "reproduce": f".venv/bin/python fuzz/fuzz_{name}.py {os.path.relpath(art, ROOT)}"
                                   if art else None})
        if not new:
            break  # failed without an artifact (e.g. the harness did not start): do not loop
    res["seconds"] = round(res["seconds"], 1)
    res["corpus_files"] = len(os.listdir(corpus))
    return res


def _kernels_state(python: str) -> str:
    """'loaded', or 'not loaded: <why>', as the harnesses' interpreter sees vlmprep.kernels."""
    code = ("import vlmprep.kernels as k; print('loaded' if k.available() and k.jpeg_available() "
            "else f'not loaded: {k.why_unavailable()}')")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    lines = (out.stdout.strip() or out.stderr.strip() or "unknown").splitlines()
    return lines[-1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=900, help="total budget, split over the harnesses")
    ap.add_argument("--only", default="", help="comma list of harnesses (default: all)")
    ap.add_argument("--executions", type=int, default=0,
                    help="stop each harness after this many inputs (0: run for its whole time)")
    args = ap.parse_args()
    names = [n for n in HARNESSES if not args.only or n in args.only.split(",")]
    if names and args.seconds / len(names) < 4:  # run_one starts a harness only with >= 3 whole s left
        ap.error(f"--seconds: expected at least {4 * len(names)} ({len(names)} harnesses, 4 s each), "
                 f"got {args.seconds:g}: nothing would run")
    python = sys.executable
    kernels = _kernels_state(python)
    # the harnesses run different decoders with and without the compiled kernels: say which
    print(f"fuzz: compiled kernels {kernels}")
    results = []
    for n in names:
        r = run_one(n, args.seconds / len(names), python, args.executions)
        results.append(r)
        distinct = sorted({c["summary"] for c in r["crashes"]})
        print(f"fuzz {n}: {r['executions']} executions in {r['seconds']} s, coverage {r['coverage']}, "
              f"corpus {r['corpus_files']} files, {len(r['crashes'])} crashes ({len(distinct)} distinct)")
        for u in r["slow_units"]:
            print(f"  slow input (> 10 s, not a failure): {u}")
        for u in r["rss_growth"]:
            print(f"  out of memory, the input replayed clean alone (the process's growth, restarted): {u}")
        for c in r["crashes"]:
            again = f"\n    reproduce: {c['reproduce']}" if c["reproduce"] else ""
            print(f"  CRASH {c['summary']}\n    log: {c['log']}{again}")
    os.makedirs(os.path.join(HERE, "crashes"), exist_ok=True)
    with open(os.path.join(HERE, "crashes", "last_run.json"), "w") as f:
        json.dump({"seconds": args.seconds, "kernels": kernels, "results": results}, f, indent=1)
    return 1 if any(r["crashes"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
