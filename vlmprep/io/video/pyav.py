"""Sampled frames through PyAV (FFmpeg's libavcodec) when it is importable (``decoder="pyav"``):
one sequential pass that skips decoding the non-reference frames between the samples.

A sampled frame needs every reference frame before it back to its keyframe decoded, but not the
frames nothing refers to (the non-reference B-frames of H.264 / HEVC): FFmpeg's
``skip_frame = NONREF`` drops them unseen. OpenCV and torchcodec do not expose it. Measured on
the bench's 720p H.264 clip (x264's defaults, 20 samples at 2 fps): 154 of the 286 frames
decoded instead of all, 974 ms against 1490 ms on one thread, the same frames bit for bit
(docs/benchmarks.md "Video").

Metadata and limits come from OpenCV's probe first (``decode._run_pyav``), so the plan is the
OpenCV one; frames are indexed as OpenCV and transformers index them (by presentation order).
The skip is used only where a frame's index follows from its timestamp: a constant frame rate
(an MP4/MOV whose header says so: ``mp4.video_track_is_vfr``); elsewhere every frame is decoded
and counted. The rotation is applied after the decode (PyAV returns frames as stored). Colours:
``to_ndarray(format="rgb24")`` (swscale), the same bits as OpenCV's conversion on every test
clip (tests/video/test_video_io.py).
"""
from __future__ import annotations

import functools
import time
from typing import Any, Sequence

import numpy as np

from ...errors import ImageError
from .sources import DeadlineStream, positions, timed_out
from .types import VideoMeta

__all__ = ["available", "read_frames"]


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether PyAV imports (checked once per process)."""
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def _store(frame: Any, meta: VideoMeta, dst: np.ndarray) -> None:
    x = frame.to_ndarray(format="rgb24")
    if meta.rotation:
        x = np.rot90(x, k=-(meta.rotation // 90))
    if x.shape != dst.shape:
        raise ImageError(f"expected every frame to be {dst.shape[0]}x{dst.shape[1]} (HxW) as the "
                         f"container declares, got {x.shape[0]}x{x.shape[1]}; a stream whose size "
                         f"changes is not supported: re-encode it at one size")
    dst[...] = x


def read_frames(stream: DeadlineStream, meta: VideoMeta, indices: Sequence[int], out: np.ndarray,
                timeout_s: float, threads: int, skip: bool) -> None:
    """Decode frames ``indices`` (any order, repeats allowed) into ``out`` ``(T, H, W, 3)`` uint8
    RGB in one pass from the start. ``skip``: drop the non-reference frames that are not wanted
    (a constant frame rate stream only: indices from timestamps); else count every frame.
    ``threads``: FFmpeg's decoding threads (frame threads when more than one).

    Raises ImageError when the stream ends before a wanted frame, a frame's size differs from
    the declared one, or past the deadline."""
    import av
    where = positions(indices)
    last = max(where)
    with av.open(stream, mode="r") as container:
        st = container.streams.video[0]
        cc = st.codec_context
        cc.thread_count = max(1, int(threads))
        cc.thread_type = "FRAME" if threads > 1 else "SLICE"
        tb, rate = st.time_base, meta.fps
        origin = st.start_time or 0
        skip = bool(skip and tb is not None and rate > 0)
        seconds = float(tb) if tb is not None else 0.0

        def index(pts: int) -> int:
            return int(round((pts - origin) * seconds * rate))

        done: set[int] = set()
        count = 0  # frames out of the decoder so far (presentation order)

        def take(frames: Any) -> None:
            nonlocal count
            for fr in frames:
                i = index(fr.pts) if skip and fr.pts is not None else count
                count += 1
                if i in where and i not in done:
                    first, *rest = where[i]
                    _store(fr, meta, out[first])
                    for k in rest:
                        out[k] = out[first]
                    done.add(i)

        for pkt in container.demux(st):
            if stream.expired or time.monotonic() > stream.deadline:
                raise timed_out(f"decode frames {min(where)}..{last}", timeout_s)
            if skip and pkt.pts is not None:
                cc.skip_frame = "DEFAULT" if index(pkt.pts) in where else "NONREF"
            take(cc.decode(pkt))  # a flush packet (size 0) drains the decoder at the end
            if len(done) == len(where):
                break
    if stream.expired:
        raise timed_out(f"decode frames {min(where)}..{last}", timeout_s)
    missing = sorted(set(where) - done)
    if missing:
        raise ImageError(f"expected frame {missing[0]} of the {meta.total_num_frames} frames the "
                         f"container declares, but the stream ended first; the file is truncated "
                         f"or its header lies: re-encode or re-download it")
