"""The process-wide memory budget: the items being processed at once plan at most this many bytes.

Each item holds its planned bytes (``image_bytes``, ``video_bytes``: what its header and plan
say it needs at its peak) from the one ``process_budget()`` while it is decoded and processed,
and gives them back after. An item that does not fit waits, in arrival order, until the items
before it give back enough, so N items at once never plan more than the budget between them,
whatever N is: eight decode bombs (each legal under ``max_decode_bytes``) sent at once run a few
at a time, not all together. What is not per item (the batch's output, the interpreter) comes
on top.

- Size: ``VLMPREP_MEMORY_BUDGET``, read at the first item: bytes (``4000000000``), with a binary
  suffix (``512M``, ``8G``), a share of the host's memory (``25%``), or ``off`` (no budget).
  Default: half of the host's memory (physical RAM, or the cgroup's limit when lower). Each
  process has its own; ``vlmprep run --workers N`` gives each of its N worker processes
  1/N of its own (``set_process_budget``); split it yourself between other processes of one
  host (Ray actors, several servers).
- An item planning more than the whole budget is refused (ImageError, expected / got / fix):
  it could not run without taking what the budget protects.
- A waiting item gives up at its deadline with an ImageError: a video at its ``timeout_s``
  (``VideoLimits``; the wait counts against it), an image after ``MemoryBudget.wait_s``
  (``DEFAULT_WAIT_S``).
- An uncontended hold is one lock acquire and an addition; ``off`` skips even that.

Where items hold it: ``Backend._map`` (the images of a batch image by image; the dispatching
thread waits, never an image thread), ``held_chunks`` (the backends that run a batch chunk by
chunk: dali, and torch on CUDA, hold each chunk's images while the chunk runs) and
``backends.video.run_video`` (each video). It counts host memory: a device's memory is the
device's (its allocator fails, the backend reports it).
"""
from __future__ import annotations

import collections
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, TypeVar

from .errors import ImageError
from .io.decode import decode_cost

if TYPE_CHECKING:
    from .io.inputs import Source
    from .plan import ImagePlan
    from .plan.video import VideoPlan

__all__ = ["MemoryBudget", "Hold", "process_budget", "set_process_budget", "held_chunks",
           "image_bytes", "video_bytes", "host_memory", "ENV", "DEFAULT_SHARE", "DEFAULT_WAIT_S"]

T = TypeVar("T")

ENV = "VLMPREP_MEMORY_BUDGET"
DEFAULT_SHARE = 0.5  # of the host's memory
DEFAULT_WAIT_S = 60.0  # an image's wait (a video waits at most its own timeout_s)
_SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Hold:
    """Bytes held from a budget; ``release()`` (or leaving the ``with`` block) gives them back,
    once. ``waited_s``: seconds the acquire waited."""

    __slots__ = ("_budget", "nbytes", "waited_s")

    def __init__(self, budget: "MemoryBudget | None", nbytes: int, waited_s: float = 0.0):
        self._budget, self.nbytes, self.waited_s = budget, nbytes, waited_s

    def release(self) -> None:
        b, self._budget = self._budget, None
        if b is not None:
            b._give_back(self.nbytes)

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


