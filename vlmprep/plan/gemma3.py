"""Gemma 3 geometry: squash to one size, plus optional pan-and-scan crops of the original image.

Reproduces transformers' ``Gemma3ImageProcessor.pan_and_scan`` (``models/gemma3``) and the
prompt text of ``Gemma3Processor``.

Crop order, a tiny example:

    Given  1080x1920 (HxW), pan & scan on (min crop 256, max 4 crops, ratio 1.2)
    Output n = floor(1920/1080 + 0.5) = 2 crops of width ceil(1920/2) = 960:
           boxes (0,0,1080,960) (0,960,1080,960); sequences: the whole image squashed to
           896x896 first, then each crop squashed to 896x896
"""
from __future__ import annotations

import math

from ..ops import pan_and_scan
from ..pipeline import Pipeline
from . import grid
from .boxes import Box
from .plan import Canvas, Sizing, sizing_rule

__all__ = ["pan_and_scan_crops"]


def pan_and_scan_crops(height: int, width: int, min_crop_size: int, max_num_crops: int,
                       min_ratio_to_activate: float) -> list[Box]:
    """Crop boxes ``(top, left, h, w)`` in the original image, row-major; [] when none apply.

    Along the long side: only if ``long / short >= min_ratio_to_activate``;
    ``n = min(floor(long / short + 0.5), floor(long / min_crop_size))`` clamped to
    ``[2, max_num_crops]``; crop side ``ceil(long / n)`` at offsets ``k * that`` (the last crop
    may be shorter); none if a crop side would be below ``min_crop_size``.

    Given 1080x1920 -> [(0, 0, 1080, 960), (0, 960, 1080, 960)]; 17x900 -> [] (17 < 256).
    """
    if width >= height:
        if width / height < min_ratio_to_activate:
            return []
        nw = min(int(math.floor(width / min_crop_size)), int(math.floor(width / height + 0.5)))
        nw, nh = min(max_num_crops, max(2, nw)), 1
    else:
        if height / width < min_ratio_to_activate:
            return []
        nh = min(int(math.floor(height / min_crop_size)), int(math.floor(height / width + 0.5)))
        nw, nh = 1, min(max_num_crops, max(2, nh))
    cw, ch = int(math.ceil(width / nw)), int(math.ceil(height / nh))
    if min(cw, ch) < min_crop_size:
        return []
    # transformers slices image[top:top + ch, left:left + cw]: a crop past the edge is shorter.
    return [(top, left, min(ch, height - top), min(cw, width - left))
            for top in range(0, ch * nh, ch) for left in range(0, cw * nw, cw)]


def _placeholder(pipeline: Pipeline, tokens_per_seq: int, n_crops: int) -> str:
    """Gemma3Processor's text for one image: ``\\n\\n<start_of_image>`` + soft tokens +
    ``<end_of_image>\\n\\n``, and with crops its "Here is the original image ..." sentence."""
    pk = pipeline.pack
    seq = pk.prefix + pk.image_token * tokens_per_seq + pk.suffix
    if not n_crops:
        return seq
    return (f"Here is the original image {seq} and here are some crops to help you see better "
            + " ".join([seq] * n_crops))


@sizing_rule("pan_and_scan")
def _pan_and_scan(op: pan_and_scan, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """Canvas 0: the whole image squashed; canvas k: crop k of the source, squashed. One tile
    (the whole canvas) per canvas; tokens: the soft tokens of every sequence."""
    size = (op.height, op.width)
    crops = (pan_and_scan_crops(hw[0], hw[1], op.pan_and_scan_min_crop_size,
                                op.pan_and_scan_max_num_crops,
                                op.pan_and_scan_min_ratio_to_activate)
             if op.do_pan_and_scan else [])
    canvases = [Canvas(size)] + [Canvas(size, parent=-1, box=b) for b in crops]
    n = len(canvases)
    per_seq = grid.tokens_for_grid(grid.patch_grid(size, pipeline.patchify), pipeline.patchify)
    return Sizing(canvases, [(0, 0, op.height, op.width)] * n, list(range(n)),
                  image_tokens=per_seq * n, placeholder=_placeholder(pipeline, per_seq, len(crops)))
