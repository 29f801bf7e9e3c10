"""Batch forming: the sample stream of an epoch, size grouping, and greedy packing.

Pure host-side logic (no pixels): the DataLoader feeds it samples whose token counts come from
``Processor.plan`` (header-only), and receives lists of samples to process.

Greedy packing, a tiny example::

    Given  tokens [30, 50, 40, 100, 10], max_batch_tokens=80, batch_size=None
    Output [30, 50] [40] [100] [10]       ([100] is above the budget: its own batch, reported)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ..errors import ImageError

__all__ = ["Sample", "pack_greedy", "group_by_tokens", "stream_from"]


@dataclass(slots=True)
class Sample:
    """One sample on its way to a batch.

    Fields:
        pos: position in the epoch's sample stream (what resume counts).
        index: position in ``sources`` (map-style) or in the iterable (streaming).
        sid: the sample id: the dict's id field, else ``index``.
        image: the image (or video) item handed to the Processor (None when ``error`` is set).
        tokens: LLM tokens from the header-only plan (0 when unknown or bad; -1 when not
            needed: count batching without size grouping).
        error: an ImageError found before processing (a dict without its image field).
        video: the item is a video (``Processor(videos=[...])``; in ``batch.videos``).
        document: the item is a one-page ``vlmprep.Document``: an image item of the batch
            (``loader/documents.py``).
    """

    pos: int
    index: int
    sid: Any
    image: Any
    tokens: int = -1
    error: ImageError | None = None
    video: bool = False
    document: bool = False


def pack_greedy(samples: Iterable[Sample], batch_size: int | None, max_batch_tokens: int | None,
                drop_last: bool = False) -> Iterator[list[Sample]]:
    """Consecutive samples -> batches, in stream order (nothing reordered, lost or repeated).

    A batch is closed when the next sample would take it past ``batch_size`` images or
    ``max_batch_tokens`` tokens; a sample alone above ``max_batch_tokens`` forms its own batch.
    Every batch boundary depends only on the samples after the previous one, so packing the
    stream from any boundary reproduces the same later batches (what resume relies on).
    ``drop_last``: the final batch is dropped unless it is full (``batch_size`` images, or at
    least ``max_batch_tokens`` tokens).
    """
    cur: list[Sample] = []
    tok = 0
    for s in samples:
        t = max(s.tokens, 0)
        if cur and max_batch_tokens is not None and tok + t > max_batch_tokens:
            yield cur
            cur, tok = [], 0
        cur.append(s)
        tok += t
        if batch_size is not None and len(cur) == batch_size:
            yield cur
            cur, tok = [], 0
    if cur:
        full = (batch_size is not None and len(cur) == batch_size) or \
               (max_batch_tokens is not None and tok >= max_batch_tokens)
        if full or not drop_last:
            yield cur


def group_by_tokens(samples: Iterable[Sample], window: int, skip: int = 0) -> Iterator[Sample]:
    """Within each run of ``window`` consecutive samples, largest token count first (ties in
    stream order): similar sizes share batches, and a too-large batch fails early.

    ``samples`` must start at a window boundary; the first ``skip`` (< window) re-ordered
    samples are dropped (resume inside a window). ``pos`` is renumbered to the new order.
    """
    buf: list[Sample] = []
    base = 0  # stream position of the window's first sample

    def flush() -> Iterator[Sample]:
        nonlocal skip
        order = sorted(range(len(buf)), key=lambda k: (-buf[k].tokens, k))
        for j, k in enumerate(order):
            s = buf[k]
            s.pos = base + j
            if j >= skip:
                yield s
        skip = 0

    for s in samples:
        if not buf:
            base = s.pos
        buf.append(s)
        if len(buf) == window:
            yield from flush()
            buf = []
    if buf:
        yield from flush()


def stream_from(raw: Iterator[tuple[int, Any]], start: int, make: Callable[[int, int, Any], Sample]
                ) -> Iterator[Sample]:
    """``(index, item)`` pairs -> Samples numbered from stream position ``start``."""
    for pos, (index, item) in enumerate(raw, start):
        yield make(pos, index, item)
