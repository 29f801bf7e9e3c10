"""JPEG: the segment list up to the frame header (``probe_jpeg``) or first scan (``jpeg_frame``)."""
from __future__ import annotations

import re
import struct

from vlmprep.errors import ImageError

from .common import CORRUPT, MAX_TEXT, TRUNCATED, check_size, norm_orientation
from .exif import exif_orientation, xmp_orientation
from .reader import Bytes
from .result import ProbeResult

# JPEG headers are walked to the frame header (probe) or first scan (jpeg_frame) within a work
# budget, not a segment count that rejects valid files: segments cost one step each, and all the
# junk between them together at most MAX_JUNK bytes (Pillow skips junk one byte at a time, so
# this also bounds what a decoder given the file spends before the image data).
MAX_JPEG_SEGMENTS = 65536
MAX_JUNK = 65536  # bytes of non-marker junk skipped between JPEG segments, in all
_SOF_MARKERS = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF, 0xDE))
_PROGRESSIVE = frozenset((0xC2, 0xC6, 0xCA, 0xCE))
# Markers Pillow treats as standalone (no length field): JPG, RST0-7, SOI, EOI, JPG0-13.
_STANDALONE = frozenset((0xC8, *range(0xD0, 0xDA), *range(0xF0, 0xFE)))
_JPEG_MODES = {1: "L", 3: "RGB", 4: "CMYK"}
_MARKER_RE = re.compile(rb"\xff+([^\x00\xff])")
_XMP_APP1 = b"http://ns.adobe.com/xap/1.0/\x00"


def _next_marker(d, pos: int, budget: int = MAX_JUNK) -> tuple[int | None, int, int]:
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


def _segment_length(d, pos: int) -> int:
    """The length field at ``pos`` (-1: the data ends inside it)."""
    raw_len = d.at(pos, 2)
    return (raw_len[0] << 8 | raw_len[1]) if len(raw_len) == 2 else -1


def jpeg_frame(data: bytes) -> tuple[int, int, int, list[tuple[int, int]], int]:
    """The frame of a JPEG, walked as Pillow walks it to the first scan, within the probe's
    bounds (segments and junk): ``(SOF marker, height, width, [(h, v) sampling per component],
    offset just after the first SOS segment)``.

    For the decoders: a file whose first scan is not reached within the bounds is refused before
    any decoder scans it (Pillow skips junk a byte at a time in Python). Raises ImageError.
    """
    d = Bytes(data)
    pos, junk, sof = 2, 0, None
    for _ in range(MAX_JPEG_SEGMENTS):
        marker, pos, skipped = _next_marker(d, pos, MAX_JUNK - junk)
        junk += skipped
        if marker is None:
            found = (f"{junk:,} bytes of junk" if junk >= MAX_JUNK else
                     f"the data ends at byte {d.size:,}")
            raise ImageError(
                f"expected the JPEG image data (SOS marker) after the headers; {found} before it; "
                f"{TRUNCATED}")
        if marker in _STANDALONE:
            continue
        if marker < 0xC0:
            raise ImageError(f"expected a JPEG marker at byte {pos - 2:,}; found the invalid marker "
                             f"0xFF{marker:02X}; {CORRUPT}")
        length = _segment_length(d, pos)
        if 0 <= length < 2 and marker not in _SOF_MARKERS and marker != 0xDA:
            pos += 2  # as the probe: nothing read, resync at the next marker
            continue
        if length < 2 or pos + length > d.size:
            raise ImageError(
                f"expected a complete JPEG segment 0xFF{marker:02X} at byte {pos - 2:,}; its length "
                f"field {'is cut off' if length < 0 else f'declares {length} bytes'} and "
                f"{d.size - pos:,} remain; {TRUNCATED}")
        if marker == 0xDA:
            if sof is None:
                raise ImageError(f"expected a JPEG frame header (SOF marker) before the image data "
                                 f"(SOS) at byte {pos - 2:,}; {CORRUPT}")
            return (*sof, pos + length)
        if marker in _SOF_MARKERS and sof is None:
            f = d.at(pos + 2, length - 2)
            n = f[5] if len(f) > 5 else 0
            if len(f) < 6 + 3 * n:
                raise ImageError(f"expected a JPEG frame header of {8 + 3 * n} bytes; its length field "
                                 f"says {length}; {CORRUPT}")
            height, width = struct.unpack_from(">HH", f, 1)
            sof = (marker, height, width, [(f[7 + 3 * i] >> 4, f[7 + 3 * i] & 15) for i in range(n)])
        pos += length
    raise ImageError(f"expected the JPEG image data (SOS marker) within {MAX_JPEG_SEGMENTS:,} "
                     f"segments; none found; {CORRUPT}")


