"""Timing and statistics shared by the image harness and the video benchmark: thread counts,
timed call series, percentiles and the throughput / latency keys of a result row."""
from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from ..kernels import threads as vt

__all__ = ["thread_count", "sync", "pct", "ms", "batches", "Timing", "time_calls", "rates",
           "floor_times"]


@contextlib.contextmanager
def thread_count(n: int | None) -> Iterator[dict]:
    """Run the block with ``n`` threads for vlmprep's own work, torch and OpenCV (restored after).

    Yields the effective counts, ``{"vlmprep_threads", "torch_threads"}``.
    """
    import torch  # deferred: heavy

    old_v = getattr(vt, "_threads", None)
    old_t = torch.get_num_threads()
    cv2 = _cv2()
    old_c = cv2.getNumThreads() if cv2 is not None else None
    try:
        if n is not None:
            vt.set_num_threads(n)
            torch.set_num_threads(n)
            if cv2 is not None:
                cv2.setNumThreads(n)
        yield {"vlmprep_threads": vt.get_num_threads(), "torch_threads": torch.get_num_threads()}
    finally:
        vt.set_num_threads(old_v)
        torch.set_num_threads(old_t)
        if cv2 is not None and old_c is not None:
            cv2.setNumThreads(old_c)


def _cv2():
    try:
        import cv2  # deferred: optional
        return cv2
    except ImportError:
        return None


def sync(device: str) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.startswith("cuda"):
        import torch  # deferred: heavy
        torch.cuda.synchronize(device)


def pct(xs: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``xs``."""
    import numpy as np  # deferred: heavy
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q))


def ms(x: float) -> float:
    """Seconds -> milliseconds, rounded to the microsecond."""
    return round(x * 1000, 3)


def batches(n: int, batch_size: int) -> list[list[int]]:
    """Item indices per call: every item at least once, cycling to fill the last batch."""
    calls = max(1, -(-n // batch_size))
    return [[(k * batch_size + j) % n for j in range(batch_size)] for k in range(calls)]


@dataclass
class Timing:
    latencies: list[float]   # seconds per call
    cpu_s: float
    wall_s: float
    last: Any                # the last call's output


def time_calls(call: Callable[[list], Any], batches: list[list], repeat: int, warmup: int,
               device: str) -> Timing:
    # Each call runs while the previous output is still referenced, in warm-up as in the timed
    # loop (and as in a user's loop): an allocator that reuses freed buffers then has the same
    # buffers ready when timing starts (two warm-up calls fault in both).
    out = None
    for i in range(warmup):
        out = call(batches[i % len(batches)])
        sync(device)
    gc.collect()
    lat: list[float] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(repeat):
        for b in batches:
            t0 = time.perf_counter()
            out = call(b)
            sync(device)
            lat.append(time.perf_counter() - t0)
    return Timing(lat, time.process_time() - cpu0, time.perf_counter() - wall0, out)


def rates(t: Timing, batch_size: int, mp: list[float], tokens: list[int],
          batches: list[list[int]]) -> dict:
    """Throughput and latency keys from a timing series (``mp``/``tokens`` per item)."""
    total = sum(t.latencies)
    per_pass_mp = sum(mp[i] for b in batches for i in b)
    per_pass_tok = sum(tokens[i] for b in batches for i in b)
    passes = len(t.latencies) / len(batches)
    images = len(t.latencies) * batch_size
    per_img = [x / batch_size for x in t.latencies]
    return {
        "images": images,
        "images_per_s": round(images / total, 3),
        "p50_images_per_s": round(batch_size / pct(t.latencies, 50), 3),
        "megapixels_per_s": round(per_pass_mp * passes / total, 3),
        "visual_tokens_per_s": round(per_pass_tok * passes / total, 1),
        "batch_p50_ms": ms(pct(t.latencies, 50)),
        "batch_p99_ms": ms(pct(t.latencies, 99)),
        "batch_mean_ms": ms(total / len(t.latencies)),
        "per_image_p50_ms": ms(pct(per_img, 50)),
        "per_image_p99_ms": ms(pct(per_img, 99)),
        "per_image_min_ms": ms(min(per_img)),
        "per_image_mean_ms": ms(sum(per_img) / len(per_img)),
        "cpu_cores_used": round(t.cpu_s / t.wall_s, 2) if t.wall_s > 0 else None,
    }


def floor_times(calls: Sequence[Callable[[], Any]], repeat: int) -> tuple[float, float]:
    """(p50, min) seconds of the calls, each run ``repeat`` times after two warm passes (which
    fault in both buffers a loop alternates between, as the Processor's warm-up does)."""
    for f in [*calls, *calls]:
        f()
    lat = []
    for _ in range(repeat):
        for f in calls:
            t0 = time.perf_counter()
            f()
            lat.append(time.perf_counter() - t0)
    return pct(lat, 50), min(lat)
