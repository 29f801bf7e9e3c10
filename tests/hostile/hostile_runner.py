"""Parent side of the hostile corpus: runs groups in child processes (hostile_worker.py) under
a per-step watchdog, and turns crashes and hangs into results named by case.

    results = run_groups(["corrupt", "special"], ["reference", "torch"])
    results[("corrupt", "empty", "torch", "proc")] -> {"problems": [...], "seconds": ..., ...}

One child runs every group (its imports and warm-up are paid once); after a crash or hang the
next child resumes at the following step.

The batcher and loader modes run chunks of cases in one step (as they share batches); a crash
or hang there fails every case of the chunk, naming them.

A child that dies (SIGSEGV, abort, OOM kill) fails the step it had begun, with its signal and
the tail of its stderr (faulthandler's Python stack); a step with no result after the watchdog
(VLMPREP_HOSTILE_WATCHDOG seconds, default 30: every case is small, so this only catches a
hang) fails as a hang, and the case's remaining steps are not run (each would wait the
watchdog out again) but reported as failed. The run then resumes in a fresh child.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "hostile_worker.py")


def watchdog_s() -> float:
    return float(os.environ.get("VLMPREP_HOSTILE_WATCHDOG", "30"))


def full() -> bool:
    return os.environ.get("VLMPREP_HOSTILE_FULL", "") not in ("", "0")


def _reader(stream, q: queue.Queue) -> None:
    for line in stream:
        q.put(line)
    q.put(None)


def _how(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}"


def run_groups(groups: list[str], backends: list[str], modes: tuple[str, ...] | None = None,
               watchdog: float | None = None, full_run: bool | None = None,
               max_restarts: int = 200) -> dict:
    """Run every step of ``groups`` -> {(group, case, backend, mode): result}; ``modes``
    overrides each group's own."""
    watchdog = watchdog_s() if watchdog is None else watchdog
    full_run = full() if full_run is None else full_run
    results: dict = {}
    names: dict | None = None
    start, restarts = 0, 0
    skip: set[str] = set()  # "group:case" that hung alone: their later steps are reported, not run
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        while True:
            cmd = [sys.executable, WORKER, ",".join(groups), "--backends", ",".join(backends),
                   "--start", str(start), "--skip", ",".join(sorted(skip)),
                   "--tmp", tmp] + (["--full"] if full_run else []) + \
                (["--modes", ",".join(modes)] if modes else [])
            errf = tempfile.TemporaryFile(mode="w+")
            child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True,
                                     start_new_session=True)
            q: queue.Queue = queue.Queue()
            threading.Thread(target=_reader, args=(child.stdout, q), daemon=True).start()
            current, began = None, time.monotonic()
            # the child's imports and warm-up are not a step: they get their own, longer limit
            limit = watchdog + 120
            hung = False
            while True:
                try:
                    line = q.get(timeout=max(0.1, began + limit - time.monotonic()))
                except queue.Empty:
                    hung = True
                    os.killpg(child.pid, signal.SIGKILL)
                    break
                if line is None:
                    break
                msg = json.loads(line)
                if "cases" in msg:
                    names, steps = msg["cases"], msg["steps"]
                elif "begin" in msg:
                    current, began = msg["begin"], time.monotonic()
                    # the first step of a backend also builds it and warms it up
                    first = all(s[2] != steps[current][2] for s in steps[start:current])
                    limit = watchdog * len(steps[current][1]) ** 0.5 + (120 if first else 0)
                elif "end" in msg:
                    g, _, b, m = steps[msg["end"]]
                    for case, r in msg["results"].items():
                        results[(g, case, b, m)] = r
                    current = None
            rc = child.wait()
            errf.seek(0)
            err = errf.read()
            errf.close()
            # faulthandler's report starts at "Fatal Python error"; the current thread's stack
            # (the one that crashed) is printed right after it
            at = err.rfind("Fatal Python error")
            err_tail = err[at:at + 2500] if at >= 0 else err[-2500:]
            if names is None:
                raise RuntimeError(f"hostile worker for {groups} {_how(rc)} before listing its "
                                   f"cases:\n{err_tail}")
            if current is None:
                if rc != 0 and not hung:
                    raise RuntimeError(f"hostile worker for {groups} {_how(rc)} between steps:\n{err_tail}")
                return results
            g, idx, b, m = steps[current]
            who = [names[g][i] for i in idx]
            if hung:
                for case in who:
                    results[(g, case, b, m)] = {"problems": [
                        f"hang: no result after {limit:.0f} s (watchdog)"
                        + (f" for this chunk of {len(who)} cases: {who}" if len(who) > 1 else "")],
                        "seconds": limit}
                nxt = current + 1
                if len(who) == 1:  # the case's other steps would wait the watchdog out again
                    skip.add(f"{g}:{idx[0]}")
            else:
                for case in who:
                    results[(g, case, b, m)] = {"problems": [
                        f"crash: the process {_how(rc)} during this step"
                        + (f" (a chunk of {len(who)} cases: {who})" if len(who) > 1 else "")
                        + f"; stderr tail:\n{err_tail}"]}
                nxt = current + 1
            start = nxt
            restarts += 1
            if start >= len(steps) or restarts > max_restarts:
                for g, idx, b, m in steps[start:]:
                    for i in idx:
                        results.setdefault((g, names[g][i], b, m),
                                           {"problems": ["not run: too many crashes or hangs before it"]})
                return results
