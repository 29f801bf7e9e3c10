"""Small PDFs for the document tests (tests/io, tests/batch), made with pypdfium2's own API: one
page per ``(width, height)`` in points with a random RGB image drawn over part of it (so that
resampling has edges to get wrong), plus ``render``, pypdfium2's own pixels (the oracle).
Importing this needs pypdfium2 (the extra ``vlmprep[pdf]``): guard with ``pytest.importorskip``."""
from __future__ import annotations

import io

import numpy as np
import pypdfium2 as pdfium

from vlmprep.io.document import DEFAULT_DPI


def make_pdf(sizes_pt, rotate=None, seed=0) -> bytes:
    """A PDF with one page per ``(width, height)`` in points; ``rotate``: {page: degrees}."""
    import PIL.Image
    rng = np.random.default_rng(seed)
    doc = pdfium.PdfDocument.new()
    for k, (w, h) in enumerate(sizes_pt):
        page = doc.new_page(w, h)
        img = pdfium.PdfImage.new(doc)
        arr = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
        img.set_bitmap(pdfium.PdfBitmap.from_pil(PIL.Image.fromarray(arr)))
        img.set_matrix(pdfium.PdfMatrix().scale(w * 0.6, h * 0.5).translate(w * 0.1, h * 0.2))
        page.insert_obj(img)
        page.gen_content()
        if rotate and k in rotate:
            page.set_rotation(rotate[k])
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def render(data: bytes, page: int, dpi: float = DEFAULT_DPI) -> np.ndarray:
    """pypdfium2's own pixels of one page, RGB."""
    doc = pdfium.PdfDocument(data)
    return np.ascontiguousarray(doc[page].render(scale=dpi / 72, rev_byteorder=True).to_numpy())
