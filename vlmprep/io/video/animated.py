"""Animated GIF and WebP as video, through Pillow.

Metadata comes from walking the file's blocks (GIF: graphic control extensions and image
descriptors; WebP: ANMF chunks), so probing decodes nothing. A GIF frame without a delay (0, or no
graphic control extension) lasts 10 centiseconds, as FFmpeg's gif demuxer times it (measured with
this OpenCV's FFmpeg; torchcodec uses the same demuxer), other delays as written; the
frame rate is the average one, frames / total duration, as torchcodec's ``average_fps``: an
animation with unequal delays (variable frame rate) is indexed by frame, not by time.
Frames are Pillow's composited frames converted to RGB (alpha dropped, as FFmpeg's rgb24 output).

Cost: Pillow composes every frame up to the last sampled one at full canvas size, whatever the
frames' own sizes (a GIF of 1x1 frames on a 13000x13000 screen composes 169 M pixels per frame).
So before any pixel is decoded the canvas is checked against ``max_source_pixels``
(``decode._check_meta``, from the walked header: a GIF frame reaching outside its screen, which
Pillow would grow the canvas for, is refused; the walk reads the blocks exactly as Pillow's GIF
reader does, and a canvas that still differs after Pillow's seek is refused before the frame is
decoded) and the pixels to compose, frames up to the last
sampled one x canvas, against ``max_total_pixels``, the plan's bound on the output; the deadline
is checked before each composed frame and each band of the conversion to RGB. Memory: the output,
Pillow's working canvases (at most about 16 bytes per canvas pixel: libwebp's two RGBA canvases
and the frame it hands over) and one band of rows at a time, never a whole RGB copy.
"""
from __future__ import annotations

import io
import struct
import time
from typing import Any, Sequence

import numpy as np

from ...errors import ImageError
from .sources import positions, timed_out
from .types import DEFAULT_MAX_VIDEO_TOTAL_PIXELS, VideoMeta

__all__ = ["animation_meta", "read_animation"]

_GIF_MIN_DELAY_CS, _GIF_DEFAULT_DELAY_CS = 1, 10


def _bad(fmt: str, why: str) -> ImageError:
    return ImageError(f"expected a complete animated {fmt}, got {why}; the file is truncated or corrupt: "
                      f"re-encode or re-download it")


def _gif_frames(data: bytes, max_frames: int) -> tuple[int, int, int, list[int]]:
    """(width, height, frames, delays in ms) from the GIF's blocks."""
    w, h, delays, _ = _gif_walk(data, max_frames)
    return w, h, len(delays), delays


def _gif_walk(data: bytes, max_frames: int) -> tuple[int, int, list[int], tuple[int, int, int] | None]:
    """(screen width, height, delays in ms, the first frame reaching outside the screen as
    (index, right, bottom) or None) from the GIF's blocks, read as Pillow's GIF reader reads them
    (``_GifBlocks``). Walking the file any other way lets a crafted GIF show this walker frames
    inside the screen while Pillow meets one that grows the canvas to 65535x65535."""
    if len(data) < 13:
        raise _bad("GIF", f"{len(data)} bytes (no screen descriptor)")
    w, h, flags = struct.unpack_from("<HHB", data, 6)
    blocks = _GifBlocks(data, 13 + ((3 << ((flags & 7) + 1)) if flags & 0x80 else 0))
    delays: list[int] = []
    outside = None
    while len(delays) <= max_frames:
        if delays:
            blocks.skip_sub_blocks()  # the rest of the previous frame's image data
        delay, reach, found = blocks.frame(not delays, w, h)
        if outside is None and reach is not None:
            outside = (len(delays), *reach)
        if not found:
            break
        delays.append(10 * (delay if delay >= _GIF_MIN_DELAY_CS else _GIF_DEFAULT_DELAY_CS))
    return w, h, delays, outside


