"""What every format parser of the probe shares: limits, messages and small checks."""
from __future__ import annotations

from vlmprep.errors import ImageError

MAX_SEGMENTS = 1024  # PNG or WebP chunks walked before giving up
MAX_TEXT = 1 << 20  # metadata texts (XMP, EXIF in PNG text chunks) beyond this are ignored

TRUNCATED = "the file is truncated or corrupt; re-download it or re-encode it"
CORRUPT = "the file is corrupt; re-encode it"


def need(d, off: int, n: int, what: str, fmt: str) -> bytes:
    """``n`` bytes at ``off`` or an ImageError naming the structure that is cut short."""
    b = d.at(off, n)
    if len(b) < n:
        raise ImageError(
            f"expected the {fmt} {what} at bytes {off}..{off + n}; the data ends at byte "
            f"{d.size}; {TRUNCATED}"
        )
    return b


def check_size(fmt: str, width: int, height: int, where: str) -> None:
    if width <= 0 or height <= 0:
        raise ImageError(
            f"expected a positive image size in the {fmt} {where}; found {width}x{height} "
            f"(width x height); {CORRUPT}"
        )


def norm_orientation(value: int | None) -> int:
    return value if value is not None and 1 <= value <= 8 else 1
