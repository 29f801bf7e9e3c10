"""SigLIP2 NaFlex geometry (``naflex_resize``): the largest scale within a patch budget.

As ``get_image_size_for_max_num_patches`` of ``Siglip2ImageProcessor[Pil]`` (transformers 5.24):
a bisection of the scale on ``[eps / 10, 100]`` that stops once the interval is narrower than
``eps = 1e-5``, keeping the last feasible lower bound. The float expressions are the same, in
the same order, so the same scale and sizes come out (no closed form reproduces every tie).

    Given  patch 16, max_num_patches 256, a 1080x1920 (HxW) image
    Output 192 x 336 (12 x 21 = 252 valid patches): the bisection's scale ~0.17, each side
           ceiled to a multiple of 16; one ViT sequence of 252 rows, padded to 256 in to_hf()

A 1x1 image reaches only 112 x 112 (49 patches): the scale is capped at 100.
"""
from __future__ import annotations

import math

from ..errors import ImageError
from ..ops import naflex_resize
from ..pipeline import Pipeline
from .plan import Canvas, Sizing, sizing_rule

__all__ = ["naflex_size"]

_EPS = 1e-5  # transformers' default eps; the lower bound starts at eps / 10


def _scaled(scale: float, size: int, p: int) -> int:
    # transformers: max(p, ceil(size * scale / p) * p); the product is a float first.
    s = size * scale
    return int(max(p, math.ceil(s / p) * p))


def naflex_size(h: int, w: int, patch_size: int, max_num_patches: int) -> tuple[int, int]:
    """``(H', W')``, both multiples of ``patch_size``, at most ``max_num_patches`` patches.

    Raises ImageError where even the smallest scale gives more patches than allowed (only for
    extreme aspect ratios with a tiny budget; transformers would emit more rows than
    ``max_num_patches`` there)."""
    p = patch_size
    lo, hi = _EPS / 10, 100.0
    while (hi - lo) >= _EPS:
        mid = (lo + hi) / 2
        th, tw = _scaled(mid, h, p), _scaled(mid, w, p)
        if (th / p) * (tw / p) <= max_num_patches:  # float compare, as transformers
            lo = mid
        else:
            hi = mid
    th, tw = _scaled(lo, h, p), _scaled(lo, w, p)
    if (th // p) * (tw // p) > max_num_patches:
        raise ImageError(f"expected at most max_num_patches={max_num_patches} patches, got "
                         f"{th // p}x{tw // p} for a {h}x{w} (HxW) image even at the smallest "
                         f"scale; raise max_num_patches or pad the image towards a square")
    return th, tw


@sizing_rule("naflex_resize")
def _naflex_resize(op: naflex_resize, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """One canvas, one box: one ViT sequence of ``h_p * w_p`` valid patches (the default token
    rule with merge 1 counts them; SigLIP2 inserts no text of its own)."""
    rh, rw = naflex_size(hw[0], hw[1], pipeline.patchify.patch_size, op.max_num_patches)
    return Sizing([Canvas((rh, rw))], [(0, 0, rh, rw)], [0])
