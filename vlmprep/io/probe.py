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
"""
from __future__ import annotations

import os
import re
import struct
import sys
import zlib
from dataclasses import dataclass

from vlmprep.errors import ImageError, describe_source

__all__ = ["ProbeResult", "probe"]

_BLOCK = 8192  # read granularity for files; one block holds a typical header
# Bytes one probe may read from a file (each block is kept): a header walk touches a block per
# segment, so 65,536 long JPEG segments could otherwise read and hold 512 MiB.
_MAX_READ = 32 << 20
_MAX_SEGMENTS = 1024  # PNG or WebP chunks walked before giving up
# JPEG headers are walked to the frame header (probe) or first scan (jpeg_frame) within a work
# budget, not a segment count that rejects valid files: segments cost one step each, and all the
# junk between them together at most _MAX_JUNK bytes (Pillow skips junk one byte at a time, so
# this also bounds what a decoder given the file spends before the image data).
_MAX_JPEG_SEGMENTS = 65536
_MAX_JUNK = 65536  # bytes of non-marker junk skipped between JPEG segments, in all
_MAX_GIF_STEPS = 10000  # GIF extension sub-blocks walked before the first frame
_MAX_TEXT = 1 << 20  # metadata texts (XMP, EXIF in PNG text chunks) beyond this are ignored
# All PNG text chunks of one probe together: bytes read plus bytes inflated (Pillow allows 64 MiB
# in all; the probe only needs the orientation, and without a total 1,000 chunks inflate 1 GiB).
_MAX_TEXT_TOTAL = 4 << 20
_MAX_TIFF_VALUES = 64  # values read per TIFF tag; we only need a handful

_TRUNCATED = "the file is truncated or corrupt; re-download it or re-encode it"
_CORRUPT = "the file is corrupt; re-encode it"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What ``probe`` learns from a file header.

    Attributes:
        format: ``"jpeg"``, ``"png"``, ``"webp"``, ``"bmp"``, ``"gif"`` or ``"tiff"``.
        width, height: pixel size as stored in the file, before orientation.
        orientation: EXIF orientation 1..8 (1 when absent or invalid).
        channels: samples per decoded pixel, alpha included when ``has_alpha``:
            1 gray, 2 gray+alpha, 3 RGB/YCbCr/Lab, 4 RGBA or CMYK/YCCK.  Palette
            images count their palette entries (3, or 4 with transparency).
        bit_depth: bits per stored sample (palette images: bits per index);
            e.g. 8, 16 for 16-bit PNG/TIFF, 1/2/4 for low-depth PNG/BMP,
            12 for 12-bit JPEG.  16/24/32-bit BMPs and GIFs report 8.
        mode_hint: the Pillow mode the file opens as (``"RGB"``, ``"RGBA"``,
            ``"L"``, ``"LA"``, ``"P"``, ``"1"``, ``"I;16"``, ``"CMYK"``...),
            except ``"YCCK"`` for Adobe YCCK JPEGs (Pillow says ``"CMYK"``).
        has_alpha: an alpha channel or a transparency key is declared before the
            image data: PNG alpha or tRNS (a palette tRNS only if some entry is
            not opaque), GIF transparency of the first frame, WebP alpha as
            libwebp reports it, BMP alpha bitfields, TIFF alpha extra samples.
        animated: more than one frame, when known cheaply: APNG (acTL), WebP
            (two ANMF chunks), multi-page TIFF.  Always False for GIF (counting
            GIF frames means reading all image data) and for JPEG/BMP.
        progressive: JPEG progressive frame (SOF2/6/10/14); False otherwise.
    """

    format: str
    width: int
    height: int
    orientation: int
    channels: int
    bit_depth: int
    mode_hint: str
    has_alpha: bool
    animated: bool
    progressive: bool

    @property
    def size_hw(self) -> tuple[int, int]:
        """``(height, width)`` after applying the orientation (sides swap for 5..8)."""
        if self.orientation >= 5:
            return self.width, self.height
        return self.height, self.width

    @property
    def pixels(self) -> int:
        """``width * height``."""
        return self.width * self.height


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
        data = _open(x)
        try:
            return _probe(data)
        finally:
            data.close()
    except ImageError as err:
        raise err.at(source=source) from err.__cause__


# --------------------------------------------------------------------------
# Input access


class _Bytes:
    """Random access to an in-memory file; ``at`` returns at most ``n`` bytes."""

    def __init__(self, buf: bytes | memoryview):
        self._buf = buf
        self.size = len(buf)

    def at(self, off: int, n: int) -> bytes:
        return bytes(self._buf[off:off + n]) if off >= 0 else b""

    def close(self) -> None:
        pass


