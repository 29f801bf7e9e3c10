"""PDF documents as image items (issue 31): ``vlmprep.Document``, ``proc.plan(documents=)`` from
the page tree only, ``proc(documents=)`` bit-exact with pypdfium2's own render fed as an array,
and bad / hostile PDFs as per-item ImageErrors naming the page.

PDFs are made with pypdfium2's own API (tests/_support/pdfs.py: pages with a random image drawn
on them), and the encrypted one here by hand (the Standard security handler, revision 2: pdfium
writes no encryption).
Without pypdfium2 everything skips except the check that a document then names the extra.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import vlmprep
from vlmprep import Document, ImageError
from vlmprep.io.document import DEFAULT_DPI, page_hw

try:
    import pypdfium2 as pdfium
except ImportError:  # the optional extra vlmprep[pdf]
    pdfium = None

needs_pdfium = pytest.mark.skipif(pdfium is None, reason="needs pypdfium2 (pip install 'vlmprep[pdf]')")
FAMILIES = ["qwen2-vl", "internvl"]  # one patch family, one tiled family


def _pdf(sizes_pt, rotate=None, seed=0) -> bytes:
    from _support.pdfs import make_pdf  # imports pypdfium2: only where it is installed
    return make_pdf(sizes_pt, rotate, seed)


def _encrypted_pdf(user: bytes, owner: bytes = b"owner") -> bytes:
    from _support.pdfs import encrypted_pdf
    return encrypted_pdf(user, owner)


def _render(data: bytes, page: int, dpi: float = DEFAULT_DPI) -> np.ndarray:
    """pypdfium2's own pixels of one page, RGB (the oracle)."""
    from _support.pdfs import render
    return render(data, page, dpi)


@pytest.fixture(scope="module")
def pdf3() -> bytes:
    return _pdf([(200.3, 150.7), (150, 260), (300, 120)], rotate={2: 90})


def _no_render(monkeypatch):
    """Any render fails the test: in this process, and in the render workers (their entry)."""
    from vlmprep.io import page_render

    def boom(*a, **k):
        raise AssertionError("a page was rasterized")
    monkeypatch.setattr(pdfium.PdfPage, "render", boom)
    monkeypatch.setattr(page_render, "render", boom)


# -- plan: header only ------------------------------------------------------------------------
@needs_pdfium
@pytest.mark.parametrize("family", FAMILIES)
def test_plan_reads_page_sizes_without_rendering(family, pdf3, monkeypatch):
    proc = vlmprep.Processor(family, backend="reference")
    _no_render(monkeypatch)
    doc = Document(pdf3, pages=[2, 0], dpi=100)
    plan = proc.plan(documents=[doc])
    # page 2 is 300 x 120 pt turned by /Rotate 90: 120 wide, 300 high
    want = [page_hw(120, 300, 100 / 72), page_hw(200.3, 150.7, 100 / 72)]
    assert [p.source_hw for p in plan.images] == want == [(417, 167), (210, 279)]
    same = proc.plan([np.zeros((*hw, 3), np.uint8) for hw in want])
    for a, b in zip(plan.images, same.images, strict=True):
        assert (a.resized_hw, a.grid_thw, a.num_tokens, a.tiles) == \
            (b.resized_hw, b.grid_thw, b.num_tokens, b.tiles)
    assert plan.num_tokens == same.num_tokens


# -- exactness --------------------------------------------------------------------------------
@needs_pdfium
def test_render_page_is_pypdfium2_bit_for_bit(pdf3):
    from vlmprep.io.document import document_pages, render_page
    for dpi in (None, 97.3):
        doc = Document(pdf3, dpi=dpi)
        for p, src in enumerate(document_pages(doc, 0)):
            got = render_page(src)
            want = _render(pdf3, p, dpi or DEFAULT_DPI)
            assert got.dtype == np.uint8 and got.flags.c_contiguous and got.shape == (*src.hw, 3)
            np.testing.assert_array_equal(got, want)


@needs_pdfium
@pytest.mark.parametrize("family", FAMILIES)
def test_batch_equals_images_of_the_rendered_pages(family, pdf3):
    """Images first, then each document's pages in its pages= order: the batch equals proc() on
    the same arrays, bit for bit, with one cu_seqlens segment (or tile group) per page."""
    proc = vlmprep.Processor(family, backend="reference")
    photo = np.random.default_rng(1).integers(0, 256, (64, 80, 3), dtype=np.uint8)
    docs = [Document(pdf3, pages=[1, 2]), Document(pdf3, pages=[0], dpi=60)]
    got = proc(images=[photo], documents=docs)
    want = proc([photo, _render(pdf3, 1), _render(pdf3, 2), _render(pdf3, 0, 60)])
    assert got.pixel_values.dtype == want.pixel_values.dtype
    assert np.array_equal(got.pixel_values.numpy(), want.pixel_values.numpy())
    assert got.cu_seqlens.tolist() == want.cu_seqlens.tolist()
    assert got.grid_thw.tolist() == want.grid_thw.tolist()
    assert got.image_index.tolist() == want.image_index.tolist()
    assert got.num_tokens == want.num_tokens and len(got.num_tokens) == 4
    assert proc.plan(images=[photo], documents=docs).num_tokens == got.num_tokens


