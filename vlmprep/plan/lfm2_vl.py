"""LFM2-VL geometry (``lfm2_vl_tile``): smart resize for small images, 512 tiles and a thumbnail
for large ones, the ``<|image_start|>..<|image_end|>`` prompt.

Reproduces transformers 5.24's ``Lfm2VlImageProcessor.resize_and_split`` (torchvision only: there
is no PIL class) and ``Lfm2VlProcessor._build_image_tokens``. With ``f = patch_size *
merge_size`` (16 * 2 = 32, ``encoder_patch_size * downsample_factor``):

1. ``smart_resize``: each side rounded to a multiple of ``f`` (at least ``f``); above
   ``max_image_tokens * f^2`` pixels both sides are scaled by ``sqrt`` of the excess and floored
   to ``f``, below ``min_image_tokens * f^2`` scaled up and ceiled.
2. Too large (``_is_image_too_large``: the sides rounded to ``f``, a side under 16 taken as 16,
   above ``max_image_tokens * f^2 * max_pixels_tolerance`` pixels) and splitting on: the grid
   ``(cols, rows)`` of ``min_tiles..max_tiles`` tiles with the closest aspect ratio (ties: the
   later one when the image covers more than half of it), the image squashed to ``(rows * 512,
   cols * 512)`` and cut row-major, then the smart-resized image as the thumbnail.

Tiny example::

    Given  1080x1920 (HxW), the 1.6B checkpoint (tolerance 1.5, thumbnail)
    Input  rounded 1088 x 1920 = 2,088,960 px > 256 * 32^2 * 1.5 = 393,216: too large
    Output grid 2 rows x 4 cols ((4, 2): ratio 2.0 ties 2.0 of (2, 1), and the image covers
           more than half of 4 x 2 tiles), the image squashed to 1024x2048, 8 tiles of 512
           row-major, then the thumbnail 384x672 (smart resize: 12 x 21 tokens);
           num_embeddings 8 * 256 + 252 = 2300, placeholder <|image_start|><|img_row_1_col_1|>
           <image>*256 ... <|img_row_2_col_4|><image>*256<|img_thumbnail|><image>*252
           <|image_end|> (2311 tokens)
"""
from __future__ import annotations

import math

from ..errors import ImageError
from ..ops import lfm2_vl_tile
from ..pipeline import Pipeline
from .boxes import grid_boxes
from .plan import Canvas, Sizing, sizing_rule

__all__ = ["lfm2_smart_resize", "lfm2_too_large", "lfm2_grid", "lfm2_placeholder",
           "lfm2_max_num_patches", "IMAGE_START", "IMAGE_END", "IMAGE_THUMBNAIL"]

#: ``Lfm2VlProcessor``'s wrapper tokens (one LLM token each; ``use_image_special_tokens``).
IMAGE_START, IMAGE_END, IMAGE_THUMBNAIL = "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"


def _factor(pipeline: Pipeline) -> tuple[int, int]:
    """``(encoder_patch_size, downsample_factor)``: the pipeline's patch and merge sizes."""
    return pipeline.patchify.patch_size, pipeline.patchify.merge_size


def lfm2_smart_resize(h: int, w: int, op: lfm2_vl_tile, p: int = 16, m: int = 2
                      ) -> tuple[int, int]:
    """``Lfm2VlImageProcessor.smart_resize`` -> ``(H', W')`` (transformers returns ``(W', H')``).

    Given 1x1 -> (256, 256); 1080x1920 -> (384, 672); 500x500 -> (512, 512).
    """
    f = p * m
    lo, hi = op.min_image_tokens * f * f, op.max_image_tokens * f * f
    hb, wb = max(f, round(h / f) * f), max(f, round(w / f) * f)
    if hb * wb > hi:
        beta = math.sqrt((h * w) / hi)
        hb = max(f, math.floor(h / beta / f) * f)
        wb = max(f, math.floor(w / beta / f) * f)
    elif hb * wb < lo:
        beta = math.sqrt(lo / (h * w))
        hb = math.ceil(h * beta / f) * f
        wb = math.ceil(w * beta / f) * f
    return hb, wb


def lfm2_too_large(h: int, w: int, op: lfm2_vl_tile, p: int = 16, m: int = 2) -> bool:
    """``_is_image_too_large``: the sides rounded to ``p * m`` (at least ``p``) above
    ``max_image_tokens * (p * m)^2 * max_pixels_tolerance`` pixels."""
    f = p * m
    hb, wb = max(p, round(h / f) * f), max(p, round(w / f) * f)
    return hb * wb > op.max_image_tokens * p ** 2 * m ** 2 * op.max_pixels_tolerance


def _target_ratios(min_tiles: int, max_tiles: int) -> list[tuple[int, int]]:
    """``Lfm2VlImageProcessor._target_ratios``, built the same way (a set, stably sorted by area:
    the order of equal areas is the set's, hence the same expression)."""
    ratios = [(w, h) for n in range(min_tiles, max_tiles + 1) for w in range(1, n + 1)
              for h in range(1, n + 1) if min_tiles <= w * h <= max_tiles]
    return sorted(set(ratios), key=lambda x: x[0] * x[1])