class _File:
    """Random access to a seekable file that reads only the blocks asked for.

    Blocks are cached, so re-reading a header is free, and a skipped segment is
    never read.  Offsets are relative to ``start``; ``size`` counts from there.
    """

    def __init__(self, fp, start: int, size: int, owned: bool):
        self._fp = fp
        self._start = start
        self._owned = owned
        self._blocks: dict[int, bytes] = {}
        self._read_total = 0  # bytes read so far (bounded by _MAX_READ)
        self.size = size

    def at(self, off: int, n: int) -> bytes:
        n = min(n, self.size - off)
        if off < 0 or n <= 0:
            return b""
        first, last = off // _BLOCK, (off + n - 1) // _BLOCK
        i = first
        while i <= last:  # fetch each run of missing blocks with one read
            if i in self._blocks:
                i += 1
                continue
            j = i
            while j < last and j + 1 not in self._blocks:
                j += 1
            raw = self._read(i * _BLOCK, (j - i + 1) * _BLOCK)
            for k in range(i, j + 1):
                self._blocks[k] = raw[(k - i) * _BLOCK:(k - i + 1) * _BLOCK]
            i = j + 1
        lo = off - first * _BLOCK
        if first == last:
            return self._blocks[first][lo:lo + n]
        return b"".join(self._blocks[k] for k in range(first, last + 1))[lo:lo + n]

    def _read(self, off: int, n: int) -> bytes:
        self._read_total += n
        if self._read_total > _MAX_READ:
            raise ImageError(
                f"expected the image headers within {_MAX_READ:,} bytes read; the header walk "
                f"needs more (at byte {off:,}); the file is corrupt or hostile: re-encode it"
            )
        parts, chunk = [], b""
        try:
            self._fp.seek(self._start + off)
            while n > 0:  # file objects may return short reads before EOF
                chunk = self._fp.read(n)
                if not chunk or not isinstance(chunk, (bytes, bytearray, memoryview)):
                    break
                parts.append(bytes(chunk))
                n -= len(chunk)
        except (OSError, ValueError) as exc:
            raise ImageError(
                f"expected a readable file; reading it failed ({exc}); check the file or pass its bytes"
            ) from exc
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise ImageError(
                f"expected a binary file object; read() returned {type(chunk).__name__}; "
                "open the file in binary mode ('rb')"
            )
        return b"".join(parts)

    def close(self) -> None:
        try:
            if self._owned:
                self._fp.close()
            else:
                self._fp.seek(self._start)
        except (OSError, ValueError) as exc:
            raise ImageError(
                f"expected a seekable file; restoring its position failed ({exc}); pass the bytes instead"
            ) from exc


def _open(x) -> _Bytes | _File:
    if isinstance(x, bytes):
        return _Bytes(x)
    if isinstance(x, (bytearray, memoryview)):
        try:
            mv = memoryview(x)
            return _Bytes(mv.cast("B") if mv.c_contiguous else mv.tobytes())
        except (ValueError, TypeError) as exc:  # released view, odd formats
            raise ImageError(f"expected a readable byte buffer; {exc}; pass bytes") from exc
    if isinstance(x, (str, os.PathLike)):
        return _open_path(x)
    if callable(getattr(x, "read", None)) and callable(getattr(x, "seek", None)):
        try:
            start = x.seek(0, os.SEEK_CUR)
            end = x.seek(0, os.SEEK_END)
            x.seek(start)
        except (OSError, ValueError, TypeError) as exc:
            raise ImageError(
                f"expected a seekable binary file object; seek() failed ({exc}); pass the bytes instead"
            ) from exc
        if not isinstance(start, int) or not isinstance(end, int):
            raise ImageError(
                "expected a file object whose seek() returns the position; it returned "
                f"{type(start).__name__}; pass the bytes instead"
            )
        return _File(x, start, max(end - start, 0), owned=False)
    raise ImageError(
        f"expected bytes, a path or a binary file object; got {type(x).__name__}; "
        "probe reads encoded files (a decoded array or PIL image has no header to probe)"
    )


def _open_path(path) -> _File:
    # Regular files only, opened without blocking: a FIFO or device at the path would make
    # open() or read() wait forever. probe's reads are bounded, so no size limit here.
    from .inputs import open_image_file
    fp = open_image_file(path, sys.maxsize)
    try:
        size = os.fstat(fp.fileno()).st_size
    except OSError as exc:
        fp.close()
        raise ImageError(f"expected a readable image file; stat failed ({exc}); check the path") from exc
    return _File(fp, 0, size, owned=True)


# --------------------------------------------------------------------------
# Dispatch

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


def _probe(d) -> ProbeResult:
    head = d.at(0, 16)
    if not head:
        raise ImageError(
            "expected an encoded image file; got 0 bytes; check that the download or read succeeded"
        )
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp(d)
    for magic, name in _SIGNATURES:
        if head.startswith(magic):
            return _PARSERS[name](d)
    if len(head) < 12 and (b"RIFF".startswith(head) or head.startswith(b"RIFF")):
        name = "WebP"
    else:
        name = next((n for m, n in _SIGNATURES if m.startswith(head)), None)
    if name is not None:
        raise ImageError(
            f"expected a complete {name} file; the data ends after {len(head)} bytes, "
            f"inside the {name} signature; {_TRUNCATED}"
        )
    raise ImageError(
        f"expected a JPEG/PNG/WebP/BMP/GIF/TIFF file; the first bytes {head[:8]!r} match none of "
        "them; pass an encoded image file or a decoded array"
    )


def _need(d, off: int, n: int, what: str, fmt: str) -> bytes:
    """``n`` bytes at ``off`` or an ImageError naming the structure that is cut short."""
    b = d.at(off, n)
    if len(b) < n:
        raise ImageError(
            f"expected the {fmt} {what} at bytes {off}..{off + n}; the data ends at byte "
            f"{d.size}; {_TRUNCATED}"
        )
    return b


def _check_size(fmt: str, width: int, height: int, where: str) -> None:
    if width <= 0 or height <= 0:
        raise ImageError(
            f"expected a positive image size in the {fmt} {where}; found {width}x{height} "
            f"(width x height); {_CORRUPT}"
        )


def _norm_orientation(value: int | None) -> int:
    return value if value is not None and 1 <= value <= 8 else 1


# --------------------------------------------------------------------------
# TIFF structures (TIFF files and EXIF blocks)

_TIFF_TYPE_SIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4, 16: 8}
_TIFF_INT_FMT = {3: "H", 4: "L", 6: "b", 8: "h", 9: "l", 13: "L", 16: "Q"}
_TIFF_BYTES_TYPES = (1, 2, 7)
_TAG_ORIENTATION = 274
_TAG_XMP = 700
_XMP_ORIENTATION = re.compile(rb'tiff:Orientation(="|>)([0-9])')  # Pillow's pattern


