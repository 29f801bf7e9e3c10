"""Sampled frames through PyAV (FFmpeg's libavcodec) when it is importable (``decoder="pyav"``):
one sequential pass that skips decoding the non-reference frames between the samples; for a
constant-rate H.264 MP4/MOV whose samples span GOPs, GOP by GOP (``read_frames_split``: a seek
to each wanted GOP's keyframe, so unwanted GOPs are never decoded, and the GOPs spread over
vlmprep's threads, each thread with its own reader and decoder).

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

__all__ = ["available", "read_frames", "read_frames_split", "splits", "gop_runs", "SPLIT_CODECS"]


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


def _place(frame: Any, meta: VideoMeta, at: list[int], out: np.ndarray) -> None:
    """One decoded frame into every position ``at`` of ``out`` that asks for it."""
    first, *rest = at
    _store(frame, meta, out[first])
    for k in rest:
        out[k] = out[first]


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
                    _place(fr, meta, where[i], out)
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


# -- GOP-parallel decode ------------------------------------------------------------------------
#: Codecs whose MP4/MOV sync samples are closed-GOP starts (H.264: an IDR picture), so decoding
#: from a keyframe gives the frames a decode from the start gives. HEVC's may be CRA pictures
#: whose leading frames need the previous GOP: not split.
SPLIT_CODECS = ("h264",)


def gop_runs(wanted: Sequence[int], keyframes: Sequence[int], workers: int
             ) -> list[list[tuple[int, list[int]]]]:
    """Distinct wanted frames and the stream's keyframes (both ascending) -> at most ``workers``
    runs, each ``[(keyframe, [its wanted frames]), ...]`` in stream order. A GOP costs the frames
    from its keyframe to its last wanted one; GOPs go to the least loaded run, largest first.

    Given wanted [5, 40, 45, 90], keyframes [0, 30, 60], 2 workers ->
    [[(60, [90])], [(0, [5]), (30, [40, 45])]] (costs 31 against 6 + 16)."""
    import bisect
    gops: dict[int, list[int]] = {}
    for i in wanted:
        k = bisect.bisect_right(keyframes, i) - 1
        gops.setdefault(keyframes[k] if k >= 0 else 0, []).append(i)
    load = [0] * max(1, min(workers, len(gops)))
    runs: list[list[tuple[int, list[int]]]] = [[] for _ in load]
    for key, frames in sorted(gops.items(), key=lambda kv: kv[0] - kv[1][-1]):  # costliest first
        w = load.index(min(load))
        runs[w].append((key, frames))
        load[w] += frames[-1] - key + 1
    return [sorted(r) for r in runs]


def _decode_run(stream: DeadlineStream, meta: VideoMeta, run: list[tuple[int, list[int]]],
                where: dict[int, list[int]], out: np.ndarray, timeout_s: float) -> set[int]:
    """One thread's GOPs: seek to each keyframe and decode to its last wanted frame, the
    non-reference frames nobody wants skipped -> the wanted frames it stored."""
    import av
    done: set[int] = set()
    with av.open(stream, mode="r") as container:
        st = container.streams.video[0]
        cc = st.codec_context
        cc.thread_count, cc.thread_type = 1, "SLICE"  # the parallelism is the GOPs'
        seconds, rate, origin = float(st.time_base or 0), meta.fps, st.start_time or 0  # splits() checked

        def index(pts: int) -> int:
            return int(round((pts - origin) * seconds * rate))

        for key, frames in run:
            want = set(frames)
            container.seek(origin + int(round(key / (rate * seconds))), stream=st,
                           backward=True, any_frame=False)
            for pkt in container.demux(st):
                if stream.expired or time.monotonic() > stream.deadline:
                    raise timed_out(f"decode frames {frames[0]}..{frames[-1]}", timeout_s)
                if pkt.pts is not None:
                    cc.skip_frame = "DEFAULT" if index(pkt.pts) in want else "NONREF"
                for fr in cc.decode(pkt):
                    i = index(fr.pts) if fr.pts is not None else -1
                    if i in want and i not in done:
                        _place(fr, meta, where[i], out)
                        done.add(i)
                if want <= done:
                    break
    return done


def read_frames_split(stream: DeadlineStream, meta: VideoMeta, indices: Sequence[int],
                      out: np.ndarray, timeout_s: float, threads: int,
                      keyframes: Sequence[int]) -> set[int]:
    """``read_frames`` of a constant-rate H.264 MP4/MOV GOP by GOP: each GOP holding a wanted
    frame is decoded from its keyframe (a seek) to its last wanted frame, so GOPs nobody wants
    are never decoded (the one pass decodes their reference frames); over ``threads`` threads,
    one run of GOPs each (``gop_runs``), each thread with its own reader (``stream.fork()``) and
    decoder -> the distinct wanted frames it could not find (the caller decodes those in one
    pass: a timestamp that maps to no index, a stream shorter than declared)."""
    from concurrent.futures import ThreadPoolExecutor
    where = positions(indices)
    runs = gop_runs(sorted(where), sorted(keyframes), threads)
    # every reader a fork: the caller's stream may be an open OpenCV capture's (decoder "auto")
    forks = [stream.fork() for _ in runs]
    if len(runs) == 1:  # one thread: the GOPs in order, seeking over the ones nobody wants
        try:
            return set(where) - _decode_run(forks[0], meta, runs[0], where, out, timeout_s)
        finally:
            forks[0].close()
    try:  # libavcodec and swscale run without the GIL: the threads decode at once
        with ThreadPoolExecutor(len(runs), thread_name_prefix="vlmprep-gop") as pool:
            found = list(pool.map(lambda a: _decode_run(a[0], meta, a[1], where, out, timeout_s),
                                  zip(forks, runs)))
        done = set().union(*found)
    finally:
        for f in forks:
            f.close()
    return set(where) - done


def meta_ok(st: Any) -> bool:
    """A stream whose timestamps map to frame indices (a time base and a positive rate)."""
    return bool(st.time_base) and bool(st.average_rate) and float(st.average_rate) > 0


def splits(stream: DeadlineStream, keyframes: Sequence[int], indices: Sequence[int]) -> bool:
    """Whether ``read_frames_split`` applies: the wanted frames span two GOPs or more and the
    codec's keyframes start closed GOPs (``SPLIT_CODECS``). Reads the stream header only."""
    import bisect

    import av
    gops = {bisect.bisect_right(keyframes, int(i)) for i in indices}
    if len(gops) < 2:
        return False
    probe = stream.fork()  # not the caller's stream: an OpenCV capture may be reading it
    try:
        with av.open(probe, mode="r") as container:
            st = container.streams.video[0]
            name = st.codec_context.name if meta_ok(st) else None
    except Exception:  # noqa: BLE001 (the one-pass reader then reports what is wrong)
        return False
    finally:
        probe.close()
    return name in SPLIT_CODECS
