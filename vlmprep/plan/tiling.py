"""Boxes of a canvas: where a crop or tile box meets the image it is cut from."""
from __future__ import annotations

__all__ = ["box_overlap", "internvl_grid"]


def box_overlap(box: tuple[int, int, int, int], hw: tuple[int, int]
                ) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]] | None:
    """The part of ``box = (top, left, height, width)`` inside an image of ``hw = (H, W)``.

    Returns ``(src, dst)`` as ``(y0, y1, x0, x1)`` windows: ``out[dst] = image[src]`` where ``out``
    is the ``(height, width)`` crop, zero elsewhere; None when the box misses the image.

    Given box (-2, 1, 6, 3) on a 4x5 image -> src (0, 4, 1, 4), dst (2, 6, 0, 3).
    """
    top, left, h, w = box
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + h, hw[0]), min(left + w, hw[1])
    if y1 <= y0 or x1 <= x0:
        return None
    return (y0, y1, x0, x1), (y0 - top, y1 - top, x0 - left, x1 - left)


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