def lfm2_grid(h: int, w: int, op: lfm2_vl_tile) -> tuple[int, int]:
    """``find_closest_aspect_ratio`` over ``_target_ratios`` -> ``(rows, cols)``.

    Given 1080x1920 -> (2, 4); 1000x1000 -> (2, 2) (1x1 is not a candidate with min_tiles 2).
    """
    aspect, area, t = w / h, w * h, op.tile_size
    best_diff, best = float("inf"), (1, 1)
    for ratio in _target_ratios(op.min_tiles, op.max_tiles):
        diff = abs(aspect - ratio[0] / ratio[1])
        if diff < best_diff:
            best_diff, best = diff, ratio
        elif diff == best_diff and area > 0.5 * (t * t * ratio[0] * ratio[1]):
            best = ratio
    return best[1], best[0]


def lfm2_max_num_patches(op: lfm2_vl_tile, p: int = 16, m: int = 2) -> int:
    """Rows each sequence is padded to: ``max(max_image_tokens * m^2, (tile_size // p)^2)`` (the
    tile term only with splitting): 1024 for the checkpoints."""
    return max(op.max_image_tokens * m * m, (op.tile_size // p) ** 2 if op.splits else 0)


def lfm2_placeholder(rows: int, cols: int, tile_tokens: int, image_tokens: int, thumbnail: bool,
                     special: bool = True, token: str = "<image>") -> str:
    """``Lfm2VlProcessor._build_image_tokens``.

    Given 1 x 1, 2 tokens -> ``<|image_start|><image><image><|image_end|>``; 1 x 2, tile 1,
    thumbnail 1 -> ``<|image_start|><|img_row_1_col_1|><image><|img_row_1_col_2|><image>
    <|img_thumbnail|><image><|image_end|>`` (without the line breaks).
    """
    start, end = (IMAGE_START, IMAGE_END) if special else ("", "")
    if rows == cols == 1:
        return start + token * image_tokens + end
    parts = [start]
    for r in range(rows):
        for c in range(cols):
            parts.append((f"<|img_row_{r + 1}_col_{c + 1}|>" if special else "") + token * tile_tokens)
    if thumbnail:
        parts.append((IMAGE_THUMBNAIL if special else "") + token * image_tokens)
    return "".join(parts) + end


def _tokens(hw: tuple[int, int], p: int, m: int) -> int:
    """``_compute_tokens_for_image`` of a ``hw`` image (or tile)."""
    return math.ceil((hw[0] // p) / m) * math.ceil((hw[1] // p) / m)


def _check_rows(hw: tuple[int, int], src: tuple[int, int], op: lfm2_vl_tile, p: int, m: int) -> None:
    """A sequence longer than the padded width: transformers pads nothing, so its mask and rows
    disagree (one image) or stacking fails (tiles and thumbnail): refused."""
    n, cap = (hw[0] // p) * (hw[1] // p), lfm2_max_num_patches(op, p, m)
    if n > cap:
        raise ImageError(f"expected at most {cap} patches per sequence (max_num_patches), got "
                         f"{hw[0] // p}x{hw[1] // p} = {n} for a {src[0]}x{src[1]} (HxW) image "
                         f"resized to {hw[0]}x{hw[1]} (an extreme aspect ratio; transformers "
                         f"emits a mask shorter than the rows or fails); pad or crop the image "
                         f"towards a square")


@sizing_rule("lfm2_vl_tile")
def _lfm2_vl_tile(op: lfm2_vl_tile, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """One smart-resized canvas and tile; or the grid canvas cut row-major and the smart-resized
    thumbnail last (its own canvas); tokens: every token of the placeholder."""
    p, m = _factor(pipeline)
    small = lfm2_smart_resize(hw[0], hw[1], op, p, m)
    image_tokens = _tokens(small, p, m)
    if not (op.splits and lfm2_too_large(hw[0], hw[1], op, p, m)):
        _check_rows(small, hw, op, p, m)
        text = lfm2_placeholder(1, 1, 0, image_tokens, False, op.special_tokens,
                                pipeline.pack.image_token)
        wrappers = 2 if op.special_tokens else 0
        return Sizing([Canvas(small)], [(0, 0, small[0], small[1])], [0],
                      image_tokens=image_tokens + wrappers, placeholder=text)
    rows, cols = lfm2_grid(hw[0], hw[1], op)
    t = op.tile_size
    canvases, tiles = [Canvas((rows * t, cols * t))], grid_boxes(rows, cols, t)
    tile_canvas = [0] * len(tiles)
    if op.use_thumbnail:
        _check_rows(small, hw, op, p, m)
        canvases.append(Canvas(small))
        tiles.append((0, 0, small[0], small[1]))
        tile_canvas.append(1)
    tile_tokens = _tokens((t, t), p, m)
    text = lfm2_placeholder(rows, cols, tile_tokens, image_tokens, op.use_thumbnail,
                            op.special_tokens, pipeline.pack.image_token)
    n = rows * cols
    tokens = n * tile_tokens + (image_tokens if op.use_thumbnail else 0)
    if op.special_tokens:
        tokens += 2 + n + (1 if op.use_thumbnail else 0)
    return Sizing(canvases, tiles, tile_canvas, image_tokens=tokens, placeholder=text)
