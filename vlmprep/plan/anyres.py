"""LLaVA-NeXT / LLaVA-OneVision "anyres" geometry and token counts (op ``anyres_tile``).

Pure integer/float functions reproducing transformers 5.24 operation for operation
(``image_processing_utils.select_best_resolution`` / ``get_patch_output_size``, the image
processors' ``_get_padding_size`` and ``get_image_patches``, the processors'
``_get_unpadded_features``).

Tile order, a tiny example::

    Given  llava-next (tile 336), an image of 333x777 (HxW)
    Input  best pinpoint (336, 1008); scale_w = 1008/777 >= scale_h = 336/333, so h = 336 and
           w = min(ceil(777 * 336/333), 1008) = 784; centre-pad into 336x1008 at left 112
    Output tiles [base (the whole image squashed to 336x336),
                  (0, 0, 336, 336), (0, 336, 336, 336), (0, 672, 336, 336)]  (base first,
           then row-major), tokens 1944.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from ..errors import ImageError
from ..ops import anyres_tile
from ..pipeline import Pipeline
from .boxes import grid_boxes
from .plan import Canvas, Sizing, count_embeddings, sizing_rule
from .video import Clip, VideoOptions, VideoPlan, check_budget, uniform_indices, video_rule

if TYPE_CHECKING:
    from .video import VideoMetaLike

__all__ = ["select_best_resolution", "patch_output_size", "padding", "unpadded_features",
           "anyres_tokens", "multi_image_tokens", "default_num_frames", "onevision_video_tokens",
           "vllm_num_frames", "vllm_indices", "VIDEO_TOKEN", "VLLM_NUM_FRAMES"]


def select_best_resolution(height: int, width: int, pinpoints: Sequence[tuple[int, int]]
                           ) -> tuple[int, int]:
    """The pinpoint ``(ph, pw)`` that keeps most of the image: highest effective resolution
    ``min(int(W*s) * int(H*s), W*H)`` with ``s = min(pw/W, ph/H)``, then least wasted area
    ``ph*pw - effective``; on a full tie the first in list order.

    Given 1080x1920 and llava-next's pinpoints -> (672, 672); 1x1 -> (336, 672).
    """
    best, best_eff, best_waste = None, 0, float("inf")
    for ph, pw in pinpoints:
        s = min(pw / width, ph / height)
        eff = min(int(width * s) * int(height * s), width * height)
        waste = ph * pw - eff
        if eff > best_eff or (eff == best_eff and waste < best_waste):
            best, best_eff, best_waste = (ph, pw), eff, waste
    if best is None:  # every candidate keeps 0 pixels: transformers returns None and fails later
        raise ValueError(f"select_best_resolution: no pinpoint of {list(pinpoints)} keeps any pixel "
                         f"of a {height}x{width} image")
    return best


def patch_output_size(height: int, width: int, target: tuple[int, int]) -> tuple[int, int]:
    """Aspect-fit ``(h, w)`` inside ``target = (ph, pw)``: the side with the smaller scale takes the
    target, the other is ``min(ceil(side * scale), target side)``.

    Given 333x777 into (336, 1008) -> (336, 784).
    """
    th, tw = target
    scale_w, scale_h = tw / width, th / height
    if scale_w < scale_h:
        return min(math.ceil(height * scale_w), th), tw
    return th, min(math.ceil(width * scale_h), tw)


def padding(resized: tuple[int, int], target: tuple[int, int]) -> tuple[int, int]:
    """``(top, left)`` of the resized image in the target: ``(target - resized) // 2`` per axis
    (the bottom/right share gets the odd pixel)."""
    return (target[0] - resized[0]) // 2, (target[1] - resized[1]) // 2


def unpadded_features(height: int, width: int, patches: int, rows: int, cols: int,
                      max_num_patches: int = 0) -> tuple[int, int]:
    """``(unpadded, newline)`` features of the tile grid, as the processors'
    ``_get_unpadded_features``: the ``patches*rows x patches*cols`` feature map with the padding
    rows/columns removed (``int(round(side * cur / other, 7))``), one newline per remaining row;
    with ``max_num_patches`` (OneVision's ``anyres_max_N``) the map is pooled down by
    ``ratio = sqrt(h*w / (N * patches**2))`` when ``ratio > 1.1``.
    """
    cur_h, cur_w = patches * rows, patches * cols
    if width / height > cur_w / cur_h:
        new_h = int(round(height * (cur_w / width), 7))
        cur_h -= ((cur_h - new_h) // 2) * 2
    else:
        new_w = int(round(width * (cur_h / height), 7))
        cur_w -= ((cur_w - new_w) // 2) * 2
    unpadded, newline = cur_h * cur_w, cur_h
    if max_num_patches:
        ratio = math.sqrt(cur_h * cur_w / (max_num_patches * patches ** 2))
        if ratio > 1.1:
            unpadded = int(cur_h // ratio) * int(cur_w // ratio)
            newline = int(cur_h // ratio)
    return unpadded, newline


def _base_tokens(op: anyres_tile, patches: int) -> int:
    """Features of one tile as the processor counts them: ``patches**2`` plus
    ``num_additional_image_tokens`` (CLS), minus one for the "default" strategy (drops CLS)."""
    return (patches * patches + op.num_additional_image_tokens
            - (1 if op.vision_feature_select_strategy == "default" else 0))


def anyres_tokens(op: anyres_tile, height: int, width: int, patch_size: int) -> int:
    """LLM tokens of one single-image sample (the processor's ``_get_num_multimodal_tokens``).

    Given llava-next, 1080x1920 -> 1948; llava-onevision, 1080x1920 -> 7269.
    """
    patches = op.tile_size // patch_size
    ph, pw = select_best_resolution(height, width, op.pinpoints)
    unpadded, newline = unpadded_features(height, width, patches, ph // op.tile_size,
                                          pw // op.tile_size, op.max_num_patches)
    return unpadded + newline + _base_tokens(op, patches)


def multi_image_tokens(op: anyres_tile, patch_size: int) -> int:
    """LLM tokens of one image of a multi-image OneVision sample: one tile + one newline."""
    return _base_tokens(op, op.tile_size // patch_size) + 1


@sizing_rule("anyres_tile")
def _anyres_tile(op: anyres_tile, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """Canvases: [0] the aspect-fit resize padded into the pinpoint, [1] the base image.
    Tiles: base first, then the pinpoint canvas row-major. ``multi_image``: [0] the source padded
    to a square with ``square_fill``, [1] that square squashed to one tile."""
    if pipeline.get("center_crop") is not None:
        raise ValueError("Pipeline: anyres_tile expected no center_crop (its tiles are already "
                         "tile_size squares), got one; remove the center_crop op")
    h, w = hw
    t = op.tile_size
    patch = pipeline.patchify.patch_size
    token = pipeline.pack.image_token
    if op.multi_image:
        side = max(h, w)
        # transformers' pad_to_square: the short axis is centred with floor((side - s) / 2).
        square = Canvas((h, w), size=(side, side), offset=((side - h) // 2, (side - w) // 2),
                        fill=op.square_fill)
        n = multi_image_tokens(op, patch)
        return Sizing([square, Canvas((t, t), parent=0)], [(0, 0, t, t)], [1], image_tokens=n,
                      placeholder=token * n)
    ph, pw = select_best_resolution(h, w, op.pinpoints)
    rhw = patch_output_size(h, w, (ph, pw))
    canvases = [Canvas(rhw, size=(ph, pw), offset=padding(rhw, (ph, pw)), fill=(0, 0, 0)),
                Canvas((t, t))]
    grid = grid_boxes(ph // t, pw // t, t)
    n = anyres_tokens(op, h, w, patch)
    return Sizing(canvases, [(0, 0, t, t)] + grid, [1] + [0] * len(grid), image_tokens=n,
                  placeholder=token * n)


# -- video (LLaVA-OneVision) -------------------------------------------------------------------
# transformers 5.24: models/llava_onevision/video_processing_llava_onevision.py (BaseVideoProcessor:
# sample_frames = video_utils.default_sample_indices_fn; every frame resized to size 384x384, no
# crop) and processing_llava_onevision.py (replace_video_token / _get_num_multimodal_tokens: the
# tower's P x P features per frame are pooled to ceil(P / 2)^2, plus ONE newline per video).
#   Sampling (do_sample_frames; the checkpoint's default is False: every frame of the clip):
#   num_frames n, or n = max(1, int(total / src_fps * fps)); n > total is an error; indices
#   arange(n) * total // n. fps with an unknown source fps is an error (as transformers raises).
#   Output: pixel_values_videos (1, n, 3, 384, 384); placeholder "<video>" * (n * 196 + 1).
# sampling="vllm": vLLM 0.33's default video loader (vllm/multimodal/video.py VideoBackend, with
#   VideoMediaIO's num_frames=32) picks the frames, then the HF processor runs on them unchanged:
#   n = min(num_frames or 32, total), and min(n, floor(duration * fps)) when fps is given, at least
#   1; every frame when n == total, else np.linspace(0, total - 1, n, dtype=int). So vLLM takes 32
#   frames of a long clip where transformers' default takes every frame.
#: The processor's video token (LlavaOnevisionProcessor's default; the checkpoints' tokenizer).
VIDEO_TOKEN = "<video>"
#: vLLM's default frame count per video (VideoMediaIO(num_frames=32)).
VLLM_NUM_FRAMES = 32


def vllm_num_frames(count: int, src_fps: float | None, opts: VideoOptions) -> int:
    """Frames vLLM's default loader takes from a clip of ``count`` frames: ``min(num_frames or
    32, count)``, capped at ``floor(count / src_fps * fps)`` when fps is given, at least 1.
    Given 300 frames at 30 fps: defaults -> 32; fps=1 -> 10; num_frames=8 -> 8."""
    n = min(opts.num_frames or VLLM_NUM_FRAMES, count)
    if opts.fps is not None:
        if src_fps is None:
            raise ImageError("video: expected a known source fps to sample by fps (vLLM's "
                             "loader), got fps 0 (unknown); pass num_frames=")
        n = min(n, math.floor(count / src_fps * opts.fps))
    return max(1, n)


def vllm_indices(count: int, n: int) -> list[int]:
    """vLLM's loader indices: every frame when ``n == count``, else ``np.linspace(0, count - 1,
    n, dtype=int)``. Given 300, 4 -> [0, 99, 199, 299]."""
    if n == count:
        return list(range(count))
    import numpy as np
    return [int(v) for v in np.linspace(0, count - 1, n, dtype=int)]


def default_num_frames(count: int, src_fps: float | None, opts: VideoOptions) -> int:
    """Frames transformers' ``default_sample_indices_fn`` takes from a clip of ``count`` frames
    (``BaseVideoProcessor.sample_frames``); raises ImageError where transformers raises.

    Given 300 frames at 30 fps: fps=2 -> 20; num_frames=8 -> 8; neither (sampling on) -> 300.
    """
    if not opts.do_sample_frames:
        return count
    if opts.fps is not None and opts.num_frames is not None:
        raise ImageError(f"video: expected fps or num_frames (transformers' sample_frames: mutually "
                         f"exclusive), got fps={opts.fps}, num_frames={opts.num_frames}; set one "
                         f"to None")
    n = opts.num_frames
    if n is None and opts.fps is not None:
        if src_fps is None:
            raise ImageError("video: expected a known source fps to sample by fps, got fps 0 "
                             "(unknown); pass num_frames= or Video(source_fps=...)")
        n = max(1, int(count / src_fps * opts.fps))
    if n is None:
        return count
    if n > count:
        raise ImageError(f"video: expected at most the clip's {count} frames, got num_frames={n}; "
                         f"sample fewer frames (a lower fps or num_frames)")
    return n


def onevision_video_tokens(num_frames: int, tile_size: int, patch_size: int) -> int:
    """LLM tokens of a OneVision video: ``num_frames * ceil(P / 2)**2 + 1`` (``P = tile / patch``,
    the newline). Given 8 frames, 384 / 14 -> 8 * 196 + 1 = 1569."""
    pooled = math.ceil((tile_size // patch_size) / 2)
    return num_frames * pooled * pooled + 1


@video_rule("llava-onevision")
def _onevision_video(pipeline: Pipeline, meta: "VideoMetaLike", opts: VideoOptions, clip: Clip,
                     index: int) -> VideoPlan:
    """Frames as transformers samples them, each squashed to one tile; pooled tokens + 1."""
    if opts.sampling not in ("transformers", "vllm"):
        raise ImageError(f"video: llava-onevision expected sampling='transformers' or 'vllm', got "
                         f"{opts.sampling!r}; qwen_vl_utils is Qwen's own")
    op = pipeline.sizing
    if not isinstance(op, anyres_tile):
        raise ImageError(f"video: llava-onevision expected an anyres_tile pipeline, got "
                         f"{op.name!r}; plan with the llava-onevision preset")
    t, p = op.tile_size, pipeline.patchify.patch_size
    vllm = opts.sampling == "vllm"
    n = (vllm_num_frames if vllm else default_num_frames)(clip.count, clip.fps, opts)
    side = t // p
    check_budget(n, meta, clip.limits, n * side * side, 3 * p * p)
    rel = vllm_indices(clip.count, n) if vllm else uniform_indices(clip.count, n)
    idx = [clip.first + i for i in rel]
    tokens = onevision_video_tokens(n, t, p)
    text = VIDEO_TOKEN * tokens
    return VideoPlan(
        index=index, meta=meta, frame_indices=idx,
        timestamps=[i / clip.fps for i in idx] if clip.fps is not None else [],
        resized_hw=(t, t), grid_thw=[(1, side, side)] * n, num_patches=n * side * side,
        num_tokens=tokens, num_embeddings=count_embeddings(text, VIDEO_TOKEN, tokens),
        placeholder=text)
