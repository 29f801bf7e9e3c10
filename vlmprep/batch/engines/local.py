"""The local engine: work items in this process (``in_process``) or in ``workers`` spawned
processes (``local_pool``), each building its Processor once from the JobConfig, using
``usable_cpus // workers`` threads (``work.worker_threads``) and 1/workers of this process's
memory budget (``vlmprep.budget``), and calling ``work.process_item`` per item. Both yield each
shard's info as it completes; the caller (``vlmprep.batch.run.run``) keeps the manifest.
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from typing import Any, Callable, Iterator, Sequence

from ...budget import process_budget, set_process_budget
from ...processor import Processor
from ..config import JobConfig
from ..work import JobFailed, WorkItem, process_item, worker_threads

__all__ = ["in_process", "local_pool"]


def _die_with_parent() -> None:
    """Linux: this worker gets SIGKILL when the parent dies (a killed job must not leave workers
    writing shards that a --resume run writes too)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _worker(config: JobConfig, output: str, workers: int, tasks: Any, results: Any,
            parent: int, memory: int | None) -> None:
    """A local worker: build the Processor once, then process items until the None sentinel.
    ``memory``: this worker's memory budget (its share of the parent's). Messages: ("images",
    n, tokens), ("done", info), ("failed", item name, traceback text)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _die_with_parent()
    if os.getppid() != parent:  # the parent died before prctl took effect
        return
    try:
        worker_threads(workers)
        set_process_budget(memory)
        proc = config.processor()
    except BaseException:  # noqa: BLE001 (reported to the parent, which stops the job)
        results.put(("failed", "worker start", traceback.format_exc()))
        return
    while True:
        item = tasks.get()
        if item is None:
            return
        unit, part = item
        try:
            info = process_item(proc, unit, part, output, config,
                                on_images=lambda n, t: results.put(("images", n, t)))
        except BaseException:  # noqa: BLE001 (reported to the parent, which stops the job)
            results.put(("failed", f"{unit.name} part {part}", traceback.format_exc()))
            return
        results.put(("done", info))
        if _TEST_PAUSE_S:
            time.sleep(_TEST_PAUSE_S)


# Tests only: seconds a worker waits after each shard, so a test that interrupts a job (Ctrl-C,
# SIGKILL) reliably catches it mid-run instead of racing a fast machine to the end.
try:
    _TEST_PAUSE_S = min(max(float(os.environ.get("VLMPREP_RUN_TEST_PAUSE_S", "0")), 0.0), 10.0)
except ValueError:
    _TEST_PAUSE_S = 0.0


def local_pool(items: Sequence[WorkItem], output: str, config: JobConfig, workers: int,
               on_images: Callable[[int, int], None]) -> Iterator[dict]:
    """Run ``items`` in ``workers`` spawned processes; yield each shard's info as it completes.
    Closing the generator (an exception or Ctrl-C in the caller) terminates the workers."""
    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    for it in items:
        tasks.put(it)
    n = min(workers, len(items))
    for _ in range(n):
        tasks.put(None)
    # the n workers share this host's one memory budget (VLMPREP_MEMORY_BUDGET or half the
    # host): each holds 1/n of it, so n bombs at once still fit the whole
    total = process_budget().total
    share = None if total is None else max(1, total // n)
    procs = [ctx.Process(target=_worker, args=(config, output, n, tasks, results,
                                               os.getpid(), share),
                         daemon=True, name=f"vlmprep-run-{i}")
             for i in range(n)]
    for p in procs:
        p.start()
    left = len(items)
    try:
        while left:
            try:
                msg = results.get(timeout=0.5)
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead or all(p.exitcode is not None for p in procs):
                    codes = ", ".join(f"{p.name}: exit {p.exitcode}" for p in procs)
                    raise JobFailed(f"a worker process ended unexpectedly ({codes}); the "
                                     f"manifest lists the shards done: run again with --resume") \
                        from None
                continue
            if msg[0] == "images":
                on_images(msg[1], msg[2])
            elif msg[0] == "done":
                left -= 1
                yield msg[1]
            else:
                raise JobFailed(f"{msg[1]} failed (not an image's fault; the manifest lists "
                                 f"the shards done: fix the cause and run again with "
                                 f"--resume):\n{msg[2]}")
        for p in procs:
            p.join()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=10)
        tasks.close()
        results.close()
        tasks.cancel_join_thread()
        results.cancel_join_thread()


def in_process(items: Sequence[WorkItem], output: str, config: JobConfig, proc: Processor,
               on_images: Callable[[int, int], None]) -> Iterator[dict]:
    """Run ``items`` here, one after the other, with the caller's Processor."""
    for unit, part in items:
        try:
            info = process_item(proc, unit, part, output, config, on_images=on_images)
        except Exception as e:  # not an image's fault (process_samples never raises for one)
            raise JobFailed(f"{unit.name} part {part} failed (not an image's fault; the manifest "
                            f"lists the shards done: fix the cause and run again with --resume): "
                            f"{type(e).__name__}: {e}") from e
        yield info
