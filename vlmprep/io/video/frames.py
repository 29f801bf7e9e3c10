"""Already-decoded frame sequences: a ``(T, H, W, 3)`` uint8 RGB array, a ``(T, 3, H, W)`` uint8
tensor, or a list of images (each anything ``vlmprep.io.inputs.resolve`` takes: PIL, HWC array,
CHW tensor, encoded still image) of one size. Their metadata is their shape; ``fps`` is the
``Video.source_fps`` given (0.0 when none: transformers' VideoMetadata then has ``fps=None``)."""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from ...errors import ImageError
from ...ops import DEFAULT_MAX_SOURCE_BYTES
from ..decode import decode
from ..inputs import resolve
from .sources import timed_out
from .types import VideoLimits, VideoMeta

__all__ = ["sequence_meta", "read_sequence"]


def _frame_bytes(limits: VideoLimits) -> int:
    """Bytes one encoded still frame may have: the image limit (a frame is an image)."""
    return min(limits.max_source_bytes, DEFAULT_MAX_SOURCE_BYTES)


def _check_stack(shape: tuple, dtype: Any, layout: str) -> tuple[int, int, int]:
    """(T, H, W) of a THWC / TCHW uint8 stack; else ImageError."""
    ch = 3 if layout == "THWC" else 1
    dt = str(dtype).replace("torch.", "")
    if len(shape) != 4 or shape[ch] != 3:
        other = 1 if layout == "THWC" else 3
        hint = (f"; got {'TCHW' if layout == 'THWC' else 'THWC'}? transpose to {layout}"
                if len(shape) == 4 and shape[other] == 3 else "")
        raise ImageError(f"expected a {layout} video ({'(T, H, W, 3)' if layout == 'THWC' else '(T, 3, H, W)'}) "
                         f"of RGB frames, got shape {tuple(shape)}{hint}; stack frames as {layout} uint8")
    if dt != "uint8":
        raise ImageError(f"expected a {layout} uint8 video, got dtype {dt}; convert with "
                         f"(x * 255).round().clip(0, 255) to uint8 first")
    t, h, w = (shape[0], shape[1], shape[2]) if layout == "THWC" else (shape[0], shape[2], shape[3])
    if t < 1 or h < 1 or w < 1:
        raise ImageError(f"expected at least one frame of at least 1x1 pixels, got shape {tuple(shape)}; "
                         f"pass a non-empty video")
    return int(t), int(h), int(w)


def _meta(t: int, h: int, w: int, source_fps: float | None) -> VideoMeta:
    fps = float(source_fps) if source_fps else 0.0
    return VideoMeta(total_num_frames=t, fps=fps, duration=t / fps if fps else 0.0, height=h, width=w,
                     rotation=0, codec="", container="frames")


def sequence_meta(kind: str, source: Any, source_fps: float | None, limits: VideoLimits) -> VideoMeta:
    if kind == "array":
        return _meta(*_check_stack(tuple(source.shape), source.dtype, "THWC"), source_fps)
    if kind == "tensor":
        if getattr(source, "is_meta", False) or getattr(source, "is_nested", False):
            raise ImageError("expected a dense TCHW uint8 tensor holding pixels, got a meta or nested "
                             "tensor; materialize it first")
        return _meta(*_check_stack(tuple(source.shape), source.dtype, "TCHW"), source_fps)
    items = list(source)
    if not items:
        raise ImageError("expected a list of at least one frame, got an empty list; pass the frames")
    if len(items) > limits.max_frames:
        raise ImageError(f"expected at most {limits.max_frames:,} frames (VideoLimits.max_frames), got a "
                         f"list of {len(items):,}; pass fewer frames")
    hw = None
    for i, item in enumerate(items):
        try:
            src = resolve(item, _frame_bytes(limits))
        except ImageError as e:
            raise ImageError(f"frame {i} of the list: {e.reason}") from (e.__cause__ or e)
        if hw is None:
            hw = src.hw
        elif src.hw != hw:
            raise ImageError(f"expected every frame of the list to be {hw[0]}x{hw[1]} (HxW) like frame 0, "
                             f"got {src.hw[0]}x{src.hw[1]} at frame {i}; resize the frames to one size")
    assert hw is not None
    return _meta(len(items), hw[0], hw[1], source_fps)


def read_sequence(kind: str, source: Any, indices: Sequence[int], out: np.ndarray, limits: VideoLimits) -> None:
    """Frames ``indices`` of a frame sequence into ``out`` ``(T, H, W, 3)`` uint8 RGB (a list of
    encoded images: each decoded as an image, within ``limits.timeout_s`` in all)."""
    idx = np.asarray(indices, dtype=np.int64)
    if kind == "array":
        np.take(np.asarray(source), idx, axis=0, out=out)
        return
    if kind == "tensor":
        import torch
        sel = source.detach().index_select(0, torch.as_tensor(idx, device=source.device))
        out[...] = sel.permute(0, 2, 3, 1).cpu().numpy()
        return
    deadline = time.monotonic() + limits.timeout_s
    items = list(source)
    done: dict[int, int] = {}
    for k, i in enumerate(idx.tolist()):
        if i in done:
            out[k] = out[done[i]]
            continue
        if time.monotonic() > deadline:
            raise timed_out(f"decode frame {i} of the list", limits.timeout_s)
        try:
            frame = decode(resolve(items[i], _frame_bytes(limits)))
        except ImageError as e:
            raise ImageError(f"frame {i} of the list: {e.reason}") from (e.__cause__ or e)
        if frame.shape != out.shape[1:]:
            raise ImageError(f"expected frame {i} of the list to be {out.shape[1]}x{out.shape[2]} (HxW), "
                             f"decoded {frame.shape[0]}x{frame.shape[1]}; resize the frames to one size")
        out[k] = frame
        done[i] = k
