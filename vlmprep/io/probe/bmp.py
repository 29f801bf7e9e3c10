"""BMP: the file and DIB headers (size, bit depth, palette or alpha bitfields)."""
from __future__ import annotations

import struct

from vlmprep.errors import ImageError

from .common import check_size, need
from .result import ProbeResult

_BMP_INFO_HEADERS = (40, 52, 56, 64, 108, 124)
# 32-bit BITFIELDS masks (r, g, b, a) that Pillow decodes with alpha
_BMP_ALPHA_MASKS = frozenset((
    (0xFF000000, 0xFF0000, 0xFF00, 0xFF),
    (0xFF, 0xFF00, 0xFF0000, 0xFF000000),
    (0xFF0000, 0xFF00, 0xFF, 0xFF000000),
    (0xFF000000, 0xFF00, 0xFF, 0xFF0000),
    (0, 0, 0, 0),
))


def probe_bmp(d) -> ProbeResult:
    raw = need(d, 14, 4, "DIB header size", "BMP")
    header_size = struct.unpack("<L", raw)[0]
    if header_size == 12:  # BITMAPCOREHEADER
        width, height, _, bits = struct.unpack("<HHHH", need(d, 18, 8, "core header", "BMP"))
        compression, colors, entry = 0, 0, 3
    elif header_size in _BMP_INFO_HEADERS:  # BITMAPINFOHEADER and later
        fields = need(d, 18, 36, "info header", "BMP")
        width, height, _, bits, compression = struct.unpack_from("<llHHL", fields)
        colors, entry = struct.unpack_from("<L", fields, 28)[0], 4
        height = abs(height)  # negative height = top-down rows
    else:
        raise ImageError(
            f"expected a BMP header of 12, 40, 52, 56, 64, 108 or 124 bytes; found {header_size}; "
            "re-encode the file as PNG or JPEG"
        )
    check_size("BMP", width, height, "header")
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
