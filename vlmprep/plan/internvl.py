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

from ..ops import internvl_tile
from ..pipeline import Pipeline
from .boxes import grid_boxes
from .plan import Canvas, Sizing, sizing_rule

__all__ = ["internvl_grid"]


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