class _GifBlocks:
    """A GIF's blocks from ``pos`` on, read as Pillow's ``GifImageFile._seek`` reads them: a byte
    that starts no block is skipped, an extension's sub-blocks are skipped after its first one
    even when that one is the terminator, the image data are skipped by sub-blocks."""

    def __init__(self, data: bytes, pos: int):
        self.data, self.n = data, len(data)
        self.pos = min(pos, self.n)

    def sub_block(self) -> bytes | None:
        """Pillow's ``data()``: a length byte, then that many bytes (fewer at the end); None
        for the terminator (or the end)."""
        d, p = self.data, self.pos
        if p < self.n and d[p]:
            self.pos = min(self.n, p + 1 + d[p])
            return d[p + 1:p + 1 + d[p]]
        self.pos = min(self.n, p + 1)
        return None

    def skip_sub_blocks(self) -> None:
        while self.sub_block():
            pass

    def frame(self, first: bool, w: int, h: int) -> tuple[int, tuple[int, int] | None, bool]:
        """The blocks up to the next frame's image data: (its delay in centiseconds, (right,
        bottom) when its descriptor reaches outside the w x h screen (Pillow grows the canvas
        there, even if the frame then fails), whether Pillow gets a frame)."""
        delay = 0
        while self.pos < self.n and self.data[self.pos] != 0x3B:
            kind = self.data[self.pos]
            self.pos += 1
            if kind == 0x21:
                ok, got = self._extension(first)
                if not ok:
                    return delay, None, False
                delay = delay if got is None else got
            elif kind == 0x2C:
                reach, found = self._descriptor(w, h)
                return delay, reach, found
        return delay, None, False

    def _extension(self, first: bool) -> tuple[bool, int | None]:
        """After a 0x21: (whether Pillow reads it, a graphic control extension's delay or None)."""
        if self.pos >= self.n:
            return False, None
        label = self.data[self.pos]
        self.pos += 1
        block = self.sub_block()
        delay = None
        if label == 0xF9 and block is not None:
            if len(block) < 3:
                return False, None  # Pillow fails on this frame: it is not one
            delay = struct.unpack_from("<H", block, 1)[0]
        elif label == 0xFE:
            while block:
                block = self.sub_block()
            return True, None  # a comment: Pillow goes on with the next byte
        elif label == 0xFF and first and block is not None and block.startswith(b"NETSCAPE2.0"):
            self.sub_block()
        self.skip_sub_blocks()
        return True, delay

    def _descriptor(self, w: int, h: int) -> tuple[tuple[int, int] | None, bool]:
        """After a 0x2C: ((right, bottom) when outside the screen, whether the frame is read)."""
        if self.pos + 9 > self.n:
            return None, False
        x, y, fw, fh = struct.unpack_from("<HHHH", self.data, self.pos)
        reach = (x + fw, y + fh) if x + fw > w or y + fh > h else None
        packed = self.data[self.pos + 8]
        self.pos += 9 + ((3 << ((packed & 7) + 1)) if packed & 0x80 else 0)
        if self.pos >= self.n:
            return reach, False  # no LZW code size: Pillow fails on this frame
        self.pos += 1
        return reach, True


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
        try:
            with Image.open(io.BytesIO(data)) as im:
                w, h = im.size
        except Exception as e:  # noqa: BLE001 (as in read_animation)
            raise _bad("WebP", f"a file Pillow cannot open ({type(e).__name__}: {e})") from e
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


#: Rows per step of the conversion to RGB: about 4 M pixels (16 MB of Pillow's RGB) at a time.
_BAND_PIXELS = 1 << 22


