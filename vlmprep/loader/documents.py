"""The DataLoader's document samples: a ``vlmprep.Document`` selecting one page is one sample,
an image item of its batch (in stream order, among the images), its tokens from the header-only
plan (``proc.plan(documents=[doc])``: the page tree, nothing rasterized).

One page per sample keeps ``sources[i]`` <-> sample ``i``, which shuffling, ``len`` and resume
count by; a multi-page document is expanded by the caller (``pages_of``)::

    Given  samples [img0, Document(pdf, pages=[3]), img1]
    Output one image batch of 3 items, item 1 the page (batch.errors[1] is the page's)
"""
from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import ImageError

if TYPE_CHECKING:
    from ..plan import ImagePlan
    from ..processor import Processor

__all__ = ["is_document_item", "check_page", "page_tokens", "pages_of", "prepare_with_pages",
           "raise_first"]


def is_document_item(item: Any) -> bool:
    """A ``vlmprep.Document`` (it exists only once its module is imported: nothing imported)."""
    mod = sys.modules.get("vlmprep.io.document")
    return mod is not None and isinstance(item, mod.Document)


def check_page(doc: Any) -> ImageError | None:
    """None when ``doc`` selects exactly one page, else the sample's ImageError saying how to
    expand it."""
    pages = doc.pages
    if pages is not None and len(pages) == 1:
        return None
    got = "every page (pages=None)" if pages is None else f"{len(pages)} pages"
    return ImageError(f"expected a Document selecting one page per DataLoader sample, got "
                      f"{got}; expand it: vlmprep.loader.pages_of(proc, [doc]) (one Document "
                      f"per page)", source="document")


def page_tokens(proc: "Processor", doc: Any) -> int:
    """The page's LLM tokens from the page tree (no render); 0 when it cannot be planned (its
    batch then raises or skips it, naming the sample)."""
    try:
        return int(proc.plan(documents=[doc]).total_tokens)
    except ImageError:
        return 0


def pages_of(proc: "Processor", documents: Sequence[Any]) -> list[Any]:
    """``documents`` (``vlmprep.Document`` or PDF paths / bytes) -> one single-page Document
    per page its plan keeps (``Document.max_tokens`` may lower the dpi or leave pages out:
    ``proc.plan(...).documents``), document by document in ``pages`` order: DataLoader sources.
    Reads each page tree once (``proc.plan``, nothing rasterized); a document that cannot be
    opened stays one item (its sample then fails with the reason)."""
    from ..io.document import Document  # deferred: the PDF module
    skip = proc.clone(errors="skip")  # a bad document is kept as a sample, not raised here
    out: list[Any] = []
    for d in documents:
        doc = d if isinstance(d, Document) else Document(d)
        (dp,) = skip.plan(documents=[doc]).documents
        if dp.error is not None:
            out.append(doc)
            continue
        # its pages at its dpi as the plan settled them (within the document's max_tokens)
        out.extend(replace(doc, pages=[p], dpi=dp.dpi, max_tokens=None) for p in dp.pages)
    return out


def _at(p: "ImagePlan", k: int) -> "ImagePlan":
    """Plan ``p`` as item ``k`` of the batch (``execute`` wants ``plans[k].index == k``)."""
    err = p.error
    if err is not None:
        err = ImageError(err.reason, index=k, source=err.source, item=err.item)
    return replace(p, index=k, error=err)


def prepare_with_pages(proc: "Processor", items: Sequence[tuple[bool, Any]]
                       ) -> tuple[list, list["ImagePlan"]]:
    """``items`` ((is it a document, item), in batch order) -> ``proc.prepare``'s output in that
    order (``prepare`` puts documents after the images: interleaved back here), for
    ``proc.execute(*proc.render_documents(...))``: item ``k`` the ``k``-th, as ``proc(images)``
    gives with each page as the image it renders to."""
    imgs = proc.prepare([it for is_doc, it in items if not is_doc])
    docs = proc.prepare([], [it for is_doc, it in items if is_doc])
    nxt = [0, 0]  # the next image, the next page
    sources, plans = [], []
    for k, (is_doc, _) in enumerate(items):
        side = docs if is_doc else imgs
        j = nxt[is_doc]
        nxt[is_doc] += 1
        sources.append(side[0][j])
        plans.append(_at(side[1][j], k))
    return sources, plans


def raise_first(proc: "Processor", plans: Sequence[Any]) -> None:
    """With ``errors="raise"``, the first planned error (an image's, a page's or a video's)."""
    if proc.errors == "raise":
        for p in plans:
            if p.error is not None:
                raise p.error
