"""GIF: the logical screen and the blocks up to the first image descriptor."""
from __future__ import annotations

import struct

from .common import check_size, need
from .result import ProbeResult

MAX_GIF_STEPS = 10000  # GIF extension sub-blocks walked before the first frame


def probe_gif(d) -> ProbeResult:
    screen = need(d, 0, 13, "logical screen descriptor", "GIF")
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
    while steps < MAX_GIF_STEPS:
        steps += 1
        kind = d.at(pos, 2)
        if not kind or kind[:1] == b";":
            break
        if kind[:1] == b"!" and len(kind) == 2:
            block = d.at(pos + 2, 2)  # first sub-block: size, then GCE flags
            if kind[1] == 0xF9 and len(block) == 2 and block[0] >= 4 and block[1] & 1:
                transparency = True
            pos += 2
            while steps < MAX_GIF_STEPS:  # data sub-blocks end with a zero length
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
    check_size("GIF", width, height, "logical screen descriptor")
    mode, channels = ("P", 3) if palette_needed else ("L", 1)
    return ProbeResult(
        "gif", width, height, 1, channels + transparency, 8, mode,
        has_alpha=transparency, animated=False, progressive=False,
    )


def _gif_palette_needed(p: bytes) -> bool:
    """False for an identity gray ramp, which Pillow opens as mode "L" (Pillow's test)."""
    return any(not (i == p[3 * i] == p[3 * i + 1] == p[3 * i + 2]) for i in range(len(p) // 3))
