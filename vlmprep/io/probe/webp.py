"""WebP: the RIFF chunks (VP8, VP8L, or VP8X and what it announces: alpha, animation, EXIF, XMP)."""
from __future__ import annotations

import struct

from vlmprep.errors import ImageError

from .common import CORRUPT, MAX_SEGMENTS, MAX_TEXT, check_size, need, norm_orientation
from .exif import exif_orientation, xmp_orientation
from .result import ProbeResult

_WEBP_ALPHA, _WEBP_EXIF, _WEBP_XMP, _WEBP_ANIM = 0x10, 0x08, 0x04, 0x02


def probe_webp(d) -> ProbeResult:
    kind, first_len = struct.unpack("<4sL", need(d, 12, 8, "first chunk header", "WebP"))
    if kind == b"VP8 ":
        frame = need(d, 20, 10, "VP8 frame header", "WebP")
        if frame[0] & 1 or frame[3:6] != b"\x9d\x01\x2a":
            raise ImageError(
                "expected a VP8 key frame with start code 9d 01 2a; found frame tag "
                f"{frame[:3].hex(' ')} and start code {frame[3:6].hex(' ')}; {CORRUPT}"
            )
        width, height = (v & 0x3FFF for v in struct.unpack_from("<HH", frame, 6))
        check_size("WebP", width, height, "VP8 frame header")
        return _webp_result(width, height, False, False, None)
    if kind == b"VP8L":
        width, height, alpha = _vp8l(need(d, 20, 5, "VP8L header", "WebP"))
        return _webp_result(width, height, alpha, False, None)
    if kind != b"VP8X":
        raise ImageError(
            f"expected a WebP VP8, VP8L or VP8X chunk first; found {kind!r}; {CORRUPT}"
        )
    vp8x = need(d, 20, 10, "VP8X header", "WebP")
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
    for _ in range(MAX_SEGMENTS):
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
    orientation = exif_orientation(d, *exif, max_prefixes=2) if exif else None
    if orientation is None and xmp is not None and 0 < xmp[1] <= MAX_TEXT:
        orientation = xmp_orientation(d.at(*xmp))
    return _webp_result(width, height, has_alpha, anim and frames >= 2, orientation)


def _vp8l(b: bytes) -> tuple[int, int, bool]:
    """(width, height, alpha hint) from the 5-byte VP8L header."""
    if len(b) < 5 or b[0] != 0x2F:
        raise ImageError(f"expected a VP8L header starting with 0x2f; found {b[:1]!r}; {CORRUPT}")
    bits = struct.unpack_from("<L", b, 1)[0]
    if bits >> 29:
        raise ImageError(f"expected VP8L version 0; found version {bits >> 29}; {CORRUPT}")
    return (bits & 0x3FFF) + 1, (bits >> 14 & 0x3FFF) + 1, bool(bits >> 28 & 1)


def _webp_result(width, height, has_alpha, animated, orientation) -> ProbeResult:
    return ProbeResult(
        "webp", width, height, norm_orientation(orientation), 4 if has_alpha else 3, 8,
        "RGBA" if has_alpha else "RGB", has_alpha, animated, False,
    )
