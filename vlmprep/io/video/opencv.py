"""Containers through OpenCV's FFmpeg (cv2.VideoCapture on a Python stream): MP4, MOV, MKV, WebM,
AVI, GIF and whatever else FFmpeg demuxes; codecs are the ones its libavcodec decodes.

Frames are FFmpeg's, converted to RGB by OpenCV (swscale), with the container's display rotation
applied (``CAP_PROP_ORIENTATION_AUTO``, on by default), as torchcodec (transformers' default video
decoder) applies it. FFmpeg decodes with vlmprep's thread count (``CAP_PROP_N_THREADS``; OpenCV's
own default is every core). Sampled frames are visited in ascending order and each is reached by
the cheaper of two ways (``plan_reads``): ``grab()`` (decode without the colour conversion) over
the frames in between, or a seek (``CAP_PROP_POS_FRAMES``: FFmpeg restarts decoding at a
keyframe before the frame). Where the keyframes are known (MP4/MOV: the track's sync samples) the
frames each way decodes are counted; elsewhere a frame ``SEEK_MIN_GAP`` or more ahead is sought.
"""
from __future__ import annotations

import bisect
import time
from typing import Any, Sequence

import numpy as np

from ...errors import ImageError
from .sources import DeadlineStream, positions, timed_out
from .types import VideoMeta

__all__ = ["open_capture", "capture_meta", "read_frames", "plan_reads", "SEEK_MIN_GAP", "SEEK_BACK",
           "SEEK_COST", "RAW_TAGS"]

#: A seek is made when the next wanted frame is at least this many frames ahead (below it,
#: decoding forward is cheaper than seeking back to a keyframe and decoding from there).
SEEK_MIN_GAP = 32
#: OpenCV's FFmpeg seek aims this many frames before the wanted one (cap_ffmpeg_impl.hpp, its
#: ``delta``), so decoding restarts at the keyframe at or before ``target - SEEK_BACK``.
SEEK_BACK = 16
#: What one seek costs beyond its decoding, in frames decoded (the decoder's flush and restart).
SEEK_COST = 4
#: Codec tags of uncompressed streams (AVI BI_RGB is tag 0). OpenCV 5.0's FFmpeg backend corrupts
#: its heap when it converts a frame of one (measured: "malloc_consolidate(): invalid chunk size"
#: on every size tried, where PyAV and torchcodec read the same file), so they are refused.
RAW_TAGS = frozenset({"", "DIB", "RGB", "RAW"})
_NOT_OPENED = ("expected a video file FFmpeg can open (MP4, MOV, MKV, WebM, AVI, GIF, ...), got "
               "bytes it could not read as one{what}; the file is not a video, or it is truncated "
               "or corrupt: re-encode or re-download it")


def open_capture(stream: DeadlineStream, container: str, threads: int = 0) -> Any:
    """OpenCV's FFmpeg capture on ``stream``; ``threads``: FFmpeg's decoding threads (0: OpenCV's
    default, every core)."""
    import cv2
    try:
        src: Any = stream  # OpenCV 5 reads any io.BufferedIOBase (its stubs list IStreamReader only)
        cap = cv2.VideoCapture(src, cv2.CAP_FFMPEG, [cv2.CAP_PROP_N_THREADS, int(threads)])
    except cv2.error as e:
        raise ImageError(_NOT_OPENED.format(what=f" ({e.msg.strip() if hasattr(e, 'msg') else e})")) from e
    if not cap.isOpened():
        cap.release()
        what = f" (it starts like {container.upper()})" if container else ""
        raise ImageError(_NOT_OPENED.format(what=what))
    return cap


def _fourcc(v: float) -> str:
    n = int(v) if v == v and v > 0 else 0
    return "".join(chr(c) for c in n.to_bytes(4, "little") if 32 <= c < 127).strip()


def capture_meta(cap: Any, container: str) -> VideoMeta:
    """The capture's declared metadata, nothing decoded (what transformers' opencv reader reads)."""
    import cv2
    n = cap.get(cv2.CAP_PROP_FRAME_COUNT)
    fps = cap.get(cv2.CAP_PROP_FPS)
    w, h = cap.get(cv2.CAP_PROP_FRAME_WIDTH), cap.get(cv2.CAP_PROP_FRAME_HEIGHT)
    rot = cap.get(cv2.CAP_PROP_ORIENTATION_META)
    total = int(n) if n == n and n > 0 else 0
    fps = float(fps) if fps == fps and fps > 0 else 0.0
    rot_i = int(round(rot)) % 360 if rot == rot else 0
    return VideoMeta(total_num_frames=total, fps=fps, duration=total / fps if fps else 0.0,
                     height=int(h) if h == h and h > 0 else 0, width=int(w) if w == w and w > 0 else 0,
                     rotation=rot_i, codec=_fourcc(cap.get(cv2.CAP_PROP_FOURCC)), container=container)