def _tiff_header(d, base: int, limit: int, allow_big: bool) -> tuple[str, bool, int]:
    """Parse a TIFF header at ``base``; return ``(endian, bigtiff, first IFD offset)``.

    The IFD offset is relative to ``base``.  Raises ImageError when the header is
    invalid or the IFD lies outside ``[base, limit)``.
    """
    h = d.at(base, min(16, limit - base))
    if len(h) < 8:
        raise ImageError(f"expected an 8-byte TIFF header; found {len(h)} bytes; {_TRUNCATED}")
    endian = {b"II": "<", b"MM": ">"}.get(h[:2])
    big = h[2:4] == (b"+\x00" if endian == "<" else b"\x00+")
    if endian is None or not (big and allow_big or h[2:4] in (b"*\x00", b"\x00*")):
        raise ImageError(
            f"expected a TIFF header (b'II*\\x00' or b'MM\\x00*'); found {h[:4]!r}; {_CORRUPT}"
        )
    if big:
        if len(h) < 16:
            raise ImageError(f"expected a 16-byte BigTIFF header; found {len(h)} bytes; {_TRUNCATED}")
        ifd = struct.unpack_from(endian + "Q", h, 8)[0]
    else:
        ifd = struct.unpack_from(endian + "L", h, 4)[0]
    if base + ifd + (8 if big else 2) > limit:
        raise ImageError(
            f"expected the first IFD inside the {limit - base}-byte TIFF data; its offset is {ifd}; "
            f"{_TRUNCATED}"
        )
    return endian, big, ifd


def _tiff_ifd(d, base: int, limit: int, endian: str, big: bool, ifd: int, wanted: frozenset):
    """Read the ``wanted`` tags of the IFD at ``base + ifd``, as Pillow would see them.

    Returns ``(tags, next_ifd)``.  ``tags`` maps a tag to a tuple of ints (integer
    types), bytes (byte/ASCII/undefined types), or None (another type).  Pillow's
    rules, which decide what a damaged IFD still yields: the first occurrence of a
    tag wins; entries of unknown type are skipped; a tag is skipped once the
    out-of-line data so far exceeds the stream; a value running past the end of
    the stream, or a table cut short, ends the IFD with the tags read so far.
    ``next_ifd`` is 0 when absent or unreadable.
    """
    count_size, entry_size, inline = (8, 20, 8) if big else (2, 12, 4)
    offset_fmt = endian + ("Q" if big else "L")
    start = base + ifd
    raw_count = d.at(start, count_size)
    if len(raw_count) < count_size:
        return {}, 0
    count = struct.unpack(endian + ("Q" if big else "H"), raw_count)[0]
    n = min(count, 0xFFFF, max(limit - start - count_size, 0) // entry_size)  # BigTIFF counts are u64
    table = d.at(start + count_size, n * entry_size)
    entry = struct.Struct(endian + ("HHQ8s" if big else "HHL4s"))
    tags: dict[int, tuple[int, ...] | bytes | None] = {}
    loaded = set()
    out_of_line = 0
    read = len(table) // entry_size
    for i in range(read):
        tag, typ, num, value = entry.unpack_from(table, i * entry_size)
        if tag in loaded or typ not in _TIFF_TYPE_SIZE:
            continue
        unit = _TIFF_TYPE_SIZE[typ]
        size = num * unit
        where = None
        if size > inline:
            where = base + struct.unpack(offset_fmt, value)[0]
            out_of_line += size
            if out_of_line > limit - base:
                continue
            if where + size > limit:
                return tags, 0
        if size == 0:
            continue
        loaded.add(tag)
        if tag not in wanted:
            continue
        if typ in _TIFF_INT_FMT:
            keep = min(num, _MAX_TIFF_VALUES)
            raw = value if where is None else d.at(where, keep * unit)
            tags[tag] = struct.unpack_from(f"{endian}{keep}{_TIFF_INT_FMT[typ]}", raw)
        elif typ in _TIFF_BYTES_TYPES:
            if size <= _MAX_TEXT:
                tags[tag] = value[:size] if where is None else d.at(where, size)
        else:
            tags[tag] = None
    next_ifd = 0
    if read == count:
        raw = d.at(start + count_size + read * entry_size, 8 if big else 4)
        if len(raw) == (8 if big else 4):
            next_ifd = struct.unpack(offset_fmt, raw)[0]
    return tags, next_ifd


def _orientation_tag(tags) -> int | None:
    """Raw Orientation of an IFD: its first integer value, 0 when present but not an integer."""
    if _TAG_ORIENTATION not in tags:
        return None
    value = tags[_TAG_ORIENTATION]
    return value[0] if isinstance(value, tuple) else 0


def _exif_orientation(d, start: int, end: int, max_prefixes: int) -> int | None:
    """Raw Orientation from an EXIF block at ``[start, end)``; None when absent or unreadable.

    Up to ``max_prefixes`` leading ``b"Exif\\0\\0"`` are skipped, as Pillow does.
    """
    for _ in range(max_prefixes):
        if d.at(start, 6) == b"Exif\x00\x00":
            start += 6
    try:
        endian, big, ifd = _tiff_header(d, start, end, allow_big=False)
    except ImageError:
        return None  # a broken EXIF block is ignored, like Pillow's Exif.load warnings
    tags, _ = _tiff_ifd(d, start, end, endian, big, ifd, frozenset((_TAG_ORIENTATION,)))
    return _orientation_tag(tags)


def _xmp_orientation(packet: bytes) -> int | None:
    match = _XMP_ORIENTATION.search(packet)
    return int(match[2]) if match else None


# --------------------------------------------------------------------------
# JPEG

_SOF_MARKERS = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF, 0xDE))
_PROGRESSIVE = frozenset((0xC2, 0xC6, 0xCA, 0xCE))
# Markers Pillow treats as standalone (no length field): JPG, RST0-7, SOI, EOI, JPG0-13.
_STANDALONE = frozenset((0xC8, *range(0xD0, 0xDA), *range(0xF0, 0xFE)))
_JPEG_MODES = {1: "L", 3: "RGB", 4: "CMYK"}
_MARKER_RE = re.compile(rb"\xff+([^\x00\xff])")
_XMP_APP1 = b"http://ns.adobe.com/xap/1.0/\x00"


