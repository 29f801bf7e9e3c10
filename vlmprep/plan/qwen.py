"""Qwen2-VL / Qwen2.5-VL / Qwen3-VL geometry (``smart_resize``): one canvas, sides multiples of
``factor``, pixels within ``[min_pixels, max_pixels]``.

Reproduces transformers' float arithmetic operation for operation (Python ``round`` is
round-half-to-even; ``int()`` truncates), because one pixel of difference changes the token
count and the pixels.

    Given  qwen2-vl (factor 28) and a 1080x1920 (HxW) image
    Output one canvas 1092x1932, one box (the whole canvas), grid (1, 78, 138), 2691 tokens
"""
from __future__ import annotations

import math

from .. import ops
from ..errors import ImageError
from ..pipeline import Pipeline
from .plan import Sizing, one_canvas, sizing_rule

__all__ = ["smart_resize"]


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


@sizing_rule("smart_resize")
def _smart_resize(op: ops.smart_resize, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    rhw = smart_resize(hw[0], hw[1], op.factor, op.min_pixels, op.max_pixels, op.max_aspect_ratio)
    return one_canvas(rhw, pipeline)
