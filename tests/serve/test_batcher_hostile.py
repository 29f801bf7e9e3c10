"""Batcher against hostile items: a special file never wedges the worker (defect: the cache read
a FIFO or /dev/zero to its end before any check), probing never runs on the event loop, and each
item is probed exactly once (submit planned it on the loop, then the worker probed it again).

Every await runs under a watchdog (asyncio.wait_for): a hang fails the test instead of pytest.
No speed is asserted: "off the loop" is shown by threads and by a probe only the running loop
releases.
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
import vlmprep.io.inputs as inputs_mod
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


class LoopGatedProbe:
    """vlmprep.io.probe.probe that, once called, waits until a coroutine on the event loop has
    ticked 3 more times (``tick``) before probing: off the loop it returns as soon as the loop
    runs; on the loop it could never return (the loop cannot tick while it waits), and its
    watchdog fails the item instead. Counts calls per thread name."""

    def __init__(self):
        self.real = probe_mod.probe
        self.calls: list[str] = []
        self.ticks = 0
        self.cv = threading.Condition()

    def tick(self) -> None:
        with self.cv:
            self.ticks += 1
            self.cv.notify_all()

    def __call__(self, x):
        with self.cv:
            self.calls.append(threading.current_thread().name)
            start = self.ticks
            ran = self.cv.wait_for(lambda: self.ticks >= start + 3, timeout=WATCHDOG_S)
        assert ran, "the event loop did not run while an item was probed (probe on the loop?)"
        return self.real(x)


def _patch_probe(monkeypatch, fn) -> None:
    """Replace probe where it is defined and where io.inputs bound it at import."""
    monkeypatch.setattr(probe_mod, "probe", fn)
    monkeypatch.setattr(inputs_mod, "probe", fn)


@pytest.mark.parametrize("cached", [False, True])
def test_submit_never_probes_on_the_event_loop_and_probes_once(monkeypatch, cached):
    """Structural, no timing: each probe waits for the loop to tick (see LoopGatedProbe), runs on
    a thread other than the loop's, and runs once per item."""
    reqs = [[png(solid((k, 2 * k, 3 * k), 20 + k, 30)), png(solid((k + 1, 9, 9), 30, 20 + k))]
            for k in range(3)]
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    want = [proc(r) for r in reqs]
    gated = LoopGatedProbe()
    _patch_probe(monkeypatch, gated)

    async def main():
        stop = False

        async def ticker():
            while not stop:
                gated.tick()
                await asyncio.sleep(0.001)

        tick = asyncio.create_task(ticker())
        async with Batcher(proc, max_delay_ms=2, cache=OutputCache(8 << 20) if cached else None) as b:
            out = await asyncio.wait_for(asyncio.gather(*(b.submit(r) for r in reqs)), WATCHDOG_S)
        stop = True
        await tick
        return out, threading.current_thread().name

    out, loop_thread = asyncio.run(main())
    for o, w in zip(out, want):
        assert not o.errors, o.errors
        assert torch.equal(o.pixel_values, w.pixel_values) and o.num_tokens == w.num_tokens
    assert len(gated.calls) == sum(len(r) for r in reqs), gated.calls  # once per item
    assert loop_thread not in gated.calls, gated.calls


def test_close_waits_for_a_request_being_planned_and_cancel_while_planned(monkeypatch):
    slow = SlowProbe(0.3)
    _patch_probe(monkeypatch, slow)
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
    _patch_probe(monkeypatch, slow.real)
    assert torch.equal(got.pixel_values, proc([a]).pixel_values)
    assert isinstance(cancelled, asyncio.CancelledError)
    assert m["cancelled"] == 1 and m["requests"] == 1 and m["images"] == 1
