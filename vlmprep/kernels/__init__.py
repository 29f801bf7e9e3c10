"""Python face of the compiled ops (csrc/): availability, build info, thread count, and the ops.

The kernels are optional: ``available()`` says whether the torch ops loaded, ``why_unavailable()``
why not ("built for X, found Y"), and every backend falls back to its pure implementation.
``VLMPREP_DISABLE_KERNELS=1`` turns them off (to compare against the pure paths).

Ops (torch tensors; shapes first). ``order`` is ``vlmprep.ops.patchify.order`` (merge_grouped,
raster, naflex, tiles); ``patch_size``, ``merge_size``, ``temporal_patch_size`` are patchify's;
``lut`` is the per-channel 256-entry normalize table. The same names in the torch op schema
(torch.ops.vlmprep.*), the DALI plugin's schema and csrc/.
    normalize_patchify(images, lut, out, offsets, order, patch_size, merge_size,
        temporal_patch_size)
        images: list of ``(h, w, 3)`` uint8 (pixel stride 3; crops of a canvas are fine),
        lut: ``(3, 256)`` of ``out.dtype`` (None for uint8 out), out: contiguous, filled in place.
    resize(image, (h, w), interpolation) -> ``(h, w, 3)`` uint8, Pillow 13-exact (CPU).
    ``match="torchvision"`` (resize and the resizing ops): torchvision's
    ``resize(antialias=True)`` of a uint8 tensor on the CPU instead, bit-exact (torch's int16
    arithmetic; MATCHES).
    resize_normalize_patchify(image, (h, w), interpolation, lut, out, offset, order, patch_size,
        merge_size, temporal_patch_size): resize then normalize_patchify for one image in one
        pass (CPU; patch orders), the same bytes, without the resized image in memory.
    decode_resize_normalize_patchify(data, src_hw, (h, w), ...): the same from a JPEG's bytes,
        decoding (libjpeg-turbo, Pillow's pixels) just ahead of the bands; returns "" or why
        the fast path declined (then decode with Pillow). ``jpeg_available()`` says if built.
    decode_jpeg(data, src_hw, num_threads=None) -> ``(H, W, 3)`` uint8: that decoder alone; on
        2+ threads the JPEG ops may split a single-scan decode in two (a second decoder skips to
        ``jpeg_split_row(data, output_pixels, output_bytes)`` and decodes the rest), the same
        bytes.
    decode_resize(data, src_hw, boxes, sizes, interpolation) -> (canvases, why): a JPEG's source
        boxes resized, each ``(h, w, 3)`` uint8 (the bytes of decode_jpeg, crop, resize), the
        resizing beside the decode when 2+ threads; why: "" or why the fast path declined.
    stream_store(out, value=0): every byte of a contiguous CPU ``out`` set with streamed
        (non-temporal) stores on one thread: the output-write floor ``vlmprep bench`` reports.
"""
from __future__ import annotations

import operator
import os
from typing import TYPE_CHECKING, Sequence

from .loader import build_info, built_with, dali_plugin, dali_plugin_loaded, load, why_unavailable
from .threads import get_num_threads, local_threads, set_num_threads

if TYPE_CHECKING:
    import torch

__all__ = ["available", "why_unavailable", "build_info", "built_with", "summary", "dali_plugin", "dali_plugin_loaded",
           "normalize_patchify", "empty", "resize", "resize_normalize_patchify",
           "decode_resize_normalize_patchify", "decode_jpeg", "jpeg_split_row", "jpeg_available", "JpegDeclined",
           "stream_store", "decode_resize", "cpu_paths",
           "RESIZE_INTERPOLATIONS", "MATCHES", "MAX_SIDE", "get_num_threads", "set_num_threads", "local_threads"]

#: Interpolations the compiled resize reproduces (nearest stays with PIL).
RESIZE_INTERPOLATIONS = ("bilinear", "bicubic", "lanczos")

#: Whose resize the ops reproduce: Pillow 13's ``Image.resize`` (the default) or torchvision's
#: antialiased uint8 tensor resize on the CPU (lanczos: torch >= 2.14's ``_upsample_lanczos2d_aa``).
MATCHES = ("pillow", "torchvision")

#: The largest image side the kernels take (csrc/include/vlmprep/limits.h: kMaxSide).
MAX_SIDE = 1 << 28
_INT64_MAX = (1 << 63) - 1


