"""Boxes of a canvas: where a crop or tile box meets the image it is cut from."""
from __future__ import annotations

__all__ = ["box_overlap"]


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
