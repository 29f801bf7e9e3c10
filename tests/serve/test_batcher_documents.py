"""Batcher.submit(images, documents=[doc]) (issue 31): each selected page is one image item of
the request after its images, planned from the page tree at submit and rendered by the worker.

Oracle: the Processor's own call on that request alone (``proc(images, documents=[doc])``), bit
for bit, errors included. "Rendered off the loop" is structural, no timing: a render that waits
for the event loop to tick (LoopGatedRender) could never return on the loop's thread. Every
await runs under a watchdog (a hang, not a speed bound).
"""
from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
import torch

import vlmprep
import vlmprep.io.document as docmod
from vlmprep import Document, ImageError
from vlmprep.serve import Batcher, RequestTooLarge

pdfs = pytest.importorskip("_support.pdfs", reason="needs pypdfium2 (pip install 'vlmprep[pdf]')")

WATCHDOG_S = 60


@pytest.fixture(scope="module")
def pdf3() -> bytes:
    return pdfs.make_pdf([(200.3, 150.7), (150, 260), (300, 120)], rotate={2: 90}, seed=5)


def _proc(errors: str = "raise") -> vlmprep.Processor:
    return vlmprep.Processor("qwen2-vl", backend="reference", errors=errors)


def _imgs(seed: int, n: int) -> list:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (int(rng.integers(40, 120)), int(rng.integers(40, 120)), 3),
                         np.uint8) for _ in range(n)]


def _same(got, want) -> None:
    a, b = got.to_hf(), want.to_hf()
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k], k
    assert got.pixel_values.dtype == want.pixel_values.dtype
    assert got.num_tokens == want.num_tokens and got.placeholders == want.placeholders
    assert {k: str(e) for k, e in got.errors.items()} == {k: str(e) for k, e in want.errors.items()}


def _run(proc, *requests, **kw):
    """Submit ``requests`` ((images, documents) pairs) concurrently -> results or exceptions."""
    async def main():
        async with Batcher(proc, **kw) as b:
            out = await asyncio.wait_for(asyncio.gather(
                *(b.submit(i, documents=d) for i, d in requests), return_exceptions=True),
                WATCHDOG_S)
            return out, b.metrics()
    return asyncio.run(main())


def test_mixed_batch_each_request_equals_its_own_processor_call(pdf3):
    proc = _proc()
    with_doc = (_imgs(1, 2), [Document(pdf3, pages=[2, 0], dpi=60)])
    plain = (_imgs(2, 3), None)
    # 4 + 3 images fill the batch: cut at once, both in it (no timing involved)
    (a, b), m = _run(proc, with_doc, plain, max_delay_ms=3_600_000, max_batch_images=7)
    assert m["batches"] == 1 and m["batch_requests_max"] == 2, m
    _same(a, proc(with_doc[0], documents=with_doc[1]))
    _same(b, proc(plain[0]))
    assert a.num_images == 4 and b.num_images == 3


def test_documents_only_and_plan_equal_the_processor(pdf3):
    proc = _proc()
    docs = [Document(pdf3, dpi=50), Document(pdf3, pages=[1], dpi=80)]
    (out,), _ = _run(proc, ([], docs), max_delay_ms=0)
    _same(out, proc(documents=docs))
    b = Batcher(proc)
    try:
        assert b.plan(_imgs(3, 1), documents=docs) == proc.plan(_imgs(3, 1), documents=docs)
    finally:
        asyncio.run(b.close())


@pytest.mark.parametrize("errors", ["skip", "raise"])
def test_bad_pdf_fails_its_request_only(pdf3, errors):
    proc = _proc(errors)
    bad = (_imgs(4, 1), [Document(b"%PDF-1.7 truncated, no xref")])
    out_of_range = (_imgs(5, 1), [Document(pdf3, pages=[0, 9], dpi=50)])
    good = (_imgs(6, 2), [Document(pdf3, pages=[1], dpi=50)])
    # skip: 2 + 3 + 3 images fill the batch, all three in it; raise: the bad two are refused
    # at submit (their errors are in the page tree), the good one fills a batch alone
    fill = 8 if errors == "skip" else 3
    (x, y, g), m = _run(proc, bad, out_of_range, good, max_delay_ms=3_600_000, max_batch_images=fill)
    assert m["batches"] == 1, m
    _same(g, proc(good[0], documents=good[1]))
    for got, (imgs, docs) in ((x, bad), (y, out_of_range)):
        if errors == "skip":
            _same(got, proc(imgs, documents=docs))
            assert list(got.errors) == [len(imgs) + (len(docs[0].pages or [0]) - 1)]
        else:
            assert isinstance(got, ImageError)
            with pytest.raises(ImageError) as want:
                proc(imgs, documents=docs)
            assert str(got) == str(want.value) and got.index == want.value.index


