"""Containers through torchcodec (transformers' default video decoder since 5.x) when it is
importable: the same frames and metadata as transformers' ``fetch_videos`` / ``load_video(...,
backend="torchcodec")`` (exact seek mode: the file is scanned once for its frame index, so the
frame count and average rate are the content's, not the header's). torchcodec reads through the
same ``DeadlineStream`` as OpenCV, so the per-item deadline ends its reads too."""
from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from ...errors import ImageError
from .sources import DeadlineStream, timed_out
from .types import VideoMeta

__all__ = ["available", "open_decoder", "decoder_meta", "read_frames"]

_CHUNK = 32


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether torchcodec imports and has found FFmpeg (checked once per process)."""
    try:
        import torchcodec
        from torchcodec.decoders import VideoDecoder  # noqa: F401
    except Exception:  # noqa: BLE001 (not installed, or its FFmpeg libraries are missing)
        return False
    # since 0.16 torchcodec imports without FFmpeg (its image decoders need none) and says so here;
    # its video decoder then fails on every file, so "auto" must not pick it (transformers'
    # is_torchcodec_usable makes the same check)
    return getattr(torchcodec, "ffmpeg_major_version", 0) is not None


def open_decoder(stream: DeadlineStream, container: str, timeout_s: float) -> Any:
    from torchcodec.decoders import VideoDecoder
    try:
        return VideoDecoder(stream, seek_mode="exact", dimension_order="NHWC", num_ffmpeg_threads=0,
                            device="cpu")
    except Exception as e:  # noqa: BLE001 (torchcodec raises RuntimeError / ValueError for bad files)
        if stream.expired:
            raise timed_out("open", timeout_s) from e
        what = f" (it starts like {container.upper()})" if container else ""
        raise ImageError(f"expected a video file FFmpeg can open (MP4, MOV, MKV, WebM, AVI, GIF, ...), got "
                         f"bytes torchcodec could not read as one{what} ({str(e).splitlines()[0][:200]}); "
                         f"the file is not a video, or it is truncated or corrupt: re-encode or "
                         f"re-download it") from e


def decoder_meta(dec: Any, container: str) -> VideoMeta:
    md = dec.metadata
    n = int(md.num_frames or 0)
    fps = float(md.average_fps or 0.0)
    dur = float(md.duration_seconds or 0.0)
    rot = md.rotation
    # torchcodec: degrees counter-clockwise (-90: stored frames turned clockwise to display);
    # VideoMeta.rotation: clockwise degrees applied, OpenCV's and ffmpeg's 'rotate' convention
    rot_i = int(round(-float(rot))) % 360 if rot else 0
    return VideoMeta(total_num_frames=n, fps=fps, duration=dur, height=int(md.height or 0),
                     width=int(md.width or 0), rotation=rot_i, codec=str(md.codec or ""), container=container)


def read_frames(dec: Any, stream: DeadlineStream, meta: VideoMeta, indices: Sequence[int], out: np.ndarray,
                timeout_s: float) -> None:
    """Frames ``indices`` into ``out`` ``(T, H, W, 3)`` uint8 RGB (torchcodec seeks itself), in
    chunks of ``_CHUNK`` frames so that its own batch adds at most a chunk to the output."""
    idx = [int(i) for i in indices]
    for lo in range(0, len(idx), _CHUNK):
        part = idx[lo:lo + _CHUNK]
        try:
            data = dec.get_frames_at(indices=part).data
        except Exception as e:  # noqa: BLE001
            if stream.expired:
                raise timed_out("decode its frames", timeout_s) from e
            raise ImageError(f"expected frames {min(part)}..{max(part)} of the {meta.total_num_frames} the "
                             f"file holds, torchcodec failed ({str(e).splitlines()[0][:200]}); the file "
                             f"is truncated or corrupt: re-encode or re-download it") from e
        if tuple(data.shape) != (len(part), *out.shape[1:]):
            raise ImageError(f"expected frames of {out.shape[1]}x{out.shape[2]} (HxW) as the stream "
                             f"declares, got {tuple(data.shape[1:3])}; a stream whose size changes is not "
                             f"supported: re-encode it at one size")
        out[lo:lo + len(part)] = data.numpy()
