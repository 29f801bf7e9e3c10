"""InternVL 2.5 / 3 / 3.5 geometry (``internvl_tile``): the tile grid, row-major tiles, a thumbnail.

Reproduces transformers' ``GotOcr2ImageProcessor`` with ``crop_to_patches`` (what
``InternVLProcessor`` forces): ``get_optimal_tiled_canvas`` and ``crop_image_to_patches``.

Tile order, a tiny example::

    Given  1080x1920 (HxW), tile 448, 1..12 tiles
    Input  grid (cols, rows) = (4, 2): the image squashed to 896x1792
    Output tiles (0,0) (0,448) (0,896) (0,1344) (448,0) .. (448,1344) as (top, left), row-major,
           then the thumbnail: the whole image squashed to 448x448 (9 tiles)
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..errors import ImageError
from ..ops import internvl_tile
from ..pipeline import Pipeline
from .boxes import grid_boxes
from .plan import Canvas, Sizing, count_embeddings, sizing_rule
from .video import Clip, VideoOptions, VideoPlan, check_budget, video_rule

if TYPE_CHECKING:
    import numpy as np

    from .video import VideoMetaLike

__all__ = ["internvl_grid", "internvl_num_frames", "internvl_video_indices", "video_placeholder"]


def internvl_grid(height: int, width: int, tile_size: int, min_tiles: int, max_tiles: int
                  ) -> tuple[int, int]:
    """InternVL's tile grid -> ``(cols, rows)``, as transformers' ``get_optimal_tiled_canvas``.

    Candidates ``(c, r)`` with ``min_tiles <= c*r <= max_tiles`` are listed width-major, then
    stably sorted by ``c*r``; the one closest to ``W/H`` wins; on an exact tie a later candidate
    replaces the best while ``H*W > 0.5 * tile_size**2 * c*r`` (more tiles only for big images).

    Given 1080x1920 (HxW), 448, 1..12 -> (4, 2); 333x777 -> (5, 2); 17x900 -> (12, 1).
    """
    cands = sorted(((c, r) for c in range(1, max_tiles + 1) for r in range(1, max_tiles + 1)
                    if min_tiles <= c * r <= max_tiles), key=lambda g: g[0] * g[1])
    aspect = width / height
    area = width * height
    best, best_diff = (1, 1), float("inf")
    for c, r in cands:
        diff = abs(aspect - c / r)
        if diff < best_diff:
            best, best_diff = (c, r), diff
        elif diff == best_diff and area > 0.5 * tile_size * tile_size * c * r:
            best = (c, r)
    return best


@sizing_rule("internvl_tile")
def _internvl_tile(op: internvl_tile, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """Row-major tiles of the resized canvas, then the thumbnail (its own canvas) if > 1 tile."""
    cols, rows = internvl_grid(hw[0], hw[1], op.tile_size, op.min_tiles, op.max_tiles)
    t = op.tile_size
    canvases = [Canvas((rows * t, cols * t))]
    tiles = grid_boxes(rows, cols, t)
    tile_canvas = [0] * len(tiles)
    if op.thumbnail and len(tiles) > 1:
        canvases.append(Canvas((t, t)))
        tiles.append((0, 0, t, t))
        tile_canvas.append(1)
    return Sizing(canvases, tiles, tile_canvas)


# -- video -------------------------------------------------------------------------------------
# transformers 5.24: models/internvl/video_processing_internvl.py (InternVLVideoProcessor) and
# processing_internvl.py (InternVLProcessor.replace_video_token): frames are images of one tile.
#   Sampling (do_sample_frames; the checkpoint's default is False: every frame of the clip):
#   n = num_frames, else int(total / src_fps * fps) (num_frames wins when both are set; n = 0,
#   n > total, neither given, or fps with an unknown source fps are errors, where transformers
#   raises); indices torch.arange(total / n / 2, total, total / n).int() (initial_shift=True: the
#   middle of each of n equal segments) in float32 (``_torch_arange_f32``).
#   Resize: every frame squashed to size (448x448, the tile), no thumbnail, no tiling.
#   Prompt: "\n".join("Frame{k}: <img>" + "<IMG_CONTEXT>" * 256 + "</img>") for k = 1..n.
#   Output: InternVLProcessor moves the frames into pixel_values ((n, 3, 448, 448), in prompt order
#   with the images' tiles); there is no pixel_values_videos key in its output.
# num_tokens counts the special tokens (n * (256 + 2)); the "FrameK: " text and the newlines add
# tokens that depend on the tokenizer.


def _torch_arange_f32(start: float, end: float, step: float) -> "np.ndarray":
    """``torch.arange(start, end, step)`` in float32 on the CPU, bit for bit: the length in
    float64; the first ``size // 16 * 16`` values computed vectorized in blocks of 8 (base
    ``float32(start + step * j0)``, then ``float32(base + step * i)``: rounded twice), the rest
    ``float32(start + step * j)``. (Measured equal to torch on 156,716 (total, n, shift) cases.)"""
    import numpy as np
    size = math.ceil((end - start) / step)
    j = np.arange(size, dtype=np.int64)
    out = (start + step * j.astype(np.float64)).astype(np.float32)
    nvec = size // 16 * 16
    if nvec:
        k = j[:nvec]
        base = (start + step * (k - k % 8).astype(np.float64)).astype(np.float32)
        out[:nvec] = (base.astype(np.float64) + step * (k % 8).astype(np.float64)).astype(np.float32)
    return out


def internvl_num_frames(count: int, src_fps: float | None, opts: VideoOptions) -> int:
    """How many frames ``InternVLVideoProcessor.sample_frames`` takes from a clip of ``count``
    frames (``count`` when sampling is off); raises ImageError where it raises.

    Given 300 frames at 30 fps: num_frames=4 -> 4; fps=0.5 -> 5; do_sample_frames False -> 300.
    """
    if not opts.do_sample_frames:
        return count
    n = opts.num_frames
    if n is None and opts.fps is not None:
        if src_fps is None:
            raise ImageError("video: expected a known source fps to sample by fps, got fps 0 "
                             "(unknown); pass num_frames= or Video(source_fps=...)")
        n = int(count / src_fps * opts.fps)
    if n is None:
        raise ImageError("video: expected num_frames or fps with do_sample_frames=True "
                         "(InternVLVideoProcessor has no default), got neither; pass "
                         "Video(src, num_frames=8)")
    if n < 1:
        raise ImageError(f"video: expected at least 1 sampled frame, got int({count} / "
                         f"{src_fps} * {opts.fps}) = 0 (InternVLVideoProcessor divides by it); "
                         f"raise fps or pass num_frames=")
    if n > count:
        raise ImageError(f"video: expected at most the clip's {count} frames, got num_frames={n}; "
                         f"sample fewer frames (a lower fps or num_frames)")
    return n


def internvl_video_indices(count: int, n: int) -> list[int]:
    """The ``n`` frames (0-based) InternVL samples from ``count``: ``torch.arange(count / n / 2,
    count, count / n).int()`` (initial_shift=True), float32 as torch computes it.

    Given 300, 4 -> [37, 112, 187, 262]; 300, 5 -> [30, 90, 150, 210, 270].
    """
    return [int(v) for v in _torch_arange_f32(count / n / 2, count, count / n)]


def video_placeholder(num_frames: int, seq_len: int, token: str = "<IMG_CONTEXT>",
                      start: str = "<img>", end: str = "</img>") -> str:
    """``InternVLProcessor.replace_video_token``'s string. Given 2 frames, seq_len 1 ->
    ``"Frame1: <img><IMG_CONTEXT></img>\nFrame2: <img><IMG_CONTEXT></img>"``."""
    body = start + token * seq_len + end
    return "\n".join(f"Frame{k + 1}: {body}" for k in range(num_frames))


@video_rule("internvl")
def _internvl_video(pipeline: Pipeline, meta: "VideoMetaLike", opts: VideoOptions, clip: Clip,
                    index: int) -> VideoPlan:
    """Frames as InternVL samples them, each one tile of ``tile_size``; "FrameK: <img>..</img>"."""
    if opts.sampling != "transformers":
        raise ImageError(f"video: internvl expected sampling='transformers' (the only rule "
                         f"implemented for this family), got {opts.sampling!r}; drop the option")
    op = pipeline.sizing
    if not isinstance(op, internvl_tile):
        raise ImageError(f"video: internvl expected an internvl_tile pipeline, got {op.name!r}; "
                         f"plan with the internvl preset")
    t, pf, pk = op.tile_size, pipeline.patchify, pipeline.pack
    side = t // pf.patch_size
    seq = side * side // (pf.merge_size * pf.merge_size)
    n = internvl_num_frames(clip.count, clip.fps, opts)
    check_budget(n, meta, clip.limits, n * side * side, 3 * pf.patch_size ** 2)
    rel = internvl_video_indices(clip.count, n) if opts.do_sample_frames else range(clip.count)
    idx = [clip.first + i for i in rel]
    text = video_placeholder(n, seq, pk.image_token, pk.prefix, pk.suffix)
    tokens = n * (seq + 2)
    return VideoPlan(
        index=index, meta=meta, frame_indices=idx,
        timestamps=[i / clip.fps for i in idx] if clip.fps is not None else [],
        resized_hw=(t, t), grid_thw=[(1, side, side)] * n, num_patches=n * side * side,
        num_tokens=tokens, num_embeddings=count_embeddings(text, pk.image_token, tokens),
        placeholder=text)
