"""Counters and windowed percentiles for the Batcher (``Batcher.metrics()``).

Written on the event loop thread only; ``snapshot`` may be read from any thread (it copies the
windows first, which is atomic for a deque under the GIL).
"""
from __future__ import annotations

import math
from collections import deque
from typing import Sequence

__all__ = ["Metrics", "percentile"]

# Percentiles describe recent behaviour: the last WINDOW batches / requests, not all time.
WINDOW = 4096


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` in [0, 100] of ``values``; None when there are none.

    Given [1, 2, 3, 4] -> p50 = 2, p99 = 4 (a value that occurred, never an interpolation).
    """
    if not values:
        return None
    s = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(s)))
    return s[min(rank, len(s)) - 1]


class Metrics:
    """What the Batcher did: totals since creation, and percentile windows."""

    def __init__(self, window: int = WINDOW):
        self.batches = 0          # backend batches run (a batch may be all cache hits)
        self.images = 0           # images served in those batches (hits included)
        self.requests = 0         # requests answered (result or error), cancelled ones excluded
        self.failed = 0           # requests answered with an exception
        self.rejected = 0         # submits refused before queueing (limits, closed)
        self.cancelled = 0        # requests whose caller went away
        self.cache_hits = 0
        self.cache_misses = 0
        self.cache_errors = 0     # cache calls that raised (the image was processed uncached)
        self.batch_images: deque[int] = deque(maxlen=window)
        self.batch_requests: deque[int] = deque(maxlen=window)
        self.batch_tokens: deque[int] = deque(maxlen=window)
        self.latency_ms: deque[float] = deque(maxlen=window)

    def record_batch(self, images: int, requests: int, tokens: int) -> None:
        self.batches += 1
        self.images += images
        self.batch_images.append(images)
        self.batch_requests.append(requests)
        self.batch_tokens.append(tokens)

    def snapshot(self, queue_depth: int, queued_images: int, running: int,
                 cache: bool = False) -> dict:
        """A plain dict (JSON-safe; percentiles are None until there is data). The cache
        counters are there only with ``cache=True`` (a cache is configured): without one, every
        image would read as a miss."""
        bi, br, bt, lat = (list(self.batch_images), list(self.batch_requests),
                           list(self.batch_tokens), list(self.latency_ms))
        out = {
            "queue_depth": queue_depth, "queued_images": queued_images, "running": running,
            "batches": self.batches, "images": self.images, "requests": self.requests,
            "failed": self.failed, "rejected": self.rejected, "cancelled": self.cancelled,
            "batch_size_p50": percentile(bi, 50), "batch_size_p99": percentile(bi, 99),
            "batch_size_max": max(bi, default=None),
            "batch_requests_p50": percentile(br, 50), "batch_requests_p99": percentile(br, 99),
            "batch_requests_max": max(br, default=None),
            "batch_tokens_p50": percentile(bt, 50), "batch_tokens_max": max(bt, default=None),
            "latency_ms_p50": percentile(lat, 50), "latency_ms_p90": percentile(lat, 90),
            "latency_ms_p99": percentile(lat, 99),
        }
        if cache:
            out.update(cache_hits=self.cache_hits, cache_misses=self.cache_misses,
                       cache_errors=self.cache_errors)
        return out
