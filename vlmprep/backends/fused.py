"""The fused normalize + patchify path (vlmprep.kernels), shared by the backends that use it.

A backend's ``normalize`` lowering returns ``Normalized(tiles, table)`` instead of float
images when the kernel will run; its ``patchify`` lowering then writes every row of the image
in one kernel call. ``table[c, v]`` is the backend's own normalize applied to level ``v`` of
channel ``c`` (a uint8 channel has 256 values), so the fused path gives the same bits as the
backend's pure path, whatever order that one rounds in.

    Given  qwen2-vl, one 1092x1932 image, float32
    Input  tiles [uint8 (1092, 1932, 3)], table (3, 256) float32
    Output ctx.dest (10764, 1176) filled: row r = merge-grouped patch r, [c, t, py, px]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch

    from ..io.inputs import Source
    from .base import Context

__all__ = ["Normalized", "Deferred", "Encoded", "usable", "deferrable", "jpeg_deferrable", "hwc_tiles",
           "table", "write_rows", "RESIZE_LAYOUTS"]

#: Layouts whose rows the kernel can write while it resizes (a band of patch rows at a time).
RESIZE_LAYOUTS = ("merge_grouped", "raster", "naflex")


@dataclass
class Normalized:
    """Tiles whose normalization is deferred to the kernel.

    Fields:
        tiles: uint8 images ``(h, w, 3)`` (numpy arrays or torch tensors, any row stride).
        table: ``(3, 256)`` in the output dtype, on the output device.
    """

    tiles: list
    table: "torch.Tensor"


@dataclass
class Encoded:
    """An 8-bit JPEG whose decode is left to the kernel that also resizes and writes the rows
    (``kernels.decode_resize_normalize_patchify``).

    Fields:
        source: the input (its bytes are read at the kernel call; damaged data the kernel
            declines is an ImageError; Pillow decodes what it declines for other reasons).
        op: the pipeline's decode op (its limits apply as in the decode lowering).
    """

    source: "Source"
    op: Any = None


@dataclass
class Deferred:
    """A resize left to the kernel that writes the rows (``kernels.resize_normalize_patchify``):
    the same bytes as resizing first, without the resized image in memory.

    Fields:
        image: uint8 ``(H, W, 3)`` source (pixel stride 3) on the CPU, or ``Encoded`` (the kernel
            decodes it too).
        hw: the resized ``(h, w)``.
        interpolation: one of ``kernels.RESIZE_FILTERS``.
    """

    image: "torch.Tensor | Encoded"
    hw: tuple[int, int]
    interpolation: str


def deferrable(ctx: "Context", interpolation: str) -> bool:
    """Whether ``ctx.plan``'s sizing can be left to the kernel: it writes CPU rows, and the
    plan's only canvas is the whole source resized (no crop, no padding) and its only tile is
    that canvas (Qwen, Pixtral, NaFlex)."""
    from .. import kernels
    if ctx.dest.device.type != "cpu" or not usable(ctx):
        return False
    plan = ctx.plan
    if len(plan.canvases) != 1:
        return False
    c = plan.canvases[0]
    if c.parent != -1 or c.box is not None or c.size is not None:
        return False
    return ((c.interpolation or interpolation) in kernels.RESIZE_FILTERS
            and list(plan.tiles) == [(0, 0, *c.resize_hw)])


def jpeg_deferrable(ctx: "Context", interpolation: str) -> bool:
    """Whether the decode can be left to the kernel as well: the plan is ``deferrable``, the
    input is an 8-bit RGB / gray JPEG with no EXIF rotation, the kernels were built with
    libjpeg-turbo, and this image gets two threads or more (the kernel then decodes on one while
    the others resize and write the bands already decoded; on one thread it is no faster than
    decoding first)."""
    from .. import kernels
    h = ctx.source.header
    return (ctx.source.kind == "encoded" and h is not None and h.format == "jpeg"
            and h.bit_depth == 8 and h.mode_hint in ("RGB", "L") and h.orientation == 1
            and kernels.get_num_threads() >= 2 and kernels.jpeg_available()
            and deferrable(ctx, interpolation))


def hwc_tiles(imgs: list) -> list:
    """Tiles for ``write_rows``: ``(C, h, w)`` tensors as ``(h, w, C)`` views, ``Deferred`` as is."""
    return [x if isinstance(x, Deferred) else x.permute(1, 2, 0) for x in imgs]


def usable(ctx: "Context") -> bool:
    """Whether the kernel can fill ``ctx.dest``: built, loaded, and built for its device."""
    from .. import kernels
    if not kernels.available() or not ctx.dest.is_contiguous():
        return False
    if ctx.dest.device.type == "cpu":
        return True
    return ctx.dest.device.type == "cuda" and bool(kernels.build_info()["torch_ext"].get("cuda"))


_TABLES: dict[tuple, "torch.Tensor"] = {}


def table(key: tuple, normalize_ramp: Callable[[], Any], dtype: "torch.dtype",
          device: "torch.device") -> "torch.Tensor":
    """``(3, 256)`` table in ``dtype`` on ``device``, cached by ``key`` (backend, op, ...).

    ``normalize_ramp()`` returns the backend's normalize applied to the ramp image whose pixel
    ``v`` is ``(v, v, v)``, as float32 ``(256, 3)`` values in any array form.
    """
    import torch
    k = key + (str(dtype), str(device))
    t = _TABLES.get(k)
    if t is None:
        ramp = torch.as_tensor(normalize_ramp(), dtype=torch.float32).reshape(256, 3)
        # float32 -> bfloat16 rounds to nearest even, as the pure paths' copy_ into the output.
        t = _TABLES[k] = ramp.t().contiguous().to(dtype).to(device)
    return t


def _hwc(x: Any) -> "torch.Tensor":
    """uint8 ``(h, w, 3)`` torch view with pixel stride 3 (one copy only when it has none)."""
    import warnings

    import numpy as np
    import torch
    if isinstance(x, np.ndarray):
        with warnings.catch_warnings():  # Pillow's arrays are read-only; the kernel only reads
            warnings.simplefilter("ignore", UserWarning)
            x = torch.from_numpy(x)
    if x.stride(2) != 1 or x.stride(1) != 3:
        x = x.contiguous()
    return x


def write_rows(tiles: list, table_: "torch.Tensor | None", ctx: "Context", op: Any) -> None:
    """Every tile's rows into ``ctx.dest`` in ``op.order`` (one kernel call per image; a
    ``Deferred`` tile is resized by the kernel as it writes)."""
    import numpy as np
    import torch

    from .. import kernels
    from ..plan.grid import row_length
    if len(tiles) == 1 and isinstance(tiles[0], Deferred):
        d = tiles[0]
        args = (d.hw, d.interpolation, table_, ctx.dest.view(-1), 0, op.order, op.patch_size,
                op.merge_size, op.temporal_patch_size)
        image = d.image
        if isinstance(image, Encoded):
            from ..io import decode as _io
            src = image.source
            why = kernels.decode_resize_normalize_patchify(_io.encoded_bytes(src, image.op),
                                                           src.hw, *args)
            if why == "":
                return
            err = _io.jpeg_declined(why, src)
            if err is not None:  # libjpeg's error or warning: truncated or corrupt data
                raise err
            # Declined for what the file is: the decode lowering's path; the rows are written
            # again below.
            image = torch.from_numpy(np.require(_io.decode(src, fast=True, op=image.op),
                                                requirements="W"))
        kernels.resize_normalize_patchify(_hwc(image), *args)
        return
    imgs = [_hwc(t) for t in tiles]
    if ctx.dest.device.type != "cpu":
        imgs = [t.to(ctx.dest.device, non_blocking=True) for t in imgs]
    offsets, at = [], 0
    for t in imgs:
        offsets.append(at)
        h, w = t.shape[0], t.shape[1]
        at += 3 * h * w if op.order == "tiles" else (h // op.patch_size) * (w // op.patch_size) \
            * row_length(op)
    kernels.normalize_patchify(imgs, table_, ctx.dest.view(-1), offsets, op.order,
                               op.patch_size, op.merge_size, op.temporal_patch_size)