def _next_marker(d, pos: int, budget: int = _MAX_JUNK) -> tuple[int | None, int, int]:
    """First marker at or after ``pos`` as ``(marker, offset after it, bytes skipped)``.

    Like Pillow, junk bytes, 0xFF fill bytes and escaped 0xFF00 are skipped
    (at most ``budget`` bytes).  ``(None, pos, skipped)`` when no marker is found.
    """
    w = d.at(pos, 2)
    if len(w) == 2 and w[0] == 0xFF and w[1] not in (0x00, 0xFF):
        return w[1], pos + 2, 0  # the common case: a marker right where expected
    start = pos
    end = pos + budget
    while pos < end:
        want = min(4096, end - pos + 2)
        buf = d.at(pos, want)
        match = _MARKER_RE.search(buf)
        if match and pos + match.start() < end:
            skipped = pos + match.end() - 2 - start
            return match[1][0], pos + match.end(), skipped
        if len(buf) < want:  # the data ends
            return None, pos, pos + len(buf) - start
        pos += len(buf) - 1  # keep a trailing 0xFF: it may start the next marker
    return None, pos, max(budget, 0)  # the junk budget is spent


def jpeg_frame(data: bytes) -> tuple[int, int, int, list[tuple[int, int]], int]:
    """The frame of a JPEG, walked as Pillow walks it to the first scan, within the probe's
    bounds (segments and junk): ``(SOF marker, height, width, [(h, v) sampling per component],
    offset just after the first SOS segment)``.

    For the decoders: a file whose first scan is not reached within the bounds is refused before
    any decoder scans it (Pillow skips junk a byte at a time in Python). Raises ImageError.
    """
    d = _Bytes(data)
    pos, junk, sof = 2, 0, None
    for _ in range(_MAX_JPEG_SEGMENTS):
        marker, pos, skipped = _next_marker(d, pos, _MAX_JUNK - junk)
        junk += skipped
        if marker is None:
            found = (f"{junk:,} bytes of junk" if junk >= _MAX_JUNK else
                     f"the data ends at byte {d.size:,}")
            raise ImageError(
                f"expected the JPEG image data (SOS marker) after the headers; {found} before it; "
                f"{_TRUNCATED}")
        if marker in _STANDALONE:
            continue
        if marker < 0xC0:
            raise ImageError(f"expected a JPEG marker at byte {pos - 2:,}; found the invalid marker "
                             f"0xFF{marker:02X}; {_CORRUPT}")
        raw_len = d.at(pos, 2)
        length = (raw_len[0] << 8 | raw_len[1]) if len(raw_len) == 2 else -1
        if 0 <= length < 2 and marker not in _SOF_MARKERS and marker != 0xDA:
            pos += 2  # as the probe: nothing read, resync at the next marker
            continue
        if length < 2 or pos + length > d.size:
            raise ImageError(
                f"expected a complete JPEG segment 0xFF{marker:02X} at byte {pos - 2:,}; its length "
                f"field {'is cut off' if length < 0 else f'declares {length} bytes'} and "
                f"{d.size - pos:,} remain; {_TRUNCATED}")
        if marker == 0xDA:
            if sof is None:
                raise ImageError(f"expected a JPEG frame header (SOF marker) before the image data "
                                 f"(SOS) at byte {pos - 2:,}; {_CORRUPT}")
            return (*sof, pos + length)
        if marker in _SOF_MARKERS and sof is None:
            f = d.at(pos + 2, length - 2)
            n = f[5] if len(f) > 5 else 0
            if len(f) < 6 + 3 * n:
                raise ImageError(f"expected a JPEG frame header of {8 + 3 * n} bytes; its length field "
                                 f"says {length}; {_CORRUPT}")
            height, width = struct.unpack_from(">HH", f, 1)
            sof = (marker, height, width, [(f[7 + 3 * i] >> 4, f[7 + 3 * i] & 15) for i in range(n)])
        pos += length
    raise ImageError(f"expected the JPEG image data (SOS marker) within {_MAX_JPEG_SEGMENTS:,} "
                     f"segments; none found; {_CORRUPT}")