def read_animation(data: bytes, meta: VideoMeta, indices: Sequence[int], out: np.ndarray,
                   deadline: float, timeout_s: float,
                   max_pixels: int = DEFAULT_MAX_VIDEO_TOTAL_PIXELS) -> None:
    """Frames ``indices`` of a GIF/WebP into ``out`` ``(T, H, W, 3)`` uint8 RGB: every frame up to
    the last one sampled is composed, in order (Pillow composes each from the ones before), and
    the sampled ones converted into ``out`` a band of rows at a time.

    Refused before anything is decoded: composing more than ``max_pixels`` (VideoLimits.
    max_total_pixels) canvas pixels in all, or a GIF frame reaching outside the screen. Past
    ``deadline`` (checked per composed frame and per band) an ImageError naming ``timeout_s``;
    whatever Pillow raises on a damaged file, an ImageError too."""
    from PIL import Image
    where = positions(indices)
    fmt = meta.container.upper()
    last = max(where)
    composed = (last + 1) * meta.width * meta.height
    if composed > max_pixels:
        raise ImageError(
            f"expected an animated {fmt} whose sampled frames need at most {max_pixels:,} composed pixels "
            f"(VideoLimits.max_total_pixels), got frame {last} of a {meta.width}x{meta.height} (WxH) canvas: "
            f"{last + 1:,} frames composed x {meta.width * meta.height:,} = {composed:,} (each frame is "
            f"composed at full canvas size); sample earlier frames, re-encode it as a video (e.g. MP4), "
            f"or raise max_total_pixels if it is trusted")
    if meta.container == "gif":
        outside = _gif_walk(data, last)[3]
        if outside is not None and outside[0] <= last:
            k, right, bottom = outside
            raise ImageError(f"expected the GIF's frames inside its {meta.width}x{meta.height} (WxH) screen, "
                             f"got frame {k} reaching to {right}x{bottom}; the file is corrupt or hostile: "
                             f"re-encode it")
    try:
        im = Image.open(io.BytesIO(data))
    except Exception as e:  # noqa: BLE001 (Pillow's plugins raise whatever a damaged file makes them meet)
        raise _bad(fmt, f"a file Pillow cannot open ({type(e).__name__}: {e})") from e
    with im:
        if im.size != (meta.width, meta.height):
            raise ImageError(f"expected a {meta.width}x{meta.height} (WxH) {fmt} as its header declares, "
                             f"Pillow reads {im.size[0]}x{im.size[1]}; the file is corrupt: re-encode it")
        for f in range(last + 1):
            if time.monotonic() > deadline:
                raise timed_out(f"compose frame {f}", timeout_s)
            try:
                im.seek(f)
                _same_canvas(im, meta, f)
                im.load()
                if f in where:
                    first, *rest = where[f]
                    _to_rgb(im, out[first], deadline, timeout_s, f)
                    for k in rest:
                        out[k] = out[first]
            except (ImageError, MemoryError):
                raise
            except EOFError as e:
                raise ImageError(f"expected frame {f} of the {meta.total_num_frames} frames the {fmt} "
                                 f"declares, it has fewer; the file is truncated: re-encode it") from e
            except Exception as e:  # noqa: BLE001 (as at open)
                raise _bad(fmt, f"frame {f} unreadable ({type(e).__name__}: {e})") from e


def _same_canvas(im: Any, meta: VideoMeta, frame: int) -> None:
    """A canvas Pillow grew at seek (a frame the block walk missed) is refused before decoding."""
    if im.size != (meta.width, meta.height):
        raise ImageError(f"expected the {meta.container.upper()}'s frames inside its {meta.width}x{meta.height} "
                         f"(WxH) canvas, got frame {frame} growing it to {im.size[0]}x{im.size[1]}; the file "
                         f"is corrupt or hostile: re-encode it")


def _to_rgb(im: Any, dst: np.ndarray, deadline: float, timeout_s: float, frame: int) -> None:
    """Pillow's frame ``im`` -> ``dst`` ``(H, W, 3)`` uint8, as ``np.asarray(im.convert("RGB"))``
    (a pixelwise conversion) a band of rows at a time: no whole-canvas copy beside ``dst``."""
    w, h = im.size
    rows = max(1, _BAND_PIXELS // w)
    for y in range(0, h, rows):
        if time.monotonic() > deadline:
            raise timed_out(f"convert frame {frame}", timeout_s)
        band = im.crop((0, y, w, min(h, y + rows)))
        if band.mode != "RGB":
            band = band.convert("RGB")
        dst[y:y + band.size[1]] = np.frombuffer(band.tobytes(), np.uint8).reshape(band.size[1], w, 3)
