"""Pixtral / Mistral-Small-3.x geometry and break-token placeholder (``pixtral_resize``).

As ``PixtralImageProcessor[Pil]`` (``get_resize_output_image_size``) and ``PixtralProcessor``
(``replace_image_token``, ``_get_num_multimodal_tokens``) in transformers 5.24:

    Given  pixtral-12b (L = 1024, q = patch 16 * merge 1 = 16) and a 1080x1920 (HxW) image
    Input  ratio = max(1080/1024, 1920/1024) = 1.875 > 1 -> floor: 576 x 1024
    Output ceil to q: 576 x 1024; rows 36, cols 64; tokens 36 * (64 + 1) = 2340;
           placeholder ([IMG] * 64 + [IMG_BREAK]) * 36 with the last [IMG_BREAK] -> [IMG_END]
"""
from __future__ import annotations

import math

from ..errors import ImageError
from ..ops import pixtral_resize
from ..pipeline import Pipeline
from .plan import Canvas, Sizing, sizing_rule

__all__ = ["pixtral_size", "pixtral_placeholder"]


def pixtral_size(h: int, w: int, longest_edge: int, q: int) -> tuple[int, int]:
    """``(H', W')``: floor-scale to fit ``longest_edge`` (only when larger), then ceil each side
    to a multiple of ``q``. Raises ImageError where a side floors to 0 (transformers' resize
    fails there too: e.g. 1x3000 with L = 1024)."""
    ratio = max(h / longest_edge, w / longest_edge)
    if ratio > 1:
        # transformers: int(math.floor(h / ratio)); floor keeps the long side <= L.
        h, w = int(math.floor(h / ratio)), int(math.floor(w / ratio))
    if h < 1 or w < 1:
        raise ImageError(f"expected an aspect ratio that keeps both sides >= 1 pixel after "
                         f"scaling the long side to longest_edge={longest_edge}, got {h}x{w} "
                         f"(HxW) after scaling; pad the image towards a square or raise "
                         f"longest_edge")
    # transformers: ((h - 1) // q + 1) * q, i.e. ceil(h / q) * q.
    return ((h - 1) // q + 1) * q, ((w - 1) // q + 1) * q


def pixtral_placeholder(rows: int, cols: int, image_token: str, break_token: str,
                        end_token: str) -> str:
    """``(image_token * cols + break_token) * rows`` with the last break token -> ``end_token``.

    Given rows 2, cols 3: ``[IMG][IMG][IMG][IMG_BREAK][IMG][IMG][IMG][IMG_END]`` (8 tokens).
    """
    row = image_token * cols
    return (row + break_token) * (rows - 1) + row + end_token


@sizing_rule("pixtral_resize")
def _pixtral_resize(op: pixtral_resize, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """One canvas, one box (the whole resized image): one ViT sequence of raster patches."""
    pf = pipeline.patchify
    q = pf.patch_size * pf.merge_size
    rh, rw = pixtral_size(hw[0], hw[1], op.longest_edge, q)
    rows, cols = rh // q, rw // q
    return Sizing([Canvas((rh, rw))], [(0, 0, rh, rw)], [0], image_tokens=rows * (cols + 1),
                  placeholder=pixtral_placeholder(rows, cols, pipeline.pack.image_token,
                                                  op.break_token, op.end_token))
