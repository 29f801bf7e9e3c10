"""Resize rules: output ``(height, width)`` from the source size, as pure integer functions.

These reproduce transformers' float arithmetic operation for operation (Python
``round`` is round-half-to-even; ``int()`` truncates), because one pixel of
difference changes the token count and the pixels.
"""
from __future__ import annotations

import math

from ..errors import ImageError

__all__ = ["smart_resize", "shortest_edge", "longest_edge"]


def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56,
                 max_pixels: int = 14 * 14 * 4 * 1280, max_aspect_ratio: float = 200.0
                 ) -> tuple[int, int]:
    """Qwen2-VL's resize rule -> ``(h, w)``, both multiples of ``factor``.

    Given 1080x1920, factor 28, pixels 3136..12,845,056 -> (1092, 1932).
    Given 10x2000 -> (28, 812): the floor branch's ``max(factor, .)`` clamp keeps h at 28.

    Steps (transformers ``models/qwen2_vl/image_processing_qwen2_vl.smart_resize``):
      1. aspect ratio ``max/min > max_aspect_ratio`` -> ImageError;
      2. round each side to the nearest multiple (half to even);
      3. too many pixels: scale by ``beta = sqrt(H*W/max)`` and floor, at least ``factor``;
      4. too few: scale by ``beta = sqrt(min/(H*W))`` and ceil.
    """
    if height < 1 or width < 1:
        raise ImageError(f"expected an image of at least 1x1 pixels, got {height}x{width} (HxW); "
                         f"the file or array is empty")
    if max(height, width) / min(height, width) > max_aspect_ratio:
        raise ImageError(
            f"expected an aspect ratio of at most {max_aspect_ratio:g} (this family's limit), got "
            f"{max(height, width) / min(height, width):.1f} for {height}x{width} (HxW); crop or pad "
            f"the image to a less extreme shape")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def shortest_edge(height: int, width: int, size: int) -> tuple[int, int]:
    """Short side -> ``size``, long side ``int(size * long / short)`` (truncated), as
    transformers' ``get_resize_output_image_size(default_to_square=False)``.

    Given 480x640, size 336 -> (336, 448).
    """
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(size * long / short)
    return (new_long, size) if width <= height else (size, new_long)


def longest_edge(height: int, width: int, size: int) -> tuple[int, int]:
    """Long side -> ``size``, short side ``int(size * short / long)``, at least 1.

    Given 480x640, size 320 -> (240, 320).
    """
    short, long = (width, height) if width <= height else (height, width)
    new_short = max(1, int(size * short / long))
    return (size, new_short) if width <= height else (new_short, size)
