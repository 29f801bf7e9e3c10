"""Harness (h): PDF documents (``vlmprep.Document``: ``vlmprep/io/document.py``, the render
workers of ``vlmprep/io/page_render.py``) on mutated PDF bytes.

Input: a PDF's bytes (seeds: small hand-written PDFs, tests/_support/pdfs.py: pages, images,
annotations and JavaScript, encryption, a damaged xref, a page tree loop, a form bomb, a slow
shading). ``proc.plan(documents=[doc])`` then ``proc(documents=[doc])`` with errors="skip",
dpi 36, at most 8 pages, timeout_s 1 a page, a 4 Mpx page limit.

Guarantees: only ImageError, saying "expected", ever reaches the caller (in the plan and the
batch: never an exception of the call); the plan reads no page content (no render); the batch
has the plan's items, and each page the plan accepted is rendered with the plan's tokens or is
its own ImageError naming the page; the call ends within the pages' time bounds plus a grace
(a page that does not finish is killed after timeout_s); the harness's own memory stays under
run.py's ``-rss_limit_mb`` (a page's allocations happen in its worker, under its own bound).

    .venv/bin/python fuzz/fuzz_document.py fuzz/corpus/document fuzz/seeds/document -max_total_time=60
"""
from __future__ import annotations

import time

import _common  # noqa: F401  (sys.path)

TIMEOUT_S = 1.0
MAX_PAGES = 8
GRACE_S = 5.0  # a worker (re)start after a killed one, a busy host
_PROC: list = []


def _proc():
    if not _PROC:
        import vlmprep
        _PROC.append(vlmprep.Processor("qwen2-vl", backend="reference", errors="skip",
                                       max_source_pixels=4_000_000))
    return _PROC[0]


def _check_errors(errors: dict, what: str) -> None:
    from vlmprep.errors import ImageError
    for k, e in errors.items():
        assert isinstance(e, ImageError), f"{what}: a {type(e).__name__} at {k}, not an ImageError\n{e!r}"
        assert "expected" in str(e), f"{what}: ImageError without 'expected'\n{e}"
        assert "document 0" in str(e), f"{what}: an error that does not name the document\n{e}"


def test_one_input(data: bytes) -> None:
    from vlmprep import Document
    proc = _proc()
    doc = Document(data, dpi=36, max_pages=MAX_PAGES, timeout_s=TIMEOUT_S)
    plan = proc.plan(documents=[doc])
    _check_errors({p.index: p.error for p in plan.images if p.error is not None}, "the plan")
    t0 = time.monotonic()
    batch = proc(documents=[doc])
    took = time.monotonic() - t0
    bound = TIMEOUT_S * len(plan.images) + GRACE_S
    assert took <= bound, f"the call ran past its pages' time bounds\n{took:.1f} s > {bound:.1f} s"
    _check_errors(batch.errors, "the batch")
    assert len(batch.num_tokens) == len(plan.images), (
        f"the batch has other items than the plan\n{len(batch.num_tokens)} vs {len(plan.images)}")
    for p in plan.images:
        if p.error is not None:
            assert p.index in batch.errors, f"a page the plan refused was rendered\n{p}"
        elif p.index in batch.errors:
            assert "page" in str(batch.errors[p.index]), f"a render error not naming the page\n{batch.errors[p.index]}"
        else:
            assert batch.num_tokens[p.index] == p.num_tokens, (
                f"a rendered page's tokens differ from its plan\n{batch.num_tokens[p.index]} vs {p.num_tokens}")


if __name__ == "__main__":
    warm = _common.warm_on_first_seed(test_one_input, "document")
    _common.main(test_one_input, instrument=("vlmprep.io.document",), warm=warm)
