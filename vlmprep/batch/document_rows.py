"""Document rows: a batch job's PDF sample -> one shard row per page, in page order.

A PDF sample (``is_document``: its name ends in ``.pdf``, or its first KiB holds ``%PDF-``:
``io.media``) is ``vlmprep.Document(data)`` with the defaults (every page, 144 dpi, at most
``DEFAULT_MAX_PAGES`` pages). Page ``k`` (0-based, as ``Document(pages=)`` counts) is the image
row ``{id}#p{k}`` holding what ``proc(documents=[Document(data, pages=[k])])`` returns, so
``read_shards`` gives it back bit for bit. A cause of the whole PDF (damaged, encrypted, not a
PDF, too many pages, no pypdfium2) is one error row under the sample's own id; a bad page is
that page's error row.

    Given  "scans/a.pdf" of 3 pages      Output rows "scans/a.pdf#p0", "#p1", "#p2"

The pages are rendered ``_PAGES_PER_CALL`` at a time (``Processor.stream``): a long PDF holds
one group of rendered pages, not all of them (its rows are held until the shard is written).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..io.media import is_document_bytes, is_document_name
from .packed_rows import rows_of_batch
from .schema import make_row, row_layout, row_shape_of

if TYPE_CHECKING:
    from ..processor import Processor

__all__ = ["is_document", "page_id", "document_rows"]

# Pages per Processor call: 8 Letter pages at 144 dpi are ~45 MB rendered; enough per call to
# keep the kernels' threads busy.
_PAGES_PER_CALL = 8


class _PageRef(NamedTuple):
    """What ``make_row`` needs of a page: its row id and the PDF it came from."""
    id: str
    source: str


def page_id(sample_id: str, page: int) -> str:
    """The row id of page ``page`` (0-based) of a PDF sample: ``"a.pdf#p12"``."""
    return f"{sample_id}#p{page}"


def is_document(sample: Any) -> bool:
    """Whether a sample goes the document path: not named a video, and its id / source ends in
    ``.pdf`` or its bytes hold ``%PDF-`` in their first KiB."""
    if getattr(sample, "video", False):
        return False
    names = (getattr(sample, "id", None), getattr(sample, "source", None))
    if any(isinstance(n, str) and is_document_name(n) for n in names):
        return True
    data = getattr(sample, "data", None)
    return data is not None and is_document_bytes(data)


def document_rows(p: "Processor", sample: Any) -> tuple[list[dict], BaseException | None]:
    """``sample`` (a PDF sample with data) -> (its rows, one per page, the unexpected exception
    that made pages error rows, else None). ``p`` skips bad items (``errors="skip"``). Never
    raises for a per-item cause."""
    # deferred: the PDF module; image jobs never need it
    from ..io.document import Document, whole_document_error
    pipe = p.pipeline
    dtype, layout, shape = p.dtype, row_layout(pipe), row_shape_of(pipe)
    doc = Document(sample.data)
    plans = p.plan(documents=[doc]).images  # the page tree only: which pages, which are bad
    if whole_document_error([q.error for q in plans]):
        return [make_row(sample, dtype, layout, shape, (0, 0),
                         error=plans[0].error.reason)], None  # type: ignore[union-attr]
    refs = [_PageRef(page_id(sample.id, k), sample.source) for k in range(len(plans))]
    rows: list[dict] = []
    try:
        for part in p.stream(doc, pages_per_batch=_PAGES_PER_CALL):
            a = len(rows)
            rows += rows_of_batch(part, refs[a:a + len(part.num_tokens)], part.image_plans, dtype)
    except Exception as e:  # noqa: BLE001 (the pages' rows; the caller re-raises when all fail)
        a = len(rows)
        rows += [make_row(r, dtype, layout, shape, plans[a + i].source_hw,
                          error=f"{type(e).__name__}: {e}") for i, r in enumerate(refs[a:])]
        return rows, e
    return rows, None
