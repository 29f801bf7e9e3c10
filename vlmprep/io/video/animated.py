"""Animated GIF and WebP as video, through Pillow.

Metadata comes from walking the file's blocks (GIF: graphic control extensions and image
descriptors; WebP: ANMF chunks), so probing decodes nothing. A GIF frame without a delay (0, or no
graphic control extension) lasts 10 centiseconds, as FFmpeg's gif demuxer times it (measured with
this OpenCV's FFmpeg; torchcodec uses the same demuxer), other delays as written; the
frame rate is the average one, frames / total duration, as torchcodec's ``average_fps``: an
animation with unequal delays (variable frame rate) is indexed by frame, not by time.
Frames are Pillow's composited frames converted to RGB (alpha dropped, as FFmpeg's rgb24 output).
"""
from __future__ import annotations

import io
import struct
import time
from typing import Any, Sequence

import numpy as np

from ...errors import ImageError
from .sources import positions, timed_out
from .types import VideoMeta

__all__ = ["animation_meta", "read_animation"]

_GIF_MIN_DELAY_CS, _GIF_DEFAULT_DELAY_CS = 1, 10


def _bad(fmt: str, why: str) -> ImageError:
    return ImageError(f"expected a complete animated {fmt}, got {why}; the file is truncated or corrupt: "
                      f"re-encode or re-download it")


def _gif_frames(data: bytes, max_frames: int) -> tuple[int, int, int, list[int]]:
    """(width, height, frames, delays in ms) from the GIF's blocks."""
    if len(data) < 13:
        raise _bad("GIF", f"{len(data)} bytes (no screen descriptor)")
    w, h, flags = struct.unpack_from("<HHB", data, 6)
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    delays: list[int] = []
    delay = 0
    n = len(data)
    while pos < n:
        kind = data[pos]
        if kind == 0x3B:  # trailer
            break
        if kind == 0x21:  # extension: label, then sub-blocks ending with a zero length
            if pos + 1 < n and data[pos + 1] == 0xF9 and pos + 8 <= n:
                delay = struct.unpack_from("<H", data, pos + 4)[0]
            pos += 2
        elif kind == 0x2C:  # image descriptor (9 bytes), local colour table, LZW code size
            if pos + 10 > n:
                break
            packed = data[pos + 9]
            pos += 10 + (3 << ((packed & 7) + 1) if packed & 0x80 else 0) + 1
            delays.append(10 * (delay if delay >= _GIF_MIN_DELAY_CS else _GIF_DEFAULT_DELAY_CS))
            delay = 0
            if len(delays) > max_frames:
                break
        else:
            raise _bad("GIF", f"an unknown block 0x{kind:02X} at byte {pos:,}")
        while pos < n:  # sub-blocks
            size = data[pos]
            pos += 1 + size
            if not size:
                break
    return w, h, len(delays), delays


def _webp_frames(data: bytes, max_frames: int) -> tuple[int, int, int, list[int]]:
    """(canvas width, height, frames, durations in ms) from the WebP's VP8X and ANMF chunks."""
    pos, n = 12, min(len(data), 8 + struct.unpack_from("<I", data, 4)[0]) if len(data) >= 12 else 0
    w = h = 0
    delays: list[int] = []
    still = False
    while pos + 8 <= n:
        fourcc, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if fourcc == b"VP8X" and body + 10 <= n:
            w = 1 + int.from_bytes(data[body + 4:body + 7], "little")
            h = 1 + int.from_bytes(data[body + 7:body + 10], "little")
        elif fourcc == b"ANMF" and body + 16 <= n:
            delays.append(int.from_bytes(data[body + 12:body + 15], "little"))
            if len(delays) > max_frames:
                break
        elif fourcc in (b"VP8 ", b"VP8L"):
            still = True
        pos = body + size + (size & 1)
    if not delays and still:  # a still WebP: one frame (Pillow reads its size)
        from PIL import Image
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
        delays = [0]
    return w, h, len(delays), delays


def animation_meta(data: bytes, container: str, max_frames: int) -> VideoMeta:
    walk = _gif_frames if container == "gif" else _webp_frames
    w, h, n, delays = walk(data, max_frames)
    if n == 0:
        raise ImageError(f"expected at least one frame in the {container.upper()}, got none; the file is "
                         f"empty, truncated or corrupt: re-encode it")
    total_ms = sum(delays)
    fps = n / (total_ms / 1000.0) if total_ms > 0 else 0.0
    return VideoMeta(total_num_frames=n, fps=fps, duration=total_ms / 1000.0, height=h, width=w,
                     rotation=0, codec=container.upper(), container=container)


def read_animation(data: bytes, meta: VideoMeta, indices: Sequence[int], out: np.ndarray,
                   deadline: float, timeout_s: float) -> None:
    """Frames ``indices`` of a GIF/WebP into ``out`` ``(T, H, W, 3)`` uint8 RGB (frames are visited
    in ascending order; Pillow composes each from the ones before)."""
    from PIL import Image
    where = positions(indices)
    fmt = meta.container.upper()
    with Image.open(io.BytesIO(data)) as im:
        if im.size != (meta.width, meta.height):
            raise ImageError(f"expected a {meta.width}x{meta.height} (WxH) {fmt} as its header declares, "
                             f"Pillow reads {im.size[0]}x{im.size[1]}; the file is corrupt: re-encode it")
        for target in sorted(where):
            if time.monotonic() > deadline:
                raise timed_out(f"decode frame {target}", timeout_s)
            try:
                im.seek(target)
                frame: Any = np.asarray(im.convert("RGB"))
            except EOFError as e:
                raise ImageError(f"expected frame {target} of the {meta.total_num_frames} frames the {fmt} "
                                 f"declares, it has fewer; the file is truncated: re-encode it") from e
            first, *rest = where[target]
            out[first] = frame
            for k in rest:
                out[k] = frame
