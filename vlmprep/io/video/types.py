"""What a video input is (``Video``), what its container says (``VideoMeta``) and the bounds every
video read stays within (``VideoLimits``)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...errors import ImageError
from ...ops import DEFAULT_MAX_SOURCE_PIXELS

__all__ = ["Video", "VideoMeta", "VideoLimits", "as_video", "limits_of",
           "DEFAULT_MAX_VIDEO_BYTES", "DEFAULT_MAX_VIDEO_FRAMES", "DEFAULT_MAX_VIDEO_SECONDS",
           "DEFAULT_MAX_VIDEO_FPS", "DEFAULT_MAX_VIDEO_TOTAL_PIXELS", "DEFAULT_VIDEO_TIMEOUT_S"]

#: Largest encoded video (a file's size on disk, or bytes) read: 4 GiB (an hour of 1080p at 8 Mbit/s).
DEFAULT_MAX_VIDEO_BYTES = 4 << 30
#: Most frames a container may declare: 24 h at 30 fps. More is a broken or hostile header.
DEFAULT_MAX_VIDEO_FRAMES = 2_592_000
#: Longest declared duration: 24 h.
DEFAULT_MAX_VIDEO_SECONDS = 86_400.0
#: Highest declared frame rate (high-speed cameras record 960 fps; a broken time base says 90,000).
DEFAULT_MAX_VIDEO_FPS = 1000.0
#: Most pixels of all sampled frames together (T x H x W): 768 frames of 1920x1080, Qwen2-VL's
#: max_frames at 1080p; the decoded frames then hold 3 bytes per pixel (4.8 GB at this bound).
DEFAULT_MAX_VIDEO_TOTAL_PIXELS = 768 * 1920 * 1080
#: Seconds one video may take to probe or to decode its sampled frames.
DEFAULT_VIDEO_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Video:
    """One video item and its per-item sampling options (public as ``vlmprep.Video``).

    ``source``: a path (str / PathLike) or the bytes of a video file (MP4, MOV, MKV, WebM, AVI,
    animated GIF or WebP); or decoded frames: a ``(T, H, W, 3)`` uint8 RGB numpy array, a
    ``(T, 3, H, W)`` uint8 torch tensor, or a list of images (PIL images, HWC uint8 arrays, CHW
    uint8 tensors, or encoded still images) of one size. ``fps`` / ``num_frames``: how many frames
    to sample (None: the checkpoint's defaults). ``start`` / ``end``: seconds of the clip to sample
    from. ``source_fps``: the frame rate of a frame sequence (a container says its own; ignored
    for files). Invalid options are an ImageError.
    """

    source: Any
    fps: float | None = None
    num_frames: int | None = None
    start: float | None = None
    end: float | None = None
    source_fps: float | None = None

    def __post_init__(self) -> None:
        for name in ("fps", "source_fps", "start", "end"):
            v = getattr(self, name)
            if v is None:
                continue
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            lo_ok = ok and (v >= 0 if name in ("start", "end") else v > 0)
            if not lo_ok:
                want = "a finite number >= 0 (seconds)" if name in ("start", "end") else "a finite number > 0"
                raise ImageError(f"Video({name}=...): expected {want} or None, got {v!r}; pass e.g. "
                                 f"{name}={'2.0' if 'fps' in name else '0.0'}")
        n = self.num_frames
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ImageError(f"Video(num_frames=...): expected an int >= 1 or None, got {n!r}; "
                             f"pass e.g. num_frames=16")
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise ImageError(f"Video(start=..., end=...): expected end > start, got start={self.start!r}, "
                             f"end={self.end!r}; pass an end after the start (seconds)")


def as_video(item: Any) -> Video:
    """A ``Video`` as given, or a bare item (path, bytes, frames) wrapped with default options."""
    return item if isinstance(item, Video) else Video(item)


@dataclass(frozen=True)
class VideoMeta:
    """What the container (or the frame sequence) declares; transformers' VideoMetadata names.

    ``height`` / ``width``: the frames' size as decoded, i.e. after the rotation is applied (a
    phone's portrait clip stored 1920x1080 with rotation 90 is 1080 wide, 1920 high).
    ``fps``: frames per second as FFmpeg reports it (the average rate); 0.0 when unknown (a
    frame sequence without ``source_fps``: transformers' VideoMetadata has ``fps=None`` there),
    and then ``duration`` is 0.0 too. ``rotation``: the display rotation in degrees (0, 90,
    180, 270) already applied to the decoded frames. ``codec``: the FFmpeg codec tag ("FMP4",
    "MJPG", "VP90", "h264", ...; "GIF"/"WEBP" for animations; "" for frame sequences).
    ``container``: "mp4", "mov", "mkv", "webm", "avi", "gif", "webp", "frames", or "" when not
    recognised from the first bytes (FFmpeg still opened it).
    """

    total_num_frames: int
    fps: float
    duration: float
    height: int
    width: int
    rotation: int = 0
    codec: str = ""
    container: str = ""

    def to_hf(self) -> dict:
        """The keyword arguments of transformers' ``VideoMetadata`` (fps/duration None when unknown)."""
        known = self.fps > 0
        return {"total_num_frames": self.total_num_frames, "fps": self.fps if known else None,
                "duration": self.duration if known else None, "height": self.height, "width": self.width}


@dataclass(frozen=True)
class VideoLimits:
    """The bounds of one video's probe and decode (an ImageError names the one exceeded).

    ``max_source_bytes``: encoded bytes (a file's size on disk is checked before it is opened).
    ``max_source_pixels``: H x W of one frame (the image limit, ``ops.decode``'s default).
    ``max_total_pixels``: T x H x W of the sampled frames, checked before anything is decoded;
    the output array is exactly that many pixels x 3 bytes. ``max_frames``, ``max_seconds``,
    ``max_fps``: what a container may declare. ``timeout_s``: seconds for one probe or one
    decode of the sampled frames (checked between frames and at each read of the file).
    """

    max_source_bytes: int = DEFAULT_MAX_VIDEO_BYTES
    max_source_pixels: int = DEFAULT_MAX_SOURCE_PIXELS
    max_total_pixels: int = DEFAULT_MAX_VIDEO_TOTAL_PIXELS
    max_frames: int = DEFAULT_MAX_VIDEO_FRAMES
    max_seconds: float = DEFAULT_MAX_VIDEO_SECONDS
    max_fps: float = DEFAULT_MAX_VIDEO_FPS
    timeout_s: float = DEFAULT_VIDEO_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("max_source_bytes", "max_source_pixels", "max_total_pixels", "max_frames"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"VideoLimits: {name}: expected an int >= 1, got {v!r}; pass {name}=<int>")
        for name in ("max_seconds", "max_fps", "timeout_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"VideoLimits: {name}: expected a number > 0, got {v!r}; pass {name}=<float>")


def limits_of(limits: Any) -> VideoLimits:
    """``VideoLimits`` as given; None: the defaults; an ``ops.decode``: its ``max_source_pixels``
    per frame, the video defaults for the rest (its ``max_source_bytes`` is sized for images)."""
    if limits is None:
        return VideoLimits()
    if isinstance(limits, VideoLimits):
        return limits
    px = getattr(limits, "max_source_pixels", None)
    if isinstance(px, int) and getattr(limits, "name", None) == "decode":
        return VideoLimits(max_source_pixels=px)
    raise TypeError(f"limits: expected VideoLimits, an ops.decode or None, got {type(limits).__name__}")
