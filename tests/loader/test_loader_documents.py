"""The DataLoader over ``vlmprep.Document`` pages (issue 31): a one-page Document is one sample,
an image item of its batch in stream order; its tokens come from the page tree (nothing
rasterized); ``vlmprep.loader.pages_of`` expands documents into one sample per page."""
from __future__ import annotations

import numpy as np
import pytest

import vlmprep
from vlmprep import Document, ImageError

pdfs = pytest.importorskip("_support.pdfs", reason="needs pypdfium2 (pip install 'vlmprep[pdf]')")
import pypdfium2 as pdfium  # noqa: E402 (after the skip: the optional extra)


@pytest.fixture(scope="module")
def pdf4() -> bytes:
    return pdfs.make_pdf([(100.3, 80.7), (60, 110), (90, 50), (40, 40)], seed=7)


def _photo(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (40 + seed, 50, 3), dtype=np.uint8)


def _same(a, b) -> None:
    assert np.array_equal(a.pixel_values.numpy(), b.pixel_values.numpy())
    assert a.cu_seqlens.tolist() == b.cu_seqlens.tolist() and a.num_tokens == b.num_tokens
    assert a.placeholders == b.placeholders


def test_pages_mixed_with_images_keep_stream_order(pdf4):
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    pages = vlmprep.loader.pages_of(proc, [Document(pdf4, dpi=40)])
    assert [d.pages for d in pages] == [[0], [1], [2], [3]]
    sources = [_photo(1), pages[2], pages[0], _photo(2), pages[3]]
    got = list(vlmprep.loader.DataLoader(sources, proc, batch_size=3, num_workers=0))
    assert [ids for ids, _ in got] == [[0, 1, 2], [3, 4]]
    render = [pdfs.render(pdf4, k, 40) for k in range(4)]
    _same(got[0][1], proc([_photo(1), render[2], render[0]]))
    _same(got[1][1], proc([_photo(2), render[3]]))


def test_token_budget_from_the_page_tree(pdf4, monkeypatch):
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    pages = vlmprep.loader.pages_of(proc, [Document(pdf4, pages=[0, 1, 2, 3], dpi=72)])
    tokens = proc.plan(documents=[Document(pdf4, dpi=72)]).num_tokens
    calls = []
    real = pdfium.PdfPage.render
    monkeypatch.setattr(pdfium.PdfPage, "render", lambda self, **k: calls.append(1) or real(self, **k))
    loader = vlmprep.loader.DataLoader(pages, proc, max_batch_tokens=tokens[0] + tokens[1],
                                       num_workers=0)
    n = len(loader)  # packs the epoch from the header-only plans
    assert calls == []
    got = list(loader)
    assert len(got) == n and sum(len(ids) for ids, _ in got) == 4
    for ids, b in got:
        assert b.num_tokens == [tokens[i] for i in ids]
        assert sum(b.num_tokens) <= tokens[0] + tokens[1] or len(ids) == 1


def test_bad_pages_and_multi_page_documents_are_sample_errors(pdf4):
    skip = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    sources = [{"id": "a", "image": Document(pdf4, pages=[9])},     # out of range
               {"id": "b", "image": Document(pdf4)},                # every page: not one sample
               {"id": "c", "image": Document(pdf4, pages=[1], dpi=30)},
               {"id": "d", "image": Document(b"not a pdf", pages=[0])}]
    loader = vlmprep.loader.DataLoader(sources, skip, batch_size=4, num_workers=0)
    [(ids, b)] = list(loader)
    assert ids == ["a", "b", "c", "d"] and sorted(b.errors) == [0, 1, 3]
    assert "sample 'a'" in str(b.errors[0]) and "0..3" in str(b.errors[0])
    assert "one page per DataLoader sample" in str(b.errors[1]) and "pages_of" in str(b.errors[1])
    assert "%PDF-" in str(b.errors[3])
    _same(list(b.split())[2], skip([pdfs.render(pdf4, 1, 30)]))
    strict = vlmprep.Processor("qwen2-vl", backend="reference")
    with pytest.raises(ImageError, match="sample 'a'"):
        list(vlmprep.loader.DataLoader(sources, strict, batch_size=4, num_workers=0))
    # a document that cannot be opened stays one source item: its sample fails with the reason
    assert len(vlmprep.loader.pages_of(strict, [b"not a pdf", Document(pdf4, pages=[3, 3])])) == 3
