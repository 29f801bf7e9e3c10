"""``probe_video`` (metadata only) and ``decode_frames`` (the sampled frames), for every video input.

Dispatch, in one place: a frame sequence (array, tensor, list of images) is indexed; an animated
GIF or WebP goes through Pillow (``animated``); every other file through the ``decoder``:
torchcodec (``tcodec``: transformers' default, used by "auto" when importable), OpenCV's FFmpeg
(``opencv``: "auto" otherwise) or NVIDIA DALI (``dali``: "dali", "dali:cpu", "dali:cuda[:N]";
metadata from OpenCV, frames from DALI's CPU or mixed/NVDEC decoder). Each call checks the
declared metadata against ``VideoLimits`` before anything is decoded, allocates exactly
``len(indices) x H x W x 3`` bytes for the output (checked against ``max_total_pixels`` first),
and raises ImageError naming the item for every bad input.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from ...errors import ImageError, describe_source
from ...kernels.threads import get_num_threads
from .. import warm
from . import animated, dali, frames, mp4, opencv, pyav, tcodec
from .sources import kind_of, open_stream, sniff_container, timed_out
from .types import Video, VideoLimits, VideoMeta, as_video, limits_of

__all__ = ["probe_video", "decode_frames", "DECODERS", "resolve_decoder"]

#: Decoder names: "auto" (torchcodec when importable, else OpenCV, with PyAV's GOP-by-GOP decode
#: of a constant-rate H.264 MP4/MOV when PyAV is importable: the same frames), "torchcodec", "opencv",
#: "dali" (DALI's mixed/NVDEC decoder on GPU 0 when DALI sees a GPU, else its CPU one; also
#: "dali:cpu", "dali:cuda", "dali:cuda:N"), "pyav" (OpenCV's metadata, PyAV's frames: one pass
#: that skips the non-reference frames between samples).
DECODERS = ("auto", "torchcodec", "opencv", "pyav", "dali")


def resolve_decoder(decoder: str) -> str:
    """"auto" -> "torchcodec" when importable, else "opencv"; a DALI name -> "dali:cpu" or
    "dali:cuda:N" (``dali.resolve``); a name as given (checked)."""
    if isinstance(decoder, str) and decoder.startswith("dali"):
        return dali.resolve(decoder)
    if decoder not in DECODERS:
        raise ValueError(f"decoder: expected one of {DECODERS}, got {decoder!r}; pass decoder='auto'")
    if decoder == "auto":
        return "torchcodec" if tcodec.available() else "opencv"
    if decoder == "torchcodec" and not tcodec.available():
        raise ValueError("decoder='torchcodec': expected torchcodec importable (with its FFmpeg "
                         "libraries), it is not; pip install torchcodec, or pass decoder='opencv'")
    if decoder == "pyav" and not pyav.available():
        raise ValueError("decoder='pyav': expected PyAV importable, it is not; pip install av, or "
                         "pass decoder='opencv'")
    return decoder


def _check_meta(meta: VideoMeta, limits: VideoLimits, size: int | None) -> None:
    """Refuse declared metadata no real video has, or beyond the limits (before any decode)."""
    what = f"an {meta.container.upper()}" if meta.container in ("avi", "mkv", "mp4") else \
        f"a {meta.container.upper() or 'video'}"
    if meta.total_num_frames < 1:
        raise ImageError(f"expected {what} with at least one frame, got one declaring 0 frames; the "
                         f"file is empty or its header is broken: re-encode it")
    if meta.height < 1 or meta.width < 1:
        raise ImageError(f"expected frames of at least 1x1 pixels, got {meta.height}x{meta.width} (HxW) "
                         f"declared; the file is corrupt: re-encode it")
    if meta.total_num_frames > limits.max_frames:
        raise ImageError(f"expected at most {limits.max_frames:,} frames (VideoLimits.max_frames), got "
                         f"{meta.total_num_frames:,} declared; the header is absurd or the video too long: "
                         f"cut it, or raise max_frames if it is trusted")
    if size is not None and meta.total_num_frames > size:
        raise ImageError(f"expected at most one frame per byte of the file, got {meta.total_num_frames:,} "
                         f"frames declared in {size:,} bytes; the header lies: re-encode the file")
    if meta.fps > limits.max_fps:
        raise ImageError(f"expected at most {limits.max_fps:g} fps (VideoLimits.max_fps), got {meta.fps:g} "
                         f"declared; the time base is broken: re-encode the file")
    if meta.duration > limits.max_seconds:
        raise ImageError(f"expected at most {limits.max_seconds:g} s (VideoLimits.max_seconds), got "
                         f"{meta.duration:g} s declared ({meta.total_num_frames:,} frames at {meta.fps:g} "
                         f"fps); the header is absurd or the video too long: cut or re-encode it")
    if meta.height * meta.width > limits.max_source_pixels:
        raise ImageError(f"expected frames of at most {limits.max_source_pixels:,} pixels "
                         f"(max_source_pixels), got {meta.height}x{meta.width} (HxW) = "
                         f"{meta.height * meta.width:,} declared; downscale the video or raise "
                         f"max_source_pixels if it is trusted")


def _stream_size(stream: Any) -> int:
    end = stream.seek(0, 2)
    stream.seek(0)
    return int(end)


def _run(video: Any, limits: Any, indices: Sequence[int] | None, seek: bool,
         decoder: str) -> tuple[VideoMeta, np.ndarray | None]:
    warm.ensure()  # OpenCV, Pillow's plugins, kernels: loaded once, before this thread decodes
    v: Video = as_video(video)
    lim = limits_of(limits)
    kind = kind_of(v.source)
    if kind != "encoded":
        meta = frames.sequence_meta(kind, v.source, v.source_fps, lim)
        _check_meta(meta, lim, None)
        if indices is None:
            return meta, None
        out = _alloc(meta, indices, lim)
        frames.read_sequence(kind, v.source, indices, out, lim)
        return meta, out
    deadline = time.monotonic() + lim.timeout_s
    stream, head = open_stream(v.source, lim.max_source_bytes, deadline)
    try:
        container = sniff_container(head)
        size = _stream_size(stream)
        if container in ("gif", "webp"):
            data = stream.read()
            if stream.expired:
                raise timed_out("be read", lim.timeout_s)
            meta = animated.animation_meta(data, container, lim.max_frames)
            _check_meta(meta, lim, size)
            if indices is None:
                return meta, None
            out = _alloc(meta, indices, lim)
            animated.read_animation(data, meta, indices, out, deadline, lim.timeout_s, lim.max_total_pixels)
            return meta, out
        if decoder.startswith("dali"):
            return _run_dali(stream, container, size, lim, indices, decoder, deadline)
        if decoder == "torchcodec":
            dec = tcodec.open_decoder(stream, container, lim.timeout_s)
            meta = tcodec.decoder_meta(dec, container)
            _check_meta(meta, lim, size)
            if indices is None:
                return meta, None
            out = _alloc(meta, indices, lim)
            tcodec.read_frames(dec, stream, meta, indices, out, lim.timeout_s)
            return meta, out
        if decoder == "pyav":
            return _run_pyav(stream, container, size, lim, indices, seek)
        return _run_opencv(stream, container, size, lim, indices, seek, decoder == "auto")
    finally:
        stream.close()


def _run_opencv(stream: Any, container: str, size: int, lim: VideoLimits,
                indices: Sequence[int] | None, seek: bool, auto: bool
                ) -> tuple[VideoMeta, np.ndarray | None]:
    """OpenCV's FFmpeg: metadata, then the frames (``opencv.read_frames``: a seek where the
    track's keyframes say it skips decoding). ``auto`` (decoder "auto" without torchcodec): a
    constant-rate H.264 MP4/MOV's frames by PyAV GOP by GOP where that applies (the same bits)."""
    keyframes = None
    if indices is not None and seek and container in ("mp4", "mov"):
        if mp4.video_track_is_vfr(stream, size):
            seek = False  # OpenCV seeks by the average rate: the wrong frames in a VFR track
        else:
            keyframes = mp4.keyframes(stream, size)  # seek only where it skips decoding
    cap, meta = _open_checked(stream, container, size, lim)
    try:
        if indices is None:
            return meta, None
        out = _alloc(meta, indices, lim)
        if not (auto and keyframes and pyav.available()
                and _gop_split(stream, meta, indices, out, lim, keyframes)):
            opencv.read_frames(cap, stream, meta, indices, out, lim.timeout_s, seek=seek,
                               keyframes=keyframes)
        return meta, out
    finally:
        cap.release()


