"""Video execution: planned frames -> the family's video pixel rows, as transformers' video processors.

The execution path of a video, decided here in one place (``run_video``):

1. decode only the plan's ``frame_indices`` (``vlmprep.io.video.decode_frames``; each distinct
   frame once, repeats are copies);
2. resize every frame to the plan's ``resized_hw`` with one antialiased ``tvF.resize`` on uint8
   (``tv_match.resize``); SmolVLM's rule resizes twice, to ``extras["first_resize_hw"]`` first,
   as ``SmolVLMVideoProcessor.resize`` does;
3. rescale + normalize fused as ``TorchvisionBackend.rescale_and_normalize``
   (``tv_match.normalize_tensor``, float32; skipped for ``dtype="uint8"``; bfloat16 is the float32
   result cast, as for images);
4. lay the frames out as the family's video processor does: ``"patches"`` (Qwen,
   ``patchify.order == "merge_grouped"``): consecutive frames grouped by ``temporal_patch_size``
   (the plan already repeats the last frame to fill the last group), rows ``[c, t, py, px]`` in
   merge-grouped order, exactly ``Qwen2VLVideoProcessor.patchify``; ``"tiles"`` (LLaVA-OneVision,
   InternVL, SmolVLM): one ``(C, S, S)`` tile per frame.

transformers 5.24's video processors all run on torchvision (there is no PIL video path), so a
video's pixels are the torchvision processor's, bit for bit on the CPU in float32, whatever
``Processor(match=...)`` says for images. The work runs on the CPU (torchvision's uint8 resize is
native there; on CUDA it resizes in float) and the result is moved to the Processor's device.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ..errors import ImageError

if TYPE_CHECKING:
    import torch

    from ..io.video import VideoLimits
    from ..pipeline import Pipeline
    from ..plan.video import VideoPlan

__all__ = ["video_layout", "row_shape", "run_video", "frames_to_rows", "pack_rows"]


def video_layout(pipeline: "Pipeline") -> str:
    """``"patches"`` (Qwen: merge-grouped rows with frames grouped in time) or ``"tiles"`` (one
    tile image per frame); ValueError for a patchify order no family's video uses."""
    order = pipeline.patchify.order
    if order == "merge_grouped":
        return "patches"
    if order == "tiles":
        return "tiles"
    raise ValueError(f"video: expected a pipeline whose patchify order is 'merge_grouped' (Qwen) or "
                     f"'tiles' (LLaVA-OneVision, InternVL, SmolVLM), got {order!r} in "
                     f"{pipeline.name!r}; process videos with one of those presets")


def row_shape(pipeline: "Pipeline", plan: "VideoPlan") -> tuple[int, ...]:
    """The shape of one video's rows: ``(num_patches, C*T*P*P)`` or ``(frames, C, S, S)``."""
    pf = pipeline.patchify
    if video_layout(pipeline) == "patches":
        return (plan.num_patches, 3 * pf.temporal_patch_size * pf.patch_size * pf.patch_size)
    h, w = plan.resized_hw
    return (len(plan.frame_indices), 3, h, w)


def _interpolation(pipeline: "Pipeline") -> str:
    return str(getattr(pipeline.sizing, "interpolation", "bicubic"))


