"""Lowerings of the torch backend: ``fn(op, value, ctx) -> value``."""
from __future__ import annotations

import numpy as np
import torch

from ... import kernels, ops
from ...io import decode as _io
from ...plan.boxes import box_overlap
from ..base import register_geometry_lowerings
from ..context import Context
from ..registry import lowering
from ..tv_exact import resize_normalized as _tv_resize_normalized
from .resize import resize_like_pil

B = "torch"


@lowering(B, "decode")
def decode(op: ops.decode, src, ctx: Context) -> torch.Tensor:
    """Source -> uint8 ``(3, H, W)`` on ``ctx.device``."""
    if src.kind == "tensor":
        return src.item.to(ctx.device)
    # Pillow hands out read-only arrays; torch wants writable memory (copies only then).
    hwc = torch.from_numpy(np.require(_io.decode(src, fast=True, op=op), requirements="W"))
    return hwc.to(ctx.device, non_blocking=True).permute(2, 0, 1)


_FILLS: dict[tuple, torch.Tensor] = {}


def fill_tensor(fill: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``fill`` as a ``(C,)`` tensor on ``device``, made once per (fill, dtype, device) and kept
    (read only): a padded canvas on CUDA costs no host-to-device upload of its fill value."""
    key = (tuple(fill), dtype, str(device))
    t = _FILLS.get(key)
    if t is None:
        t = _FILLS[key] = torch.tensor(fill, dtype=dtype, device=device)
    return t


def cut(img: torch.Tensor, box: tuple[int, int, int, int], fill=(0, 0, 0)) -> torch.Tensor:
    """``(C, H, W)`` -> ``(C, h, w)``: the box, ``fill`` where it leaves the image."""
    top, left, h, w = box
    win = box_overlap(box, (img.shape[-2], img.shape[-1]))
    if win is not None and win[1] == (0, h, 0, w):
        return img[:, top:top + h, left:left + w]  # wholly inside: a view
    out = fill_tensor(fill, img.dtype, img.device)[:, None, None].repeat(1, h, w)
    if win is not None:
        (sy0, sy1, sx0, sx1), (dy0, dy1, dx0, dx1) = win
        out[:, dy0:dy1, dx0:dx1] = img[:, sy0:sy1, sx0:sx1]
    return out


def resize(img: torch.Tensor, hw: tuple[int, int], interpolation: str) -> torch.Tensor:
    """``(C, H, W)`` uint8 -> ``(C, h, w)``: on the CPU the compiled Pillow-exact resize when
    built (its output is HWC memory, so the fused rows kernel reads it without a copy), else
    ``resize_like_pil``."""
    if compiled_resize(img.device, interpolation):
        if tuple(img.shape[-2:]) == tuple(hw):
            return img
        hwc = img.permute(1, 2, 0)
        if hwc.stride(2) != 1 or hwc.stride(1) != 3:
            hwc = hwc.contiguous()
        return kernels.resize(hwc, hw, interpolation).permute(2, 0, 1)
    return resize_like_pil(img, hw, interpolation)


def compiled_resize(device: torch.device, interpolation: str) -> bool:
    """Whether ``resize`` runs the compiled one-image CPU resize here; else it is
    ``resize_like_pil``, which also takes an ``(N, C, H, W)`` stack (``gpu.resize_group``)."""
    return (device.type == "cpu" and interpolation in kernels.RESIZE_INTERPOLATIONS
            and kernels.available())


def resize_normalized(img: torch.Tensor, hw: tuple[int, int], interpolation: str) -> torch.Tensor:
    """float32 (or uint8) ``(C, H, W)`` -> ``(C, h, w)``: a ``plan.Canvas.normalized`` canvas,
    by the op transformers calls (``tv_exact.resize_normalized``; the default and
    ``match="torchvision"`` torch backends differ only in the normalize before it). On CUDA the
    canvas makes a round trip to the CPU: torch's uint8 resize without antialias has no CUDA
    kernel (torchvision resizes in float there, other bytes) and the float one rounds its own
    way, while this backend gives the CPU's bits on every device."""
    if img.device.type != "cpu":
        return _tv_resize_normalized(img.cpu(), hw, interpolation).to(img.device)
    return _tv_resize_normalized(img, hw, interpolation)


register_geometry_lowerings(B, resize, cut, resize_normalized)


def normalize_tensor(op: ops.normalize, x: torch.Tensor) -> torch.Tensor:
    """uint8 ``(C, ...)`` -> float32 ``(x - mean/rescale) / (std/rescale)``: rescale folded
    into mean/std, like transformers' torchvision backend (~1 float ulp from the PIL order; not
    its bits either, which multiply by ``1 / rescale``: ``tv_match.normalize_tensor``)."""
    shape = (-1,) + (1,) * (x.dim() - 1)
    mean, std = _mean_std(op, x.device)
    return (x.to(torch.float32) - mean.view(shape)) / std.view(shape)


_MEAN_STD: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _mean_std(op: ops.normalize, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 ``(C,)`` mean / rescale and std / rescale on ``device``, made once per (op,
    device) and kept (read only), so a tile's normalize uploads nothing. Divided on ``device``
    as before (CUDA may divide by a scalar as a multiply by its reciprocal: the same bits as
    computed per tile there)."""
    key = (op, str(device))
    got = _MEAN_STD.get(key)
    if got is None:
        got = _MEAN_STD[key] = (
            torch.tensor(op.mean, dtype=torch.float32, device=device) / op.rescale,
            torch.tensor(op.std, dtype=torch.float32, device=device) / op.rescale)
    return got


def normalize_levels(op: ops.normalize, levels: np.ndarray) -> torch.Tensor:
    """uint8 ``(256, C)`` levels -> float32 ``(256, C)`` by ``normalize_tensor`` (the lut of
    the fused paths: ``normalize_lut.normalize_lut(op, normalize_levels)``)."""
    return normalize_tensor(op, torch.from_numpy(levels).t()).t()


@lowering(B, "normalize")
def normalize(op: ops.normalize, imgs: list[torch.Tensor], ctx: Context) -> list[torch.Tensor]:
    """uint8 tiles ``(C, h, w)`` -> float32 tiles (``normalize_tensor``)."""
    return [normalize_tensor(op, x) for x in imgs]


@lowering(B, "patchify")
def patchify(op: ops.patchify, imgs: list[torch.Tensor], ctx: Context) -> None:
    """Tiles ``(C, h, w)`` -> ``ctx.dest``: merge-grouped rows ``(gh*gw, C*T*P*P)`` written in one
    copy, or ``(n_tiles, C, h, w)`` images for the ``tiles`` layout."""
    if op.order == "tiles":
        for k, x in enumerate(imgs):
            ctx.dest[k].copy_(x)
        return
    if op.order in ("raster", "naflex"):
        # Raster rows (see plan.grid): (c, gy, py, gx, px) -> [c, py, px] or [py, px, c]; one
        # sequence per tile, tiles one after another (MiniCPM-V: the source, then its slices).
        p, row = op.patch_size, 0
        for img in imgs:
            C, H, W = img.shape
            x = img.reshape(C, H // p, p, W // p, p)
            x = x.permute(1, 3, 0, 2, 4) if op.order == "raster" else x.permute(1, 3, 2, 4, 0)
            n = (H // p) * (W // p)
            ctx.dest[row:row + n].view(x.shape).copy_(x)
            row += n
        return
    (img,) = imgs
    p, m, T = op.patch_size, op.merge_size, op.temporal_patch_size
    C, H, W = img.shape
    gh, gw = H // p, W // p
    # (c, bh, mh, py, bw, mw, px) -> (bh, bw, mh, mw, c, py, px), then T copies after c.
    x = img.reshape(C, gh // m, m, p, gw // m, m, p).permute(1, 4, 2, 5, 0, 3, 6)
    x = x.unsqueeze(5).expand(*x.shape[:5], T, p, p)
    ctx.dest.view(x.shape).copy_(x)
