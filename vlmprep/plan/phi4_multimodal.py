"""Phi-4-multimodal geometry (``phi4_hd``): dynamic HD crops of 448, a global view, the masks.

Reproduces transformers 5.24's ``Phi4MultimodalImageProcessor.dynamic_preprocess`` and the token
count of its ``_preprocess`` (torchvision only: there is no PIL class). With ``t`` the tile (448)
and ``m = t // patch_size`` (32) the mask cells per tile side:

1. Grid ``(cols, rows) = (ceil(W / t), ceil(H / t))``; above ``dynamic_hd`` crops, the grid of at
   most ``dynamic_hd`` crops with the closest aspect ratio (InternVL's rule, over transformers'
   own candidate order: a set sorted by area; ties: the later one when the image covers more
   than half of it).
2. Aspect-fit into ``(rows * t, cols * t)``: the limiting side exactly, the other
   ``int(side * ratio)``; padded right/bottom with white. A side under 10 pixels is refused.
   The global view: the padded canvas *after* the normalize (float32), resized to ``(t, t)``
   with ``global_interpolation`` and no antialias (``plan.Canvas.normalized``), first.
3. Attention mask ``(rows * m, cols * m)``: ones, the last ``floor(pad / patch)`` columns / rows
   zero when the padding is at least one patch; per crop ``(m, m)`` row-major after the global
   view's all-ones mask.
4. ``num_img_tokens = 256 + 1 + vr * vc + vr + 16`` with ``vr, vc`` the unmasked rows / columns
   of the mask taken every other cell (transformers' constants: 256 global tokens, 16 global row
   separators, 1 separator).

Tiny example::

    Given  1080x1920 (HxW), tile 448, dynamic_hd 36
    Input  grid 5 x 3 crops (ceil(1920 / 448) = 5, ceil(1080 / 448) = 3): 15 <= 36
    Output canvas 1344x2240: the image resized to 1260x2240 (ratio 2240 / 1920 < 1344 / 1080),
           84 white rows below (6 mask rows); 1 global view + 15 crops; mask rows 96 - 6 = 90,
           every other: 45 x 80; num_img_tokens 256 + 1 + 45 * 80 + 45 + 16 = 3918
"""
from __future__ import annotations

import math

from ..errors import ImageError
from ..ops import phi4_hd
from ..pipeline import Pipeline
from .boxes import grid_boxes
from .plan import Canvas, Sizing, sizing_rule

__all__ = ["phi4_grid", "phi4_hd_size", "phi4_mask_valid", "phi4_num_img_tokens", "WHITE"]

WHITE = (255, 255, 255)


def _target_ratios(max_num: int, min_num: int = 1) -> list[tuple[int, int]]:
    """``dynamic_preprocess``'s candidates, built the same way (a set, stably sorted by area: the
    order of equal areas is the set's, hence the same expression)."""
    ratios = {(i, j) for n in range(min_num, max_num + 1) for i in range(1, n + 1)
              for j in range(1, n + 1) if i * j <= max_num and i * j >= min_num}
    return sorted(ratios, key=lambda x: x[0] * x[1])


def phi4_grid(h: int, w: int, tile: int, max_num: int) -> tuple[int, int]:
    """The crop grid -> ``(cols, rows)``.

    Given 1080x1920, 448, 36 -> (5, 3); 1x1 -> (1, 1); 448x449 -> (2, 1); 100x20000 -> (36, 1).
    """
    cols, rows = math.ceil(w / float(tile)), math.ceil(h / float(tile))
    if cols * rows <= max_num:
        return cols, rows
    aspect, area = w / h, w * h
    best_diff, best = float("inf"), (1, 1)
    for ratio in _target_ratios(max_num):
        diff = abs(aspect - ratio[0] / ratio[1])
        if diff < best_diff:
            best_diff, best = diff, ratio
        elif diff == best_diff and area > 0.5 * tile * tile * ratio[0] * ratio[1]:
            best = ratio
    return best


def phi4_hd_size(h: int, w: int, op: phi4_hd) -> tuple[tuple[int, int], tuple[int, int]]:
    """-> (resized ``(h, w)``, padded canvas ``(H', W')``), as ``dynamic_preprocess``.

    Given 1080x1920 -> ((1260, 2240), (1344, 2240)); 1x1 -> ((448, 448), (448, 448)).
    """
    cols, rows = phi4_grid(h, w, op.tile_size, op.dynamic_hd)
    tw, th = op.tile_size * cols, op.tile_size * rows
    rw, rh = tw / w, th / h
    new = (int(h * rw), tw) if rw < rh else (th, int(w * rh))
    if min(new[0], th) < 10 or min(new[1], tw) < 10:
        raise ImageError(f"expected an aspect ratio phi4_hd can resize (both resized sides >= 10 "
                         f"pixels, as transformers requires), got {h}x{w} (HxW) -> "
                         f"{new[0]}x{new[1]} in a {th}x{tw} canvas; pad or crop the image "
                         f"towards a square")
    return new, (th, tw)


def phi4_mask_valid(resized: tuple[int, int], padded: tuple[int, int], op: phi4_hd
                    ) -> tuple[int, int]:
    """Unmasked ``(rows, cols)`` of the ``(H' / patch, W' / patch)`` attention mask: the padding's
    whole patches are masked when it is at least one patch.

    Given (1260, 2240) in (1344, 2240), patch 14 -> (90, 160).
    """
    m, p = op.tile_size // op.patch_size, op.patch_size
    out = []
    for r, s in zip(resized, padded):
        pad = s - r
        out.append(m * (s // op.tile_size) - (pad // p if pad >= p else 0))
    return out[0], out[1]


def phi4_num_img_tokens(valid: tuple[int, int]) -> int:
    """``num_img_tokens`` from the unmasked mask ``(rows, cols)`` (every other cell kept).

    Given (90, 160) -> 256 + 1 + 45 * 80 + 45 + 16 = 3918.
    """
    vr, vc = (valid[0] + 1) // 2, (valid[1] + 1) // 2
    return 256 + 1 + vr * vc + vr + 16


@sizing_rule("phi4_hd")
def _phi4_hd(op: phi4_hd, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """The HD canvas (resized, white right/bottom) cut row-major after the global view: the HD
    canvas's normalized values resized to one tile without antialias (``Canvas.normalized``),
    as ``_preprocess`` resizes ``rescale_and_normalize``'s output."""
    resized, padded = phi4_hd_size(hw[0], hw[1], op)
    t = op.tile_size
    rows, cols = padded[0] // t, padded[1] // t
    hd = Canvas(resized, size=padded, fill=WHITE)
    glob = Canvas((t, t), parent=0, interpolation=op.global_interpolation, normalized=True)
    tiles = [(0, 0, t, t)] + grid_boxes(rows, cols, t)
    tokens = phi4_num_img_tokens(phi4_mask_valid(resized, padded, op))
    return Sizing([hd, glob], tiles, [1] + [0] * (rows * cols), image_tokens=tokens)