def frames_to_rows(frames: "torch.Tensor", plan: "VideoPlan", pipeline: "Pipeline",
                   dtype: str) -> "torch.Tensor":
    """uint8 ``(T, H, W, 3)`` frames (the plan's ``frame_indices``, in order) -> the video's rows
    (``row_shape``) in ``dtype`` on the CPU: resize, normalize, lay out (module docstring)."""
    import torch

    from .torch import tv_match
    mode = _interpolation(pipeline)
    first = plan.extras.get("first_resize_hw")
    out = []
    for f in frames.permute(0, 3, 1, 2):  # (C, H, W) views in HWC memory, as tv_match takes them
        if first is not None and tuple(first) != tuple(f.shape[-2:]):
            f = tv_match.resize(f, tuple(first), mode)
        if tuple(plan.resized_hw) != tuple(f.shape[-2:]):
            f = tv_match.resize(f, plan.resized_hw, mode)
        out.append(f.contiguous())  # C-contiguous frames, as the processor stacks them
    x = torch.stack(out)  # (T, C, h, w) uint8
    norm = pipeline.normalize if dtype != "uint8" else None
    if video_layout(pipeline) == "tiles":
        return _values(x.transpose(0, 1), norm, dtype).transpose(0, 1).contiguous()
    pf = pipeline.patchify
    p, m, tps = pf.patch_size, pf.merge_size, pf.temporal_patch_size
    t, c, h, w = x.shape
    if t % tps:
        raise AssertionError(f"video plan {plan.index}: {t} frames is not a multiple of the "
                             f"temporal patch {tps} (the plan pads it)")
    gt, gh, gw = t // tps, h // p, w // p
    # Qwen2VLVideoProcessor.patchify without its batch dim, on the uint8 frames (a quarter of the
    # bytes to move; normalize is per element, so the bits are the same after it):
    # (gt, tps, c, bh, mh, py, bw, mw, px) -> (gt, bh, bw, mh, mw, c, tps, py, px)
    x = x.view(gt, tps, c, gh // m, m, p, gw // m, m, p).permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    rows = x.reshape(gt * gh * gw, c, tps * p * p)
    return _values(rows.transpose(0, 1), norm, dtype).transpose(0, 1).reshape(gt * gh * gw, -1)


def _values(x: "torch.Tensor", norm: Any, dtype: str) -> "torch.Tensor":
    """uint8 ``(C, ...)`` -> ``dtype``: transformers' fused rescale+normalize in float32
    (``tv_match.normalize_tensor``; memory layout kept), cast for bfloat16; uint8 as it is."""
    import torch

    from .torch import tv_match
    if dtype == "uint8":
        return x
    y = tv_match.normalize_tensor(norm, x) if norm is not None else x.to(torch.float32)
    return y.to(torch.bfloat16) if dtype == "bfloat16" else y


def run_video(video: Any, plan: "VideoPlan", pipeline: "Pipeline", dtype: str,
              limits: "VideoLimits", decoder: str = "auto") -> "torch.Tensor":
    """One planned video -> its rows (``row_shape``, ``dtype``, CPU). Raises ImageError (naming
    the item) when decoding fails; the plan must have no error."""
    import numpy as np
    import torch

    from ..io.video import decode_frames
    if plan.error is not None:
        raise plan.error
    wanted = list(dict.fromkeys(plan.frame_indices))  # each distinct frame decoded once
    frames = decode_frames(video, sorted(wanted), limits, decoder=decoder)
    where = {k: i for i, k in enumerate(sorted(wanted))}
    h, w = frames.shape[1:3]
    meta = plan.meta
    if meta is not None and (h, w) != (meta.height, meta.width):
        raise ImageError(f"expected decoded frames of {meta.height}x{meta.width} (HxW, as probed), "
                         f"got {h}x{w}; the file changes size mid-stream: re-encode it")
    pick = np.asarray([where[k] for k in plan.frame_indices], dtype=np.int64)
    ordered = frames if len(pick) == len(frames) and bool((pick == np.arange(len(pick))).all()) \
        else frames[pick]
    return frames_to_rows(torch.from_numpy(ordered), plan, pipeline, dtype)


def pack_rows(rows: Sequence["torch.Tensor"], pipeline: "Pipeline", dtype: str,
              device: str) -> "torch.Tensor":
    """The videos' rows concatenated in input order, on ``device`` (an empty tensor of the right
    trailing shape when there are none)."""
    import torch
    if rows:
        out = torch.cat(list(rows)) if len(rows) > 1 else rows[0]
    else:
        pf = pipeline.patchify
        if video_layout(pipeline) == "patches":
            shape: tuple[int, ...] = (0, 3 * pf.temporal_patch_size * pf.patch_size * pf.patch_size)
        else:
            hw = pipeline.tile_hw or (0, 0)
            shape = (0, 3, *hw)
        out = torch.empty(shape, dtype=getattr(torch, dtype))
    return out.to(device) if not device.startswith("cpu") else out