def _jpeg(d) -> ProbeResult:
    pos = 2
    sof = None  # (marker, precision, height, width, components)
    exif_seen = False  # Pillow reads the first Exif APP1; later ones are continuations
    exif = None
    xmp = None  # (offset, length) of the last XMP APP1, read only if EXIF lacks orientation
    adobe_transform = None
    junk = 0
    for _ in range(_MAX_JPEG_SEGMENTS):
        marker, pos, skipped = _next_marker(d, pos, _MAX_JUNK - junk)
        junk += skipped
        if marker is None:
            if sof is None:
                raise ImageError(
                    f"expected a JPEG frame header (SOF marker); the data ends or has no marker "
                    f"after byte {pos} of {d.size}; {_TRUNCATED}"
                )
            break
        if marker in _STANDALONE:
            continue
        if marker == 0xDA and sof is not None:
            break  # start of scan: all headers Pillow reads are behind us
        if marker == 0xDA or marker < 0xC0:  # a scan before any frame, or not a marker
            if sof is not None:
                break
            what = "scan data (SOS)" if marker == 0xDA else f"invalid marker 0xFF{marker:02X}"
            raise ImageError(
                f"expected a JPEG frame header (SOF marker); found {what} at byte {pos - 2} first; "
                f"{_CORRUPT}"
            )
        raw_len = d.at(pos, 2)
        length = (raw_len[0] << 8 | raw_len[1]) if len(raw_len) == 2 else -1
        if 0 <= length < 2 and marker not in _SOF_MARKERS:
            pos += 2  # libjpeg and Pillow read nothing and resync at the next marker
            continue
        if length < 2 or pos + length > d.size:
            if sof is not None:
                break  # size already known; the rest is decode's business
            found = "is cut off" if length < 0 else (
                f"declares {length} bytes" if length < 2 else f"declares {length} bytes but {d.size - pos} remain"
            )
            raise ImageError(
                f"expected a complete JPEG segment 0xFF{marker:02X} at byte {pos - 2} before the frame "
                f"header; its length field {found}; {_TRUNCATED}"
            )
        body = pos + 2
        if marker in _SOF_MARKERS:
            fields = d.at(body, 6)
            ncomp = fields[5] if len(fields) == 6 else 0
            if length < 8 + 3 * ncomp:
                if sof is not None:
                    break
                raise ImageError(
                    f"expected a JPEG frame header of {8 + 3 * ncomp} bytes or more at byte {pos - 2}; "
                    f"its length field says {length}; {_CORRUPT}"
                )
            precision, height, width = struct.unpack(">BHH", fields[:5])
            sof = (marker, precision, height, width, ncomp)
        elif marker == 0xE1 and not exif_seen and d.at(body, 6) == b"Exif\x00\x00":
            exif_seen = True
            exif = _exif_orientation(d, body, pos + length, max_prefixes=2)
        elif marker == 0xE1 and d.at(body, len(_XMP_APP1)) == _XMP_APP1:
            xmp = (body + len(_XMP_APP1), length - 2 - len(_XMP_APP1))
        elif marker == 0xEE and d.at(body, 5) == b"Adobe":
            tail = d.at(body + 11, 1) if length >= 14 else b""
            adobe_transform = tail[0] if tail else None
        pos += length
    if sof is None:
        raise ImageError(
            f"expected a JPEG frame header (SOF marker) within {_MAX_JPEG_SEGMENTS:,} segments; none found; "
            f"{_CORRUPT}"
        )
    marker, precision, height, width, ncomp = sof
    _check_size("JPEG", width, height, "frame header")
    if ncomp not in _JPEG_MODES:
        raise ImageError(
            f"expected a JPEG with 1, 3 or 4 colour components; the frame header declares {ncomp}; "
            "convert the file to a standard JPEG or PNG"
        )
    orientation = exif
    if orientation is None and xmp is not None and 0 < xmp[1] <= _MAX_TEXT:
        orientation = _xmp_orientation(d.at(*xmp))
    mode = _JPEG_MODES[ncomp]
    if mode == "CMYK" and adobe_transform == 2:
        mode = "YCCK"
    return ProbeResult(
        "jpeg", width, height, _norm_orientation(orientation), ncomp, precision, mode,
        has_alpha=False, animated=False, progressive=marker in _PROGRESSIVE,
    )


# --------------------------------------------------------------------------
# PNG

# (bit depth, colour type) -> (Pillow mode, stored channels); Pillow's _MODES table.
_PNG_MODES = {
    (1, 0): ("1", 1), (2, 0): ("L", 1), (4, 0): ("L", 1), (8, 0): ("L", 1), (16, 0): ("I;16", 1),
    (8, 2): ("RGB", 3), (16, 2): ("RGB", 3),
    (1, 3): ("P", 3), (2, 3): ("P", 3), (4, 3): ("P", 3), (8, 3): ("P", 3),
    (8, 4): ("LA", 2), (16, 4): ("RGBA", 2),
    (8, 6): ("RGBA", 4), (16, 6): ("RGBA", 4),
}
# Text chunk keywords Pillow turns into EXIF or XMP ("exif" only from tEXt, ImageMagick style)
_PNG_TEXT_KEYS = (b"XML:com.adobe.xmp", b"Raw profile type exif", b"exif")


