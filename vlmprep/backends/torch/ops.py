"""Lowerings of the torch backend: ``fn(op, value, ctx) -> value``."""
from __future__ import annotations

import numpy as np
import torch

from ...io import decode as _io
from ...spec import ops
from ...plan.tiling import box_overlap
from ..base import Context
from ..registry import lowering
from .resize import resize_like_pil

B = "torch"


@lowering(B, "decode")
def decode(op: ops.decode, src, ctx: Context) -> torch.Tensor:
    """Source -> uint8 ``(3, H, W)`` on ``ctx.device``."""
    if src.kind == "tensor":
        return src.item.to(ctx.device)
    # Pillow hands out read-only arrays; torch wants writable memory (copies only then).
    hwc = torch.from_numpy(np.require(_io.decode(src), requirements="W"))
    return hwc.to(ctx.device, non_blocking=True).permute(2, 0, 1)


@lowering(B, "smart_resize")
def smart_resize(op: ops.smart_resize, img: torch.Tensor, ctx: Context) -> torch.Tensor:
    return resize_like_pil(img, ctx.plan.resized_hw, op.interpolation)


@lowering(B, "resize")
def resize(op: ops.resize, img: torch.Tensor, ctx: Context) -> torch.Tensor:
    return resize_like_pil(img, ctx.plan.resized_hw, op.interpolation)


@lowering(B, "center_crop")
def center_crop(op: ops.center_crop, img: torch.Tensor, ctx: Context) -> torch.Tensor:
    """``(C, H, W)`` -> ``(C, h, w)`` from the plan's box; outside the image is 0."""
    top, left, h, w = box = ctx.plan.tiles[0]
    win = box_overlap(box, tuple(img.shape[-2:]))
    if win is not None and win[1] == (0, h, 0, w):
        return img[:, top:top + h, left:left + w]  # wholly inside: a view
    out = img.new_zeros((img.shape[0], h, w))
    if win is not None:
        (sy0, sy1, sx0, sx1), (dy0, dy1, dx0, dx1) = win
        out[:, dy0:dy1, dx0:dx1] = img[:, sy0:sy1, sx0:sx1]
    return out


@lowering(B, "normalize")
def normalize(op: ops.normalize, img: torch.Tensor, ctx: Context) -> torch.Tensor:
    """uint8 -> float32 ``(x - mean/rescale) / (std/rescale)``: rescale folded into mean/std,
    as transformers' torchvision backend (differs from the PIL order by ~1 float ulp)."""
    mean = torch.tensor(op.mean, dtype=torch.float32, device=img.device) / op.rescale
    std = torch.tensor(op.std, dtype=torch.float32, device=img.device) / op.rescale
    return (img.to(torch.float32) - mean[:, None, None]) / std[:, None, None]


@lowering(B, "patchify")
def patchify(op: ops.patchify, img: torch.Tensor, ctx: Context) -> None:
    """``(C, H, W)`` -> rows ``(gh*gw, C*T*P*P)`` written into ``ctx.dest`` in one copy."""
    p, m, T = op.patch_size, op.merge_size, op.temporal_patch_size
    C, H, W = img.shape
    gh, gw = H // p, W // p
    # (c, bh, mh, py, bw, mw, px) -> (bh, bw, mh, mw, c, py, px), then T copies after c.
    x = img.reshape(C, gh // m, m, p, gw // m, m, p).permute(1, 4, 2, 5, 0, 3, 6)
    x = x.unsqueeze(5).expand(*x.shape[:5], T, p, p)
    ctx.dest.view(x.shape).copy_(x)
