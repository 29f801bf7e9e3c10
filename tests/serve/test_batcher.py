"""vlmprep.serve.Batcher: coalescing, isolation of requests, errors, cancellation, close.

The oracle of every result is the Processor run on that request alone: the batcher must return
the same PackedBatch bit for bit (data movement only, so exact equality, no tolerance).
Images are fresh random each run, from the run's seed (the ``seed`` fixture: printed in the header,
VLMPREP_TEST_SEED replays it). No speed is asserted here (that is bench/'s job): waits have a
generous watchdog against a hang, and "off the loop" is checked by threads and by a gate that only
the running loop can open.
"""
from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from PIL import Image

import vlmprep
from vlmprep.serve import Batcher, RequestTooLarge

PRESET = "qwen2-vl"
WATCHDOG_S = 120  # a hang, not a speed bound: no step here needs more than a few seconds


def make_proc(errors: str = "raise") -> vlmprep.Processor:
    return vlmprep.Processor(PRESET, backend="reference", errors=errors)


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


def rand_array(rng, h: int | None = None, w: int | None = None) -> np.ndarray:
    # h >= 2: a 1 x 201+ image breaks Qwen's aspect-ratio limit (200) and fails from its header,
    # which tests that count processed images do not expect (it flaked ~1% of runs).
    h = int(rng.integers(2, 201)) if h is None else h
    w = int(rng.integers(1, 301)) if w is None else w
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def encode(a: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, fmt)
    return buf.getvalue()


def rand_image(rng):
    """Mostly HWC arrays 1x1..200x300; one in ten is JPEG or PNG bytes."""
    a = rand_array(rng)
    if rng.random() < 0.1:
        return encode(rand_array(rng, int(rng.integers(8, 120)), int(rng.integers(8, 160))),
                      "JPEG" if rng.random() < 0.5 else "PNG")
    return a


