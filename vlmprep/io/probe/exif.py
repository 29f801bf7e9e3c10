"""TIFF structures, as found in TIFF files and in the EXIF blocks of JPEG, PNG and WebP files.

Only what the probe needs: the header, the tags of one IFD read as Pillow reads them, and the
orientation from EXIF (or XMP, which Pillow falls back to).
"""
from __future__ import annotations

import re
import struct

from vlmprep.errors import ImageError

from .common import CORRUPT, MAX_TEXT, TRUNCATED

MAX_TIFF_VALUES = 64  # values read per TIFF tag; we only need a handful
_TIFF_TYPE_SIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4, 16: 8}
_TIFF_INT_FMT = {3: "H", 4: "L", 6: "b", 8: "h", 9: "l", 13: "L", 16: "Q"}
_TIFF_BYTES_TYPES = (1, 2, 7)
TAG_ORIENTATION = 274
TAG_XMP = 700
_XMP_ORIENTATION = re.compile(rb'tiff:Orientation(="|>)([0-9])')  # Pillow's pattern


def tiff_header(d, base: int, limit: int, allow_big: bool) -> tuple[str, bool, int]:
    """Parse a TIFF header at ``base``; return ``(endian, bigtiff, first IFD offset)``.

    The IFD offset is relative to ``base``.  Raises ImageError when the header is
    invalid or the IFD lies outside ``[base, limit)``.
    """
    h = d.at(base, min(16, limit - base))
    if len(h) < 8:
        raise ImageError(f"expected an 8-byte TIFF header; found {len(h)} bytes; {TRUNCATED}")
    endian = {b"II": "<", b"MM": ">"}.get(h[:2])
    big = h[2:4] == (b"+\x00" if endian == "<" else b"\x00+")
    if endian is None or not (big and allow_big or h[2:4] in (b"*\x00", b"\x00*")):
        raise ImageError(
            f"expected a TIFF header (b'II*\\x00' or b'MM\\x00*'); found {h[:4]!r}; {CORRUPT}"
        )
    if big:
        if len(h) < 16:
            raise ImageError(f"expected a 16-byte BigTIFF header; found {len(h)} bytes; {TRUNCATED}")
        ifd = struct.unpack_from(endian + "Q", h, 8)[0]
    else:
        ifd = struct.unpack_from(endian + "L", h, 4)[0]
    if base + ifd + (8 if big else 2) > limit:
        raise ImageError(
            f"expected the first IFD inside the {limit - base}-byte TIFF data; its offset is {ifd}; "
            f"{TRUNCATED}"
        )
    return endian, big, ifd


def tiff_ifd(d, base: int, limit: int, endian: str, big: bool, ifd: int, wanted: frozenset):
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
            keep = min(num, MAX_TIFF_VALUES)
            raw = value if where is None else d.at(where, keep * unit)
            tags[tag] = struct.unpack_from(f"{endian}{keep}{_TIFF_INT_FMT[typ]}", raw)
        elif typ in _TIFF_BYTES_TYPES:
            if size <= MAX_TEXT:
                tags[tag] = value[:size] if where is None else d.at(where, size)
        else:
            tags[tag] = None
    next_ifd = 0
    if read == count:
        raw = d.at(start + count_size + read * entry_size, 8 if big else 4)
        if len(raw) == (8 if big else 4):
            next_ifd = struct.unpack(offset_fmt, raw)[0]
    return tags, next_ifd


def orientation_tag(tags) -> int | None:
    """Raw Orientation of an IFD: its first integer value, 0 when present but not an integer."""
    if TAG_ORIENTATION not in tags:
        return None
    value = tags[TAG_ORIENTATION]
    return value[0] if isinstance(value, tuple) else 0


def exif_orientation(d, start: int, end: int, max_prefixes: int) -> int | None:
    """Raw Orientation from an EXIF block at ``[start, end)``; None when absent or unreadable.

    Up to ``max_prefixes`` leading ``b"Exif\\0\\0"`` are skipped, as Pillow does.
    """
    for _ in range(max_prefixes):
        if d.at(start, 6) == b"Exif\x00\x00":
            start += 6
    try:
        endian, big, ifd = tiff_header(d, start, end, allow_big=False)
    except ImageError:
        return None  # a broken EXIF block is ignored, like Pillow's Exif.load warnings
    tags, _ = tiff_ifd(d, start, end, endian, big, ifd, frozenset((TAG_ORIENTATION,)))
    return orientation_tag(tags)


def xmp_orientation(packet: bytes) -> int | None:
    match = _XMP_ORIENTATION.search(packet)
    return int(match[2]) if match else None
