"""Batcher against hostile items: a special file never wedges the worker (defect: the cache read
a FIFO or /dev/zero to its end before any check), probing never runs on the event loop, and each
item is probed exactly once (submit planned it on the loop, then the worker probed it again).

Every await runs under a watchdog (asyncio.wait_for): a hang fails the test instead of pytest.
"""
from __future__ import annotations

import asyncio
import io
import os
import threading
import time

import numpy as np
import pytest
import torch
from PIL import Image

import vlmprep
import vlmprep.io.probe as probe_mod
from vlmprep.cache import OutputCache
from vlmprep.serve import Batcher

WATCHDOG_S = 30


def png(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    return buf.getvalue()


def solid(rgb, h=30, w=40) -> np.ndarray:
    return np.broadcast_to(np.array(rgb, np.uint8), (h, w, 3)).copy()


def _unblock(fifo) -> None:
    try:  # a reader stuck in open() of the FIFO (the old cache) gets EOF: its thread can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def test_special_file_with_a_cache_does_not_wedge_the_worker(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    good = [solid((10, 20, 30)), png(solid((40, 50, 60), 20, 50))]

    async def main():
        b = Batcher(proc, max_delay_ms=0, cache=OutputCache(8 << 20))
        try:
            first = asyncio.ensure_future(b.submit([str(fifo), good[0]]))
            await asyncio.sleep(0.05)  # the FIFO reaches the worker first
            later = await asyncio.wait_for(b.submit([good[1]]), WATCHDOG_S)
            zero = await asyncio.wait_for(b.submit(["/dev/zero", good[1]]), WATCHDOG_S)
            return await asyncio.wait_for(first, WATCHDOG_S), later, zero
        finally:
            _unblock(fifo)  # lets a worker stuck in open() of the FIFO end, so close() returns
            await b.close()

    first, later, zero = asyncio.run(main())
    assert list(first.errors) == [0] and "FIFO" in first.errors[0].reason
    assert list(zero.errors) == [0] and "character device" in zero.errors[0].reason
    assert torch.equal(first.pixel_values, proc([good[0]]).pixel_values)
    assert torch.equal(later.pixel_values, proc([good[1]]).pixel_values)
    assert torch.equal(zero.pixel_values, later.pixel_values)


class SlowProbe:
    """vlmprep.io.probe.probe taking ``delay`` s more per call (sleeping: the GIL is free, so a
    loop that is not blocked keeps ticking); counts calls per thread name."""

    def __init__(self, delay: float):
        self.real = probe_mod.probe
        self.delay = delay
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, x):
        with self.lock:
            self.calls.append(threading.current_thread().name)
        time.sleep(self.delay)
        return self.real(x)


@pytest.mark.parametrize("cached", [False, True])
def test_submit_never_probes_on_the_event_loop_and_probes_once(monkeypatch, cached):
    delay = 0.4
    reqs = [[png(solid((k, 2 * k, 3 * k), 20 + k, 30)), png(solid((k + 1, 9, 9), 30, 20 + k))]
            for k in range(3)]
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    want = [proc(r) for r in reqs]
    slow = SlowProbe(delay)
    monkeypatch.setattr(probe_mod, "probe", slow)

    async def main():
        gaps: list[float] = []
        stop = False

        async def ticker():
            last = time.monotonic()
            while not stop:
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        async with Batcher(proc, max_delay_ms=2, cache=OutputCache(8 << 20) if cached else None) as b:
            out = await asyncio.wait_for(asyncio.gather(*(b.submit(r) for r in reqs)), WATCHDOG_S)
        stop = True
        await tick
        return out, max(gaps)

    out, max_gap = asyncio.run(main())
    for o, w in zip(out, want):
        assert torch.equal(o.pixel_values, w.pixel_values) and o.num_tokens == w.num_tokens
    # Each probe sleeps 0.4 s: run on the loop, the ticker would stall at least that long.
    assert max_gap < delay / 2, f"event loop stalled {max_gap:.3f} s while items were probed"
    assert len(slow.calls) == sum(len(r) for r in reqs), slow.calls  # once per item
    assert not any(n == threading.main_thread().name for n in slow.calls), slow.calls


def test_close_waits_for_a_request_being_planned_and_cancel_while_planned(monkeypatch):
    slow = SlowProbe(0.3)
    monkeypatch.setattr(probe_mod, "probe", slow)
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    a, c = png(solid((1, 2, 3))), png(solid((4, 5, 6)))

    async def main():
        b = Batcher(proc, max_delay_ms=0)
        ta = asyncio.create_task(b.submit([a]))
        tc = asyncio.create_task(b.submit([c]))
        await asyncio.sleep(0.05)          # both are being probed on the planning threads
        tc.cancel()
        await asyncio.wait_for(b.close(), WATCHDOG_S)  # admitted before close: still served
        assert ta.done()
        with pytest.raises(RuntimeError, match="closed"):
            await b.submit([a])
        return ta.result(), await asyncio.gather(tc, return_exceptions=True), b.metrics()

    got, (cancelled,), m = asyncio.run(main())
    monkeypatch.setattr(probe_mod, "probe", slow.real)
    assert torch.equal(got.pixel_values, proc([a]).pixel_values)
    assert isinstance(cancelled, asyncio.CancelledError)
    assert m["cancelled"] == 1 and m["requests"] == 1 and m["images"] == 1
