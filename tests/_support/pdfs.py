"""Small PDFs for the document tests (tests/io, tests/batch), made with pypdfium2's own API: one
page per ``(width, height)`` in points with a random RGB image drawn over part of it (so that
resampling has edges to get wrong), plus ``render``, pypdfium2's own pixels (the oracle), and
hand-written hostile PDFs as bytes (``build_pdf`` and the builders after it: damaged xref, page
tree loop, a render that does not finish, an image bomb, a form bomb, JavaScript, encryption).
Importing this needs pypdfium2 (the extra ``vlmprep[pdf]``): guard with ``pytest.importorskip``."""
from __future__ import annotations

import hashlib
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


# -- hand-written PDFs (tests/io/test_hostile_pdfs.py, fuzz seeds): bytes as a hostile file has
# them, not what a writer would make --------------------------------------------------------
def build_pdf(objects: list[bytes], trailer: bytes = b"", xref_shift: int = 0,
              cut_xref: int | None = None) -> bytes:
    """A PDF of ``objects`` (object ``k + 1`` is ``objects[k]``, a dictionary, or a dictionary
    and its stream as ``b"<<...>>\\nstream\\n...\\nendstream"``), the catalog being object 1;
    ``trailer``: more trailer keys. Damage on request: ``xref_shift`` added to every xref offset
    (all wrong), ``cut_xref``: the file cut that many bytes into its xref table (no trailer)."""
    out, offs = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"), []
    for n, body in enumerate(objects, 1):
        offs.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % (x + xref_shift) for x in offs)
    if cut_xref is not None:
        return bytes(out[:xref + cut_xref])
    out += (b"trailer\n<< /Size %d /Root 1 0 R %s>>\nstartxref\n%d\n%%%%EOF\n"
            % (len(objects) + 1, trailer, xref))
    return bytes(out)


def stream(dictionary: bytes, data: bytes) -> bytes:
    """An object body of ``dictionary`` (without its ``<< >>``) and its stream ``data``."""
    return b"<< %s /Length %d >>\nstream\n" % (dictionary, len(data)) + data + b"\nendstream"


def pages_pdf(n: int, content: bytes = b"0 0 1 rg 10 10 50 50 re f", size=(200, 100)) -> bytes:
    """``n`` pages of ``size`` points (inherited from the page tree), all drawing one shared
    content stream (a blue square): n page objects of ~60 bytes, no writer needed."""
    kids = b" ".join(b"%d 0 R" % (k + 4) for k in range(n))
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [%s] /Count %d /MediaBox [0 0 %d %d] >>" % (kids, n, *size),
            stream(b"", content)]
    objs += [b"<< /Type /Page /Parent 2 0 R /Contents 3 0 R >>"] * n
    return build_pdf(objs)


def page_tree_loop_pdf() -> bytes:
    """A page tree whose second kid is an intermediate node whose /Kids point back at the root
    (an ancestor): a walk that follows /Kids never ends; /Count claims 3 pages."""
    return build_pdf([b"<< /Type /Catalog /Pages 2 0 R >>",
                      b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 3 /MediaBox [0 0 200 100] >>",
                      b"<< /Type /Page /Parent 2 0 R >>",
                      b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 2 >>"])


def form_bomb_pdf(levels: int = 32) -> bytes:
    """One 100x100-pt page whose content draws Form XObject 0, which draws form 1 twice, ...,
    form ``levels - 1`` fills a tiny square: 2^levels squares to parse and draw from ~2 KB
    (each form is parsed again at each use), a render that does not finish in any useful time."""
    first = 4  # objects 1-3: catalog, pages, page
    forms = []
    for k in range(levels):
        if k == levels - 1:
            body, res = b"0 0 1 1 re f", b""
        else:
            body = b"/F Do /F Do"
            res = b"/Resources << /XObject << /F %d 0 R >> >>" % (first + k + 1)
        forms.append(stream(b"/Type /XObject /Subtype /Form /BBox [0 0 100 100] " + res, body))
    page_content = stream(b"", b"/F Do")
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 100 100] /Contents %d 0 R "
            b"/Resources << /XObject << /F %d 0 R >> >> >>" % (first + levels, first),
            *forms, page_content]
    return build_pdf(objs)


