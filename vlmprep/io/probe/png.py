"""PNG: the chunks up to the first IDAT (size, mode, transparency, APNG frames, EXIF/XMP)."""
from __future__ import annotations

import struct
import zlib

from vlmprep.errors import ImageError

from .common import CORRUPT, MAX_SEGMENTS, MAX_TEXT, check_size, need, norm_orientation
from .exif import exif_orientation, xmp_orientation
from .reader import Bytes
from .result import ProbeResult

# All PNG text chunks of one probe together: bytes read plus bytes inflated (Pillow allows 64 MiB
# in all; the probe only needs the orientation, and without a total 1,000 chunks inflate 1 GiB).
MAX_TEXT_TOTAL = 4 << 20

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


def probe_png(d) -> ProbeResult:
    ihdr = need(d, 8, 21, "IHDR header", "PNG")
    length, ctype = struct.unpack_from(">L4s", ihdr)
    if ctype != b"IHDR" or length < 13:
        raise ImageError(
            f"expected the PNG IHDR chunk (13 bytes) first; found {ctype!r} of {length} bytes; {CORRUPT}"
        )
    width, height, depth, colour = struct.unpack_from(">LLBB", ihdr, 8)
    check_size("PNG", width, height, "IHDR header")
    if (depth, colour) not in _PNG_MODES:
        raise ImageError(
            f"expected a valid PNG bit depth / colour type pair; found depth {depth} with colour "
            f"type {colour}; {CORRUPT}"
        )
    mode, channels = _PNG_MODES[(depth, colour)]
    has_alpha = colour in (4, 6)
    n_frames = None  # from a valid acTL, as Pillow counts them
    frame_before_idat = False
    exif = None  # (data, start, end, prefixes to strip) of the EXIF Pillow would use
    text: dict[bytes, bytes] = {}  # last value per keyword in _PNG_TEXT_KEYS
    budget = MAX_TEXT_TOTAL  # text bytes still to read and inflate in this probe
    pos = 8 + 12 + length
    for _ in range(MAX_SEGMENTS):
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
                exif = (Bytes(entry[1]), 0, len(entry[1]), 2)
            elif entry is not None:
                text[entry[0]] = entry[1]
        pos = end + 4
    orientation = None
    if exif is None and b"Raw profile type exif" in text:
        try:  # ImageMagick: three header lines, then hex
            raw = bytes.fromhex("".join(text[b"Raw profile type exif"].decode("latin-1").split("\n")[3:]))
            exif = (Bytes(raw), 0, len(raw), 2)
        except ValueError:
            pass
    if exif is not None:
        orientation = exif_orientation(*exif)
    if orientation is None and b"XML:com.adobe.xmp" in text:
        orientation = xmp_orientation(text[b"XML:com.adobe.xmp"])
    if has_alpha and channels in (1, 3):
        channels += 1
    # an IDAT without a preceding fcTL is a default image that Pillow counts as a frame
    animated = n_frames is not None and n_frames + (0 if frame_before_idat else 1) > 1
    return ProbeResult(
        "png", width, height, norm_orientation(orientation), channels, depth, mode,
        has_alpha=has_alpha, animated=animated, progressive=False,
    )


def _png_text(d, ctype: bytes, body: int, length: int, budget: int) -> tuple[bytes, bytes] | None:
    """``(keyword, text)`` of a tEXt/zTXt/iTXt chunk keyed in ``_PNG_TEXT_KEYS``, else None.

    Other keywords are not read past their first bytes.  Chunks over ``MAX_TEXT``
    and undecodable ones are ignored; inflated text is cut at ``MAX_TEXT``.  ``budget``: bytes
    this chunk may still read plus inflate (the probe's total); a chunk past it is ignored
    (a hostile file; Pillow itself refuses text over 64 MiB in all).
    """
    key, sep, _ = d.at(body, 22).partition(b"\x00")
    if not sep or key not in _PNG_TEXT_KEYS or (key == b"exif" and ctype != b"tEXt"):
        return None
    if length > min(MAX_TEXT, budget):
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
            rest = zlib.decompressobj().decompress(rest, max(min(MAX_TEXT, budget - length), 1))
        except zlib.error:
            return None
    return key, rest
