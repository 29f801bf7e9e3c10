"""``proc.stream(doc, pages_per_batch=)`` (issue 31): a PackedBatch per page group, each equal to
the one-shot call on that group's pages, at most two groups' pages rendered at a time (the next rendered ahead), and the
whole document planned (page tree only) before the first render."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import vlmprep
from vlmprep import Document, ImageError

pdfs = pytest.importorskip("_support.pdfs", reason="needs pypdfium2 (pip install 'vlmprep[pdf]')")
import pypdfium2 as pdfium  # noqa: E402 (after the skip: the optional extra)


@pytest.fixture(scope="module")
def pdf5() -> bytes:
    return pdfs.make_pdf([(200.3, 150.7), (150, 260), (300, 120), (90, 90), (120, 80)],
                         rotate={2: 90}, seed=3)


def _same(a, b) -> None:
    assert np.array_equal(a.pixel_values.numpy(), b.pixel_values.numpy())
    assert a.pixel_values.dtype == b.pixel_values.dtype
    assert a.cu_seqlens.tolist() == b.cu_seqlens.tolist()
    assert a.grid_thw.tolist() == b.grid_thw.tolist()
    assert a.num_tokens == b.num_tokens and a.placeholders == b.placeholders
    assert {k: str(e) for k, e in a.errors.items()} == {k: str(e) for k, e in b.errors.items()}


@pytest.mark.parametrize("family", ["qwen2-vl", "internvl"])
@pytest.mark.parametrize("n", [1, 2, 5])
def test_each_part_equals_the_one_shot_call_on_its_pages(family, n, pdf5):
    proc = vlmprep.Processor(family, backend="reference")
    pages = [4, 0, 2, 1, 3]
    parts = list(proc.stream(Document(pdf5, pages=pages, dpi=50), pages_per_batch=n))
    groups = [pages[a:a + n] for a in range(0, len(pages), n)]
    assert len(parts) == len(groups)
    for part, group in zip(parts, groups, strict=True):
        _same(part, proc(documents=[Document(pdf5, pages=group, dpi=50)]))
    assert sum((p.num_tokens for p in parts), []) == \
        proc.plan(documents=[Document(pdf5, pages=pages, dpi=50)]).num_tokens


@pytest.mark.parametrize("n", [1, 2])
def test_at_most_two_groups_of_rendered_pages_are_alive(n, pdf5, monkeypatch):
    """Every rendered page is held by a weakref: at each render, at most the pages of the
    group running and of the next one (rendered ahead) are alive, whatever the consumer does
    with the parts it already got."""
    import vlmprep.io.document as document
    real = document.render_page
    alive: list = []
    peak = [0]

    def spy(src):
        out = real(src)
        alive.append(weakref.ref(out))
        peak[0] = max(peak[0], sum(r() is not None for r in alive))
        return out
    monkeypatch.setattr(document, "render_page", spy)
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    parts = list(proc.stream(Document(pdf5, dpi=40), pages_per_batch=n))  # kept: must not matter
    assert len(alive) == 5 and len(parts) == -(-5 // n)
    assert n <= peak[0] <= 2 * n
    del parts
    gc.collect()
    assert sum(r() is not None for r in alive) == 0  # nothing kept by the stream


def test_bad_page_raises_before_any_render_or_is_its_part_error(pdf5, monkeypatch):
    renders = []
    real = pdfium.PdfPage.render
    monkeypatch.setattr(pdfium.PdfPage, "render", lambda self, **k: renders.append(1) or real(self, **k))
    doc = Document(pdf5, pages=[0, 9, 1], dpi=40)  # page 9 of 5: a bad page in the middle
    strict = vlmprep.Processor("qwen2-vl", backend="reference")
    with pytest.raises(ImageError, match="image 1 document 0 page 9.*0..4"):
        strict.stream(doc)  # from the call itself, not the first next()
    assert renders == []
    skip = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    parts = list(skip.stream(doc, pages_per_batch=2))
    assert [sorted(p.errors) for p in parts] == [[1], []]
    _same(parts[0], skip(documents=[Document(pdf5, pages=[0, 9], dpi=40)]))
    _same(parts[1], skip(documents=[Document(pdf5, pages=[1], dpi=40)]))


def test_a_bad_document_is_one_part_or_raises(pdf5):
    skip = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    parts = list(skip.stream(b"GIF89a not a pdf", pages_per_batch=3))
    assert len(parts) == 1 and "document 0" in str(parts[0].errors[0]) and "%PDF-" in str(parts[0].errors[0])
    with pytest.raises(ImageError, match="%PDF-"):
        vlmprep.Processor("qwen2-vl", backend="reference").stream(b"GIF89a not a pdf")
    assert list(skip.stream(Document(pdf5, pages=[]))) == []


def test_stream_arguments_are_checked(pdf5):
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"pages_per_batch.*expected an int >= 1"):
            proc.stream(pdf5, pages_per_batch=bad)
    with pytest.raises(TypeError, match="stream once per document"):
        proc.stream([Document(pdf5)])
