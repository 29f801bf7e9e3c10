"""The GIF block walker (``vlmprep/io/video/animated._gif_walk``) sees the frames Pillow sees.

The walker decides, before Pillow composes anything, whether a frame reaches outside the screen
(Pillow would grow the canvas for it). If it walks the blocks differently from Pillow, a crafted
GIF shows it small frames while Pillow meets a 18759x6214 one: the two out-of-memory inputs of
issue 33's long animated fuzz run (2.4 and 2.9 GB) did exactly that, through an extension whose
first sub-block is the terminator (Pillow then skips the blocks after it as sub-blocks too).

Oracle: Pillow's own reader (``GifImageFile._seek`` with ``update_image=False``: the blocks are
parsed, no pixel decoded), recording each image descriptor it reads; over mutations of real
animated GIFs the frame count and the first frame outside the screen must be the walker's.
"""
from __future__ import annotations

import io
import random
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import GifImagePlugin, Image

from vlmprep import ImageError
from vlmprep.io.video import VideoLimits, decode_frames
from vlmprep.io.video.animated import _gif_walk

ROOT = Path(__file__).resolve().parents[2]
OOM = sorted((ROOT / "tests" / "data" / "animated_oom").glob("*.bin"))


def _pillow_walk(data: bytes, max_frames: int) -> tuple[int, tuple[int, int, int] | None]:
    """(frames Pillow's reader parses, up to max_frames + 1, or -1 when it refuses frame 0's
    canvas as a bomb and reads no further; the first frame reaching outside the screen as (index,
    right, bottom) or None), from Pillow's block parser without decoding."""
    seen: list[tuple[int, int, int, int]] = []
    real_i16 = GifImagePlugin.i16

    def spy(c: bytes, o: int = 0) -> int:
        if len(c) == 9 and o == 0:  # the image descriptor (x0 is read first)
            seen.append(struct.unpack_from("<HHHH", c))
        return real_i16(c, o)

    GifImagePlugin.i16 = spy
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            try:
                im = Image.open(io.BytesIO(data))
            except Image.DecompressionBombError:  # frame 0 parsed, then refused for the canvas it grows to
                return -1, _first_outside(seen, data)
            except Exception:  # noqa: BLE001 (frame 0 unreadable: Pillow parses no frame)
                return 0, _first_outside(seen, data)
            frames = 1
            try:
                while frames <= max_frames:
                    im._seek(frames, False)
                    frames += 1
            except Exception:  # noqa: BLE001 (EOFError at the end; others where a damaged frame stops it)
                pass
    finally:
        GifImagePlugin.i16 = real_i16
    return frames, _first_outside(seen, data)  # a descriptor read grows the canvas, even if the frame then fails


def _first_outside(descs, data: bytes):
    w, h = struct.unpack_from("<HH", data, 6)
    for k, (x, y, fw, fh) in enumerate(descs):
        if x + fw > w or y + fh > h:
            return (k, x + fw, y + fh)
    return None


def _seed_gifs() -> list[bytes]:
    """Real animated GIFs made by Pillow: disposals, transparency, local tables, comments."""
    rng = np.random.default_rng(0)
    out = []
    for side, n, disposal in ((16, 4, 2), (9, 3, 1), (24, 5, 3)):
        frames = [Image.fromarray(rng.integers(0, 255, (side, side + 3, 3), np.uint8)).convert(
            "P", palette=Image.Palette.ADAPTIVE, colors=8) for _ in range(n)]
        buf = io.BytesIO()
        frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=[30, 0, 70, 10, 20][:n],
                       disposal=disposal, transparency=1, loop=0, comment=b"hi")
        out.append(buf.getvalue())
    return out + [p.read_bytes()[1:] for p in OOM]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.random()
        at = rng.randrange(6, len(b)) if len(b) > 6 else 6
        if op < 0.5 and at < len(b):
            b[at] = rng.choice((0x00, 0x21, 0x2C, 0x3B, 0xF9, 0xFE, 0xFF, rng.randrange(256)))
        elif op < 0.7:
            b[at:at] = bytes([rng.choice((0x21, 0x2C, 0x00, rng.randrange(256)))])
        elif op < 0.85:
            del b[at:at + rng.randint(1, 8)]
        else:
            b[at:at + 2] = struct.pack("<H", rng.choice((0, 1, 255, 4096, 65535)))
    return bytes(b)


