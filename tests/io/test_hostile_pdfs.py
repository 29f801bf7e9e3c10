"""Bad and hostile PDFs (issue 31), one test per row of docs/reliability.md "Hostile PDFs": each
is an ImageError naming the document or page and the cause, within a time bound (never a hang,
never memory past the render's bound), or a render equal to pypdfium2's own, bit for bit.

The PDFs are written by hand as bytes (tests/_support/pdfs.py ``build_pdf`` and the builders
after it), as a hostile file has them. Renders run in worker processes (``io.page_render``):
a test that kills one checks that the next page still renders.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pdfium = pytest.importorskip("pypdfium2")

from _support import pdfs  # noqa: E402

import vlmprep  # noqa: E402
from vlmprep import Document, ImageError  # noqa: E402
from vlmprep.io import page_render  # noqa: E402
from vlmprep.io.document import DEFAULT_DPI, page_hw  # noqa: E402

BOUND_S = 15.0  # the most any row may take here, timeouts included (a hang fails, not blocks)


@pytest.fixture(scope="module")
def proc():
    return vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")


def _run(proc, docs, images=None):
    """proc(documents=docs) -> (batch, {index: str(error)}, seconds)."""
    t = time.monotonic()
    batch = proc(images=images, documents=docs)
    took = time.monotonic() - t
    assert took < BOUND_S, f"took {took:.1f} s"
    return batch, {k: str(e) for k, e in batch.errors.items()}, took


def _same_as_pypdfium2(proc, batch, data, pages, dpi):
    """The batch equals proc() of pypdfium2's own renders of ``pages`` at ``dpi``."""
    want = proc([pdfs.render(data, p, dpi) for p in pages])
    assert np.array_equal(batch.pixel_values.numpy(), want.pixel_values.numpy())
    assert batch.num_tokens == want.num_tokens


