"""PDF documents as image items (issue 31): ``Document`` (public as ``vlmprep.Document``),
``document_pages`` (each selected page's size from the PDF's page tree: no page rasterized) and
``render_page`` (one page -> ``(H, W, 3)`` uint8 RGB, pypdfium2's own pixels).

Rendering needs the optional extra ``vlmprep[pdf]`` (pypdfium2, imported on first use so that
``import vlmprep`` stays light); without it every document is an ImageError naming the extra.

Every per-document or per-page cause (not a PDF, damaged, encrypted, a page too large, a page
out of range, too many pages) is an ImageError for that item, never an exception of the batch.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from ..errors import ImageError, describe_source
from ..ops import DEFAULT_MAX_SOURCE_BYTES
from . import tiff_pages
from .files import read_image_file, too_big
from .inputs import Source

__all__ = ["Document", "DEFAULT_DPI", "DEFAULT_MAX_PAGES", "DEFAULT_PAGE_TIMEOUT_S",
           "MIN_BUDGET_DPI", "PDF_EXTRA", "document_pages",
           "render_page", "rendered", "page_hw", "whole_document_error"]

#: Render resolution when ``Document(dpi=None)``: 144 dpi, pdfium's scale 2 (1 PDF point = 2 px).
#: 10-pt body text is then ~20 px high, legible at the 14-16 px patches of the ViTs covered; a
#: US Letter page is 1224x1584 (1.9 MP), under the default pixel budget of most families, so
#: the family's own resize decides the final size; pdf2image's 200 dpi costs 1.9x the pixels to
#: render for pages most families then shrink anyway. Pass dpi= for small print (200-300).
DEFAULT_DPI = 144.0
#: Most pages one document may select when ``max_pages=None``: a hostile page tree can declare
#: millions; 1000 pages at Qwen2-VL's ~2.5k tokens a page is already 2.5M tokens.
DEFAULT_MAX_PAGES = 1000
#: Most seconds one page may take to render when ``Document(timeout_s=None)``: a dense
#: 300-dpi page renders in well under a second; a page that takes 30 s is hostile or broken.
DEFAULT_PAGE_TIMEOUT_S = 30.0
#: Lowest dpi a ``max_tokens`` budget may choose: below 72 dpi 10-pt text is under 10 px high.
MIN_BUDGET_DPI = 72.0
#: The pip extra that brings the renderer.
PDF_EXTRA = "vlmprep[pdf]"
_MAX_DPI = 2400.0  # beyond any scanner; a typo (dpi=14400) is refused, not rendered
_MAGIC = b"%PDF-"
_MAGIC_WINDOW = 1024  # PDF readers accept junk before the header within the first 1 KiB
# PDFium is not thread-safe (pypdfium2's docs): one lock around every call into it.
_PDFIUM_LOCK = threading.RLock()


@dataclass(frozen=True)
class Document:
    """One PDF and which of its pages become image items (public as ``vlmprep.Document``).

    ``source``: a path (str / PathLike) or the bytes of a PDF. ``pages``: 0-based page indices
    (a list, tuple or range of ints, in the order they become items; repeats allowed), None:
    every page. ``dpi``: render resolution (pdfium's ``scale = dpi / 72``), None:
    ``DEFAULT_DPI`` (144). ``max_pages``: the most pages the document may select, None:
    ``DEFAULT_MAX_PAGES``; more is refused (one ImageError for the document saying how many it
    has and how to select some), never cut silently. ``password``: for an encrypted PDF.
    ``timeout_s``: the most seconds one page may take to render, None: ``DEFAULT_PAGE_TIMEOUT_S``;
    a page past it is that page's ImageError. ``max_tokens``: the most visual tokens the selected
    pages may cost together, None: no budget; the plan lowers the dpi (not below
    ``MIN_BUDGET_DPI``), then keeps the leading pages that fit, and says which (``Plan.documents``).
    Invalid options are an ImageError (expected / got / fix).
    """

    source: Any
    pages: Any = None
    dpi: float | None = None
    max_pages: int | None = None
    password: str | None = None
    timeout_s: float | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        d = self.dpi
        if d is not None and (isinstance(d, bool) or not isinstance(d, (int, float))
                              or not math.isfinite(d) or not 0 < d <= _MAX_DPI):
            raise ImageError(f"Document(dpi=...): expected a number in (0, {_MAX_DPI:g}] or None, "
                             f"got {d!r}; pass e.g. dpi=144 (None: {DEFAULT_DPI:g})")
        _count_or_none("max_pages", self.max_pages, 50)
        t = self.timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not math.isfinite(t) or not t > 0):
            raise ImageError(f"Document(timeout_s=...): expected seconds > 0 or None, got {t!r}; "
                             f"pass e.g. timeout_s=30 (None: {DEFAULT_PAGE_TIMEOUT_S:g})")
        _count_or_none("max_tokens", self.max_tokens, 16384)
        if self.password is not None and not isinstance(self.password, str):
            raise ImageError(f"Document(password=...): expected a str or None, got "
                             f"{type(self.password).__name__}")
        if not _pages_ok(self.pages):
            raise ImageError(f"Document(pages=...): expected None (every page) or a list / range "
                             f"of 0-based page indices (ints >= 0), got {self.pages!r}; pass e.g. "
                             f"pages=[0, 2] or pages=range(10)")

    @property
    def scale(self) -> float:
        """Pixels per PDF point: ``dpi / 72`` (pypdfium2's ``render(scale=...)``)."""
        return (self.dpi if self.dpi is not None else DEFAULT_DPI) / 72.0


def _count_or_none(name: str, n: Any, example: int) -> None:
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ImageError(f"Document({name}=...): expected an int >= 1 or None, got {n!r}; pass "
                         f"e.g. {name}={example}")


def _pages_ok(p: Any) -> bool:
    if p is None:
        return True
    if isinstance(p, range):  # its ends only: range(10**9) is checked without walking it
        return len(p) == 0 or min(p[0], p[-1]) >= 0
    return isinstance(p, (list, tuple)) and all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in p)


@dataclass(frozen=True)
class _Page:
    """What ``render_page`` needs: the open document (shared by its pages) and one page; the
    PDF's bytes, password and time bound for the render process (``_Render``, shared too)."""

    pdf: Any
    page: int
    scale: float
    render: _Render | None = None


@dataclass(frozen=True)
class _Render:
    """One document's render inputs (``io.page_render.render``): its bytes, their digest (with
    the password: the worker's cache key), the password and ``Document.timeout_s``."""

    data: bytes = field(repr=False)
    key: str
    password: str | None
    timeout_s: float


# the render inputs of each document ``_open`` returned, by its PdfDocument (dropped with it)
_RENDER: weakref.WeakKeyDictionary[Any, _Render] = weakref.WeakKeyDictionary()


def page_hw(width_pt: float, height_pt: float, scale: float) -> tuple[int, int]:
    """``(H, W)`` pixels of a page of ``width_pt x height_pt`` points rendered at ``scale``:
    pypdfium2's own ``ceil(size * scale)`` (``PdfPage.render``), so the plan equals the render.

    Given a US Letter page (612 x 792 pt) at scale 2 -> (1584, 1224)."""
    return math.ceil(height_pt * scale), math.ceil(width_pt * scale)


def _pdfium() -> Any:
    try:
        import pypdfium2  # deferred: optional extra, and a native library to load
    except ImportError as e:
        raise ImageError(f"expected the PDF renderer pypdfium2 to read a Document, got it not "
                         f"installed ({e}); pip install '{PDF_EXTRA}' (or pip install "
                         f"pypdfium2)") from e
    return pypdfium2


def _bytes(source: Any, max_bytes: int) -> bytes:
    """The document's bytes, through the same checks as an image path (regular file, size
    bound)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if len(data) > max_bytes:
            raise too_big(len(data), max_bytes, "(a document)")
        return data
    if isinstance(source, (str, os.PathLike)):
        return read_image_file(source, max_bytes)
    raise ImageError(f"expected a PDF or a multi-page TIFF as a path or bytes, got "
                     f"{type(source).__name__}; pass Document('file.pdf') or Document(pdf_bytes)")


def _read(source: Any, max_bytes: int) -> bytes:
    """The PDF's bytes (``_bytes``), refused unless they hold ``%PDF-``."""
    data = _bytes(source, max_bytes)
    if _MAGIC not in data[:_MAGIC_WINDOW]:
        head = data[:8]
        raise ImageError(f"expected a PDF (a file starting with %PDF-) or a TIFF, got "
                         f"{len(data):,} bytes starting {head!r}; pass a PDF or a TIFF, or pass "
                         f"an image through images=")
    return data


def _open(doc: Document, max_bytes: int) -> Any:
    """The parsed PDF (its cross-reference table and trailer: no page content read)."""
    pdfium = _pdfium()
    data = _read(doc.source, max_bytes)
    try:
        with _PDFIUM_LOCK:
            pdf = pdfium.PdfDocument(data, password=doc.password)
    except pdfium.PdfiumError as e:
        raise _load_error(e, doc.password is not None) from e
    key = hashlib.sha256(data + b"\0" + (doc.password or "").encode()).hexdigest()
    timeout = doc.timeout_s if doc.timeout_s is not None else DEFAULT_PAGE_TIMEOUT_S
    _RENDER[pdf] = _Render(data, key, doc.password, float(timeout))
    return pdf


def _load_error(e: Any, has_password: bool) -> ImageError:
    import pypdfium2.raw as c
    code = getattr(e, "err_code", None)
    if code == c.FPDF_ERR_PASSWORD:
        got = "the wrong password" if has_password else "an encrypted PDF and no password"
        return ImageError(f"expected a PDF it can open, got {got}; pass "
                          f"Document(..., password='...') with the document's password")
    if code == c.FPDF_ERR_SECURITY:
        return ImageError("expected a PDF it can open, got an unsupported security handler; "
                          "decrypt it first (e.g. qpdf --decrypt)")
    return ImageError(f"expected a readable PDF, got one PDFium cannot load ({e}); the file is "
                      f"damaged or truncated: repair it (e.g. qpdf) or re-export it")


def _selected(doc: Document, count: int) -> list[int]:
    """The page indices the document selects (out-of-range ones too: each fails as its item)."""
    selected = range(count) if doc.pages is None else doc.pages
    limit = doc.max_pages if doc.max_pages is not None else DEFAULT_MAX_PAGES
    if len(selected) > limit:  # refused, not cut: which pages to drop is the caller's choice
        raise ImageError(f"expected at most {limit:,} pages per document (max_pages), got "
                         f"{len(selected):,} selected of {count:,}; select some with "
                         f"Document(..., pages=range({min(limit, count)})) or raise max_pages=")
    return list(selected)


def document_pages(doc: Document, d: int, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES
                   ) -> list[Source | ImageError]:
    """Document ``d`` of a call -> one entry per selected page, in its ``pages`` order: a
    ``Source`` of kind ``"page"`` with ``hw`` the page's size at the dpi (from the page tree's
    MediaBox/CropBox and /Rotate: no page parsed or rasterized), or the ImageError of that page.
    A cause of the whole document (not a PDF, damaged, encrypted, too many pages, no pypdfium2)
    is one ImageError entry. Errors name the page as ``document d page p`` (0-based)."""
    src = describe_source(doc.source)
    try:
        data = _bytes(doc.source, max_bytes)
        if tiff_pages.is_tiff(data):
            return _tiff_pages(doc, d, data, src)
        pdf = _open(dataclasses.replace(doc, source=data), max_bytes)
        with _PDFIUM_LOCK:
            count = len(pdf)
        pages = _selected(doc, count)
    except ImageError as e:
        return [e.at(source=f"document {d} ({src})")]
    return [_page_source(pdf, doc.scale, p, count, f"document {d} page {p} ({src})")
            for p in pages]


def _tiff_pages(doc: Document, d: int, data: bytes, src: str) -> list[Source | ImageError]:
    """``document_pages`` of a multi-page TIFF: each frame at its stored size (``dpi`` does
    not apply: refused), the IFD chain walked only as far as the pages asked need."""
    if doc.dpi is not None:
        raise ImageError(f"expected dpi=None for a TIFF (its pages are pixels, used at their "
                         f"stored size), got dpi={doc.dpi:g}; leave dpi out")
    limit = doc.max_pages if doc.max_pages is not None else DEFAULT_MAX_PAGES
    need = limit + 1 if doc.pages is None else (max(doc.pages, default=-1) + 1)
    sizes, more = tiff_pages.frame_sizes(data, min(need, tiff_pages.MAX_TIFF_FRAMES))
    if doc.pages is None and more:  # refused, not cut, as a PDF of too many pages
        raise ImageError(f"expected at most {limit:,} pages per document (max_pages), got a "
                         f"TIFF of more than {limit:,} frames; select some with "
                         f"Document(..., pages=range({limit})) or raise max_pages=")
    out: list[Source | ImageError] = []
    for p in _selected(doc, len(sizes)):
        desc = f"document {d} page {p} ({src})"
        if p >= len(sizes):
            n = f"{len(sizes)}-page" if not more else f"over-{tiff_pages.MAX_TIFF_FRAMES:,}-frame"
            out.append(ImageError(f"expected a page index in 0..{len(sizes) - 1} (0-based), got "
                                  f"page {p} of a {n} TIFF; fix Document(pages=...)", source=desc))
        else:
            out.append(Source("page", tiff_pages.TiffPage(data, p), sizes[p], None, desc))
    return out


def rendered(src: Source) -> Source:
    """A ``"page"`` Source -> the image Source the page becomes: a PDF page rendered
    (``render_page``) as an ``"array"``; a TIFF frame decoded (``tiff_pages.render_frame``) as
    the ``"pil"`` image it is. ImageError when the page cannot be made."""
    if isinstance(src.item, tiff_pages.TiffPage):
        frame = tiff_pages.render_frame(src.item)
        if frame.size != (src.hw[1], src.hw[0]):
            raise ImageError(f"expected the frame at its planned {src.hw[0]}x{src.hw[1]} (HxW), "
                             f"got {frame.size[1]}x{frame.size[0]}; report this TIFF")
        return Source("pil", frame, src.hw, None, src.desc)
    return Source("array", render_page(src), src.hw, None, src.desc)


def whole_document_error(errors: list[ImageError | None]) -> bool:
    """Whether the errors of one document's entries (``document_pages``, or its plans' errors,
    of a call with that one document) are one error of the whole document, no page known:
    ``document_pages`` names a page's own error ``document 0 page P``, the document's
    ``document 0``."""
    err = errors[0] if len(errors) == 1 else None
    return err is not None and not (err.source or "").startswith("document 0 page ")


def _page_source(pdf: Any, scale: float, p: int, count: int, desc: str) -> Source | ImageError:
    if p >= count:
        return ImageError(f"expected a page index in 0..{count - 1} (0-based), got page {p} of a "
                          f"{count}-page document; fix Document(pages=...)", source=desc)
    try:
        with _PDFIUM_LOCK:
            w, h = pdf.get_page_size(p)
    except Exception as e:  # noqa: BLE001 (a damaged page tree: this page's item fails, not the batch)
        return ImageError(f"expected a page with a readable size, got {type(e).__name__} ({e}); "
                          f"repair the PDF", source=desc)
    if not (math.isfinite(w) and math.isfinite(h)) or w <= 0 or h <= 0:
        return ImageError(f"expected a page of positive size, got {w!r} x {h!r} points; repair "
                          f"the PDF", source=desc)
    # page sizes beyond max_source_pixels are refused by the plan from this hw, before any render
    return Source("page", _Page(pdf, p, scale, _RENDER.get(pdf)), page_hw(w, h, scale), None,
                  desc)


def render_page(src: Source) -> Any:
    """A ``"page"`` Source -> ``(H, W, 3)`` uint8 RGB numpy array, C-contiguous: pypdfium2's
    ``page.render(scale=dpi/72, rev_byteorder=True).to_numpy()`` (white background, annotations
    drawn), bit for bit, rendered in a worker process (``io.page_render``: bounded in time by
    ``Document.timeout_s`` and in memory by the planned size). ImageError naming the page when
    PDFium fails, the render runs past the time bound or its memory bound, the worker dies, or
    the rendered size is not the planned ``hw`` (the plan must equal the pixels)."""
    from . import page_render  # deferred: starts worker processes on first use
    ref: _Page = src.item
    r = ref.render
    if r is None:  # a _Page made without _open: the document's bytes are not known
        raise ImageError("expected a page from document_pages, got one without its PDF's bytes; "
                         "plan documents through Processor.prepare", source=src.desc)
    try:
        out = page_render.render(r.data, r.key, r.password, ref.page, ref.scale,
                                 (src.hw[0], src.hw[1]), r.timeout_s)
    except ImageError as e:
        raise e.at(source=src.desc) from (e.__cause__ or e)
    if out.shape[:2] != tuple(src.hw):
        raise ImageError(f"expected the page rendered at the planned {src.hw[0]}x{src.hw[1]} "
                         f"(HxW), got {out.shape[0]}x{out.shape[1]}; report this PDF",
                         source=src.desc)
    return out