def test_walker_reads_the_frames_pillow_reads():
    """4,000 mutations of real animated GIFs and the two fuzz inputs: every frame count and every
    first frame outside the screen equal Pillow's parser's."""
    rng = random.Random(33)
    seeds = _seed_gifs()
    checked = outside = 0
    for i in range(4000):
        data = _mutate(rng, rng.choice(seeds)) if i >= len(seeds) else seeds[i]
        if not data.startswith((b"GIF87a", b"GIF89a")) or len(data) < 13:
            continue
        cap = 6
        _, _, delays, got_out = _gif_walk(data, cap)
        frames, want_out = _pillow_walk(data, cap)
        if frames < 0:  # Pillow refused the canvas at frame 0: a huge screen (max_source_pixels refuses
            # it before Pillow) or frame 0 outside it (the walker must see that)
            assert want_out is None or got_out == want_out, (i, data.hex())
            continue
        if frames == 0:  # Pillow cannot open it: nothing is ever composed, whatever the walker saw
            continue
        assert (min(len(delays), cap + 1), got_out) == (min(frames, cap + 1), want_out), (i, data.hex())
        checked += 1
        outside += want_out is not None
    assert checked > 3500 and outside > 50, (checked, outside)


@pytest.mark.parametrize("path", OOM, ids=lambda p: p.name)
def test_fuzz_out_of_memory_gifs_refused_before_composing(path):
    """The two long-fuzz inputs (first byte: the harness's frame pick, frame 1): refused as a frame
    outside the screen, before Pillow grows its canvas (before: 2.4 and 2.9 GB, then a codec error)."""
    data = path.read_bytes()[1:]
    with pytest.raises(ImageError, match=r"expected the GIF's frames inside its \d+x6 \(WxH\) screen, got "
                                         r"frame 1 reaching to \d+x\d+; .* re-encode it"):
        decode_frames(data, [1], VideoLimits(max_source_pixels=1 << 20, timeout_s=1.0))


def test_comment_before_a_frame_and_bytes_between_blocks_as_pillow():
    """A comment extension and stray bytes between blocks (Pillow skips them) do not hide a frame."""
    head = b"GIF89a" + struct.pack("<HHBBB", 4, 4, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    frame = b"," + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    big = b"," + struct.pack("<HHHHB", 0, 0, 5000, 5000, 0) + b"\x02\x02\x44\x01\x00"
    data = head + frame + b"!\xfe\x02hi\x00" + b"\x07\x07" + big + b";"
    assert _gif_walk(data, 5)[2:] == ([100, 100], (1, 5000, 5000))
    assert _pillow_walk(data, 5) == (2, (1, 5000, 5000))


def test_a_canvas_grown_after_seek_is_refused_before_decoding(monkeypatch):
    """The second guard: were the walk ever to miss a frame outside the screen, Pillow's seek shows
    the grown canvas and the frame is refused before it is decoded (walk stubbed to miss it)."""
    import vlmprep.io.video.animated as animated
    head = b"GIF89a" + struct.pack("<HHBBB", 64, 64, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    frame = b"," + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    big = b"," + struct.pack("<HHHHB", 8999, 8999, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    data = head + frame + big + frame + b";"
    real = animated._gif_walk
    monkeypatch.setattr(animated, "_gif_walk", lambda d, m: (*real(d, m)[:3], None))
    with pytest.raises(ImageError, match=r"expected the GIF's frames inside its 64x64 \(WxH\) canvas, got frame 1 "
                                         r"growing it to 9000x9000; .* re-encode it"):
        decode_frames(data, [2])