def _int(op: str, name: str, v, lo: int, hi: int) -> int:
    """``v`` as an int in [lo, hi], else a ValueError that says so. Checked here, in Python's
    unbounded ints, so a value like 2**32 + 3 or 2**70 never reaches the op's int64 / int32."""
    try:
        if isinstance(v, bool):
            raise TypeError
        i = operator.index(v)  # ints, numpy ints; not floats, not strings
    except TypeError:
        raise ValueError(f"{op}: {name}: expected an integer in [{lo}, {hi}], got {type(v).__name__} "
                         f"{v!r}; pass an int") from None
    if not lo <= i <= hi:
        raise ValueError(f"{op}: {name}: expected an integer in [{lo}, {hi}], got {i}; pass the value "
                         f"from the plan")
    return i


def _hw(op: str, name: str, hw) -> tuple[int, int]:
    """An (h, w) size: two ints in [1, MAX_SIDE]."""
    try:
        h, w = hw
    except (TypeError, ValueError):
        raise ValueError(f"{op}: {name}: expected (height, width), got {hw!r}; pass a pair of ints") from None
    return _int(op, f"{name}[0]", h, 1, MAX_SIDE), _int(op, f"{name}[1]", w, 1, MAX_SIDE)


def _patch_ints(op: str, patch_size, merge_size, temporal_patch_size) -> tuple[int, int, int]:
    return (_int(op, "patch_size", patch_size, 1, MAX_SIDE), _int(op, "merge_size", merge_size, 1, MAX_SIDE),
            _int(op, "temporal_patch_size", temporal_patch_size, 1, MAX_SIDE))


def available() -> bool:
    """True when the torch ops are loaded (loads them on first call)."""
    return load() is None


def cpu_paths() -> dict:
    """The instruction-set path each CPU kernel takes here now: ``{"resize": "avx512-vnni" |
    "avx2" | "neon" | "scalar", "normalize_patchify": "avx512-vbmi, float32 patch rows avx2" (the
    band path but for float32 rows of patch 14 / 16) | "avx2" | "scalar", "cap": the
    VLMPREP_CPU_ISA value or None}``. The kernels read VLMPREP_CPU_ISA ("avx2": no AVX-512;
    "scalar": plain C++) at every call, so this is what a call made now runs."""
    import torch
    _require()
    resize_path, np_path = torch.ops.vlmprep.cpu_paths()
    return {"resize": resize_path, "normalize_patchify": np_path,
            "cap": os.environ.get("VLMPREP_CPU_ISA") or None}


def summary() -> dict:
    """The build record plus whether the ops load here (and why not), and the CPU paths they take:
    ``vlmprep info`` and the bench JSON."""
    reason = why_unavailable()
    return {"built": reason is None, "reason": reason, **build_info(),
            "dali_plugin_loaded": dali_plugin() is not None if reason is None else False,
            "cpu_paths": cpu_paths() if reason is None else None}


def _require() -> None:
    reason = load()
    if reason is not None:
        raise RuntimeError(f"vlmprep's compiled ops are not available: {reason}")


def normalize_patchify(images: Sequence["torch.Tensor"], lut: "torch.Tensor | None",
                       out: "torch.Tensor", offsets: Sequence[int], order: str, patch_size: int,
                       merge_size: int = 1, temporal_patch_size: int = 1) -> None:
    """Fill ``out`` (contiguous; float32 / bfloat16 / uint8) with every image's rows in
    ``order`` starting at element ``offsets[i]``; ``lut[c, v]`` is channel c's output for
    level v (None for uint8). One call per batch; CPU twin or CUDA kernel by ``out.device``.
    An image may be a video's temporal group, ``(T, h, w, 3)`` with T == temporal_patch_size
    >= 2 (merge_grouped): frame t's values go to each row's t-th ``[py, px]`` slots."""
    import torch
    _require()
    op = "normalize_patchify"
    offsets = [_int(op, f"offsets[{i}]", o, 0, _INT64_MAX) for i, o in enumerate(offsets)]
    torch.ops.vlmprep.normalize_patchify(list(images), lut, out, offsets, order,
                                         *_patch_ints(op, patch_size, merge_size, temporal_patch_size),
                                         get_num_threads())


def empty(shape: Sequence[int], dtype: "torch.dtype", device: str = "cpu") -> "torch.Tensor":
    """An uninitialised contiguous output tensor: on the CPU from vlmprep's host buffer cache
    (``torch.empty`` without the kernels, and on other devices): a reused buffer is not faulted
    in again, which costs more than filling it for a large batch (csrc/torch/host_cache.cpp)."""
    import math

    import torch
    shape = tuple(_int("empty", f"shape[{i}]", s, 0, _INT64_MAX) for i, s in enumerate(shape))
    if str(device) != "cpu" or load() is not None:
        return torch.empty(shape, dtype=dtype, device=device)
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if nbytes > _INT64_MAX:
        raise ValueError(f"empty: expected at most 2**63 - 1 bytes, got shape {shape} ({nbytes} bytes); "
                         f"allocate less")
    return torch.ops.vlmprep.empty_host(nbytes).view(dtype).view(tuple(shape))