# APPn segments Pillow parses by their prefix, with the bytes its parser reads unchecked (a
# shorter one makes Pillow, and so transformers, refuse the file while libjpeg decodes it; an
# ICC_PROFILE one only before the frame header, which is where Pillow indexes it).
_PILLOW_APP_MIN = ((0xE0, b"JFIF", 7), (0xEE, b"Adobe", 7), (0xE2, b"ICC_PROFILE\x00", 14))


def _check_pillow_reads(d, marker: int, body: int, n: int, at: int, before_sof: bool) -> None:
    """Refuse a header segment (``n`` bytes at ``body``) that Pillow's JPEG parser refuses, so
    that every backend and build refuses it alike (libjpeg reads these segments leniently).
    Raises ImageError."""
    for app, prefix, least in _PILLOW_APP_MIN:
        if (marker == app and len(prefix) <= n < least and d.at(body, len(prefix)) == prefix
                and (before_sof or app != 0xE2)):
            name = prefix.rstrip(b"\x00").decode()
            raise ImageError(f"expected at least {least} bytes in the {name} APP{marker & 15} "
                             f"segment at byte {at:,}; got {n}; Pillow (and so transformers) "
                             f"cannot read the file; {CORRUPT}")
    if marker in _SOF_MARKERS:
        f = d.at(body, 1)
        if f and f[0] != 8:
            raise ImageError(f"expected 8-bit JPEG samples (what Pillow and transformers read); the "
                             f"frame header at byte {at:,} declares {f[0]}-bit; convert the file "
                             f"to an 8-bit JPEG or a PNG")
        if n >= 6 and (n - 6) % 3:
            raise ImageError(f"expected a JPEG frame header of 6 + 3 bytes per component at byte "
                             f"{at:,}; got {n} bytes; {CORRUPT}")
    elif marker == 0xDB:
        _check_dqt(d, body, n, at)


def _check_dqt(d, body: int, n: int, at: int) -> None:
    """A DQT segment must hold whole tables (1 + 64 or 1 + 128 bytes each), as Pillow and
    libjpeg both require. Raises ImageError."""
    off, end = body, body + n
    while off < end:
        head = d.at(off, 1)
        size = 1 + (64 if head[0] >> 4 == 0 else 128)
        if end - off < size:
            raise ImageError(f"expected whole quantization tables in the DQT segment at byte "
                             f"{at:,}; the last has {end - off} of its {size} bytes; {CORRUPT}")
        off += size


def _check_frame_header_length(marker: int, length: int, at: int) -> None:
    """Refuse a frame header (SOF) under 8 bytes: Pillow reads every one, a later one too, and
    refuses it (the size it reads is cut off). Raises ImageError."""
    if marker in _SOF_MARKERS and 0 <= length < 8:
        raise ImageError(
            f"expected a JPEG frame header of 8 bytes or more at byte {at}; its length field says "
            f"{length}; Pillow (and so transformers) cannot read the file; {CORRUPT}"
        )


