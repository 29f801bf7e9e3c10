"""A document's plan: which pages become items at which dpi, within its visual-token budget.

``plan_document`` reads the page tree (``io.document.document_pages``: no page rasterized) and
plans each selected page with the family's own rule (``plan_images``). Without
``Document.max_tokens`` the document is taken as given. With it, when the selected pages cost
more tokens than the budget, the dpi is lowered first (the highest whole dpi down to
``MIN_BUDGET_DPI`` that fits: every page kept, each smaller), and only when the floor does not
fit are pages left out: the leading pages (in ``pages`` order) that fit at the floor are kept,
the rest are ``dropped``. Dropping is said, never silent: ``DocumentPlan.fit`` says which was
done and ``dropped`` lists the pages left out; a document whose first page alone is over the
budget is one ImageError (nothing fits). Tokens only ever go down as the dpi does for the
families covered, but every dpi chosen is one whose total was computed, so the budget holds
whatever the rule.

    Given  a 300-page Letter PDF, qwen2-vl, dpi 144, max_tokens=16384
    Output fit "pages": dpi 72, pages 0..25 kept (616 tokens each), 26..299 dropped
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import ImageError
from ..io import document as io_document
from ..io.document import DEFAULT_DPI, MIN_BUDGET_DPI, Document
from ..io.tiff_pages import TiffPage
from .plan import plan_images

if TYPE_CHECKING:
    from ..io.inputs import Source
    from ..pipeline import Pipeline

__all__ = ["DocumentPlan", "plan_document"]


@dataclass(frozen=True)
class DocumentPlan:
    """Document ``index`` of a call: ``pages`` the 0-based page indices that are its items, in
    order (bad pages included: each is its item's error), at ``dpi``; ``dropped`` the selected
    pages ``max_tokens`` left out; ``num_tokens`` the kept pages' tokens together. ``fit``:
    ``"as-is"`` (no budget, or within it), ``"dpi"`` (the dpi was lowered, every page kept) or
    ``"pages"`` (at ``MIN_BUDGET_DPI`` and pages dropped). A multi-page TIFF has no dpi
    (``None``: its pages are pixels): over budget it can only drop pages. ``error``: a cause of
    the whole document (then ``pages`` is empty)."""

    index: int
    dpi: float | None
    pages: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    num_tokens: int = 0
    max_tokens: int | None = None
    fit: str = "as-is"
    error: ImageError | None = None


def _dpi(doc: Document) -> float:
    return doc.dpi if doc.dpi is not None else DEFAULT_DPI


def _is_raster(entries: list) -> bool:
    """Whether the pages are stored pixels (a TIFF's frames), not rendered at a dpi."""
    return any(isinstance(getattr(e, "item", None), TiffPage) for e in entries)


def _tokens(pipeline: "Pipeline", entries: list) -> list[int]:
    """Tokens per entry of ``document_pages`` (0 for a bad page: it costs none)."""
    sizes = [e if isinstance(e, ImageError) else e.hw for e in entries]
    return [p.num_tokens for p in plan_images(pipeline, sizes)]


def _page_numbers(doc: Document, n: int) -> list[int]:
    return list(range(n)) if doc.pages is None else list(doc.pages)


def plan_document(pipeline: "Pipeline", doc: Document, d: int, max_bytes: int
                  ) -> tuple["list[Source | ImageError]", DocumentPlan]:
    """Document ``d`` of a call -> (its ``document_pages`` entries at the dpi and pages it runs
    with, its DocumentPlan). Never raises for a per-document cause: the entries then hold one
    ImageError and the plan says so."""
    entries = io_document.document_pages(doc, d, max_bytes)
    first = entries[0] if len(entries) == 1 else None
    if isinstance(first, ImageError) and not (first.source or "").startswith(f"document {d} page "):
        return entries, DocumentPlan(d, _dpi(doc), max_tokens=doc.max_tokens, error=first)
    budget = doc.max_tokens
    tokens = _tokens(pipeline, entries)
    pages = _page_numbers(doc, len(entries))
    dpi = None if _is_raster(entries) else _dpi(doc)
    if budget is None or sum(tokens) <= budget:
        return entries, DocumentPlan(d, dpi, pages, [], sum(tokens), budget)
    if dpi is None:
        return _leading(d, None, entries, tokens, budget, pages)
    return _fit(pipeline, doc, d, max_bytes, budget, pages)


def _at(pipeline: "Pipeline", doc: Document, d: int, max_bytes: int, dpi: float
        ) -> tuple[list, list[int]]:
    entries = io_document.document_pages(dataclasses.replace(doc, dpi=dpi, max_tokens=None), d,
                                         max_bytes)
    return entries, _tokens(pipeline, entries)


def _fit(pipeline: "Pipeline", doc: Document, d: int, max_bytes: int, budget: int,
         pages: list[int]) -> tuple[list, DocumentPlan]:
    """Over budget at the document's dpi: the highest whole dpi that fits, else the floor and
    the leading pages that fit there."""
    floor = min(MIN_BUDGET_DPI, _dpi(doc))
    entries, tokens = _at(pipeline, doc, d, max_bytes, floor)
    if sum(tokens) <= budget:
        lo, hi = math.floor(floor) + 1, math.ceil(_dpi(doc)) - 1  # the floor fits; above it unknown
        best = (floor, entries, tokens)
        while lo <= hi:  # bisect the whole dpis above the floor for the highest that fits
            mid = (lo + hi + 1) // 2
            e, t = _at(pipeline, doc, d, max_bytes, float(mid))
            if sum(t) <= budget:
                best, lo = (float(mid), e, t), mid + 1
            else:
                hi = mid - 1
        dpi, entries, tokens = best
        return entries, DocumentPlan(d, dpi, pages, [], sum(tokens), budget, "dpi")
    return _leading(d, floor, entries, tokens, budget, pages)


def _leading(d: int, dpi: float | None, entries: list, tokens: list[int], budget: int,
             pages: list[int]) -> tuple[list, DocumentPlan]:
    """The leading pages whose tokens fit ``budget`` (the rest dropped); one ImageError for
    the document when not even its first page fits."""
    keep, total = 0, 0
    while keep < len(tokens) and total + tokens[keep] <= budget:
        total += tokens[keep]
        keep += 1
    if keep == 0:
        at = f"at the lowest dpi {dpi:g}" if dpi is not None else "at its stored size"
        err = ImageError(f"expected the first page to fit max_tokens={budget:,}, got "
                         f"{tokens[0]:,} tokens {at}; raise Document(max_tokens=...) or select "
                         f"other pages", source=f"document {d}")
        return [err], DocumentPlan(d, dpi, [], pages, 0, budget, "pages", err)
    return entries[:keep], DocumentPlan(d, dpi, pages[:keep], pages[keep:], total, budget,
                                        "pages")