def _open_checked(stream: Any, container: str, size: int, lim: VideoLimits) -> tuple[Any, VideoMeta]:
    """OpenCV's capture and the container's metadata, checked against the limits before any frame
    is decoded (the caller releases the capture). A deadline hit while opening is a timeout."""
    try:
        cap = opencv.open_capture(stream, container, get_num_threads())
    except ImageError:
        if stream.expired:
            raise timed_out("open", lim.timeout_s) from None  # EOF at the deadline
        raise
    try:
        if stream.expired:
            raise timed_out("open", lim.timeout_s)
        meta = opencv.capture_meta(cap, container)
        _check_meta(meta, lim, size)
    except BaseException:
        cap.release()
        raise
    return cap, meta


def _run_pyav(stream: Any, container: str, size: int, lim: VideoLimits,
              indices: Sequence[int] | None, seek: bool) -> tuple[VideoMeta, np.ndarray | None]:
    """PyAV: the metadata and limits from OpenCV's FFmpeg first (as the plan's probe), then one
    pass of PyAV's decoder (``pyav.read_frames``), skipping unwanted non-reference frames where
    the header says the frame rate is constant (MP4/MOV; ``seek=False``: nothing skipped, every
    frame decoded and counted); an H.264 track's samples in several GOPs GOP by GOP
    (``_gop_split``)."""
    skip = indices is not None and seek and container in ("mp4", "mov") \
        and not mp4.video_track_is_vfr(stream, size)
    cap, meta = _open_checked(stream, container, size, lim)
    cap.release()
    if indices is None:
        return meta, None
    out = _alloc(meta, indices, lim)
    threads = get_num_threads()
    keys = mp4.keyframes(stream, size) if skip else None
    if not (keys and _gop_split(stream, meta, indices, out, lim, keys)):
        stream.seek(0)
        pyav.read_frames(stream, meta, indices, out, lim.timeout_s, threads, skip)
    return meta, out


