"""Mllama (Llama-3.2-Vision) geometry: canvas choice, aspect-fit size, row-major tiles.

Reproduces transformers' ``models/mllama/image_processing_pil_mllama.py`` float for float
(``get_all_supported_aspect_ratios``, ``get_optimal_tiled_canvas``,
``get_image_size_fit_to_canvas``).

Tile order, a tiny example:

    Given  1080x1920 (HxW), tile 560, up to 4 tiles
    Output canvas 1120x1120 (2 x 2 tiles), image resized to 630x1120 at the top-left, the rest 0;
           tiles (0,0) (0,560) (560,0) (560,560) as (top, left), row-major; aspect_ratio_id 6
"""
from __future__ import annotations

import math
from functools import lru_cache

from ..ops import canvas_tile
from ..pipeline import Pipeline
from .boxes import grid_boxes
from .plan import Canvas, ImagePlan, Sizing, sizing_rule

__all__ = ["tile_arrangements", "aspect_ratio_id", "image_aspect_ratio_id", "mllama_canvas",
           "mllama_fit"]


@lru_cache(maxsize=16)
def tile_arrangements(max_tiles: int) -> tuple[tuple[int, int], ...]:
    """Every ``(tiles_h, tiles_w)`` with ``tiles_h * tiles_w <= max_tiles``, first-index-major.

    Given 4 -> (1,1) (1,2) (1,3) (1,4) (2,1) (2,2) (3,1) (4,1); ``aspect_ratio_ids`` are the
    1-based positions in this list (0 is batch padding).
    """
    return tuple((a, b) for a in range(1, max_tiles + 1) for b in range(1, max_tiles + 1)
                 if a * b <= max_tiles)


def aspect_ratio_id(arrangement: tuple[int, int], max_tiles: int) -> int:
    """1-based id of ``(tiles_h, tiles_w)`` as ``MllamaImageProcessor`` reports it."""
    return tile_arrangements(max_tiles).index(tuple(arrangement)) + 1


def image_aspect_ratio_id(plan: ImagePlan, op: canvas_tile) -> int:
    """``aspect_ratio_id`` of a planned image: the arrangement of its canvas (``canvases[0]``,
    ``tiles_h * tile_size x tiles_w * tile_size``).

    Given 1080x1920 (canvas 1120x1120), tile 560, up to 4 -> 6.
    """
    ch, cw = plan.canvases[0].hw
    return aspect_ratio_id((ch // op.tile_size, cw // op.tile_size), op.max_tiles)


def mllama_canvas(height: int, width: int, tile_size: int, max_tiles: int) -> tuple[int, int]:
    """The canvas ``(tiles_h, tiles_w)`` for an ``height x width`` image.

    Per arrangement ``scale = min(ch / H, cw / W)``; the smallest scale >= 1 wins (the least
    upscale), else the largest scale < 1; among equal scales the smallest canvas area, the first
    listed on equal areas (numpy argmin).

    Given 17x900 -> (1, 2); 900x17 -> (2, 1); 1080x1920 -> (2, 2); 1x1 -> (1, 1).
    """
    arr = tile_arrangements(max_tiles)
    scales = []
    for a, b in arr:
        sh, sw = (a * tile_size) / height, (b * tile_size) / width
        scales.append(sh if sw > sh else sw)
    ups = [s for s in scales if s >= 1]
    chosen = min(ups) if ups else max(scales)
    best = None
    for (a, b), s in zip(arr, scales):
        if s == chosen and (best is None or a * b < best[0] * best[1]):
            best = (a, b)
    return best  # type: ignore[return-value]


def mllama_fit(height: int, width: int, canvas_h: int, canvas_w: int, tile_size: int
               ) -> tuple[int, int]:
    """Aspect-fit ``(h, w)`` inside the canvas: each side's target is clipped to
    ``[tile_size, canvas side]``, the smaller of the two scales wins, the other side is
    ``floor(side * scale)`` (at least 1, at most its target).

    Given 17x900 in 560x1120 -> (17, 900) (no upscale past the image's own width);
    1x1 in 560x560 -> (560, 560); 1080x1920 in 1120x1120 -> (630, 1120).
    """
    tw = min(max(width, tile_size), canvas_w)
    th = min(max(height, tile_size), canvas_h)
    sh, sw = th / height, tw / width
    if sw < sh:
        return min(math.floor(height * sw) or 1, th), tw
    return th, min(math.floor(width * sh) or 1, tw)


@sizing_rule("canvas_tile")
def _canvas_tile(op: canvas_tile, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """One canvas (resized image padded bottom/right with 0), its tiles row-major; one
    ``<|image|>`` token per image (cross-attention reads the tiles, not the prompt)."""
    t = op.tile_size
    a, b = mllama_canvas(hw[0], hw[1], t, op.max_tiles)
    rhw = mllama_fit(hw[0], hw[1], a * t, b * t, t)
    canvas = Canvas(rhw, size=(a * t, b * t), offset=(0, 0), fill=(0, 0, 0))
    tiles = grid_boxes(a, b, t)
    return Sizing([canvas], tiles, [0] * len(tiles), image_tokens=1)