def truncated_jpeg(rng) -> bytes:
    """A JPEG whose header is fine (plans) but whose data is cut (fails at decode)."""
    b = encode(rand_array(rng, 64, 80), "JPEG")
    return b[: len(b) // 2]


AR_BAD = np.zeros((1, 250, 3), np.uint8)  # aspect ratio 250 > 200: a header (plan) error


def alone(proc, images):
    """The oracle: ('ok', PackedBatch) or ('err', type, index, reason)."""
    try:
        return ("ok", proc(images))
    except vlmprep.ImageError as e:
        return ("err", type(e), e.index, e.reason)


def outcome(x):
    """The batcher's result in the oracle's form."""
    if isinstance(x, vlmprep.ImageError):
        return ("err", type(x), x.index, x.reason)
    if isinstance(x, BaseException):
        raise x
    return ("ok", x)


def assert_same(got, want, what=""):
    assert got[0] == want[0], f"{what}: got {got[:1] + got[2:] if got[0] == 'err' else 'ok'}, " \
                              f"want {want}"
    if got[0] == "err":
        assert got == want, what
        return
    g, w = got[1], want[1]
    assert torch.equal(g.pixel_values, w.pixel_values), what
    assert g.pixel_values.dtype == w.pixel_values.dtype, what
    assert torch.equal(g.grid_thw, w.grid_thw), what
    assert torch.equal(g.cu_seqlens, w.cu_seqlens), what
    assert g.cu_seqlens.dtype == torch.int32, what
    assert torch.equal(g.image_index, w.image_index), what
    assert g.num_tokens == w.num_tokens, what
    assert g.seqlens == w.seqlens and g.max_seqlen == w.max_seqlen, what
    assert g.placeholders == w.placeholders, what
    assert sorted(g.errors) == sorted(w.errors), what
    for k, e in g.errors.items():
        assert (e.index, e.reason, e.source) == (k, w.errors[k].reason, w.errors[k].source), what


class Recorder:
    """Wraps the batcher's internal processor: records every backend call's images, and can
    hold the first call at a gate or make it raise."""

    def __init__(self, inner, gate: bool = False, fail_first: bool = False):
        self.inner = inner
        self.calls: list[list] = []
        self.threads: list[int] = []  # the thread of each call
        self.started = threading.Event()
        self.gate = threading.Event() if gate else None
        self.fail_first = fail_first

    def __getattr__(self, name):  # plan, device, ...: the real processor's
        return getattr(self.inner, name)

    def _hold(self, images):
        first = not self.calls
        self.calls.append(images)
        self.threads.append(threading.get_ident())
        self.started.set()
        if first and self.gate is not None:
            assert self.gate.wait(20), "test gate never opened"
        if first and self.fail_first:
            raise RuntimeError("injected worker failure")

    def __call__(self, images):
        images = list(images)
        self._hold(images)
        return self.inner(images)

    def execute(self, sources, plans):
        # The batcher's worker runs the sources and plans made at submit (no second probe);
        # an item that failed to resolve has no Source: recorded as None.
        self._hold([s.item if s is not None else None for s in sources])
        return self.inner.execute(sources, plans)


def record(b: Batcher, **kw) -> Recorder:
    rec = Recorder(b._proc, **kw)
    b._proc = rec
    return rec


async def until(cond, timeout: float = 60.0):
    """Wait for ``cond()``; the timeout is a watchdog against a hang, not a speed bound."""
    t = time.monotonic()
    while not cond():
        assert time.monotonic() - t < timeout, "condition not reached"
        await asyncio.sleep(0.001)


# -- coalescing and isolation ------------------------------------------------------------------
def test_many_concurrent_requests_each_get_their_own_rows(rng):
    proc = make_proc()
    skip = make_proc("skip")
    max_images, max_tokens = 16, 600
    reqs = [[rand_image(rng) for _ in range(int(rng.integers(1, 5)))] for _ in range(300)]
    big_tokens = [rand_array(rng, 200, 300) for _ in range(10)]   # ~770 tokens > 600 alone
    many_images = [rand_array(rng, 8, 8) for _ in range(20)]      # 20 images > 16 alone
    reqs[100:100] = [big_tokens]
    reqs[200:200] = [many_images]
    tokens = [skip.plan(r).total_tokens for r in reqs]
    assert tokens[100] > max_tokens and len(reqs[200]) > max_images

    async def main():
        b = Batcher(proc, max_delay_ms=20, max_batch_images=max_images,
                    max_batch_tokens=max_tokens)
        rec = record(b)

        async def one(r):
            await asyncio.sleep(float(rng.random()) * 0.05)  # staggered arrivals
            try:
                return await b.submit(r)
            except vlmprep.ImageError as e:
                return e

        out = await asyncio.gather(*(one(r) for r in reqs))
        m = b.metrics()
        await b.close()
        return out, rec, m

    out, rec, m = asyncio.run(main())
    for i, (r, got) in enumerate(zip(reqs, out)):
        assert_same(outcome(got), alone(proc, r), f"request {i}")

    owner = {id(img): i for i, r in enumerate(reqs) for img in r}
    seen: dict[int, int] = {}
    for k, call in enumerate(rec.calls):
        members = sorted({owner[id(img)] for img in call})
        for q in members:  # a request's images all go into one batch, in order
            assert [img for img in call if owner[id(img)] == q] == reqs[q], f"request {q}"
            assert q not in seen, f"request {q} in batches {seen[q]} and {k}"
            seen[q] = k
        if len(members) > 1:
            assert len(call) <= max_images, f"batch {k}: {len(call)} images"
            assert sum(tokens[q] for q in members) <= max_tokens, f"batch {k}"
        # the oversize requests ran, alone
        assert 100 not in members or members == [100]
        assert 200 not in members or members == [200]
    ok = [i for i, got in enumerate(out) if not isinstance(got, Exception)]
    assert all(i in seen for i in ok)
    assert 100 in seen and 200 in seen
    multi = sum(1 for call in rec.calls if len({owner[id(img)] for img in call}) > 1)
    assert multi >= 10, f"only {multi} batches coalesced more than one request"
    assert m["batches"] == len(rec.calls) < len(ok)
    assert m["images"] == sum(len(c) for c in rec.calls)
    # No cache configured: no cache counters (every image would read as a miss).
    assert not any(k.startswith("cache_") for k in m), sorted(m)
    assert m["batch_requests_max"] >= 2
    assert m["batch_size_max"] == max(len(c) for c in rec.calls)
    assert m["requests"] == len(ok)
    assert m["latency_ms_p50"] is not None and 0 < m["latency_ms_p50"] <= m["latency_ms_p99"]
    assert m["queue_depth"] == 0 and m["cancelled"] == 0


def test_empty_request_and_plan():
    proc = make_proc()
    imgs = [np.zeros((50, 70, 3), np.uint8), np.zeros((300, 20, 3), np.uint8)]

    async def main():
        async with Batcher(proc) as b:
            empty = await b.submit([])
            p = b.plan(imgs)
            assert b.metrics()["queue_depth"] == 0 and b.metrics()["batches"] == 1
            return empty, p

    empty, p = asyncio.run(main())
    assert_same(("ok", empty), ("ok", proc([])))
    assert p.num_tokens == proc.plan(imgs).num_tokens and p.total_tokens > 0
    assert p.num_tokens == proc(imgs).num_tokens


def test_the_batcher_keeps_the_processors_fetch_for_urls(rng):
    # The batcher runs a skip-mode copy of the Processor: that copy must keep every setting,
    # here the fetch callable that is the only way a URL is read (issue 17 item 7).
    png = encode(rand_array(rng, 40, 60), "PNG")
    asked: list[str] = []

    def fetch(url: str) -> bytes:
        asked.append(url)
        return png

    proc = vlmprep.Processor(PRESET, backend="reference", fetch=fetch)

    async def main():
        async with Batcher(proc) as b:
            return await b.submit(["https://example.invalid/a.png"])

    got = asyncio.run(main())
    assert asked and all(u == "https://example.invalid/a.png" for u in asked)
    assert_same(("ok", got), ("ok", proc([png])))


# -- errors -------------------------------------------------------------------------------------
def _error_requests(rng):
    a = [rand_array(rng, 40, 60), rand_array(rng, 30, 30)]
    b = [rand_array(rng, 20, 90), truncated_jpeg(rng), rand_array(rng, 33, 44), truncated_jpeg(rng)]
    c = [rand_array(rng, 50, 50), AR_BAD, rand_array(rng, 60, 10)]
    d = [encode(rand_array(rng, 70, 50), "PNG")]
    return [a, b, c, d]


@pytest.mark.parametrize("mode", ["raise", "skip"])
def test_bad_images_fail_only_their_request_with_local_indices(rng, mode):
    proc = make_proc(mode)
    reqs = _error_requests(rng)

    async def main():
        b = Batcher(proc, max_delay_ms=300)  # all four join one batch, even on a loaded box
        rec = record(b)
        out = await asyncio.gather(*(b.submit(r) for r in reqs), return_exceptions=True)
        await b.close()
        return out, rec, b.metrics()

    out, rec, m = asyncio.run(main())
    for i, (r, got) in enumerate(zip(reqs, out)):
        assert_same(outcome(got), alone(proc, r), f"request {i}")
    # The requests really shared one backend batch (else nothing was tested): a, b, d in raise
    # mode (c fails from its header, before queueing), all four in skip mode.
    assert len(rec.calls) == 1
    assert len(rec.calls[0]) == (7 if mode == "raise" else 10)
    if mode == "raise":
        assert [type(x) for x in out] == [vlmprep.PackedBatch, vlmprep.ImageError,
                                          vlmprep.ImageError, vlmprep.PackedBatch]
        assert out[1].index == 1 and "truncated" in out[1].reason  # global index would be 3
        assert out[2].index == 1 and "aspect ratio" in out[2].reason
        assert m["failed"] == 2
    else:
        assert all(isinstance(x, vlmprep.PackedBatch) for x in out)
        assert sorted(out[1].errors) == [1, 3] and [e.index for e in out[1].errors.values()] == [1, 3]
        assert sorted(out[2].errors) == [1] and out[2].errors[1].index == 1
        assert out[0].errors == {} and out[3].errors == {}
        assert out[1].num_tokens[1] == 0 and out[1].num_tokens[0] > 0
        assert m["failed"] == 0


def test_worker_exception_fails_only_that_batch(rng):
    proc = make_proc()
    reqs = [[rand_array(rng)] for _ in range(6)] + [[rand_array(rng), rand_array(rng)]]

    async def main():
        b = Batcher(proc, max_delay_ms=300, max_batch_images=3)
        rec = record(b, fail_first=True)
        # All six queue before the scheduler first runs: batch 1 = requests 0-2, batch 2 = 3-5.
        first = await asyncio.gather(*(b.submit(r) for r in reqs[:6]), return_exceptions=True)
        later = await b.submit(reqs[6])
        await b.close()
        return first, later, rec, b.metrics()

    first, later, rec, m = asyncio.run(main())
    assert [len(c) for c in rec.calls] == [3, 3, 2]
    for i in range(3):
        assert isinstance(first[i], RuntimeError) and "injected" in str(first[i]), first[i]
    for i in range(3, 6):
        assert_same(outcome(first[i]), alone(proc, reqs[i]), f"request {i}")
    assert_same(outcome(later), alone(proc, reqs[6]), "later request")
    assert m["failed"] == 3 and m["requests"] == 7 and m["batches"] == 3


# -- limits, cancellation, close ----------------------------------------------------------------
def test_per_request_limits_refuse_before_queueing(rng):
    proc = make_proc()
    big = rand_array(rng, 200, 300)  # 77 tokens

    async def main():
        b = Batcher(proc, max_request_images=3, max_request_tokens=100)
        rec = record(b)
        with pytest.raises(RequestTooLarge, match=r"expected at most 3 images.*got 4") as e1:
            await b.submit([rand_array(rng, 10, 10) for _ in range(4)])
        with pytest.raises(RequestTooLarge, match=r"expected at most 100 visual tokens.*got 154"):
            await b.submit([big, big])
        assert b.metrics()["queue_depth"] == 0 and rec.calls == []
        ok = await b.submit([big])
        m = b.metrics()
        await b.close()
        return e1.value, ok, rec, m

    err, ok, rec, m = asyncio.run(main())
    assert isinstance(err, ValueError) and "split the request" in str(err)
    assert m["rejected"] == 2 and len(rec.calls) == 1
    assert_same(("ok", ok), alone(proc, [big]))


def test_cancellation_withdraws_queued_and_drops_running(rng):
    proc = make_proc()
    ra, rb = [rand_array(rng)], [rand_array(rng)]
    queued = [[rand_array(rng)] for _ in range(10)]
    cancel = {2, 5, 7}

    async def main():
        # a and b are planned on threads: 200 ms lets both join batch 1 whatever the timing.
        b = Batcher(proc, max_delay_ms=200, max_batch_images=4)
        rec = record(b, gate=True)
        ta, tb = asyncio.create_task(b.submit(ra)), asyncio.create_task(b.submit(rb))
        await until(rec.started.is_set)           # batch 1 (a, b) is running, held at the gate
        tasks = [asyncio.create_task(b.submit(r)) for r in queued]
        await until(lambda: b.metrics()["queue_depth"] == 10)
        for i in cancel:
            tasks[i].cancel()
        ta.cancel()                               # running: its result is dropped
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        depth = b.metrics()["queue_depth"]
        rec.gate.set()
        out = await asyncio.gather(*tasks, ta, tb, return_exceptions=True)
        await b.close()
        return out, depth, rec, b.metrics()

    out, depth, rec, m = asyncio.run(main())
    assert depth == 7
    for i, r in enumerate(queued):
        if i in cancel:
            assert isinstance(out[i], asyncio.CancelledError), out[i]
        else:
            assert_same(outcome(out[i]), alone(proc, r), f"queued {i}")
    assert isinstance(out[10], asyncio.CancelledError)
    assert_same(outcome(out[11]), alone(proc, rb), "b, batch-mate of the cancelled a")
    processed = [id(img) for call in rec.calls for img in call]
    assert rec.calls[0] == ra + rb
    for i in cancel:  # withdrawn before they started: never processed
        assert id(queued[i][0]) not in processed
    assert len(processed) == 2 + 7
    assert m["cancelled"] == 4 and m["requests"] == 8 and m["queue_depth"] == 0


def test_close_drains_then_refuses(rng):
    proc = make_proc()
    reqs = [[rand_array(rng, 30, 40)] for _ in range(20)]

    async def main():
        # Only close() can make these run before the hour is up: the watchdog (a hang, not a
        # speed bound) is far below the delay, so close() must not wait for it.
        b = Batcher(proc, max_delay_ms=3_600_000)
        tasks = [asyncio.create_task(b.submit(r)) for r in reqs]
        await until(lambda: b.metrics()["queue_depth"] == 20)
        await asyncio.wait_for(b.close(), WATCHDOG_S)
        done = [t.done() for t in tasks]
        with pytest.raises(RuntimeError, match="closed"):
            await b.submit(reqs[0])
        async with Batcher(proc, max_delay_ms=3_600_000) as b2:
            late = asyncio.create_task(b2.submit(reqs[1]))
            await until(lambda: b2.metrics()["queue_depth"] == 1)
        with pytest.raises(RuntimeError, match="closed"):
            await b2.submit(reqs[1])
        return [t.result() for t in tasks], done, late, b.metrics()

    out, done, late, m = asyncio.run(main())
    assert all(done)
    for i, r in enumerate(out):
        assert_same(("ok", r), alone(proc, reqs[i]), f"request {i}")
    assert late.done() and late.exception() is None
    assert_same(("ok", late.result()), alone(proc, reqs[1]))
    assert m["rejected"] == 1 and m["requests"] == 20


def test_event_loop_keeps_running_during_a_batch(rng):
    """The batch runs on a worker thread, and the loop keeps running other coroutines meanwhile:
    the worker holds the batch at a gate that only a coroutine on the loop opens, after it has
    ticked 5 times while the batch was held. Processing on the loop thread could never open it
    (the gate's watchdog fails the test instead of hanging)."""
    proc = make_proc()
    imgs = [rand_array(rng, 200, 300) for _ in range(60)]

    async def main():
        b = Batcher(proc, max_delay_ms=0)
        rec = record(b, gate=True)
        ticks_while_held = 0

        async def ticker():
            nonlocal ticks_while_held
            await until(rec.started.is_set)
            while ticks_while_held < 5:
                ticks_while_held += 1
                await asyncio.sleep(0.001)
            rec.gate.set()

        tt = asyncio.create_task(ticker())
        res = await asyncio.wait_for(b.submit(imgs), WATCHDOG_S)
        await tt
        await b.close()
        return res, rec, threading.get_ident(), ticks_while_held

    res, rec, loop_thread, ticks = asyncio.run(main())
    assert res.num_images == 60
    assert ticks == 5 and rec.calls
    assert loop_thread not in rec.threads, "a batch ran on the event loop's thread"


# -- cache --------------------------------------------------------------------------------------
class DictCache:
    """The cache interface (key_for / get / put) over a dict."""

    def __init__(self):
        self.d: dict = {}
        self.puts = 0

    def key_for(self, item, proc):
        if isinstance(item, np.ndarray):
            return f"{proc.pipeline.name}:{item.shape}:{hash(item.tobytes())}"
        if isinstance(item, bytes):
            return f"{proc.pipeline.name}:bytes:{hash(item)}"
        return None

    def get(self, key):
        return self.d.get(key)

    def put(self, key, batch):
        assert batch.num_images == 1 and not batch.errors
        self.puts += 1
        self.d[key] = batch


def _cache_roundtrip(rng, cache):
    proc = make_proc("skip")
    r1 = [rand_array(rng, 40, 50), encode(rand_array(rng, 30, 60), "PNG"), truncated_jpeg(rng)]
    r2 = [rand_array(rng, 70, 20)]
    new = rand_array(rng, 25, 35)
    again = [r2[0], new, r1[0], r1[2], r1[1]]

    async def main():
        async with Batcher(proc, max_delay_ms=300, cache=cache) as b:
            rec = record(b)
            first = await asyncio.gather(b.submit(r1), b.submit(r2))
            second = await b.submit(again)
            return first, second, rec, b.metrics()

    first, second, rec, m = asyncio.run(main())
    assert_same(("ok", first[0]), alone(proc, r1), "r1")
    assert_same(("ok", first[1]), alone(proc, r2), "r2")
    assert_same(("ok", second), alone(proc, again), "again")
    # Second request: only the new image and the bad one (never cached) reach the backend.
    assert len(rec.calls) == 2 and len(rec.calls[1]) == 2
    assert {id(x) for x in rec.calls[1]} == {id(new), id(r1[2])}
    assert m["cache_hits"] == 3 and m["cache_misses"] == 6 and m["cache_errors"] == 0
    # The caller's rows never alias the cache's.
    hit = cache.get(cache.key_for(r1[0], proc))
    assert hit.pixel_values.data_ptr() != second.pixel_values.data_ptr()
    second.pixel_values.zero_()
    assert hit.pixel_values.abs().sum() > 0


def test_cache_hits_skip_the_backend(rng):
    cache = DictCache()
    _cache_roundtrip(rng, cache)
    assert cache.puts == 4  # 4 good images processed once each; the bad one is never put


def test_with_output_cache(rng):
    cache_mod = pytest.importorskip("vlmprep.cache")
    cache = cache_mod.OutputCache(max_bytes=1 << 26)
    _cache_roundtrip(rng, cache)
    assert len(cache) == 4


# -- boundary -----------------------------------------------------------------------------------
def test_constructor_validates():
    proc = make_proc()
    with pytest.raises(TypeError, match="vlmprep.Processor"):
        Batcher("qwen2-vl")
    with pytest.raises(ValueError, match="max_delay_ms"):
        Batcher(proc, max_delay_ms=-1)
    with pytest.raises(ValueError, match="max_batch_images"):
        Batcher(proc, max_batch_images=0)
    with pytest.raises(ValueError, match="max_request_tokens"):
        Batcher(proc, max_request_tokens=1.5)
    with pytest.raises(TypeError, match="put"):
        Batcher(proc, cache=object())


def test_lazy_import_does_not_load_torch():
    code = "import sys, vlmprep; vlmprep.serve.Batcher; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_docs_asyncio_server_example_runs(capsys):
    import pathlib
    import re
    md = pathlib.Path(__file__).resolve().parents[2] / "docs" / "how-to" / "serving.md"
    blocks = re.findall(r"```python\n(.*?)```", md.read_text(), re.S)
    code = [b for b in blocks if "asyncio.start_server" in b]
    assert len(code) == 1, "the runnable asyncio server example is missing from serving.md"
    exec(compile(code[0], str(md), "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert "40 requests in" in out and "'image': 1" in out, out