@pytest.mark.parametrize("errors", ["skip", "raise"])
def test_page_failing_to_render_is_its_items_error(pdf3, errors, monkeypatch):
    """A page PDFium fails to render (injected: page 1 of dpi=70 documents) is an error of its
    request's item, found in the worker; the request beside it in the batch is untouched."""
    real = docmod.render_page

    def flaky(src):
        if src.item.page == 1 and abs(src.item.scale - 70 / 72) < 1e-9:
            raise ImageError("expected a page PDFium can render, got injected failure")
        return real(src)

    monkeypatch.setattr(docmod, "render_page", flaky)
    proc = _proc(errors)
    hit = (_imgs(7, 1), [Document(pdf3, pages=[0, 1, 2], dpi=70)])
    beside = (_imgs(8, 1), [Document(pdf3, pages=[1], dpi=50)])
    (h, s), _ = _run(proc, hit, beside, max_delay_ms=3_600_000, max_batch_images=6)
    _same(s, proc(beside[0], documents=beside[1]))
    if errors == "skip":
        _same(h, proc(hit[0], documents=hit[1]))
        assert list(h.errors) == [2] and h.num_images == 4
    else:
        with pytest.raises(ImageError) as want:
            proc(hit[0], documents=hit[1])
        assert isinstance(h, ImageError) and str(h) == str(want.value)


class LoopGatedRender:
    """render_page that, once called, waits until a coroutine on the event loop has ticked 3
    more times: off the loop it returns as soon as the loop runs; on the loop it could never
    return, and its watchdog fails the item instead. Records thread names; the page-tree
    reads (document_pages) are recorded too, to show where planning ran."""

    def __init__(self):
        self.real = docmod.render_page
        self.real_pages = docmod.document_pages
        self.calls: list[str] = []
        self.planned: list[str] = []
        self.ticks = 0
        self.cv = threading.Condition()

    def tick(self) -> None:
        with self.cv:
            self.ticks += 1
            self.cv.notify_all()

    def pages(self, *a, **k):
        self.planned.append(threading.current_thread().name)
        return self.real_pages(*a, **k)

    def __call__(self, src):
        with self.cv:
            self.calls.append(threading.current_thread().name)
            start = self.ticks
            ran = self.cv.wait_for(lambda: self.ticks >= start + 3, timeout=WATCHDOG_S)
        assert ran, "the event loop did not run while a page rendered (render on the loop?)"
        return self.real(src)


def test_pages_are_planned_at_submit_and_rendered_on_the_worker_never_the_loop(pdf3, monkeypatch):
    proc = _proc()
    reqs = [(_imgs(9, 1), [Document(pdf3, pages=[k, 2 - k], dpi=50)]) for k in range(3)]
    want = [proc(i, documents=d) for i, d in reqs]  # before the gate: no loop runs here
    gated = LoopGatedRender()
    monkeypatch.setattr(docmod, "render_page", gated)
    monkeypatch.setattr(docmod, "document_pages", gated.pages)

    async def main():
        stop = False

        async def ticker():
            while not stop:
                gated.tick()
                await asyncio.sleep(0.001)

        tick = asyncio.create_task(ticker())
        async with Batcher(proc, max_delay_ms=2) as b:
            out = await asyncio.wait_for(asyncio.gather(
                *(b.submit(i, documents=d) for i, d in reqs)), WATCHDOG_S)
        stop = True
        await tick
        return out, threading.current_thread().name

    out, loop_thread = asyncio.run(main())
    for o, w in zip(out, want):
        _same(o, w)
    assert len(gated.calls) == 6, gated.calls  # each page rendered once
    assert all(t.startswith("vlmprep-serve") for t in gated.calls), gated.calls
    assert gated.planned and all(t.startswith("vlmprep-plan") for t in gated.planned), gated.planned
    assert loop_thread not in gated.calls + gated.planned


def test_pages_count_against_the_request_limits(pdf3):
    proc = _proc()
    doc = [Document(pdf3, dpi=50)]  # 3 pages

    async def main():
        async with Batcher(proc, max_request_images=3) as b:
            with pytest.raises(RequestTooLarge, match=r"got 4 \(3 of them document pages\)"):
                await asyncio.wait_for(b.submit(_imgs(10, 1), documents=doc), WATCHDOG_S)
            ok = await asyncio.wait_for(b.submit(documents=doc), WATCHDOG_S)
        tokens = proc.plan(documents=doc).total_tokens
        async with Batcher(proc, max_request_tokens=tokens - 1) as b:
            with pytest.raises(RequestTooLarge, match="max_request_tokens"):
                await asyncio.wait_for(b.submit(documents=doc), WATCHDOG_S)
        return ok

    _same(asyncio.run(main()), proc(documents=doc))


def test_documents_not_in_a_list_is_a_type_error(pdf3):
    async def main():
        async with Batcher(_proc()) as b:
            with pytest.raises(TypeError, match=r"documents=\[doc\]"):
                await asyncio.wait_for(b.submit(documents=Document(pdf3)), WATCHDOG_S)
    asyncio.run(main())