def _gop_split(stream: Any, meta: VideoMeta, indices: Sequence[int], out: np.ndarray,
               lim: VideoLimits, keys: Sequence[int]) -> bool:
    """PyAV GOP by GOP into ``out`` (``pyav.read_frames_split``: a seek over GOPs nobody wants,
    several GOPs at once on vlmprep's threads) when it applies (a constant-rate H.264 track, the
    samples in two GOPs or more); the frames it could not place by one pass. False when it does
    not apply (nothing decoded)."""
    if not (meta.fps > 0 and pyav.splits(stream, keys, indices)):
        return False
    threads = get_num_threads()
    missing = pyav.read_frames_split(stream, meta, indices, out, lim.timeout_s, threads, keys)
    if missing:
        left = [i for i in indices if int(i) in missing]
        rest = np.empty((len(left), *out.shape[1:]), np.uint8)
        stream.seek(0)
        pyav.read_frames(stream, meta, left, rest, lim.timeout_s, threads, True)
        at = {int(i): k for k, i in enumerate(left)}
        for k, i in enumerate(indices):
            if int(i) in at:
                out[k] = rest[at[int(i)]]
    return True


def _run_dali(stream: Any, container: str, size: int, lim: VideoLimits, indices: Sequence[int] | None,
              decoder: str, deadline: float) -> tuple[VideoMeta, np.ndarray | None]:
    """DALI: the metadata and limits from OpenCV's FFmpeg first (DALI has no metadata-only read),
    then the file's bytes to DALI's decoder (``dali.read_frames``)."""
    cap, meta = _open_checked(stream, container, size, lim)
    try:
        if indices is None:
            return meta, None
        out = _alloc(meta, indices, lim)
        dali.check_packets(cap, stream, meta, max(int(i) for i in indices), lim.timeout_s)
    finally:
        cap.release()
    stream.seek(0)
    data = stream.read()
    if stream.expired:
        raise timed_out("be read", lim.timeout_s)
    dali.read_frames(data, decoder, meta, indices, out, deadline, lim.timeout_s)
    return meta, out


