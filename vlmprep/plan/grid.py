"""Patch grids and token counts of one ViT sequence.

merge_grouped (Qwen2-VL, Qwen3-VL), a tiny example:

    Given  a 4x4 patch grid (gh = gw = 4), merge 2, patches named by (row, col)
    Input  rows of the grid in raster order
    Output row order  (0,0) (0,1) (1,0) (1,1) | (0,2) (0,3) (1,2) (1,3) |
                      (2,0) (2,1) (3,0) (3,1) | (2,2) (2,3) (3,2) (3,3)
           i.e. row r = ((bh * gw/2 + bw) * 2 + mh) * 2 + mw for patch (2bh+mh, 2bw+mw);
           each group of 4 rows is one LLM token; a row holds [c, t, py, px].

raster (Pixtral, Mistral-Small-3.x; MiniCPM-V): one sequence per tile, rows in raster order, each
[c, py, px] (what a stride-P conv patch embedding reads); merge_size m only fixes the
multiple the sides must have (P*m) and the token grid (gh/m x gw/m, the merger's 2x2 unfold):

    Given  a 32x48 image (HxW), patch 16, merge 1 -> grid 2x3
    Input  pixel x[c, y, x] of the (3, 32, 48) image
    Output 6 rows (0,0) (0,1) (0,2) (1,0) (1,1) (1,2); row r = gy*3 + gx holds
           x[c, 16gy + py, 16gx + px] at column (c*16 + py)*16 + px (768 columns)

naflex (SigLIP2 NaFlex): as raster, but channels last inside a row: [py, px, c]:

    Given  the same 32x48 image, patch 16
    Output 6 rows as above; row r = gy*3 + gx holds x[c, 16gy + py, 16gx + px] at column
           (py*16 + px)*3 + c (768 columns); to_hf() pads to max_num_patches rows
"""
from __future__ import annotations

from ..errors import ImageError
from ..ops import patchify

__all__ = ["patch_grid", "tokens_for_grid", "row_length"]


def patch_grid(hw: tuple[int, int], op: patchify) -> tuple[int, int, int]:
    """``(t, gh, gw)`` for a still image or tile of size ``hw`` (t = 1: one temporal group).

    ``tiles`` order: ``floor(side / patch_size)``, what a stride-P patch embedding sees
    (SigLIP 384 with patch 14 -> 27 x 27).
    """
    h, w = hw
    p, m = op.patch_size, op.merge_size
    if op.order == "tiles":
        return 1, h // p, w // p
    if h % (p * m) or w % (p * m):
        raise ImageError(f"expected sides that are multiples of patch_size*merge_size = {p * m} "
                         f"for order {op.order!r}, got {h}x{w} (HxW) after resizing; use a "
                         f"resize op whose factor is {p * m}")
    return 1, h // p, w // p


def tokens_for_grid(grid_thw: tuple[int, int, int], op: patchify) -> int:
    """LLM tokens of one sequence: ``t*gh*gw / merge**2`` (the 2x2 merger joins 4 patches;
    InternVL's pixel shuffle likewise; merge 1: one token per patch).

    A grid side that is not a multiple of ``merge_size`` (a fixed tile of the ``tiles`` order:
    the other orders' sides are checked by ``patch_grid``) raises ValueError: the merger could
    not join its patches, and a floored count would be silently wrong.

    Given (1, 32, 32), merge 2 -> 256; (1, 16, 16), merge 1 -> 256; (1, 27, 27), merge 2 -> raises.
    """
    t, gh, gw = grid_thw
    m = op.merge_size
    if gh % m or gw % m:
        raise ValueError(f"patchify: expected a patch grid whose sides are multiples of merge_size "
                         f"= {m}, got {gh}x{gw} patches (HxW) of a tile at patch_size "
                         f"{op.patch_size}; use a tile size that is a multiple of patch_size*"
                         f"merge_size = {op.patch_size * m}, or merge_size=1 (one token per patch)")
    return t * gh * gw // (m ** 2)


def row_length(op: patchify, channels: int = 3) -> int:
    """Elements per patch row: ``C * T * P * P`` (1176 for Qwen2-VL, 1536 for Qwen3-VL)."""
    return channels * op.temporal_patch_size * op.patch_size * op.patch_size
