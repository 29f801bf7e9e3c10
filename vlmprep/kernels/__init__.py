"""Python face of the compiled ops (csrc/): availability, build info, thread count, and the ops.

The kernels are optional: ``available()`` says whether the torch ops loaded, ``why_unavailable()``
why not ("built for X, found Y"), and every backend falls back to its pure implementation.
``VLMPREP_DISABLE_KERNELS=1`` turns them off (to compare against the pure paths).

Ops (torch tensors; shapes first):
    normalize_patchify(images, lut, out, offsets, layout, patch, merge, temporal)
        images: list of ``(h, w, 3)`` uint8 (pixel stride 3; crops of a canvas are fine),
        lut: ``(3, 256)`` of ``out.dtype`` (None for uint8 out), out: contiguous, filled in place.
    resize(image, (h, w), interpolation) -> ``(h, w, 3)`` uint8, Pillow 13-exact (CPU).
    resize_normalize_patchify(image, (h, w), interpolation, lut, out, offset, layout, patch,
        merge, temporal): resize then normalize_patchify for one image in one pass (CPU; patch
        layouts), the same bytes, without the resized image in memory.
    decode_resize_normalize_patchify(data, src_hw, (h, w), ...): the same from a JPEG's bytes,
        decoding (libjpeg-turbo, Pillow's pixels) just ahead of the bands; returns "" or why
        the fast path declined (then decode with Pillow). ``jpeg_available()`` says if built.
    decode_jpeg(data, src_hw) -> ``(H, W, 3)`` uint8: that decoder alone.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .loader import build_info, dali_plugin, load, why_unavailable
from .threads import get_num_threads, local_threads, set_num_threads

if TYPE_CHECKING:
    import torch

__all__ = ["available", "why_unavailable", "build_info", "dali_plugin", "normalize_patchify", "empty",
           "resize", "resize_normalize_patchify", "decode_resize_normalize_patchify", "decode_jpeg",
           "jpeg_available", "RESIZE_FILTERS", "get_num_threads", "set_num_threads", "local_threads"]

#: Interpolations the compiled resize reproduces (nearest stays with PIL).
RESIZE_FILTERS = ("bilinear", "bicubic", "lanczos")


def available() -> bool:
    """True when the torch ops are loaded (loads them on first call)."""
    return load() is None


def _require() -> None:
    reason = load()
    if reason is not None:
        raise RuntimeError(f"vlmprep's compiled ops are not available: {reason}")


def normalize_patchify(images: Sequence["torch.Tensor"], lut: "torch.Tensor | None",
                       out: "torch.Tensor", offsets: Sequence[int], layout: str, patch: int,
                       merge: int = 1, temporal: int = 1) -> None:
    """Fill ``out`` (contiguous; float32 / bfloat16 / uint8) with every image's rows in
    ``layout`` starting at element ``offsets[i]``; ``lut[c, v]`` is channel c's output for
    level v (None for uint8). One call per batch; CPU twin or CUDA kernel by ``out.device``."""
    import torch
    _require()
    torch.ops.vlmprep.normalize_patchify(list(images), lut, out, [int(o) for o in offsets],
                                         layout, int(patch), int(merge), int(temporal),
                                         get_num_threads())


def empty(shape: Sequence[int], dtype: "torch.dtype", device: str = "cpu") -> "torch.Tensor":
    """An uninitialised contiguous output tensor: on the CPU from vlmprep's host buffer cache
    (``torch.empty`` without the kernels, and on other devices): a reused buffer is not faulted
    in again, which costs more than filling it for a large batch (csrc/torch/host_cache.cpp)."""
    import math

    import torch
    if str(device) != "cpu" or load() is not None:
        return torch.empty(tuple(shape), dtype=dtype, device=device)
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return torch.ops.vlmprep.empty_host(nbytes).view(dtype).view(tuple(shape))


def resize(image: "torch.Tensor", hw: tuple[int, int], interpolation: str) -> "torch.Tensor":
    """``(H, W, 3)`` uint8 CPU -> ``(h, w, 3)`` uint8, bit-exact with Pillow 13's
    ``Image.resize`` for bilinear / bicubic / lanczos."""
    import torch
    _require()
    return torch.ops.vlmprep.resize(image, int(hw[0]), int(hw[1]), interpolation,
                                    get_num_threads())


def resize_normalize_patchify(image: "torch.Tensor", hw: tuple[int, int], interpolation: str,
                              lut: "torch.Tensor | None", out: "torch.Tensor", offset: int,
                              layout: str, patch: int, merge: int = 1, temporal: int = 1) -> None:
    """``(H, W, 3)`` uint8 CPU image -> its rows in ``layout`` (merge_grouped / raster / naflex)
    written into ``out`` from element ``offset``: the bytes of ``resize`` then
    ``normalize_patchify``, made one band of patch rows at a time (the resized image is never
    whole in memory)."""
    import torch
    _require()
    torch.ops.vlmprep.resize_normalize_patchify(image, int(hw[0]), int(hw[1]), interpolation, lut,
                                                out, int(offset), layout, int(patch), int(merge),
                                                int(temporal), get_num_threads())


def jpeg_available() -> bool:
    """True when the ops are loaded and were built with libjpeg-turbo (the JPEG fast path)."""
    return available() and bool(build_info().get("torch_ext", {}).get("libjpeg"))


def _bytes_tensor(data: bytes | bytearray | memoryview) -> "torch.Tensor":
    import torch
    return torch.frombuffer(data if isinstance(data, bytearray) else bytearray(data), dtype=torch.uint8)


def decode_resize_normalize_patchify(data: bytes, src_hw: tuple[int, int], hw: tuple[int, int],
                                     interpolation: str, lut: "torch.Tensor | None",
                                     out: "torch.Tensor", offset: int, layout: str, patch: int,
                                     merge: int = 1, temporal: int = 1) -> str:
    """An 8-bit JPEG's bytes (``src_hw`` as probed) -> its rows in ``layout`` written into
    ``out`` from element ``offset``: Pillow's decode, then ``resize_normalize_patchify``'s
    bytes. Returns "" when done, else why the fast path declined (damaged or unusual data;
    ``out`` is then partly written: decode with Pillow and redo it)."""
    import torch
    _require()
    try:
        torch.ops.vlmprep.decode_resize_normalize_patchify(
            _bytes_tensor(data), int(src_hw[0]), int(src_hw[1]), int(hw[0]), int(hw[1]),
            interpolation, lut, out, int(offset), layout, int(patch), int(merge), int(temporal),
            get_num_threads())
    except RuntimeError as e:  # the op raises "...: declined: <why>" for data it leaves to Pillow
        msg = str(e).split("\n")[0]
        if ": declined: " not in msg:
            raise
        return msg.split(": declined: ", 1)[1]
    return ""


def decode_jpeg(data: bytes, src_hw: tuple[int, int]) -> "torch.Tensor":
    """An 8-bit JPEG's bytes (``src_hw`` as probed) -> uint8 ``(H, W, 3)`` RGB, Pillow's pixels
    (libjpeg-turbo, islow IDCT, fancy upsampling). Raises RuntimeError on damaged data."""
    import torch
    _require()
    return torch.ops.vlmprep.decode_jpeg(_bytes_tensor(data), int(src_hw[0]), int(src_hw[1]))
