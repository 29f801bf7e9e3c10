"""Issue 33, deliverable 3: an animation or a data: URI costs what its plan says, not what the file
can make a decoder do.

Animated GIF/WebP as video: the pixels Pillow composes (every frame up to the last sampled one, at
full canvas size) are counted against ``max_total_pixels`` before a frame is decoded, the
deadline is checked per composed frame, a GIF frame outside its screen is refused, and the
frames stay bit-identical to Pillow's. data: URIs and base64 strings: refused from their length
when even the shortest decode is over ``max_source_bytes``, else decoded in chunks that stop at the
cap, equal to ``urllib.parse.unquote_to_bytes`` / ``base64.b64decode``. Time and peak memory are
measured in a child process (``_cost``) where they are the point.
"""
from __future__ import annotations

import base64
import inspect
import io
import json
import random
import re
import struct
import time
import urllib.parse

import numpy as np
import pytest
from _support.guarded import describe, run_isolated
from PIL import Image

import vlmprep
import vlmprep.io.datauri as datauri
import vlmprep.io.inputs as inputs
import vlmprep.io.video.animated as animated
from vlmprep import ImageError
from vlmprep.io.video import VideoLimits, decode_frames, probe_video


# -- builders (small on disk, large canvases) --------------------------------------------------------
def _gif(side: int, frames: int, *, at: tuple[int, int] | None = None, at_frame: int = 1) -> bytes:
    """A GIF89a with a ``side`` x ``side`` screen, a 2-colour global table (so Pillow composes
    frames after the first in RGB at full canvas size) and ``frames`` 1x1 frames of 24 bytes (the
    85-byte repro: 3 of them on 13000x13000); frame ``at_frame`` placed at ``at`` (x, y) when
    given (outside the screen, to test that)."""
    out = b"GIF89a" + struct.pack("<HHBBB", side, side, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    for i in range(frames):
        x, y = at if at is not None and i == at_frame else (i % side, 0)
        out += b"!\xf9\x04" + struct.pack("<BHB", 0, 10, 0) + b"\x00"  # 100 ms
        out += b"," + struct.pack("<HHHHB", x, y, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return out + b";"


def _chunk(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("<I", len(body)) + body + b"\x00" * (len(body) & 1)


def _webp(side: int, frames: int) -> bytes:
    """An animated WebP with a ``side`` x ``side`` canvas and ``frames`` 1x1 lossless frames."""
    one = io.BytesIO()
    Image.new("RGB", (1, 1), (255, 0, 0)).save(one, "WEBP", lossless=True)
    vp8l = one.getvalue()[12:]
    size = struct.pack("<I", side - 1)[:3] * 2
    body = _chunk(b"VP8X", b"\x02\x00\x00\x00" + size) + _chunk(b"ANIM", bytes(6))
    for i in range(frames):
        xy = struct.pack("<I", i % (side // 2))[:3] + bytes(3)
        body += _chunk(b"ANMF", xy + bytes(6) + struct.pack("<I", 100)[:3] + b"\x00" + vp8l)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def _costs(setup: str, cases: dict[str, str], video: bool = False, timeout: float = 300) -> dict:
    """Runs ``setup`` then each case's expression, in order, in one child process -> {case:
    {"outcome", "seconds", "mb"}}: the call's wall time and how far it raised the peak RSS above
    the peak before it (a high-water mark: so inputs are built first, and cases run smallest
    first). The builders above are defined there; ``video``: decode a tiny GIF first (the
    decoders' one-time imports)."""
    builders = "".join(inspect.getsource(f) + "\n" for f in (_gif, _chunk, _webp))
    warm = "from vlmprep.io.video import decode_frames\ndecode_frames(_gif(8, 2), [1])\n" if video else ""
    child = ("import io, json, resource, struct, time\nfrom PIL import Image\n" + builders + warm + setup + "\n"
             "got = {}\n"
             f"for name, expr in {cases!r}.items():\n"
             "    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
             "    t = time.monotonic()\n"
             "    try:\n        eval(expr); outcome = 'ok'\n"
             "    except Exception as e:\n        outcome = type(e).__name__ + ': ' + str(e)\n"
             "    got[name] = {'outcome': outcome, 'seconds': time.monotonic() - t,\n"
             "                 'mb': (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024}\n"
             "print(json.dumps(got))\n")
    proc = run_isolated(child, timeout=timeout)
    assert proc.returncode == 0, describe(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """The decoders' one-time imports, before anything here is timed."""
    decode_frames(_gif(8, 2), [1])


def _pillow_frames(data: bytes, indices) -> np.ndarray:
    """The oracle: each frame as Pillow composes it, whole, converted to RGB (the reader before
    issue 33)."""
    with Image.open(io.BytesIO(data)) as im:
        out = []
        for i in indices:
            im.seek(i)
            out.append(np.asarray(im.convert("RGB")))
    return np.stack(out)


# -- animations ----------------------------------------------------------------------------------------
def test_85_byte_gif_on_13000_canvas_refused_before_composing():
    """The repro: 3 frames of 1x1 on a 13000x13000 screen. With a serving pixel limit it is refused
    from the header; with the defaults (a 169 M pixel canvas is legal: see test_peak_memory) a
    short timeout stops it between composed frames, not after all of them (17 s before)."""
    data = _gif(13000, 3)
    assert len(data) == 89  # the 85 bytes, with a colour table
    with pytest.raises(ImageError, match=r"max_source_pixels.*13000x13000") as e:
        decode_frames(data, [2], VideoLimits(max_source_pixels=1 << 24))
    assert "expected" in str(e.value) and "raise max_source_pixels" in str(e.value)
    t = time.monotonic()
    # on a quiet machine the deadline falls while composing ("compose frame N"); a loaded one can
    # pass it earlier ("be read"): either way well before the three 13000^2 frames are composed
    with pytest.raises(ImageError, match=r"within 0.01 s \(VideoLimits.timeout_s\)"):
        decode_frames(data, [2], VideoLimits(timeout_s=0.01))
    assert time.monotonic() - t < 5


@pytest.mark.parametrize("fmt", ["gif", "webp"])
def test_many_frames_over_a_large_canvas_refused_from_the_plan(fmt):
    """The 6.9 KB GIF / 10 KB WebP repros (79 s, 85.5 s, 5.7 GB): 240 frames on 3000x3000, 4
    sampled: the plan's output is 36 M pixels, but reaching the last frame composes 2.2 G: refused
    before any frame is decoded, through the Processor as through decode_frames."""
    data = _gif(3000, 240) if fmt == "gif" else _webp(3000, 240)
    assert len(data) < 12_000
    meta = probe_video(data)
    assert (meta.total_num_frames, meta.width, meta.height) == (240, 3000, 3000)
    t = time.monotonic()
    with pytest.raises(ImageError, match="max_total_pixels") as e:
        decode_frames(data, [0, 80, 160, 239])
    msg = str(e.value)
    assert "expected" in msg and "240 frames composed x 9,000,000 = 2,160,000,000" in msg
    assert "sample earlier frames" in msg
    assert time.monotonic() - t < 0.5  # before: every frame composed (tens of seconds)
    # the earlier frames stay within the budget: decoded
    assert decode_frames(data, [0, 2]).shape == (2, 3000, 3000, 3)
    proc = vlmprep.Processor("qwen2-vl", errors="skip")
    v = proc(videos=[vlmprep.Video(data, num_frames=4)]).videos  # frames 0, 60, 120, 180
    assert list(v.errors) == [0] and "181 frames composed" in str(v.errors[0]), v.errors


class _SteppingClock:
    """Stands in for the ``time`` module: each ``monotonic()`` reading is ``step`` s later."""

    def __init__(self, step: float) -> None:
        self.t, self.step = time.monotonic(), step

    def monotonic(self) -> float:
        self.t += self.step
        return self.t


@pytest.mark.parametrize("fmt", ["gif", "webp"])
def test_deadline_checked_per_composed_frame(fmt, monkeypatch):
    """Within the pixel budget (400 frames x 1 M pixels) but past timeout_s: stopped at the next
    composed frame (before: checked only before the one sampled frame, so all 400 ran)."""
    data = _gif(1000, 400) if fmt == "gif" else _webp(1000, 400)
    # the composer's clock moves 10 ms per reading, so the deadline falls at the ~20th check
    # whatever this machine's speed (CI composed all 400 frames in under 0.2 s of real time)
    clock = _SteppingClock(0.01)
    monkeypatch.setattr(animated, "time", clock)
    with pytest.raises(ImageError, match=r"compose frame \d+ within 0.2 s \(VideoLimits.timeout_s\)") as e:
        decode_frames(data, [399], VideoLimits(timeout_s=0.2))
    frame = int(re.search(r"compose frame (\d+)", str(e.value)).group(1))
    assert 5 <= frame <= 30, frame


def test_gif_frame_outside_its_screen_refused_before_composing():
    """Pillow grows the canvas for a frame reaching outside the screen (64x64 -> 9000x9000 here):
    refused from the blocks when that frame would be composed; a frame before it still decodes."""
    data = _gif(64, 3, at=(8999, 8999), at_frame=1)
    assert decode_frames(data, [0]).shape == (1, 64, 64, 3)
    with pytest.raises(ImageError, match=r"expected the GIF's frames inside its 64x64 \(WxH\) screen, got "
                                         r"frame 1 reaching to 9000x9000; .* re-encode it"):
        decode_frames(data, [2])


@pytest.mark.stress
def test_peak_memory_of_the_animation_repros():
    """Peak RSS of each repro in a fresh process: the refusals allocate nothing; the 85-byte GIF
    with the defaults (3 frames of 13000x13000 are a legal plan: 1.5 GB of output) peaks at its
    output and one composed canvas, not at three more whole copies (before: 3.1 GB, +1.6 GB)."""
    got = _costs("from vlmprep.io.video import decode_frames, VideoLimits\n"
                 "gif, webp, outside, g85 = _gif(3000, 240), _webp(3000, 240), _gif(64, 3, at=(8999, 8999)), "
                 "_gif(13000, 3)\nidx = [0, 80, 160, 239]", {
                     "gif": "decode_frames(gif, idx)", "webp": "decode_frames(webp, idx)",
                     "outside": "decode_frames(outside, [2])",
                     "85_bytes": "decode_frames(g85, [0, 1, 2])"}, video=True)
    for name in ("gif", "webp", "outside"):
        assert got[name]["outcome"].startswith("ImageError") and got[name]["mb"] < 20, (name, got[name])
        assert got[name]["seconds"] < 1, (name, got[name])
    out_mb = 3 * 13000 * 13000 * 3 / 2**20
    assert got["85_bytes"]["outcome"] == "ok", got["85_bytes"]
    assert got["85_bytes"]["mb"] < out_mb + 1.5 * 13000 * 13000 * 4 / 2**20, got["85_bytes"]


def _gif_rich(seed: int) -> bytes:
    """A GIF Pillow composes through its RGB/RGBA paths: local palettes, transparency, every
    disposal method, frames of their own size and place."""
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(7):
        a = rng.integers(0, 256, (37, 53, 3), np.uint8)
        im = Image.fromarray(a).quantize(colors=int(rng.integers(2, 200)))
        frames.append(im.crop((i, i // 2, 53 - 2 * i, 37 - i)) if i % 2 else im)
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=[40, 0, 70] * 2 + [10],
                   disposal=[0, 1, 2, 3, 2, 1, 3], transparency=3, optimize=False)
    return buf.getvalue()


def _webp_rich(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    frames = [Image.fromarray(rng.integers(0, 256, (41, 29, 4), np.uint8), "RGBA") for _ in range(6)]
    buf = io.BytesIO()
    frames[0].save(buf, "WEBP", save_all=True, append_images=frames[1:], duration=50, lossless=True)
    return buf.getvalue()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_frames_bit_identical_to_pillow(seed, monkeypatch):
    """Frames composed one by one and converted in bands (small bands here, so rows split) equal
    Pillow's whole-frame convert("RGB"), for GIF (palettes, transparency, disposals) and WebP
    (alpha, blending), any order and repeats."""
    monkeypatch.setattr(animated, "_BAND_PIXELS", 100 + 37 * seed)
    for data in (_gif_rich(seed), _webp_rich(seed)):
        n = probe_video(data).total_num_frames
        idx = [n - 1, 0, 3, 3, 1] if seed else list(range(n))
        np.testing.assert_array_equal(decode_frames(data, idx), _pillow_frames(data, idx))


# -- data: URIs and base64 -----------------------------------------------------------------------------
def _payload(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, np.uint8).tobytes()


@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_percent_encoded_at_the_cap_equals_unquote(chunk, monkeypatch):
    """Under or at the cap: the bytes ``unquote_to_bytes`` gives (upper / lower hex, unreserved
    letters kept, stray '%', UTF-8 text, escapes cut by chunk ends); one byte over: refused."""
    monkeypatch.setattr(datauri, "_CHUNK", chunk)
    raw = _payload(3000)
    texts = [urllib.parse.quote_from_bytes(raw), urllib.parse.quote_from_bytes(raw, safe="").lower(),
             "%" + urllib.parse.quote_from_bytes(raw[:40]) + "%4%zz%%41%e9%", "é%41ü%C3%A9" * 50, "plain"]
    for text in texts:
        want = urllib.parse.unquote_to_bytes(text)
        assert inputs.decode_data_uri("data:image/png," + text, len(want)) == want
        with pytest.raises(ImageError, match=r"expected an encoded image of at most .* max_source_bytes"):
            inputs.decode_data_uri("data:image/png," + text, len(want) - 1)
    # a short text of 2-byte characters decodes past the cap: refused (was returned whole)
    with pytest.raises(ImageError, match="max_source_bytes"):
        inputs.decode_data_uri("data:image/png," + "é" * 600, 1000)
    # a lone surrogate (a JSON body can carry one): an ImageError, not UnicodeEncodeError
    with pytest.raises(ImageError, match="UTF-8 cannot encode"):
        inputs.decode_data_uri("data:image/png,%41\ud800", 100)


def test_data_uri_bombs_bounded():
    """The percent-encoded repro (209 MB: 87 s, 17.7 GB; 31 MB: 9 s, +2.4 GB) at 12 MB of '%41',
    base64 with a space every 2 letters (was split into one string per pair) and a 9 MB header of
    parameters (was split likewise), each in a fresh process: refused from the length alone when
    a third of it is over the cap; else decoded in chunks, with little memory beside the output."""
    got = _costs("from vlmprep.io.inputs import decode_data_uri, decode_base64\n"
                 "uri = ''.join(['data:image/png,'] + ['%41' * (1 << 16)] * 64)\n"
                 "b64 = 'QU ' * 3_500_000\nhead = 'data:image/png' + ';ab' * 3_000_000 + ',QUFB'", {
                     "pct_over_cap": "decode_data_uri(uri, 1 << 20)",
                     "header": "decode_data_uri(head)",
                     "b64_spaces": "len(decode_base64(b64)) == 5_250_000 or 1 / 0",
                     "pct": "decode_data_uri(uri) == b'A' * (64 << 16) or 1 / 0"})
    assert "got 4,194,304 bytes or more in a percent-encoded data URI" in got["pct_over_cap"]["outcome"], got
    assert "expected a data URI header" in got["header"]["outcome"], got
    for name in ("pct_over_cap", "header"):
        assert got[name]["seconds"] < 0.05 and got[name]["mb"] < 5, (name, got[name])
    assert got["b64_spaces"]["outcome"] == "ok" and got["b64_spaces"]["mb"] < 60, got  # before: +200 MB
    assert got["pct"]["outcome"] == "ok" and got["pct"]["mb"] < 100, got  # before: +900 MB
    assert got["pct"]["seconds"] < 5, got


@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_base64_at_the_cap_equals_b64decode(chunk, monkeypatch):
    """Every spelling clients send (standard, URL-safe, unpadded, MIME line breaks): at the cap the
    bytes of ``base64.b64decode``; one byte under the decoded size: refused before decoding."""
    monkeypatch.setattr(datauri, "_CHUNK", chunk)
    raw = _payload(3001, 1)
    std = base64.b64encode(raw).decode()
    for s in (std, base64.urlsafe_b64encode(raw).decode().rstrip("="), base64.encodebytes(raw).decode(),
              "\r\n".join(std[i:i + 76] for i in range(0, len(std), 76))):
        assert inputs.decode_base64(s, len(raw)) == raw
        assert inputs.decode_data_uri("data:image/png;base64," + s, len(raw)) == raw
        with pytest.raises(ImageError, match="once decoded"):
            inputs.decode_data_uri("data:image/png;base64," + s, len(raw) - 1)


def _b64_before(s: str) -> bytes | None:
    """decode_base64 before issue 33 (one whole-string b64decode), as the oracle; None: refused."""
    if any(c in s for c in " \t\r\n"):
        s = "".join(s.split())
    n = len(s) - (2 if s.endswith("==") else 1 if s.endswith("=") else 0)
    if n % 4 == 1:
        return None
    try:
        return base64.b64decode(s + "=" * (-len(s) % 4), altchars=b"-_" if "-" in s or "_" in s else None,
                                validate=True)
    except ValueError:  # binascii.Error included
        return None


def test_base64_same_answers_as_one_whole_decode(monkeypatch):
    """Random strings over the alphabet, padding, whitespace and junk, decoded 3 characters per
    chunk (padding, whitespace and quads cut everywhere): accepted and refused exactly as one
    whole-string b64decode (ASCII whitespace only)."""
    monkeypatch.setattr(datauri, "_CHUNK", 3)
    rng = random.Random(33)
    letters = "ABab09+/-_=== \n\r\t*"
    for i in range(4000):
        if i % 2:
            s = "".join(rng.choice(letters) for _ in range(rng.randrange(0, 24)))
        else:
            s = base64.b64encode(_payload(rng.randrange(0, 20), i)).decode()
            s = "\n".join(s[j:j + rng.randrange(1, 6)] for j in range(0, len(s), 3)) + "=" * rng.randrange(0, 3)
        want = _b64_before(s)
        try:
            got = inputs.decode_base64(s, 1 << 10)
        except ImageError as e:
            assert want is None, (s, want, str(e))
            assert "expected a base64 string to be valid base64" in str(e)
            continue
        assert got == want, s


def test_resolve_gives_an_image_error_row():
    """Through the Processor: an over-cap percent-encoded URI is an error row naming the cap."""
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip", max_source_bytes=1000)
    b = proc(["data:image/png," + "%00" * 1001])
    assert 0 in b.errors and "max_source_bytes" in b.errors[0].reason and "expected" in b.errors[0].reason
