"""Document rows: a batch job's PDF sample -> one shard row per page, in page order.

A PDF sample (``is_document``: its name ends in ``.pdf``, or its first KiB holds ``%PDF-``:
``io.media``) is ``vlmprep.Document(data, **options)``: the job's ``--dpi`` / ``--pages`` /
``--max-pages`` / ``--max-tokens`` (``JobConfig.document_options``), Document's defaults
otherwise (every page, 144 dpi, at most ``DEFAULT_MAX_PAGES`` pages). Page ``k`` (0-based, as
``Document(pages=)`` counts) that the plan keeps is the image row ``{id}#p{k}`` holding what
``proc(documents=[Document(data, pages=[k], dpi=<the plan's dpi>)])`` returns, so
``read_shards`` gives it back bit for bit. A cause of the whole PDF (damaged, encrypted, not a
PDF, too many pages, over its max_tokens at its first page, no pypdfium2) is one error row
under the sample's own id; a bad page is that page's error row. Pages a ``max_tokens`` budget
leaves out have no row (the plan says which: ``Processor.plan(documents=...).documents``).

    Given  "scans/a.pdf" of 3 pages      Output rows "scans/a.pdf#p0", "#p1", "#p2"
    Given  the same, --pages 2,0         Output rows "scans/a.pdf#p2", "#p0"

The pages are rendered ``_PAGES_PER_CALL`` at a time (``Processor.stream``, the next group
rendered ahead): a long PDF holds two groups of rendered pages, not all of them (its rows are
held until the shard is written).
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


def document_rows(p: "Processor", sample: Any, options: dict[str, Any]
                  ) -> tuple[list[dict], BaseException | None]:
    """``sample`` (a PDF sample with data) -> (its rows, one per page its plan keeps, the
    unexpected exception that made pages error rows, else None). ``options``: the
    ``vlmprep.Document`` keywords (``JobConfig.document_options``: dpi, pages, max_pages,
    max_tokens). ``p`` skips bad items (``errors="skip"``). Never raises for a per-item cause."""
    # deferred: the PDF module; image jobs never need it
    from ..io.document import Document
    pipe = p.pipeline
    dtype, layout, shape = p.dtype, row_layout(pipe), row_shape_of(pipe)
    doc = Document(sample.data, **options)
    plan = p.plan(documents=[doc])  # the page tree only: which pages, which are bad
    plans, (dp,) = plan.images, plan.documents
    if dp.error is not None:
        return [make_row(sample, dtype, layout, shape, (0, 0), error=dp.error.reason)], None
    refs = [_PageRef(page_id(sample.id, k), sample.source) for k in dp.pages]
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
