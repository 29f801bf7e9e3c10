"""Boxes of a canvas: row-major tile boxes, the centre-crop box, and where a box meets the image
it is cut from. A box is ``(top, left, height, width)``."""
from __future__ import annotations

__all__ = ["Box", "grid_boxes", "center_crop_box", "box_overlap"]

Box = tuple[int, int, int, int]  # (top, left, height, width)


def grid_boxes(rows: int, cols: int, tile: int) -> list[Box]:
    """``rows x cols`` boxes of ``tile x tile``, row-major (the order every tiling family emits).

    Given 2 rows, 3 cols, tile 10 -> (0,0) (0,10) (0,20) (10,0) (10,10) (10,20) as (top, left).
    """
    return [(r * tile, c * tile, tile, tile) for r in range(rows) for c in range(cols)]


def center_crop_box(hw: tuple[int, int], crop_hw: tuple[int, int]) -> Box:
    """The centre ``crop_hw`` box of an ``hw`` image: top/left ``(H - h) // 2``, floor, as
    transformers; negative when the crop is larger than the image (outside is zero).

    Given (336, 448) and crop (336, 336) -> (0, 56, 336, 336); (20, 30) and (24, 24) -> (-2, 3, 24, 24).
    """
    return (hw[0] - crop_hw[0]) // 2, (hw[1] - crop_hw[1]) // 2, crop_hw[0], crop_hw[1]


def box_overlap(box: Box, hw: tuple[int, int]
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
