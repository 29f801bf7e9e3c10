"""Video inputs (issue 19): ``Video``, ``VideoMeta``, ``VideoLimits``, ``as_video``,
``probe_video`` (container metadata only) and ``decode_frames`` (the sampled frames, ``(T, H, W, 3)``
uint8 RGB). See docs/how-to/video.md "Inputs and decoders"."""
from __future__ import annotations

from .decode import decode_frames, probe_video
from .types import (
    DEFAULT_MAX_VIDEO_BYTES,
    DEFAULT_MAX_VIDEO_FPS,
    DEFAULT_MAX_VIDEO_FRAMES,
    DEFAULT_MAX_VIDEO_SECONDS,
    DEFAULT_MAX_VIDEO_TOTAL_PIXELS,
    DEFAULT_VIDEO_TIMEOUT_S,
    Video,
    VideoLimits,
    VideoMeta,
    as_video,
    limits_of,
)

__all__ = ["Video", "VideoMeta", "VideoLimits", "as_video", "limits_of", "probe_video", "decode_frames",
           "DEFAULT_MAX_VIDEO_BYTES", "DEFAULT_MAX_VIDEO_FRAMES", "DEFAULT_MAX_VIDEO_SECONDS",
           "DEFAULT_MAX_VIDEO_FPS", "DEFAULT_MAX_VIDEO_TOTAL_PIXELS", "DEFAULT_VIDEO_TIMEOUT_S"]
