"""Lowerings of the reference backend: ``fn(op, value, ctx) -> value``."""
from __future__ import annotations

import numpy as np

from ... import ops
from ...io import decode as _io
from ...plan.boxes import box_overlap
from ..base import register_geometry_lowerings
from ..context import Context
from ..normalize_lut import normalize_array
from ..registry import lowering

B = "reference"


@lowering(B, "decode")
def decode(op: ops.decode, src, ctx: Context) -> np.ndarray:
    """Source -> uint8 ``(H, W, 3)``."""
    return _io.decode(src, op=op)


def resize(img: np.ndarray, hw: tuple[int, int], interpolation: str) -> np.ndarray:
    """uint8 ``(H, W, 3)`` -> uint8 ``(h, w, 3)`` with ``PIL.Image.resize`` (what HF's PIL backend runs)."""
    from PIL import Image
    if img.shape[:2] == tuple(hw):
        return img  # Pillow returns an unchanged copy for an equal size
    pil = Image.fromarray(img, "RGB")
    return np.asarray(pil.resize((hw[1], hw[0]), resample=ops.PIL_RESAMPLE[interpolation]))


def cut(img: np.ndarray, box: tuple[int, int, int, int], fill=(0, 0, 0)) -> np.ndarray:
    """``(H, W, C)`` -> ``(h, w, C)``: the box, ``fill`` where it leaves the image."""
    top, left, h, w = box
    win = box_overlap(box, img.shape[:2])
    if win is not None and win[1] == (0, h, 0, w):
        return img[top:top + h, left:left + w]  # wholly inside: a view
    out = np.empty((h, w) + img.shape[2:], img.dtype)
    out[...] = np.asarray(fill, img.dtype)
    if win is not None:
        (sy0, sy1, sx0, sx1), (dy0, dy1, dx0, dx1) = win
        out[dy0:dy1, dx0:dx1] = img[sy0:sy1, sx0:sx1]
    return out


def resize_normalized(img: np.ndarray, hw: tuple[int, int], interpolation: str) -> np.ndarray:
    """float32 (or uint8) ``(H, W, 3)`` -> the same dtype ``(h, w, 3)``: a ``plan.Canvas.normalized``
    canvas, by the op transformers calls (``tv_exact.resize_normalized``: torch's interpolate
    without antialias). No PIL processor does this, so Pillow has no filter to stand in; the
    reference's difference from transformers is its input (Pillow's canvas, the PIL-order
    normalize), not this step."""
    import torch  # deferred: the reference backend imports torch only where it writes tensors

    from ..tv_exact import resize_normalized as tv_resize_normalized
    x = torch.from_numpy(np.require(img, requirements=["C", "W"])).permute(2, 0, 1)  # torch wants writable
    return tv_resize_normalized(x, hw, interpolation).permute(1, 2, 0).numpy()


register_geometry_lowerings(B, resize, cut, resize_normalized)


@lowering(B, "normalize")
def normalize(op: ops.normalize, imgs: list[np.ndarray], ctx: Context) -> list[np.ndarray]:
    """uint8 tiles ``(h, w, 3)`` -> float32 tiles (``normalize_lut.normalize_array``:
    transformers' PIL-backend arithmetic)."""
    return [normalize_array(op, x) for x in imgs]


@lowering(B, "patchify")
def patchify(op: ops.patchify, imgs: list[np.ndarray], ctx: Context) -> None:
    """Tiles ``(h, w, C)`` -> ``ctx.dest``: merge-grouped rows ``(gh*gw, C*T*P*P)`` (see
    plan.grid), or ``(n_tiles, C, h, w)`` images for the ``tiles`` layout."""
    import torch
    x: np.ndarray
    if op.order == "tiles":
        x = np.stack(imgs).transpose(0, 3, 1, 2)
    elif op.order in ("raster", "naflex"):
        # Raster rows (see plan.grid): (gy, py, gx, px, c) -> [c, py, px] or [py, px, c]; one
        # sequence per tile, tiles one after another (MiniCPM-V: the source, then its slices).
        p = op.patch_size
        seqs = []
        for img in imgs:
            H, W, C = img.shape
            t = img.reshape(H // p, p, W // p, p, C)
            seqs.append(t.transpose(0, 2, 4, 1, 3) if op.order == "raster" else t.transpose(0, 2, 1, 3, 4))
        x = seqs[0] if len(seqs) == 1 else np.concatenate([t.reshape(-1, t[0, 0].size) for t in seqs])
    else:
        (img,) = imgs
        p, m, T = op.patch_size, op.merge_size, op.temporal_patch_size
        H, W, C = img.shape
        gh, gw = H // p, W // p
        # (bh, mh, py, bw, mw, px, c) -> (bh, bw, mh, mw, c, py, px), then T copies after c.
        x = img.reshape(gh // m, m, p, gw // m, m, p, C).transpose(0, 3, 1, 4, 6, 2, 5)
        x = np.broadcast_to(x[:, :, :, :, :, None], x.shape[:5] + (T,) + x.shape[5:])
    if ctx.dest.dtype == torch.bfloat16:
        ctx.dest.copy_(torch.from_numpy(np.ascontiguousarray(x)).view(ctx.dest.shape))
    else:
        ctx.dest.numpy().reshape(x.shape)[...] = x  # one write, no intermediate copy
