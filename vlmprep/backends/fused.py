"""The fused executors' kernel calls (vlmprep.kernels), shared by the eager backends.

``fusion.choose`` decides which one runs an image; ``base.Backend.run_image`` calls it with plain
inputs: uint8 ``(h, w, 3)`` images (numpy arrays or torch tensors, any row stride), the
normalize lut (``normalize_lut.lut_tensor``; None for uint8 output) and the image's output rows.

    Given  qwen2-vl, one 1092x1932 image, float32
    Input  tiles [uint8 (1092, 1932, 3)], lut (3, 256) float32
    Output ctx.dest (10764, 1176) filled: row r = merge-grouped patch r, [c, t, py, px]
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .. import kernels
from ..io import decode as _io
from ..plan.grid import row_length

if TYPE_CHECKING:
    from ..io.inputs import Source
    from ..ops import decode, patchify
    from ..plan import ImagePlan
    from .context import Context

__all__ = ["write_rows", "resize_rows", "decode_resize_rows", "decode_rows"]


def _hwc(x: Any) -> torch.Tensor:
    """uint8 ``(h, w, 3)`` torch view with pixel stride 3 (one copy only when it has none)."""
    if isinstance(x, np.ndarray):
        with warnings.catch_warnings():  # Pillow's arrays are read-only; the kernel only reads
            warnings.simplefilter("ignore", UserWarning)
            x = torch.from_numpy(x)
    if x.stride(2) != 1 or x.stride(1) != 3:
        x = x.contiguous()
    return x


def write_rows(tiles: list, lut: "torch.Tensor | None", ctx: "Context", op: "patchify") -> None:
    """`ROWS`: every uint8 ``(h, w, 3)`` tile's rows into ``ctx.dest`` in ``op.order``, in one
    ``kernels.normalize_patchify`` call per image."""
    imgs = [_hwc(t) for t in tiles]
    if ctx.dest.device.type != "cpu":
        imgs = [t.to(ctx.dest.device, non_blocking=True) for t in imgs]
    offsets, at = [], 0
    for t in imgs:
        offsets.append(at)
        h, w = t.shape[0], t.shape[1]
        at += 3 * h * w if op.order == "tiles" else (h // op.patch_size) * (w // op.patch_size) \
            * row_length(op)
    kernels.normalize_patchify(imgs, lut, ctx.dest.view(-1), offsets, op.order,
                               op.patch_size, op.merge_size, op.temporal_patch_size)


def resize_rows(image: Any, hw: tuple[int, int], interpolation: str, lut: "torch.Tensor | None",
                ctx: "Context", op: "patchify", match: str = "pillow") -> None:
    """`RESIZE_ROWS`: uint8 ``(H, W, 3)`` CPU image -> its rows resized to ``hw`` in one
    ``kernels.resize_normalize_patchify`` call (the same bytes as resizing first, without the
    resized image in memory). ``match``: whose resize arithmetic (the backend's
    ``resize_match``)."""
    kernels.resize_normalize_patchify(_hwc(image), hw, interpolation, lut, ctx.dest.view(-1), 0,
                                      op.order, op.patch_size, op.merge_size,
                                      op.temporal_patch_size, match=match)


def decode_resize_rows(src: "Source", decode_op: "decode", hw: tuple[int, int],
                       interpolation: str, lut: "torch.Tensor | None", ctx: "Context",
                       op: "patchify", match: str = "pillow") -> None:
    """`DECODE_RESIZE_ROWS`: an 8-bit JPEG's bytes -> its rows, decoded, resized and written in
    one ``kernels.decode_resize_normalize_patchify`` call. Damaged data the kernel declines is
    the ImageError; a file it declines for what it is (a colour space, ...) is decoded as the
    decode lowering does (``decode_op``'s limits apply) and goes through ``resize_rows``."""
    why = kernels.decode_resize_normalize_patchify(
        _io.encoded_bytes(src, decode_op), src.hw, hw, interpolation, lut, ctx.dest.view(-1), 0,
        op.order, op.patch_size, op.merge_size, op.temporal_patch_size, match=match)
    if why == "":
        return
    err = _io.jpeg_declined(why, src)
    if err is not None:  # libjpeg's error or warning: truncated or corrupt data
        raise err
    image = torch.from_numpy(np.require(_io.decode(src, fast=True, op=decode_op),
                                        requirements="W"))
    resize_rows(image, hw, interpolation, lut, ctx, op, match)


def source_boxes(plan: "ImagePlan", src_hw: tuple[int, int]
                 ) -> list[tuple[tuple[int, int, int, int], tuple[int, int]]]:
    """``(box, resize_hw)`` of each canvas: the source box ``(top, left, h, w)`` it resizes (the
    whole source when it has no box). For plans `DECODE_ROWS` takes (``fusion``): every canvas
    from the source, no padding, its box inside the source."""
    return [(c.box if c.box is not None else (0, 0, *src_hw), c.resize_hw) for c in plan.canvases]


def decode_rows(src: "Source", decode_op: "decode", interpolation: str,
                lut: "torch.Tensor | None", ctx: "Context", op: "patchify", match: str = "pillow") -> None:
    """`DECODE_ROWS`: an 8-bit JPEG's bytes -> its canvases in one ``kernels.decode_resize``
    call (the resizing beside the decode), then its tiles (views of the canvases) -> rows as
    ``write_rows``. Damaged data the kernel declines is the ImageError; a file it declines for
    what it is is decoded as the decode lowering does (``decode_op``'s limits apply) and its
    canvases made by ``kernels.resize``: the same bytes either way."""
    plan = ctx.plan
    interp = plan.canvases[0].interpolation or interpolation  # one for all (fusion checks)
    jobs = source_boxes(plan, src.hw)
    canvases, why = kernels.decode_resize(_io.encoded_bytes(src, decode_op), src.hw,
                                          [b for b, _ in jobs], [hw for _, hw in jobs], interp, match=match)
    if why:
        err = _io.jpeg_declined(why, src)
        if err is not None:  # libjpeg's error or warning: truncated or corrupt data
            raise err
        image = torch.from_numpy(np.require(_io.decode(src, fast=True, op=decode_op),
                                            requirements="W"))
        canvases = [kernels.resize(image[t:t + h, x:x + w], hw, interp, match=match)
                    for (t, x, h, w), hw in jobs]
    tiles = [canvases[k][t:t + h, x:x + w] for (t, x, h, w), k in zip(plan.tiles, plan.tile_canvas)]
    write_rows(tiles, lut, ctx, op)