def probe_jpeg(d) -> ProbeResult:
    pos = 2
    sof = None  # (marker, precision, height, width, components)
    exif_seen = False  # Pillow reads the first Exif APP1; later ones are continuations
    exif = None
    xmp = None  # (offset, length) of the last XMP APP1, read only if EXIF lacks orientation
    adobe_transform = None
    junk = 0
    for _ in range(MAX_JPEG_SEGMENTS):
        marker, pos, skipped = _next_marker(d, pos, MAX_JUNK - junk)
        junk += skipped
        if marker is None:
            if sof is None:
                raise ImageError(
                    f"expected a JPEG frame header (SOF marker); the data ends or has no marker "
                    f"after byte {pos} of {d.size}; {TRUNCATED}"
                )
            break
        if marker in _STANDALONE:
            continue
        if marker == 0xDA and sof is not None:
            break  # start of scan: all headers Pillow reads are behind us
        if marker == 0xDA or marker < 0xC0:  # a scan before any frame, or not a marker
            # (after the frame too: Pillow refuses 0xFF01-0xFFBF, where libjpeg takes 0xFF01)
            what = "scan data (SOS)" if marker == 0xDA else f"invalid marker 0xFF{marker:02X}"
            want = "a JPEG marker" if sof is not None else "a JPEG frame header (SOF marker)"
            raise ImageError(f"expected {want}; found {what} at byte {pos - 2} first; {CORRUPT}")
        length = _segment_length(d, pos)
        if 0 <= length < 2 and marker not in _SOF_MARKERS:
            pos += 2  # libjpeg and Pillow read nothing and resync at the next marker
            continue
        _check_frame_header_length(marker, length, pos - 2)
        if length < 2 or pos + length > d.size:
            if sof is not None:
                break  # size already known; the rest is decode's business
            found = "is cut off" if length < 0 else (
                f"declares {length} bytes" if length < 2 else f"declares {length} bytes but {d.size - pos} remain"
            )
            raise ImageError(
                f"expected a complete JPEG segment 0xFF{marker:02X} at byte {pos - 2} before the frame "
                f"header; its length field {found}; {TRUNCATED}"
            )
        body = pos + 2
        _check_pillow_reads(d, marker, body, length - 2, pos - 2, sof is None)
        if marker in _SOF_MARKERS:
            fields = d.at(body, 6)
            ncomp = fields[5] if len(fields) == 6 else 0
            if length < 8 + 3 * ncomp:
                if sof is not None:
                    break
                raise ImageError(
                    f"expected a JPEG frame header of {8 + 3 * ncomp} bytes or more at byte {pos - 2}; "
                    f"its length field says {length}; {CORRUPT}"
                )
            precision, height, width = struct.unpack(">BHH", fields[:5])
            sof = (marker, precision, height, width, ncomp)
        elif marker == 0xE1 and not exif_seen and d.at(body, 6) == b"Exif\x00\x00":
            exif_seen = True
            exif = exif_orientation(d, body, pos + length, max_prefixes=2)
        elif marker == 0xE1 and d.at(body, len(_XMP_APP1)) == _XMP_APP1:
            xmp = (body + len(_XMP_APP1), length - 2 - len(_XMP_APP1))
        elif marker == 0xEE and d.at(body, 5) == b"Adobe":
            tail = d.at(body + 11, 1) if length >= 14 else b""
            adobe_transform = tail[0] if tail else None
        pos += length
    if sof is None:
        raise ImageError(
            f"expected a JPEG frame header (SOF marker) within {MAX_JPEG_SEGMENTS:,} segments; none found; "
            f"{CORRUPT}"
        )
    marker, precision, height, width, ncomp = sof
    check_size("JPEG", width, height, "frame header")
    if ncomp not in _JPEG_MODES:
        raise ImageError(
            f"expected a JPEG with 1, 3 or 4 colour components; the frame header declares {ncomp}; "
            "convert the file to a standard JPEG or PNG"
        )
    orientation = exif
    if orientation is None and xmp is not None and 0 < xmp[1] <= MAX_TEXT:
        orientation = xmp_orientation(d.at(*xmp))
    mode = _JPEG_MODES[ncomp]
    if mode == "CMYK" and adobe_transform == 2:
        mode = "YCCK"
    return ProbeResult(
        "jpeg", width, height, norm_orientation(orientation), ncomp, precision, mode,
        has_alpha=False, animated=False, progressive=marker in _PROGRESSIVE,
    )