class MemoryBudget:
    """A byte semaphore: ``acquire(n)`` holds ``n`` of ``total`` bytes, waiting (first come,
    first served) while the holders leave too little. ``total=None``: unlimited (every acquire
    returns at once). Thread-safe; ``in_use`` and ``peak`` (the most held at once) are for
    monitoring and tests."""

    def __init__(self, total: int | None, wait_s: float = DEFAULT_WAIT_S):
        if total is not None and (isinstance(total, bool) or not isinstance(total, int)
                                  or total < 1):
            raise ValueError(f"MemoryBudget: total expected bytes as an int >= 1 (or None: "
                             f"unlimited), got {total!r}")
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not wait_s > 0:
            raise ValueError(f"MemoryBudget: wait_s expected seconds > 0, got {wait_s!r}")
        self.total, self.wait_s = total, float(wait_s)
        self._cond = threading.Condition(threading.Lock())
        self._used = self.peak = 0
        self._queue: collections.deque[object] = collections.deque()  # waiters, in order

    def __repr__(self) -> str:
        size = "unlimited" if self.total is None else f"{self.total:,} bytes"
        return f"MemoryBudget({size}, in use {self._used:,})"

    @property
    def in_use(self) -> int:
        return self._used

    def acquire(self, nbytes: int, timeout_s: float | None = None, what: str = "this item"
                ) -> Hold:
        """Hold ``nbytes`` (waiting at most ``timeout_s``, default ``wait_s``) -> a ``Hold``.
        ImageError when ``nbytes`` is over the whole budget, or when the wait runs out."""
        if self.total is None:
            return Hold(None, 0)
        nbytes = self._check(nbytes, what)
        with self._cond:
            if not self._queue and self._used + nbytes <= self.total:  # the usual case
                return self._take(nbytes, 0.0)
            t0 = time.monotonic()
            deadline = t0 + (self.wait_s if timeout_s is None else max(0.0, timeout_s))
            me = object()
            self._queue.append(me)
            try:
                while self._queue[0] is not me or self._used + nbytes > self.total:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise ImageError(
                            f"expected room for {what}'s {nbytes:,} planned bytes in the "
                            f"process's memory budget ({self.total:,} bytes, {ENV}) within "
                            f"{deadline - t0:g} s, got {self._used:,} bytes held by the items "
                            f"running the whole time; send fewer large items at once, retry "
                            f"later, or raise {ENV}")
                    self._cond.wait(left)
                return self._take(nbytes, time.monotonic() - t0)
            finally:
                self._queue.remove(me)
                self._cond.notify_all()  # the next in line may fit now

    def try_acquire(self, nbytes: int, what: str = "this item") -> Hold | None:
        """Hold ``nbytes`` now if they fit and nobody waits -> a ``Hold``; None otherwise (no
        wait). ImageError when ``nbytes`` is over the whole budget."""
        if self.total is None:
            return Hold(None, 0)
        nbytes = self._check(nbytes, what)
        with self._cond:
            if not self._queue and self._used + nbytes <= self.total:
                return self._take(nbytes, 0.0)
        return None

    def _check(self, nbytes: int, what: str) -> int:
        assert self.total is not None
        nbytes = max(0, int(nbytes))
        if nbytes > self.total:
            raise ImageError(f"expected {what} to plan at most {self.total:,} bytes (the "
                             f"process's memory budget, {ENV}), got {nbytes:,} planned; lower "
                             f"max_source_pixels / max_decode_bytes so such items are refused "
                             f"from their header, or raise {ENV} if the host has the memory")
        return nbytes

    def _take(self, nbytes: int, waited_s: float) -> Hold:
        self._used += nbytes
        self.peak = max(self.peak, self._used)
        return Hold(self, nbytes, waited_s)

    def _give_back(self, nbytes: int) -> None:
        with self._cond:
            self._used -= nbytes
            if self._queue:
                self._cond.notify_all()


def host_memory() -> int:
    """Bytes of memory this process may use on this host: physical RAM, or the cgroup's limit
    (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) when lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read(64).strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total


def _parse(raw: str) -> int | None:
    """``VLMPREP_MEMORY_BUDGET``'s value -> bytes (None: ``off``); ValueError otherwise."""
    text = raw.strip().upper()
    if text in ("OFF", "NONE"):
        return None
    try:
        if text.endswith("%"):
            share = float(text[:-1]) / 100
            if not 0 < share <= 1:
                raise ValueError
            return max(1, int(host_memory() * share))
        scale = _SUFFIX.get(text[-1:], 1)
        n = int(float(text[:-1] if text[-1:] in _SUFFIX else text) * scale)
        if n < 1:
            raise ValueError
        return n
    except ValueError:
        raise ValueError(f"{ENV}: expected bytes (4000000000), with a suffix (512M, 8G), a share "
                         f"of the host's memory (25%) or 'off', got {raw!r}; fix the environment "
                         f"variable, or unset it for half of the host's memory") from None


_PROCESS: MemoryBudget | None = None
_PROCESS_LOCK = threading.Lock()