def plan_reads(targets: Sequence[int], keyframes: Sequence[int] | None,
               seek: bool = True) -> list[bool]:
    """For each wanted frame of ascending ``targets``: seek to it (True) or ``grab()`` forward
    from the previous one (False).

    ``keyframes``: the stream's keyframe numbers (ascending; None when unknown). Known: seek
    when it decodes fewer frames, counting ``SEEK_COST``: a seek decodes from the keyframe at or
    before ``target - SEEK_BACK``, a grab from the frame after the last one read. So samples
    closer together than the keyframes are all read in one sequential pass (a 30 fps H.264 clip
    with x264's 250-frame GOP sampled at 2 fps), and sparse samples seek. Unknown: seek when the
    target is ``SEEK_MIN_GAP`` or more frames ahead.
    """
    out, pos = [], 0  # pos: the frame the next read returns
    for target in targets:
        if not seek:
            go = False
        elif keyframes is None:
            go = target - pos >= SEEK_MIN_GAP
        else:
            k = bisect.bisect_right(keyframes, max(target - SEEK_BACK, 0)) - 1
            start = keyframes[k] if k >= 0 else 0
            go = (target - start) + SEEK_COST < target - pos
        out.append(go)
        pos = target + 1
    return out


def read_frames(cap: Any, stream: DeadlineStream, meta: VideoMeta, indices: Sequence[int],
                out: np.ndarray, timeout_s: float, seek: bool = True,
                keyframes: Sequence[int] | None = None) -> None:
    """Decode frames ``indices`` (any order, repeats allowed) into ``out`` ``(T, H, W, 3)`` uint8 RGB.

    Wanted frames are visited in ascending order, each sought or reached by ``grab()`` as
    ``plan_reads(..., keyframes, seek)`` says. Raises ImageError when the stream ends before a
    wanted frame (truncated, or a declared frame count larger than the frames it holds), when a
    frame's size differs from the declared one, or past the deadline.
    """
    import cv2
    if meta.codec in RAW_TAGS:
        raise ImageError(f"expected a compressed video stream, got an uncompressed one (codec tag "
                         f"{meta.codec or '0'!r}), which OpenCV's FFmpeg backend cannot convert safely "
                         f"(it corrupts memory); install torchcodec (decoder='torchcodec') or re-encode "
                         f"the video (e.g. H.264 or FFV1)")
    where = positions(indices)
    pos = 0  # index of the frame the next read returns
    h, w = meta.height, meta.width
    targets = sorted(where)
    for target, go in zip(targets, plan_reads(targets, keyframes, seek)):
        if go and target > pos:
            if cap.set(cv2.CAP_PROP_POS_FRAMES, float(target)) and int(cap.get(cv2.CAP_PROP_POS_FRAMES)) == target:
                pos = target
        while pos < target:
            if stream.expired or time.monotonic() > stream.deadline:
                raise timed_out(f"decode frames {_span(indices)}", timeout_s)
            if not cap.grab():
                raise _ended(pos, target, meta, stream, timeout_s)
            pos += 1
        ok, frame = cap.read()
        if not ok or frame is None:
            raise _ended(pos, target, meta, stream, timeout_s)
        if frame.shape != (h, w, 3) or frame.dtype != np.uint8:
            raise ImageError(f"expected every frame to be {h}x{w} (HxW) uint8 as the container declares, "
                             f"got {frame.shape[0]}x{frame.shape[1]} {frame.dtype} at frame {target}; a "
                             f"stream whose size changes is not supported: re-encode it at one size")
        first, *rest = where[target]
        cv2.cvtColor(frame, cv2.COLOR_BGR2RGB, dst=out[first])
        for k in rest:
            out[k] = out[first]
        pos += 1


def _span(indices: Sequence[int]) -> str:
    return f"{min(indices)}..{max(indices)}" if indices else "(none)"


def _ended(pos: int, target: int, meta: VideoMeta, stream: DeadlineStream, timeout_s: float) -> ImageError:
    if stream.expired:
        return timed_out(f"decode up to frame {target}", timeout_s)
    if pos == 0:
        return ImageError(f"expected frames from this {meta.codec or 'video'} stream, OpenCV's FFmpeg decoded "
                          f"none; its codec is one that FFmpeg cannot decode (e.g. AV1 without a "
                          f"software AV1 decoder) or the file is corrupt: install torchcodec "
                          f"(decoder='torchcodec') or re-encode the video (e.g. H.264)")
    return ImageError(f"expected frame {target} of the {meta.total_num_frames} frames the container "
                      f"declares, but the stream ended after {pos} frames; the file is truncated or "
                      f"its header lies: re-encode or re-download it")