def resize(image: "torch.Tensor", hw: tuple[int, int], interpolation: str,
           match: str = "pillow") -> "torch.Tensor":
    """``(H, W, 3)`` uint8 CPU -> ``(h, w, 3)`` uint8, bit-exact with Pillow 13's
    ``Image.resize`` for bilinear / bicubic / lanczos (``match="torchvision"``: with
    torchvision's ``resize(antialias=True)`` of the CHW uint8 tensor on the CPU)."""
    import torch
    _require()
    return torch.ops.vlmprep.resize(image, *_hw("resize", "hw", hw), interpolation, get_num_threads(), match)


def resize_normalize_patchify(image: "torch.Tensor", hw: tuple[int, int], interpolation: str,
                              lut: "torch.Tensor | None", out: "torch.Tensor", offset: int,
                              order: str, patch_size: int, merge_size: int = 1,
                              temporal_patch_size: int = 1, match: str = "pillow") -> None:
    """``(H, W, 3)`` uint8 CPU image -> its rows in ``order`` (merge_grouped / raster / naflex)
    written into ``out`` from element ``offset``: the bytes of ``resize`` then
    ``normalize_patchify``, made one band of patch rows at a time (the resized image is never
    whole in memory). ``image`` may be a video's temporal group ``(T, H, W, 3)`` (T ==
    temporal_patch_size >= 2, merge_grouped): each frame resized, frame t to the rows' t-th
    slots, each band of every frame written straight into the rows."""
    import torch
    _require()
    op = "resize_normalize_patchify"
    torch.ops.vlmprep.resize_normalize_patchify(image, *_hw(op, "hw", hw), interpolation, lut, out,
                                                _int(op, "offset", offset, 0, _INT64_MAX), order,
                                                *_patch_ints(op, patch_size, merge_size, temporal_patch_size),
                                                get_num_threads(), match)


def jpeg_available() -> bool:
    """True when the ops are loaded and were built with libjpeg-turbo (the JPEG fast path)."""
    return available() and built_with("torch_ext", "libjpeg")


def _bytes_tensor(data: bytes | bytearray | memoryview) -> "torch.Tensor":
    import torch
    return torch.frombuffer(data if isinstance(data, bytearray) else bytearray(data), dtype=torch.uint8)


def decode_resize_normalize_patchify(data: bytes, src_hw: tuple[int, int], hw: tuple[int, int],
                                     interpolation: str, lut: "torch.Tensor | None",
                                     out: "torch.Tensor", offset: int, order: str, patch_size: int,
                                     merge_size: int = 1, temporal_patch_size: int = 1,
                                     match: str = "pillow") -> str:
    """An 8-bit JPEG's bytes (``src_hw`` as probed) -> its rows in ``order`` written into
    ``out`` from element ``offset``: Pillow's decode, then ``resize_normalize_patchify``'s
    bytes. Returns "" when done, else why the fast path declined (damaged or unusual data;
    ``out`` is then partly written: decode with Pillow and redo it)."""
    import torch
    _require()
    op = "decode_resize_normalize_patchify"
    args = (*_hw(op, "src_hw", src_hw), *_hw(op, "hw", hw), interpolation, lut, out,
            _int(op, "offset", offset, 0, _INT64_MAX), order,
            *_patch_ints(op, patch_size, merge_size, temporal_patch_size))
    try:
        torch.ops.vlmprep.decode_resize_normalize_patchify(_bytes_tensor(data), *args, get_num_threads(), match)
    except RuntimeError as e:
        return _declined(e)
    return ""