def process_budget() -> MemoryBudget:
    """The process's one budget, made at the first call from ``VLMPREP_MEMORY_BUDGET`` (or half
    of ``host_memory()``); a bad value is a ValueError (the call fails, not an item)."""
    global _PROCESS
    b = _PROCESS
    if b is not None:
        return b
    with _PROCESS_LOCK:
        if _PROCESS is None:
            raw = os.environ.get(ENV)
            total = (_parse(raw) if raw is not None and raw.strip()
                     else max(1, int(host_memory() * DEFAULT_SHARE)))
            _PROCESS = MemoryBudget(total)
        return _PROCESS


def set_process_budget(total: int | None) -> MemoryBudget:
    """Make the process's budget ``total`` bytes (None: unlimited) from now on, whatever
    ``VLMPREP_MEMORY_BUDGET`` says; items holding the old one give it back to the old one. For
    a process that knows its share of the host (``vlmprep run``'s workers)."""
    global _PROCESS
    with _PROCESS_LOCK:
        _PROCESS = MemoryBudget(total)
        return _PROCESS


def held_chunks(items: Sequence[T], step: int, cost: Callable[[T], int],
                refuse: Callable[[T, ImageError], None], what: str = "this image",
                budget: MemoryBudget | None = None) -> Iterator[list[T]]:
    """``items`` in order, as consecutive chunks of at most ``step`` whose planned bytes
    (``cost`` of each) are held from ``budget`` (default: the process's) while the caller runs
    the chunk; they are given back when the caller asks for the next chunk or stops.

    A chunk's first item waits for its bytes (``MemoryBudget.acquire``: in turn, at most
    ``wait_s``); the next ones join only if they fit now, else the chunk closes there and that
    item heads the next one (so a chunk never waits on its own holds). An item the budget
    refuses (over the whole budget, or its wait ran out) goes to ``refuse(item, error)`` and is
    left out of every chunk."""
    if step < 1:
        raise ValueError(f"held_chunks: step expected an int >= 1, got {step!r}")
    b = process_budget() if budget is None else budget
    i = 0
    while i < len(items):
        holds: list[Hold] = []
        chunk: list[T] = []
        try:
            while i < len(items) and len(chunk) < step:
                it = items[i]
                try:
                    hold = (b.acquire(cost(it), what=what) if not chunk
                            else b.try_acquire(cost(it), what=what))
                except ImageError as e:
                    refuse(it, e)
                    i += 1
                    continue
                if hold is None:
                    break  # no room beside this chunk: it heads the next one
                holds.append(hold)
                chunk.append(it)
                i += 1
            if chunk:
                yield chunk
        finally:
            for h in holds:
                h.release()


def image_bytes(source: "Source", plan: "ImagePlan") -> int:
    """Planned peak bytes of one image: its decode (``io.decode.decode_cost`` of the header: the
    decoder's image and the RGB output) or, for an image already in memory, an RGB copy; plus
    the plan's resized canvases (RGB), a ``Canvas.normalized`` one in float32 with its parent's
    float32 copy (normalized before the resize)."""
    h, w = source.hw
    if source.header is not None:
        cost = decode_cost(source.header)
    else:
        cost = h * w * 3
    cost += sum(c.resize_hw[0] * c.resize_hw[1] * (12 if c.normalized else 3) for c in plan.canvases)
    for k in {c.parent for c in plan.canvases if c.normalized}:
        ph, pw = (h, w) if k < 0 else plan.canvases[k].hw
        cost += ph * pw * 12
    return cost


def video_bytes(plan: "VideoPlan") -> int:
    """Planned peak bytes of one video: its distinct sampled frames decoded (RGB), the decoder's
    own frame canvases (two RGBA frames: an animation's composition, a codec's buffers) and the
    resized frames (RGB)."""
    meta = plan.meta
    h, w = (int(meta.height), int(meta.width)) if meta is not None else (0, 0)
    rh, rw = plan.resized_hw
    return (len(set(plan.frame_indices)) * h * w * 3 + 2 * h * w * 4
            + len(plan.frame_indices) * rh * rw * 3)