# -- bad and hostile PDFs: per-item errors naming the page ------------------------------------
def _skip_errors(proc, docs, images=None):
    batch = proc(images=images, documents=docs)
    return batch, {k: str(e) for k, e in batch.errors.items()}


@needs_pdfium
def test_bad_documents_are_item_errors(pdf3, tmp_path):
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    path = tmp_path / "three.pdf"
    path.write_bytes(pdf3)
    docs = [b"GIF89a not a pdf at all",                       # 0: not a PDF
            pdf3[: len(pdf3) // 3],                           # 1: truncated
            Document(str(path), pages=[0, 5]),                # 2: page 5 out of range
            Document(pdf3, max_pages=2),                      # 3: 3 pages, max 2: refused
            Document(tmp_path / "missing.pdf"),               # 4: no such file
            Document(pdf3, pages=range(10**12))]              # 5: refused by max_pages, not walked
    batch, errs = _skip_errors(proc, docs)
    assert len(batch.num_tokens) == 7 and batch.num_tokens[2] > 0  # document 2 page 0 ran
    assert "document 0" in errs[0] and "%PDF-" in errs[0]
    assert "document 1" in errs[1] and "damaged or truncated" in errs[1]
    assert "document 2 page 5" in errs[3] and "0..2" in errs[3]
    assert "document 3" in errs[4] and "at most 2 pages" in errs[4] and "pages=range(2)" in errs[4]
    assert "document 4" in errs[5]
    assert "document 5" in errs[6] and "at most 1,000 pages" in errs[6]
    assert sorted(errs) == [0, 1, 3, 4, 5, 6]


@needs_pdfium
def test_encrypted_pdf_needs_its_password():
    data = _encrypted_pdf(b"secret")
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    with pytest.raises(ImageError, match="document 0.*encrypted PDF and no password.*password="):
        proc.plan(documents=[Document(data)])
    with pytest.raises(ImageError, match="document 0.*wrong password"):
        proc.plan(documents=[Document(data, password="nope")])
    batch = proc(documents=[Document(data, password="secret", dpi=36)])
    assert batch.image_plans[0].source_hw == (396, 306)  # 792 x 612 pt at half a pixel per point


@needs_pdfium
def test_page_over_max_source_pixels_refused_before_rendering(monkeypatch):
    data = _pdf([(100, 100), (5000, 5000)])  # 5000 pt at 144 dpi: 10000 x 10000 = 100 MP
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip", max_source_pixels=50_000_000)
    _no_render(monkeypatch)
    plan = proc.plan(documents=[Document(data)])
    err = plan.images[1].error
    assert err is not None and "document 0 page 1" in str(err) and "max_source_pixels" in str(err)
    assert plan.images[0].error is None
    strict = vlmprep.Processor("qwen2-vl", backend="reference", max_source_pixels=50_000_000)
    with pytest.raises(ImageError, match="image 1 document 0 page 1"):
        strict(documents=[Document(data)])  # raises from the plan: the render would assert


@needs_pdfium
def test_render_failure_is_the_page_error(pdf3, monkeypatch):
    from dataclasses import replace

    from vlmprep.io import page_render
    from vlmprep.io.document import document_pages, render_page
    # PDFium failing in the worker (a page it has not: an error reply, the worker kept)
    src = document_pages(Document(pdf3, pages=[1], dpi=30), 0)[0]
    bad = replace(src, item=replace(src.item, page=7))
    with pytest.raises(ImageError, match=r"document 0 page 1 .*expected a page PDFium can render, got"):
        render_page(bad)
    assert render_page(src).shape == (*src.hw, 3)  # the same worker renders the next page
    # through the Processor: each page's own error
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")

    def broken(*a, **k):
        raise ImageError("expected a page PDFium can render, got PdfiumError (render failed)")
    monkeypatch.setattr(page_render, "render", broken)
    batch = proc(documents=[Document(pdf3, pages=[0, 1], dpi=30)])
    assert sorted(batch.errors) == [0, 1]
    assert "document 0 page 1" in str(batch.errors[1]) and "render" in str(batch.errors[1])


def test_document_options_are_checked():
    for bad in (dict(dpi=0), dict(dpi=float("nan")), dict(dpi=True), dict(max_pages=0),
                dict(pages=[-1]), dict(pages="1-3"), dict(pages=[1.0]), dict(pages=range(5, -2, -1)),
                dict(password=3)):
        with pytest.raises(ImageError, match=r"Document\(.*expected"):
            Document(b"%PDF-", **bad)
    Document(b"%PDF-", pages=range(10**12))  # checked from its ends, not walked
    with pytest.raises(TypeError, match="documents=\\[doc\\]"):
        vlmprep.Processor("qwen2-vl", backend="reference").plan(documents=Document(b"%PDF-"))


def test_without_pypdfium2_a_document_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pypdfium2", None)  # import pypdfium2 -> ImportError
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    plan = proc.plan(documents=[Document(b"%PDF-1.4 whatever")])
    err = plan.images[0].error
    assert err is not None and "vlmprep[pdf]" in str(err) and "document 0" in str(err)
    assert "expected" in str(err) and "got" in str(err)
