"""Harness (g): animated GIF and WebP read as video (``vlmprep/io/video/animated.py``).

Input: 1 byte that picks the sampled frames, then the file (mutated animated GIF / WebP seeds;
inputs that no longer start like a GIF or a WebP are skipped: other containers go to FFmpeg,
not to this reader). The file is probed, then the picked frames decoded, each through the
body of ``probe_video`` / ``decode_frames`` (``decode._run``: ``animation_meta``, the limit
checks, ``read_animation``) without their last-resort wrapper, which turns any stray exception
into an ImageError and would hide it here. Limits: 1 Mpx canvas, timeout_s 1.

Guarantees: only ImageError escapes (saying "expected"); the decode sees the probe's metadata;
its output is ``(T, H, W, 3)`` uint8 for T picked frames; the probe and the decode each end
within timeout_s + 3 s (the deadline holds inside frame composition, not only between frames);
memory stays under run.py's ``-rss_limit_mb``.

    .venv/bin/python fuzz/fuzz_animated.py fuzz/corpus/animated fuzz/seeds/animated -max_total_time=60
"""
from __future__ import annotations

import time

import _common  # noqa: F401  (sys.path)

TIMEOUT_S = 1.0
GRACE_S = 3.0  # past the deadline: a check that waits for a whole frame's composition, a busy host
_LIMITS: list = []


def _limits():
    if not _LIMITS:
        from vlmprep.io.video.types import VideoLimits
        _LIMITS.append(VideoLimits(max_source_pixels=1 << 20, max_total_pixels=1 << 23, timeout_s=TIMEOUT_S))
    return _LIMITS[0]


def _pick(b: int, n: int) -> list[int]:
    """Frame indices in 0..n-1 from the reserved byte: spread, the last, repeats out of order, one."""
    mode = b & 3
    if mode == 0:
        k = min(n, 8)
        return [round(i * (n - 1) / max(k - 1, 1)) for i in range(k)]
    if mode == 1:
        return [n - 1]
    if mode == 2:
        return [n - 1, 0, n - 1]
    return [(b >> 2) % n]


def _timed(fn, what: str, size: int):
    from vlmprep.errors import ImageError
    t0 = time.monotonic()
    try:
        return fn()
    except ImageError as e:
        assert "expected" in str(e), f"ImageError without 'expected'\n{e}"
        return None
    finally:
        took = time.monotonic() - t0
        assert took <= TIMEOUT_S + GRACE_S, (f"{what} ran past timeout_s + {GRACE_S:g} s\n"
                                             f"{took:.1f} s for a {size}-byte file, timeout_s={TIMEOUT_S:g}")


def test_one_input(data: bytes) -> None:
    from vlmprep.io.video import decode
    from vlmprep.io.video.sources import sniff_container
    if len(data) < 2 or sniff_container(data[1:17]) not in ("gif", "webp"):
        return
    file = data[1:]
    lim = _limits()
    got = _timed(lambda: decode._run(file, lim, None, True, "opencv"), "the probe", len(file))
    if got is None:
        return
    meta = got[0]
    idx = _pick(data[0], meta.total_num_frames)
    got = _timed(lambda: decode._run(file, lim, idx, True, "opencv"), "the decode", len(file))
    if got is None:
        return
    meta2, out = got
    assert meta2 == meta, f"the decode saw other metadata than the probe\n{meta} then {meta2}"
    assert out.shape == (len(idx), meta.height, meta.width, 3) and out.dtype.name == "uint8", (
        f"not the (T, H, W, 3) uint8 output\n{out.shape} {out.dtype}")


if __name__ == "__main__":
    warm = _common.warm_on_first_seed(test_one_input, "animated")
    _common.main(test_one_input, instrument=("vlmprep.io.video.animated", "PIL.GifImagePlugin",
                                            "PIL.WebPImagePlugin"), funcs=(_pick,), warm=warm)