def _alloc(meta: VideoMeta, indices: Sequence[int], lim: VideoLimits) -> np.ndarray:
    t = len(indices)
    if t < 1:
        raise ImageError("expected at least one frame index to decode, got none; sample at least one frame")
    bad = [i for i in indices if isinstance(i, bool) or not isinstance(i, (int, np.integer))
           or not 0 <= int(i) < meta.total_num_frames]
    if bad:
        raise ImageError(f"expected frame indices in 0..{meta.total_num_frames - 1} (the video's "
                         f"{meta.total_num_frames} frames), got {bad[:4]!r}; sample from the probed "
                         f"metadata (total_num_frames)")
    total = t * meta.height * meta.width
    if total > lim.max_total_pixels:
        raise ImageError(f"expected at most {lim.max_total_pixels:,} pixels in all sampled frames "
                         f"(VideoLimits.max_total_pixels), got {t} frames of {meta.height}x{meta.width} "
                         f"(HxW) = {total:,}; sample fewer frames, or raise max_total_pixels if trusted")
    return np.empty((t, meta.height, meta.width, 3), np.uint8)


def _named(video: Any, fn: Any) -> Any:
    src = video.source if isinstance(video, Video) else video
    try:
        return fn()
    except ImageError as e:
        raise e.at(source=describe_source(src)) from (e.__cause__ or e)
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 (a per-item cause: never fail the batch)
        raise ImageError(f"expected a readable video, got {type(e).__name__} while reading it ({e}); "
                         f"the file is corrupt or not a video: re-encode it",
                         source=describe_source(src)) from e


def probe_video(video: Video | Any, limits: VideoLimits | Any = None, *, decoder: str = "auto") -> VideoMeta:
    """Container metadata of one video -> ``VideoMeta``; no frame is decoded (FFmpeg's stream probe
    reads the headers and may parse a few packets). ``video``: a ``Video`` or a bare item;
    ``limits``: ``VideoLimits``, an ``ops.decode`` (its pixel limit) or None (defaults).
    ``decoder``: "auto" (torchcodec when importable, as transformers; else OpenCV), "torchcodec",
    "opencv", "pyav" (OpenCV's metadata, PyAV's frames: one pass skipping the non-reference
    frames between samples) or "dali" ("dali:cpu", "dali:cuda[:N]": OpenCV's metadata, DALI's
    frames); probe and decode a video with the same one (their metadata may differ slightly:
    docs/how-to/video.md). FFmpeg decodes on vlmprep's thread count (OpenCV, PyAV).
    Animated GIF/WebP and frame sequences do not depend on it.

    Raises ImageError (naming the item: expected / got / fix) for an unreadable or hostile file:
    not a video, truncated before its index, zero frames, more frames than bytes, a declared frame
    count, duration or rate beyond the limits, frames above the pixel limit, or past timeout_s.
    """
    name = resolve_decoder(decoder)
    return _named(video, lambda: _run(video, limits, None, True, name)[0])


def decode_frames(video: Video | Any, indices: Sequence[int], limits: VideoLimits | Any = None,
                  *, seek: bool = True, decoder: str = "auto") -> np.ndarray:
    """Frames ``indices`` (source frame numbers, any order, repeats allowed) -> ``(T, H, W, 3)``
    uint8 RGB, C-contiguous, ``T = len(indices)``, H x W as ``probe_video`` says (rotation applied).

    ``decoder``: as for ``probe_video``. ``seek`` (OpenCV; torchcodec always seeks, by its exact
    frame index): seek to far-apart frames (FFmpeg: the keyframe before, then decode forward) instead
    of decoding every frame in between; the frames are the same either way for constant frame
    rate streams (tests/video), while FFmpeg maps a frame number to a time with the average
    rate, so for a variable frame rate stream pass ``seek=False`` to get exactly the n-th frame.
    Raises ImageError as ``probe_video`` does, and when the stream ends before a wanted frame,
    a frame's size differs from the declared one, or the sampled total exceeds max_total_pixels.
    """
    name = resolve_decoder(decoder)
    if decoder == "auto" and name == "opencv":
        name = "auto"  # OpenCV, or PyAV GOP by GOP where that applies (_run)
    out = _named(video, lambda: _run(video, limits, list(indices), seek, name)[1])
    assert out is not None
    return out
