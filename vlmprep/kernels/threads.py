"""How many CPU threads vlmprep's own work may use (kernels' CPU twins, per-image parallelism)."""
from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["set_num_threads", "get_num_threads", "local_threads", "usable_cpus"]

_threads: int | None = None
_local = threading.local()


def set_num_threads(n: int | None) -> None:
    """Use ``n`` threads for vlmprep's CPU work (None: back to the default, the usable cores)."""
    global _threads
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ValueError(f"num_threads: expected a positive int or None, got {n!r}")
    _threads = n


def get_num_threads() -> int:
    """Threads vlmprep's CPU work uses: ``set_num_threads``, else ``VLMPREP_NUM_THREADS``, else
    the cores this process may run on."""
    n = getattr(_local, "n", None)
    if n is not None:
        return n
    if _threads is not None:
        return _threads
    env = os.environ.get("VLMPREP_NUM_THREADS")
    if env:
        return max(1, int(env))
    return usable_cpus()


def usable_cpus() -> int:
    """The cores this process may run on (its affinity mask; ``os.cpu_count()`` off Linux)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def local_threads(n: int):
    """In this thread only, vlmprep's kernels use ``n`` threads (a worker that already runs in
    parallel with others asks for 1, so the two levels do not oversubscribe the cores)."""
    old = getattr(_local, "n", None)
    _local.n = n
    try:
        yield
    finally:
        _local.n = old