def huge_image_pdf(side: int = 60000) -> bytes:
    """One 100x100-pt page drawing an RGB image XObject that declares ``side`` x ``side`` pixels
    (10.8 GB decoded at 60000) from a few KB of Flate data (zeros)."""
    import zlib
    img = stream(b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB "
                 b"/BitsPerComponent 8 /Filter /FlateDecode" % (side, side),
                 zlib.compress(bytes(1 << 20), 9))
    return build_pdf([b"<< /Type /Catalog /Pages 2 0 R >>",
                      b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                      b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 100 100] /Contents 5 0 R "
                      b"/Resources << /XObject << /I 4 0 R >> >> >>",
                      img, stream(b"", b"q 100 0 0 100 0 0 cm /I Do Q")])


def javascript_annotations_pdf() -> bytes:
    """One 200x200-pt page: an /OpenAction JavaScript and a document-level script (never run by
    a render), a Square annotation with its own appearance stream, a Text (note) annotation and
    a Link, over a page content of two rectangles."""
    js = b"<< /S /JavaScript /JS (app.alert('x'); this.print();) >>"
    return build_pdf([
        b"<< /Type /Catalog /Pages 2 0 R /OpenAction 5 0 R /Names << /JavaScript << /Names "
        b"[(a) 5 0 R] >> >> >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R "
        b"/Annots [6 0 R 8 0 R 9 0 R] /AA << /O 5 0 R >> >>",
        stream(b"", b"1 0 0 rg 20 20 80 60 re f 0 0.6 0 rg 90 110 70 50 re f"),
        js,
        b"<< /Type /Annot /Subtype /Square /Rect [40 40 160 160] /C [0 0 1] /BS << /W 6 >> "
        b"/AP << /N 7 0 R >> /F 4 >>",
        stream(b"/Type /XObject /Subtype /Form /BBox [40 40 160 160]",
               b"0 0 1 RG 6 w 43 43 114 114 re S"),
        b"<< /Type /Annot /Subtype /Text /Rect [150 20 170 40] /Contents (note) /Open false "
        b"/F 4 >>",
        b"<< /Type /Annot /Subtype /Link /Rect [10 170 60 190] /A 5 0 R /Border [0 0 2] >>"])


def slow_shading_pdf(ops: int = 100_000, side_pt: int = 200) -> bytes:
    """One ``side_pt``-square page filled by a function-based shading (type 1) whose PostScript
    calculator function runs ``ops`` no-op pairs per pixel: PDFium evaluates it at every device
    pixel (~0.3 us an op), so at 144 dpi the default page takes ~15 minutes of CPU and no memory
    beyond its bitmap; the program is ~4 KB Flate-compressed."""
    import zlib
    prog = b"{ " + b"2 copy pop pop " * ops + b"pop pop 0.2 0.4 0.6 }"
    return build_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents 4 0 R "
        b"/Resources << /Shading << /S 5 0 R >> >> >>" % (side_pt, side_pt),
        stream(b"", b"/S sh"),
        b"<< /ShadingType 1 /ColorSpace /DeviceRGB /Domain [0 1 0 1] /Matrix [%d 0 0 %d 0 0] "
        b"/Function 6 0 R >>" % (side_pt, side_pt),
        stream(b"/FunctionType 4 /Domain [0 1 0 1] /Range [0 1 0 1 0 1] /Filter /FlateDecode",
               zlib.compress(prog, 9))])


def rc4(key: bytes, data: bytes) -> bytes:
    s, j = list(range(256)), 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out, i, j = bytearray(), 0, 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")


def encrypted_pdf(user: bytes, owner: bytes = b"owner") -> bytes:
    """A one-page PDF (612 x 792 pt, no content: nothing to encrypt) under the Standard security
    handler R2 / RC4-40 with user password ``user`` (PDF 1.7 section 7.6.3, algorithms 2-4)."""
    fid = b"0123456789abcdef"
    o = rc4(hashlib.md5((owner + PAD)[:32]).digest()[:5], (user + PAD)[:32])
    p = (-4).to_bytes(4, "little", signed=True)
    key = hashlib.md5((user + PAD)[:32] + o + p + fid).digest()[:5]
    u = rc4(key, PAD)
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
            b"<< /Filter /Standard /V 1 /R 2 /O <" + o.hex().encode() + b"> /U <" + u.hex().encode()
            + b"> /P -4 >>"]
    out, offs = bytearray(b"%PDF-1.4\n"), []
    for n, body in enumerate(objs, 1):
        offs.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % x for x in offs)
    out += (b"trailer\n<< /Size %d /Root 1 0 R /Encrypt 4 0 R /ID [<%s> <%s>] >>\nstartxref\n%d\n%%%%EOF\n"
            % (len(objs) + 1, fid.hex().encode(), fid.hex().encode(), xref))
    return bytes(out)