def _no_render(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a page was rasterized")
    monkeypatch.setattr(pdfium.PdfPage, "render", boom)
    monkeypatch.setattr(page_render, "render", boom)


def _zombies() -> list[int]:
    """This process's children that ended and were never waited for."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            out.append(int(pid))
    return out


_GOOD = pdfs.pages_pdf(2)


def _good_renders(proc):
    batch, errs, _ = _run(proc, [Document(_GOOD, dpi=50)])
    assert errs == {}
    _same_as_pypdfium2(proc, batch, _GOOD, [0, 1], 50)


# -- one test per row ---------------------------------------------------------------------------
def test_encrypted_without_password(proc):
    _, errs, _ = _run(proc, [Document(pdfs.encrypted_pdf(b"secret"))])
    assert "document 0" in errs[0] and "encrypted PDF and no password" in errs[0]
    assert "password=" in errs[0]


def test_damaged_xref_wrong_offsets_is_repaired(proc):
    """Every xref offset 7 bytes off: PDFium rebuilds the table by scanning the objects, and
    the pages render as pypdfium2 renders them."""
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [4 0 R 5 0 R] /Count 2 /MediaBox [0 0 200 100] >>",
            pdfs.stream(b"", b"0 0 1 rg 10 10 50 50 re f"),
            b"<< /Type /Page /Parent 2 0 R /Contents 3 0 R >>",
            b"<< /Type /Page /Parent 2 0 R >>"]
    bad = pdfs.build_pdf(objs, xref_shift=7)
    batch, errs, _ = _run(proc, [Document(bad, dpi=50)])
    assert errs == {}
    _same_as_pypdfium2(proc, batch, bad, [0, 1], 50)


def test_damaged_xref_truncated_is_refused(proc):
    """The file cut inside its xref table (no trailer, no /Root): PDFium cannot load it; one
    error for the document, nothing rendered."""
    bad = pdfs.build_pdf([b"<< /Type /Catalog /Pages 2 0 R >>",
                          b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                          b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] >>"], cut_xref=30)
    _, errs, _ = _run(proc, [Document(bad)])
    assert list(errs) == [0] and "document 0" in errs[0] and "damaged or truncated" in errs[0]


def test_page_tree_loop(proc):
    """/Kids of an intermediate node point back at the root: PDFium's page tree walk does not
    follow a node it is already inside (no endless walk); the pages /Count declares are the
    leaves it finds, each rendered as pypdfium2 renders it."""
    data = pdfs.page_tree_loop_pdf()
    n = len(pdfium.PdfDocument(data))
    batch, errs, _ = _run(proc, [Document(data, dpi=50)])
    assert errs == {} and len(batch.num_tokens) == n
    _same_as_pypdfium2(proc, batch, data, range(n), 50)


def test_200_inch_page_at_300_dpi_refused_before_render(proc, monkeypatch):
    """14400 x 14400 pt (200 in, the PDF maximum) at 300 dpi is 60000 x 60000 px: refused by
    max_source_pixels from the page tree's size; no page is rendered, in or out of process."""
    s = 14400
    data = pdfs.build_pdf([b"<< /Type /Catalog /Pages 2 0 R >>",
                           b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                           b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] >>" % (s, s)])
    _no_render(monkeypatch)
    plan = proc.plan(documents=[Document(data, dpi=300)])
    err = str(plan.images[0].error)
    assert plan.images[0].source_hw == page_hw(s, s, 300 / 72) == (60001, 60001)  # pypdfium2's ceil
    assert "document 0 page 0" in err and "max_source_pixels" in err
    _, errs, _ = _run(proc, [Document(data, dpi=300)])
    assert "document 0 page 0" in errs[0] and "max_source_pixels" in errs[0]


def test_thousands_of_pages(proc):
    """5000 pages: the default max_pages (1000) refuses the document, saying how many it has and
    how to select some; pages=range(3) renders those three."""
    data = pdfs.pages_pdf(5000)
    _, errs, _ = _run(proc, [Document(data)])
    assert list(errs) == [0] and "document 0" in errs[0]
    assert "at most 1,000 pages" in errs[0] and "of 5,000" in errs[0] and "pages=range(1000)" in errs[0]
    batch, errs, _ = _run(proc, [Document(data, pages=range(3), dpi=50)])
    assert errs == {}
    _same_as_pypdfium2(proc, batch, data, [0, 1, 2], 50)


def test_javascript_and_annotations_render_as_pypdfium2(proc):
    """/OpenAction and document JavaScript are never run (PDFium renders without a form
    environment's scripts); annotations are drawn as pypdfium2's default render draws them."""
    data = pdfs.javascript_annotations_pdf()
    batch, errs, _ = _run(proc, [Document(data)])
    assert errs == {}
    _same_as_pypdfium2(proc, batch, data, [0], DEFAULT_DPI)
    page = pdfium.PdfDocument(data)[0]
    bare = page.render(scale=2, rev_byteorder=True, draw_annots=False).to_numpy()
    assert not np.array_equal(pdfs.render(data, 0), bare)  # the annotations were drawn


def test_render_that_does_not_finish_is_the_page_error(proc):
    """A shading whose function runs 100k ops per pixel (~15 CPU-minutes at 144 dpi): with
    timeout_s=1 the worker is killed after 1 s and the page is an ImageError naming it; the
    killed worker is reaped and the next document renders in a fresh one."""
    batch, errs, took = _run(proc, [Document(pdfs.slow_shading_pdf(), timeout_s=1)])
    assert "document 0 page 0" in errs[0] and "within 1 s" in errs[0] and "timeout_s=" in errs[0]
    assert took < 8, took
    assert _zombies() == []
    _good_renders(proc)


def test_page_allocating_past_the_memory_bound(proc, monkeypatch):
    """A Form XObject bomb (form k draws form k+1 twice, 32 levels): PDFium keeps every parsed
    form, so the render allocates without end; the worker's address-space limit stops it (PDFium
    aborts on the failed allocation) and the page is its ImageError, the caller's memory
    untouched. The timeout is left long: it is the memory bound that ends it (PDFium's working
    memory lowered to 64 MiB here: the default 512 MiB takes the bomb ~6 s to reach)."""
    monkeypatch.setattr(page_render, "PAGE_WORK_BYTES", 64 << 20)
    _, errs, _ = _run(proc, [Document(pdfs.form_bomb_pdf(), timeout_s=BOUND_S - 2)])
    assert "document 0 page 0" in errs[0] and "render process ended" in errs[0]
    assert "memory bound" in errs[0]
    _good_renders(proc)


def test_image_declaring_60000_squared_pixels(proc):
    """An image XObject declaring 60000 x 60000 RGB (10.8 GB) from 1.7 KB: PDFium decodes it at
    the size it is drawn, so the render succeeds within the bound, equal to pypdfium2's own
    (compared in this process only after the bounded worker rendered it)."""
    data = pdfs.huge_image_pdf()
    batch, errs, _ = _run(proc, [Document(data, dpi=72, timeout_s=5)])
    assert errs == {}
    _same_as_pypdfium2(proc, batch, data, [0], 72)


def test_hanging_page_among_good_pages(proc):
    """errors="skip": the good pages around a page that does not finish are in the batch, equal
    to pypdfium2's renders; the bad page is one error naming it."""
    slow = pdfs.slow_shading_pdf()
    photo = np.full((40, 50, 3), 7, np.uint8)
    docs = [Document(_GOOD, dpi=50), Document(slow, timeout_s=1), Document(_GOOD, pages=[1], dpi=50)]
    batch, errs, _ = _run(proc, docs, images=[photo])
    assert list(errs) == [3] and "document 1 page 0" in errs[3] and "within 1 s" in errs[3]
    want = proc([photo, pdfs.render(_GOOD, 0, 50), pdfs.render(_GOOD, 1, 50),
                 pdfs.render(_GOOD, 1, 50)])
    assert np.array_equal(batch.pixel_values.numpy(), want.pixel_values.numpy())
    assert [t for k, t in enumerate(batch.num_tokens) if k != 3] == want.num_tokens


# -- the worker pool ----------------------------------------------------------------------------
def test_two_threads_render_at_once(proc):
    """A page that hangs in one thread does not hold up another thread's page: each thread has
    its own worker (no lock around PDFium in the caller)."""
    from vlmprep.io.document import document_pages, render_page
    if page_render._POOL.limit < 2:
        pytest.skip("one CPU: one worker")
    slow = document_pages(Document(pdfs.slow_shading_pdf(), timeout_s=2), 0)[0]
    good = document_pages(Document(_GOOD, dpi=50), 0)[0]
    started, res = threading.Event(), {}

    def hang():
        started.set()
        try:
            render_page(slow)
        except ImageError as e:
            res["slow"] = (time.monotonic(), str(e))

    t = threading.Thread(target=hang)
    t.start()
    started.wait()
    time.sleep(0.3)  # the slow page is in its worker
    got = render_page(good)
    done = time.monotonic()
    t.join(BOUND_S)
    assert not t.is_alive() and "within 2 s" in res["slow"][1]
    assert done < res["slow"][0] - 0.5, "the good page waited for the hanging one"
    np.testing.assert_array_equal(got, pdfs.render(_GOOD, 0, 50))


def test_worker_that_fails_to_start_is_a_clear_error(monkeypatch):
    from vlmprep.io.document import document_pages, render_page
    src = document_pages(Document(_GOOD, dpi=50), 0)[0]
    page_render.shutdown()  # no idle worker: the next render starts one
    monkeypatch.setattr(page_render.sys, "executable", "/bin/false")
    with pytest.raises(ImageError, match=r"document 0 page 0 .*expected a PDF render worker .* to "
                                         r"start within .*got exit status 1"):
        render_page(src)
    monkeypatch.undo()
    np.testing.assert_array_equal(render_page(src), pdfs.render(_GOOD, 0, 50))
    assert _zombies() == []


def test_workers_end_at_interpreter_exit(tmp_path):
    """A program that rendered a page exits promptly, and its worker with it (atexit)."""
    pdf = tmp_path / "a.pdf"
    pdf.write_bytes(_GOOD)
    code = ("from vlmprep.io import page_render as r; "
            "from vlmprep.io.document import Document, document_pages, render_page; "
            f"render_page(document_pages(Document({str(pdf)!r}, dpi=30), 0)[0]); "
            "print(r._POOL.idle[0].proc.pid)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.split()[-1])
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