def decode_resize(data: bytes, src_hw: tuple[int, int], boxes: Sequence[tuple[int, int, int, int]],
                  sizes: Sequence[tuple[int, int]], interpolation: str, match: str = "pillow"
                  ) -> tuple[list["torch.Tensor"], str]:
    """An 8-bit JPEG's bytes (``src_hw`` as probed) -> ``(canvases, "")``: canvas k is
    ``boxes[k]`` = (top, left, h, w), inside the image, resized to ``sizes[k]``, uint8
    ``(h, w, 3)``, the bytes of ``decode_jpeg`` then ``resize`` of the crop. With 2+ threads the
    decode is split in two (``jpeg_split_row``) and the bands are resized as their source rows
    are decoded. When
    the fast path declines (damaged or unusual data): ``([], why)``; decode with Pillow."""
    import torch
    _require()
    op = "decode_resize"
    if len(boxes) != len(sizes) or not sizes:
        raise ValueError(f"{op}: expected one box per size and at least one, got {len(boxes)} boxes "
                         f"and {len(sizes)} sizes")
    flat_boxes = [_int(op, "boxes", v, 0, MAX_SIDE) for b in boxes for v in b]
    flat_sizes = [v for hw in sizes for v in _hw(op, "sizes", hw)]
    try:
        out = torch.ops.vlmprep.decode_resize(_bytes_tensor(data), *_hw(op, "src_hw", src_hw), flat_boxes,
                                              flat_sizes, interpolation, get_num_threads(), match)
    except RuntimeError as e:
        return [], _declined(e)
    return list(out), ""


def _declined(e: RuntimeError) -> str:
    """Why a JPEG op left the file to Pillow: the ops raise "...: declined: <why>" for data
    they do not take; any other RuntimeError is re-raised (a real failure)."""
    msg = str(e).split("\n")[0]
    if ": declined: " not in msg:
        raise e
    return msg.split(": declined: ", 1)[1]


class JpegDeclined(RuntimeError):
    """``decode_jpeg`` did not decode the bytes; ``reason`` is libjpeg's error or warning, or
    what the file is that it does not take (a colour space, a size other than the probed one)."""

    def __init__(self, reason: str):
        super().__init__(f"decode_jpeg: {reason}; decode it with Pillow to see the error")
        self.reason = reason


def decode_jpeg(data: bytes, src_hw: tuple[int, int], num_threads: int | None = None) -> "torch.Tensor":
    """An 8-bit JPEG's bytes (``src_hw`` as probed) -> uint8 ``(H, W, 3)`` RGB, Pillow's pixels
    (libjpeg-turbo, islow IDCT, fancy upsampling). ``num_threads`` (default: the kernels'
    setting, ``get_num_threads``) of 2 or more split a single-scan JPEG's decode in two: a
    second decoder skips to the row ``jpeg_split_row`` names and decodes the rest. Raises
    JpegDeclined (a RuntimeError) on damaged data or a file it does not take."""
    import torch
    _require()
    threads = get_num_threads() if num_threads is None else _int("decode_jpeg", "num_threads", num_threads, 1, 1024)
    try:
        return torch.ops.vlmprep.decode_jpeg(_bytes_tensor(data), *_hw("decode_jpeg", "src_hw", src_hw), threads)
    except RuntimeError as e:  # the op raises "decode_jpeg: <why>; decode it with Pillow ..."
        msg = str(e).split("\n")[0]
        if not msg.startswith("decode_jpeg: "):
            raise
        raise JpegDeclined(msg[len("decode_jpeg: "):].split("; decode it with Pillow")[0]) from e


def jpeg_split_row(data: bytes, output_pixels: int = 0, output_bytes: int = 0) -> int:
    """The row at which a JPEG op on 2+ threads starts its second decoder when beside the decode
    it writes ``output_pixels`` resized pixels in ``output_bytes`` (0, 0: ``decode_jpeg``): 65%
    of the height for a decode alone, lower the more is written (then the first thread, done
    with its rows, resizes and writes while the second decodes), on an iMCU row. 0 when it does
    not split: progressive or multi-scan files (every scan is decoded first), images under 8
    iMCU rows, outputs whose work keeps the second thread busy anyway. -1 when the header does
    not open."""
    import torch
    _require()
    px = _int("jpeg_split_row", "output_pixels", output_pixels, 0, 2**62)
    nb = _int("jpeg_split_row", "output_bytes", output_bytes, 0, 2**62)
    return int(torch.ops.vlmprep.jpeg_split_row(_bytes_tensor(data), px, nb))


def stream_store(out: "torch.Tensor", value: int = 0) -> None:
    """Set every byte of ``out`` (contiguous, CPU, any dtype) to ``value`` with non-temporal
    64-byte stores of whole lines, as the rows kernels write a large output, on the calling
    thread. It computes nothing: its time is the cost of storing exactly ``out``'s bytes (the
    output-write floor of ``vlmprep bench``)."""
    import torch
    _require()
    torch.ops.vlmprep.stream_store(out, _int("stream_store", "value", value, 0, 255))