def _png(d) -> ProbeResult:
    ihdr = _need(d, 8, 21, "IHDR header", "PNG")
    length, ctype = struct.unpack_from(">L4s", ihdr)
    if ctype != b"IHDR" or length < 13:
        raise ImageError(
            f"expected the PNG IHDR chunk (13 bytes) first; found {ctype!r} of {length} bytes; {_CORRUPT}"
        )
    width, height, depth, colour = struct.unpack_from(">LLBB", ihdr, 8)
    _check_size("PNG", width, height, "IHDR header")
    if (depth, colour) not in _PNG_MODES:
        raise ImageError(
            f"expected a valid PNG bit depth / colour type pair; found depth {depth} with colour "
            f"type {colour}; {_CORRUPT}"
        )
    mode, channels = _PNG_MODES[(depth, colour)]
    has_alpha = colour in (4, 6)
    n_frames = None  # from a valid acTL, as Pillow counts them
    frame_before_idat = False
    exif = None  # (data, start, end, prefixes to strip) of the EXIF Pillow would use
    text: dict[bytes, bytes] = {}  # last value per keyword in _PNG_TEXT_KEYS
    budget = _MAX_TEXT_TOTAL  # text bytes still to read and inflate in this probe
    pos = 8 + 12 + length
    for _ in range(_MAX_SEGMENTS):
        head = d.at(pos, 8)
        if len(head) < 8:
            break
        length, ctype = struct.unpack(">L4s", head)
        body, end = pos + 8, pos + 8 + length
        if ctype in (b"IDAT", b"IEND") or end > d.size:
            break
        if ctype == b"tRNS":
            if colour == 3:
                has_alpha = any(b < 255 for b in d.at(body, min(length, 256)))
            elif colour in (0, 2):
                has_alpha = length >= (6 if colour == 2 else 2)
        elif ctype == b"acTL" and length >= 8:
            count = struct.unpack(">L", d.at(body, 4))[0]
            if n_frames is not None:
                n_frames = None  # Pillow: a repeated acTL makes the file a plain PNG
            elif 0 < count <= 0x80000000:
                n_frames = count
        elif ctype == b"fcTL" and length >= 26:
            frame_before_idat = True
        elif ctype == b"eXIf":
            exif = (d, body, end, 1)
        elif ctype in (b"tEXt", b"zTXt", b"iTXt"):
            entry = _png_text(d, ctype, body, length, budget)
            if entry is not None:
                budget -= length + len(entry[1])
            if entry is not None and entry[0] == b"exif":
                exif = (_Bytes(entry[1]), 0, len(entry[1]), 2)
            elif entry is not None:
                text[entry[0]] = entry[1]
        pos = end + 4
    orientation = None
    if exif is None and b"Raw profile type exif" in text:
        try:  # ImageMagick: three header lines, then hex
            raw = bytes.fromhex("".join(text[b"Raw profile type exif"].decode("latin-1").split("\n")[3:]))
            exif = (_Bytes(raw), 0, len(raw), 2)
        except ValueError:
            pass
    if exif is not None:
        orientation = _exif_orientation(*exif)
    if orientation is None and b"XML:com.adobe.xmp" in text:
        orientation = _xmp_orientation(text[b"XML:com.adobe.xmp"])
    if has_alpha and channels in (1, 3):
        channels += 1
    # an IDAT without a preceding fcTL is a default image that Pillow counts as a frame
    animated = n_frames is not None and n_frames + (0 if frame_before_idat else 1) > 1
    return ProbeResult(
        "png", width, height, _norm_orientation(orientation), channels, depth, mode,
        has_alpha=has_alpha, animated=animated, progressive=False,
    )


def _png_text(d, ctype: bytes, body: int, length: int, budget: int) -> tuple[bytes, bytes] | None:
    """``(keyword, text)`` of a tEXt/zTXt/iTXt chunk keyed in ``_PNG_TEXT_KEYS``, else None.

    Other keywords are not read past their first bytes.  Chunks over ``_MAX_TEXT``
    and undecodable ones are ignored; inflated text is cut at ``_MAX_TEXT``.  ``budget``: bytes
    this chunk may still read plus inflate (the probe's total); a chunk past it is ignored
    (a hostile file; Pillow itself refuses text over 64 MiB in all).
    """
    key, sep, _ = d.at(body, 22).partition(b"\x00")
    if not sep or key not in _PNG_TEXT_KEYS or (key == b"exif" and ctype != b"tEXt"):
        return None
    if length > min(_MAX_TEXT, budget):
        return None
    rest = d.at(body, length)[len(key) + 1:]
    compressed = False
    if ctype == b"zTXt":  # method byte (0 = zlib), then the stream
        if rest[:1] != b"\x00":
            return None
        compressed, rest = True, rest[1:]
    elif ctype == b"iTXt":  # compression flag and method, language, translated keyword, text
        parts = rest[2:].split(b"\x00", 2)
        if len(rest) < 2 or len(parts) < 3 or (rest[0] and rest[1]):
            return None
        compressed, rest = bool(rest[0]), parts[2]
    if compressed:
        try:
            rest = zlib.decompressobj().decompress(rest, max(min(_MAX_TEXT, budget - length), 1))
        except zlib.error:
            return None
    return key, rest


# --------------------------------------------------------------------------
# WebP

_WEBP_ALPHA, _WEBP_EXIF, _WEBP_XMP, _WEBP_ANIM = 0x10, 0x08, 0x04, 0x02


