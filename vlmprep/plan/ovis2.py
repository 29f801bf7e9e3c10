"""Ovis2 geometry (``ovis2_tile``): the covering grid, row-major tiles after a thumbnail, and the
``<IMG_START>..<IMG_END>`` prompt.

Reproduces transformers 5.24's ``Ovis2ImageProcessorPil`` / ``Ovis2ImageProcessor`` with
``crop_to_patches`` (the checkpoint's value) and ``Ovis2Processor.replace_image_token``.

The grid (``use_covering_area_grid``, the default): candidates ``(a, b)`` with ``1 <= a*b <=
max_tiles`` (``min_tiles`` is not used), scored by how much of the image ``a`` rows x ``b``
columns of at most ``tile_size`` cover (``split_image_into_grid``, ``compute_patch_covering_area``);
the fewest tiles covering more than 90 % win (ties: the larger cover, then the first), else the
largest cover. transformers then reads the winner ``(a, b)`` as ``(cols, rows)``: the grid it
scored with ``a`` rows is used transposed (a wide image gets more rows than columns).

Tile order, a tiny example::

    Given  1080x1920 (HxW), tile 448, 1..12 tiles
    Input  covering grid (a, b) = (4, 3): 4 rows x 3 cols scored, used as 3 cols x 4 rows
    Output the thumbnail (the whole image squashed to 448x448) first, then the image squashed to
           1792x1344 cut row-major: (0,0) (0,448) (0,896) (448,0) .. (1344,896) (13 tiles);
           grids [4, 3]
"""
from __future__ import annotations

from ..ops import ovis2_tile
from ..pipeline import Pipeline
from .boxes import grid_boxes
from .grid import patch_grid
from .internvl import internvl_grid
from .plan import Canvas, Sizing, sizing_rule

__all__ = ["covering_grid", "ovis2_grid", "ovis2_placeholder", "COVERING_THRESHOLD",
           "IMG_START", "IMG_GRID", "IMG_COL", "IMG_ROW", "IMG_END"]

#: ``crop_image_to_patches``' ``covering_threshold`` (not a preprocess kwarg: always 0.9).
COVERING_THRESHOLD = 0.9
#: ``Ovis2Processor``'s visual indicator tokens (one LLM token each).
IMG_START, IMG_GRID, IMG_COL, IMG_ROW, IMG_END = (
    "<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>")


def _candidates(max_tiles: int) -> list[tuple[int, int]]:
    """``get_all_supported_aspect_ratios(1, max_tiles)``: ``(a, b)`` a-major, stably sorted by
    ``a*b``."""
    return sorted(((a, b) for a in range(1, max_tiles + 1) for b in range(1, max_tiles + 1)
                   if a * b <= max_tiles), key=lambda g: g[0] * g[1])


def _region_cover(w: int, h: int, side: int) -> float:
    """``compute_patch_covering_area`` of a ``w x h`` region: its area once its long side fits
    ``side`` (an int when it already fits, as transformers returns it)."""
    w, h = max(w, h), min(w, h)
    return side * (h / w * side) if w > side else w * h


def _cover(height: int, width: int, rows: int, cols: int, side: int) -> float:
    """The covered share of an ``height x width`` image cut into ``rows x cols`` regions (the last
    row / column takes the remainder), as transformers computes it: the same ``sum`` of the same
    values in the same order (``split_image_into_grid``), divided by the area."""
    rh, cw = height // rows, width // cols
    return sum(_region_cover((width if c == cols - 1 else (c + 1) * cw) - c * cw,
                             (height if r == rows - 1 else (r + 1) * rh) - r * rh, side)
               for r in range(rows) for c in range(cols)) / (width * height)


def covering_grid(height: int, width: int, side: int, max_tiles: int,
                  threshold: float = COVERING_THRESHOLD) -> tuple[int, int]:
    """transformers' ``get_min_tile_covering_grid((H, W), side, max_tiles)`` -> ``(a, b)``, scored
    as ``a`` rows x ``b`` columns.

    Given 448x896 (HxW), 448, 12 -> (1, 2); 1080x1920 -> (4, 3); 3x5000 -> (11, 1).
    """
    scored = [(g, _cover(height, width, g[0], g[1], side)) for g in _candidates(max_tiles)]
    good = [s for s in scored if s[1] > threshold]
    if good:
        return min(good, key=lambda s: (s[0][0] * s[0][1], -s[1]))[0]
    return min(scored, key=lambda s: (-s[1], s[0][0] * s[0][1]))[0]


def ovis2_grid(height: int, width: int, op: ovis2_tile) -> tuple[int, int]:
    """The grid ``crop_image_to_patches`` resizes to -> ``(rows, cols)``.

    Given 448x896 (HxW), the checkpoint's op -> (2, 1) (transposed, as transformers);
    covering=False -> (1, 2) (InternVL's rule, ``get_optimal_tiled_canvas``).
    """
    if op.covering:
        cols, rows = covering_grid(height, width, op.tile_size, op.max_tiles)
    else:
        cols, rows = internvl_grid(height, width, op.tile_size, op.min_tiles, op.max_tiles)
    return rows, cols


def ovis2_placeholder(rows: int, cols: int, seq_len: int, atom: str = "<IMG_ATOM>") -> str:
    """``Ovis2Processor.replace_image_token``'s string for a ``rows x cols`` grid.

    Given 1 x 1, seq 1 -> ``<IMG_START><IMG_ATOM><IMG_GRID><IMG_END>``; 1 x 2, seq 1 ->
    ``<IMG_START><IMG_ATOM><IMG_GRID><IMG_ATOM><IMG_COL><IMG_ATOM><IMG_END>``.
    """
    body = IMG_START + atom * seq_len + IMG_GRID
    if rows * cols > 1:
        row = IMG_COL.join([atom * seq_len] * cols)
        body += IMG_ROW.join([row] * rows)
    return body + IMG_END


def _tile_tokens(tile: int, pipeline: Pipeline) -> int:
    """Visual tokens of one tile: its patch grid merged ``merge x merge``, a grid side that is not
    a multiple padded up as Ovis2's visual tokenizer pads it (``hidden_stride``): 448 / 14 = 32
    -> 16 x 16 = 256, the checkpoint's ``image_seq_length``; 384 -> 27 -> 14 x 14 = 196."""
    pf = pipeline.patchify
    _, gh, gw = patch_grid((tile, tile), pf)
    m = pf.merge_size
    return -(-gh // m) * -(-gw // m)


@sizing_rule("ovis2_tile")
def _ovis2_tile(op: ovis2_tile, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """The thumbnail (its own canvas) first if > 1 tile, then row-major tiles of the grid canvas;
    tokens: every atom and indicator of the placeholder."""
    rows, cols = ovis2_grid(hw[0], hw[1], op) if op.max_tiles > 1 else (1, 1)
    t = op.tile_size
    canvases = [Canvas((rows * t, cols * t))]
    tiles = grid_boxes(rows, cols, t)
    tile_canvas = [0] * len(tiles)
    if len(tiles) > 1:
        canvases.append(Canvas((t, t)))
        tiles.insert(0, (0, 0, t, t))
        tile_canvas.insert(0, 1)
    seq = _tile_tokens(t, pipeline)
    text = ovis2_placeholder(rows, cols, seq, pipeline.pack.image_token)
    n = rows * cols
    tokens = seq * (n + 1 if n > 1 else 1) + 3 + (rows * (cols - 1) + rows - 1 if n > 1 else 0)
    return Sizing(canvases, tiles, tile_canvas, image_tokens=tokens, placeholder=text)
