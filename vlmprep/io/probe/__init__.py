"""Header-only image probe: format, stored size, EXIF orientation and colour layout.

``probe(x)`` answers "what is this file and how big will it be once decoded and
oriented?" without decoding a pixel, so a server can size a token budget or
reject an input before paying for a decode.  It is pure Python (``struct``,
``re``, ``zlib``): no PIL, numpy or torch.

What is read.  Only headers: the JPEG segment list up to the first scan, PNG
chunks up to the first IDAT, the WebP/TIFF chunk or tag tables, the GIF blocks
up to the first image descriptor.  Segments that are not needed (ICC profiles,
text, image data) are skipped by their declared length, never read.  File and
path inputs are read lazily in 8 KiB blocks, so a typical JPEG/PNG costs one
read of 8 KiB whatever the file size.  Every loop is bounded.

Agreement with Pillow.  For well-formed files Pillow opens, ``(width, height)``
equals ``Image.open(f).size`` and ``orientation`` equals
``img.getexif().get(0x0112, 1)`` (values outside 1..8 read as 1, as
``ImageOps.exif_transpose`` does), with these documented exceptions:

* TIFF with orientation 5..8: Pillow applies the orientation while loading, so
  its ``size`` is already swapped; ``probe`` reports the stored size (Pillow's
  tile size) and ``size_hw`` agrees with ``exif_transpose`` as for every format.
* PNG ``eXIf`` chunks after the image data are not seen (reaching them means
  walking past the pixel data; writers put eXIf before IDAT).
* A multi-segment JPEG EXIF block is read from its first APP1 segment only.

Decisions on damaged metadata.  A broken EXIF block inside a JPEG/PNG/WebP
(bad TIFF header, IFD offset outside the block, entries cut short) never fails
the probe: the orientation falls back to XMP ``tiff:Orientation`` like Pillow,
else 1.  Pillow does the same for an out-of-range IFD offset (it warns and sees
no tags).  In a TIFF *file* the IFD is the image structure, so a bad IFD offset
there raises :class:`~vlmprep.errors.ImageError`.  A file truncated *after* its
size is known is not an error here (decoding will catch it); anything that
prevents knowing the size is.

Layout.  This file dispatches on the signature; ``reader.py`` gives random access to bytes or
a file (reading only the blocks asked for, at most ``reader.MAX_READ``); ``result.py`` holds
:class:`ProbeResult`; ``common.py`` the shared limits and messages; ``exif.py`` the TIFF
structures of TIFF files and EXIF blocks; one module per format (``jpeg``, ``png``, ``webp``,
``bmp``, ``gif``, ``tiff``) with its parser ``probe_<format>(reader) -> ProbeResult``.
"""
from __future__ import annotations

from vlmprep.errors import ImageError, describe_source

from .bmp import probe_bmp
from .common import TRUNCATED
from .gif import probe_gif
from .jpeg import jpeg_frame, probe_jpeg
from .png import probe_png
from .reader import open_source
from .result import ProbeResult
from .tiff import probe_tiff
from .webp import probe_webp

__all__ = ["ProbeResult", "jpeg_frame", "probe"]


def probe(x) -> ProbeResult:
    """Read the header of an encoded image without decoding it.

    Args:
        x: the encoded file as ``bytes``/``bytearray``/``memoryview``, a path
            (``str`` or ``os.PathLike``), or a binary file object with
            ``read``/``seek``; a file object is read from its current position,
            which is restored afterwards.

    Returns:
        A :class:`ProbeResult`.

    Raises:
        ImageError: the input is empty, unreadable, not a supported format, or
            damaged before its size is known (see the module docstring).
    """
    source = describe_source(x)
    try:
        data = open_source(x)
        try:
            return _probe(data)
        finally:
            data.close()
    except ImageError as err:
        raise err.at(source=source) from err.__cause__


_SIGNATURES = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"II\x00*", "TIFF"),  # byte-swapped magic: invalid, but Pillow opens it
    (b"MM*\x00", "TIFF"),
    (b"II+\x00", "TIFF"),  # BigTIFF
    (b"MM\x00+", "TIFF"),
)
_PARSERS = {"JPEG": probe_jpeg, "PNG": probe_png, "GIF": probe_gif, "BMP": probe_bmp, "TIFF": probe_tiff}


def _probe(d) -> ProbeResult:
    head = d.at(0, 16)
    if not head:
        raise ImageError(
            "expected an encoded image file; got 0 bytes; check that the download or read succeeded"
        )
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return probe_webp(d)
    for magic, name in _SIGNATURES:
        if head.startswith(magic):
            return _PARSERS[name](d)
    cut: str | None  # the format whose signature the data ends inside
    if len(head) < 12 and (b"RIFF".startswith(head) or head.startswith(b"RIFF")):
        cut = "WebP"
    else:
        cut = next((n for m, n in _SIGNATURES if m.startswith(head)), None)
    if cut is not None:
        raise ImageError(
            f"expected a complete {cut} file; the data ends after {len(head)} bytes, "
            f"inside the {cut} signature; {TRUNCATED}"
        )
    raise ImageError(
        f"expected a JPEG/PNG/WebP/BMP/GIF/TIFF file; got {_looks_like(head)}, whose first bytes "
        "match none of them; pass an encoded image file or a decoded array"
    )


# Other formats told apart in the message above: (signature, offset, what it is).
_OTHER = (
    (b"\x1f\x8b", 0, "gzip-compressed data"),
    (b"PK\x03\x04", 0, "a ZIP archive"),
    (b"%PDF", 0, "a PDF document"),
    (b"ftyp", 4, "an MP4/MOV video, not an image"),
    (b"\x1aE\xdf\xa3", 0, "a Matroska/WebM video, not an image"),
)


def _looks_like(head: bytes) -> str:
    """What data that is no image looks like, in words, never quoting its bytes: the message
    may be stored (a batch job's error rows) and the data may be a file that must not leak."""
    for magic, at, what in _OTHER:
        if head[at:at + len(magic)] == magic:
            return what
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:  # text whose last character is cut at the 16th byte is text
        text = head[:e.start].decode("utf-8") if e.start >= len(head) - 3 else ""
    if text and all(c.isprintable() or c in "\t\r\n" for c in text):
        lead = text.lstrip()[:1]
        if lead == "<":
            return "text that starts like HTML or XML (a web page or an error page?)"
        if lead in ("{", "["):
            return "text that starts like JSON"
        return "text"
    return "binary data of no known image format"