def _webp(d) -> ProbeResult:
    kind, first_len = struct.unpack("<4sL", _need(d, 12, 8, "first chunk header", "WebP"))
    if kind == b"VP8 ":
        frame = _need(d, 20, 10, "VP8 frame header", "WebP")
        if frame[0] & 1 or frame[3:6] != b"\x9d\x01\x2a":
            raise ImageError(
                "expected a VP8 key frame with start code 9d 01 2a; found frame tag "
                f"{frame[:3].hex(' ')} and start code {frame[3:6].hex(' ')}; {_CORRUPT}"
            )
        width, height = (v & 0x3FFF for v in struct.unpack_from("<HH", frame, 6))
        _check_size("WebP", width, height, "VP8 frame header")
        return _webp_result(width, height, False, False, None)
    if kind == b"VP8L":
        width, height, alpha = _vp8l(_need(d, 20, 5, "VP8L header", "WebP"))
        return _webp_result(width, height, alpha, False, None)
    if kind != b"VP8X":
        raise ImageError(
            f"expected a WebP VP8, VP8L or VP8X chunk first; found {kind!r}; {_CORRUPT}"
        )
    vp8x = _need(d, 20, 10, "VP8X header", "WebP")
    flags = vp8x[0]
    width = int.from_bytes(vp8x[4:7], "little") + 1
    height = int.from_bytes(vp8x[7:10], "little") + 1
    has_alpha = bool(flags & _WEBP_ALPHA)
    anim = bool(flags & _WEBP_ANIM)
    frames = 0
    exif = xmp = None
    vp8l_alpha = None
    alph = False
    riff_end = min(8 + struct.unpack_from("<L", d.at(4, 4))[0], d.size)
    pos = 20 + first_len + (first_len & 1)
    for _ in range(_MAX_SEGMENTS):
        chunk = d.at(pos, 8)
        if len(chunk) < 8 or pos + 8 > riff_end:
            break
        kind, length = chunk[:4], struct.unpack_from("<L", chunk, 4)[0]
        body = pos + 8
        if kind == b"ANMF":
            frames += 1
        elif kind == b"ALPH":
            alph = True
        elif kind == b"VP8L" and vp8l_alpha is None:
            vp8l_alpha = _vp8l(d.at(body, 5))[2] if length >= 5 else False
        # libwebp's demuxer only exposes EXIF/XMP that the VP8X flags announce
        elif kind == b"EXIF" and exif is None and flags & _WEBP_EXIF:
            exif = (body, min(body + length, riff_end))
        elif kind == b"XMP " and xmp is None and flags & _WEBP_XMP:
            xmp = (body, min(length, riff_end - body))
        if anim and frames >= 2 and not flags & (_WEBP_EXIF | _WEBP_XMP):
            break  # known animated and no EXIF/XMP to find behind the frames
        pos = body + length + (length & 1)
    if not anim:
        # libwebp: the VP8L header decides for lossless; otherwise the flag or an ALPH chunk
        has_alpha = (vp8l_alpha if vp8l_alpha is not None else has_alpha) or alph
    orientation = _exif_orientation(d, *exif, max_prefixes=2) if exif else None
    if orientation is None and xmp is not None and 0 < xmp[1] <= _MAX_TEXT:
        orientation = _xmp_orientation(d.at(*xmp))
    return _webp_result(width, height, has_alpha, anim and frames >= 2, orientation)


def _vp8l(b: bytes) -> tuple[int, int, bool]:
    """(width, height, alpha hint) from the 5-byte VP8L header."""
    if len(b) < 5 or b[0] != 0x2F:
        raise ImageError(f"expected a VP8L header starting with 0x2f; found {b[:1]!r}; {_CORRUPT}")
    bits = struct.unpack_from("<L", b, 1)[0]
    if bits >> 29:
        raise ImageError(f"expected VP8L version 0; found version {bits >> 29}; {_CORRUPT}")
    return (bits & 0x3FFF) + 1, (bits >> 14 & 0x3FFF) + 1, bool(bits >> 28 & 1)


def _webp_result(width, height, has_alpha, animated, orientation) -> ProbeResult:
    return ProbeResult(
        "webp", width, height, _norm_orientation(orientation), 4 if has_alpha else 3, 8,
        "RGBA" if has_alpha else "RGB", has_alpha, animated, False,
    )


# --------------------------------------------------------------------------
# BMP

_BMP_INFO_HEADERS = (40, 52, 56, 64, 108, 124)
# 32-bit BITFIELDS masks (r, g, b, a) that Pillow decodes with alpha
_BMP_ALPHA_MASKS = frozenset((
    (0xFF000000, 0xFF0000, 0xFF00, 0xFF),
    (0xFF, 0xFF00, 0xFF0000, 0xFF000000),
    (0xFF0000, 0xFF00, 0xFF, 0xFF000000),
    (0xFF000000, 0xFF00, 0xFF, 0xFF0000),
    (0, 0, 0, 0),
))


def _bmp(d) -> ProbeResult:
    raw = _need(d, 14, 4, "DIB header size", "BMP")
    header_size = struct.unpack("<L", raw)[0]
    if header_size == 12:  # BITMAPCOREHEADER
        width, height, _, bits = struct.unpack("<HHHH", _need(d, 18, 8, "core header", "BMP"))
        compression, colors, entry = 0, 0, 3
    elif header_size in _BMP_INFO_HEADERS:  # BITMAPINFOHEADER and later
        fields = _need(d, 18, 36, "info header", "BMP")
        width, height, _, bits, compression = struct.unpack_from("<llHHL", fields)
        colors, entry = struct.unpack_from("<L", fields, 28)[0], 4
        height = abs(height)  # negative height = top-down rows
    else:
        raise ImageError(
            f"expected a BMP header of 12, 40, 52, 56, 64, 108 or 124 bytes; found {header_size}; "
            "re-encode the file as PNG or JPEG"
        )
    _check_size("BMP", width, height, "header")
    if bits not in (1, 2, 4, 8, 16, 24, 32):
        raise ImageError(
            f"expected 1, 2, 4, 8, 16, 24 or 32 bits per pixel in the BMP header; found {bits}; "
            "re-encode the file as PNG or JPEG"
        )
    if bits <= 8:
        colors = colors or 1 << bits
        mode = "P"
        if colors <= 256:  # Pillow ditches a pure gray palette: "1" or "L"
            palette = d.at(14 + header_size, entry * colors)
            levels = (0, 255) if colors == 2 else range(colors)
            if all(palette[i * entry:i * entry + 3] == bytes((v, v, v)) for i, v in enumerate(levels)):
                mode = "1" if colors <= 2 else "L"
        channels, depth = (3 if mode == "P" else 1), bits
    else:
        mode, channels, depth = "RGB", 3, 8
        if bits == 32 and compression == 3:  # BI_BITFIELDS
            masks = d.at(54, 16 if header_size >= 56 else 12)
            masks = struct.unpack(f"<{len(masks) // 4}L", masks[: len(masks) // 4 * 4]) + (0,) * 4
            if masks[:4] in _BMP_ALPHA_MASKS:
                mode, channels = "RGBA", 4
    return ProbeResult("bmp", width, height, 1, channels, depth, mode, mode == "RGBA", False, False)


# --------------------------------------------------------------------------
# GIF


def _gif(d) -> ProbeResult:
    screen = _need(d, 0, 13, "logical screen descriptor", "GIF")
    width, height, flags = struct.unpack_from("<HHB", screen, 6)
    pos = 13
    palette_needed = False
    if flags & 0x80:
        palette_needed = _gif_palette_needed(d.at(pos, 3 << (flags & 7) + 1))
        pos += 3 << (flags & 7) + 1
    transparency = False
    # Walk extensions to the first image descriptor: Pillow grows the size to the
    # first frame's extent and takes its transparency and local palette.
    steps = 0
    while steps < _MAX_GIF_STEPS:
        steps += 1
        kind = d.at(pos, 2)
        if not kind or kind[:1] == b";":
            break
        if kind[:1] == b"!" and len(kind) == 2:
            block = d.at(pos + 2, 2)  # first sub-block: size, then GCE flags
            if kind[1] == 0xF9 and len(block) == 2 and block[0] >= 4 and block[1] & 1:
                transparency = True
            pos += 2
            while steps < _MAX_GIF_STEPS:  # data sub-blocks end with a zero length
                steps += 1
                size = d.at(pos, 1)
                pos += 1 + (size[0] if size else 0)
                if not size or not size[0]:
                    break
        elif kind[:1] == b",":
            desc = d.at(pos + 1, 9)
            if len(desc) == 9:
                x0, y0, w, h, local = struct.unpack("<HHHHB", desc)
                width, height = max(width, x0 + w), max(height, y0 + h)
                if local & 0x80:
                    palette_needed = _gif_palette_needed(d.at(pos + 10, 3 << (local & 7) + 1))
            break
        else:
            pos += 1  # Pillow skips stray bytes between blocks
    _check_size("GIF", width, height, "logical screen descriptor")
    mode, channels = ("P", 3) if palette_needed else ("L", 1)
    return ProbeResult(
        "gif", width, height, 1, channels + transparency, 8, mode,
        has_alpha=transparency, animated=False, progressive=False,
    )


def _gif_palette_needed(p: bytes) -> bool:
    """False for an identity gray ramp, which Pillow opens as mode "L" (Pillow's test)."""
    return any(not (i == p[3 * i] == p[3 * i + 1] == p[3 * i + 2]) for i in range(len(p) // 3))


# --------------------------------------------------------------------------
# TIFF

_TIFF_WANTED = frozenset((256, 257, 258, 259, 262, _TAG_ORIENTATION, 277, 338, 339, _TAG_XMP))
_TIFF_COLOUR = {0: 1, 1: 1, 2: 3, 3: 3, 5: 4, 6: 3, 8: 3}  # photometric -> colour channels
_TIFF_MODES = {2: "RGB", 3: "P", 5: "CMYK", 6: "YCbCr", 8: "LAB"}


def _tiff(d) -> ProbeResult:
    endian, big, ifd = _tiff_header(d, 0, d.size, allow_big=True)
    tags, next_ifd = _tiff_ifd(d, 0, d.size, endian, big, ifd, _TIFF_WANTED)

    def first(tag, default=None):
        value = tags.get(tag)
        return value[0] if isinstance(value, tuple) and value else default

    width, height = first(256), first(257)
    if width is None or height is None:
        raise ImageError(
            "expected ImageWidth (256) and ImageLength (257) integer tags in the first TIFF IFD; "
            f"found {'neither' if width is height is None else 'only one'}; {_CORRUPT}"
        )
    _check_size("TIFF", width, height, "first IFD")
    bps = tags.get(258) if isinstance(tags.get(258), tuple) else (1,)
    photometric = 6 if first(259) == 6 else first(262, 0)  # old-style JPEG is YCbCr
    spp = first(277, 1)
    extra = tags.get(338) if isinstance(tags.get(338), tuple) else ()
    colour = _TIFF_COLOUR.get(photometric, max(spp - len(extra), 1))
    alpha = any(e in (1, 2) for e in extra) or (photometric == 2 and spp == 4 and 338 not in tags)
    mode = _tiff_mode(photometric, bps[0], first(339, 1), endian, alpha)
    orientation = _orientation_tag(tags)
    if orientation is None and isinstance(tags.get(_TAG_XMP), bytes):
        orientation = _xmp_orientation(tags[_TAG_XMP])
    return ProbeResult(
        "tiff", width, height, _norm_orientation(orientation), colour + alpha, bps[0], mode,
        has_alpha=alpha, animated=0 < next_ifd < d.size, progressive=False,
    )


def _tiff_mode(photometric: int, bits: int, sample_format: int, endian: str, alpha: bool) -> str:
    """Best-effort Pillow mode for the first IFD (a digest of Pillow's OPEN_INFO)."""
    if photometric in (0, 1):
        if alpha:
            return "LA"
        if bits == 1:
            return "1"
        if bits in (12, 16):
            if sample_format == 2:
                return "I"
            return "I;16B" if endian == ">" and bits == 16 else "I;16"
        if bits == 32:
            return "F" if sample_format == 3 else "I"
        return "L"
    mode = _TIFF_MODES.get(photometric, "")
    if alpha and mode in ("RGB", "P"):
        mode += "A"
    return mode


_PARSERS = {"JPEG": _jpeg, "PNG": _png, "GIF": _gif, "BMP": _bmp, "TIFF": _tiff}
