"""Pillow's separable resample, bit for bit, in device-generic torch (CPU, CUDA).

Shapes: ``img`` is uint8 ``(..., H, W)`` (``(C, H, W)``, ``(N, C, H, W)``, ...) on any device
with float64 matmul; ``out_hw = (H2, W2)``; ``resample`` returns a C-contiguous uint8
``(..., H2, W2)`` on ``img``'s device. ``pil_coeffs(n_in, n_out, interpolation)`` returns
Pillow's coefficients of one axis as numpy ``(first (n_out,), count (n_out,), k (n_out, K))``.

What Pillow does (``src/libImaging/Resample.c``, 8 bits per channel; the same from Pillow 7
through 13): per axis, ``precompute_coeffs`` computes each output's window ``[xmin, xmin+count)``
and its filter weights in double, divides them by their (sequential) sum, and
``normalize_coeffs_8bpc`` turns them into ints ``k = (int)(±0.5 + w * 2**22)``. Each pass
(``ImagingResampleHorizontal_8bpc`` / ``Vertical_8bpc``) sums ``2**21 + sum(v * k)`` in int32 and
stores ``clip8(sum >> 22)``: floor, then clamp to ``[0, 255]``. The two passes run in
``resample_order.pil_pass_order``'s order, rounding to uint8 between them.

Here the ints are computed as Pillow does (numpy float64 for + - * /, which round like C without
FMA contraction; ``math.sin``, the C library's ``sin`` that Pillow calls; the weight sum
accumulated left to right), cached per ``(n_in, n_out, interpolation)``. (Checked against x86-64
Pillow wheels, built without FMA contraction; a Pillow built with contraction, e.g. GCC's default
on aarch64, could round a filter value differently and move a rare weight by one unit: the
bit-exact tests against PIL on that machine would show it.) A pass is a float64
product of uint8 values and these ints. ``sum |k|`` of an output is below ``2**23`` (at most
1.57 * 2**22, lanczos; the tests check it), so every product and every partial sum, in whatever
order a BLAS adds them, FMA or not, is an integer of magnitude below ``255 * 2**23 < 2**31``:
exact in float64 (53 bits) on any device. ``floor((s + 2**21) / 2**22)`` clamped is then
Pillow's byte, and the GPU result is the CPU result is Pillow's. (This needs IEEE float64
matmul: cuBLAS's native DGEMM; an opt-in reduced-precision FP64 emulation would break it.)

The product is banded: the outputs of an axis are cut into blocks of ``_BLOCK`` consecutive
outputs; block ``b`` reads ``span`` consecutive inputs from ``first[b * _BLOCK]`` (``span``: the
widest block's window, padded with zero weights), so one pass is one gather ``(..., nb, span)``
and one batched matmul with the ``(nb, span, _BLOCK)`` weights, whatever the ratio (a 20000 ->
224 panorama included: no shared-memory limit, unlike torch's antialiased CUDA kernel). Memory:
the weights take ``~8 * (n_in * _BLOCK + n_out * K)`` bytes per axis (cached per device, at most
``_CACHE_BYTES`` and ``_CACHE_ENTRIES`` in all, least recently used dropped first). Lines (rows
of a horizontal pass, columns of a vertical one) go in chunks whose gathered float64 values and
whose float64 sums take at most ``_CHUNK_BYTES`` each (a single line needing more goes alone: an
axis of over ~8M pixels), so a pass needs at most ``2 * _CHUNK_BYTES`` of float64 scratch plus
a quarter of that in uint8, plus its uint8 output, whatever the image size. Devices without
float64 (Apple MPS) are refused.
"""
from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict

import numpy as np
import torch

from ..resample_order import pil_pass_order

__all__ = ["FILTERS", "PRECISION_BITS", "pil_coeffs", "resample", "resample_axis"]

#: The separable filters Pillow resamples with (``nearest`` is a point sampler, not one of them).
FILTERS = ("bilinear", "bicubic", "lanczos")
#: Pillow's ``PRECISION_BITS`` for 8-bit images (``32 - 8 - 2``).
PRECISION_BITS = 22
_SUPPORT = {"bilinear": 1.0, "bicubic": 2.0, "lanczos": 3.0}

_BLOCK = 32  # outputs per block: any value gives the same bits; this one keeps the padding small
_CHUNK_BYTES = 64 << 20  # float64 scratch per chunk of lines (see the module docstring)
_CACHE_BYTES = 256 << 20  # device weights kept, all shapes together
_CACHE_ENTRIES = 64


# --------------------------------------------------------------------------- coefficients


def _filter(name: str, x: np.ndarray) -> np.ndarray:
    """Pillow's ``bilinear_filter`` / ``bicubic_filter`` / ``lanczos_filter`` elementwise, with
    the C expressions' operation order (so the same doubles)."""
    if name == "bilinear":
        a = np.abs(x)
        return np.where(a < 1.0, 1.0 - a, 0.0)
    if name == "bicubic":  # a = -0.5: (a + 2.0) and (a + 3.0) fold to 1.5 and 2.5 exactly
        a = np.abs(x)
        near = (1.5 * a - 2.5) * a * a + 1.0
        far = (((a - 5.0) * a + 8.0) * a - 4.0) * -0.5
        return np.where(a < 1.0, near, np.where(a < 2.0, far, 0.0))
    # lanczos: sinc(x) * sinc(x / 3) on [-3, 3), sinc(x) = sin(x * pi) / (x * pi), sinc(0) = 1
    flat = x.ravel().tolist()
    out = [_sinc(v) * _sinc(v / 3.0) if -3.0 <= v < 3.0 else 0.0 for v in flat]
    return np.array(out, np.float64).reshape(x.shape)


def _sinc(x: float) -> float:
    if x == 0.0:
        return 1.0
    x = x * math.pi
    return math.sin(x) / x


@functools.lru_cache(maxsize=256)
def pil_coeffs(n_in: int, n_out: int, interpolation: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pillow's 8-bit coefficients of one axis resampled from ``n_in`` to ``n_out`` pixels.

    Returns read-only ``(first, count, k)``: int64 ``(n_out,)``, int64 ``(n_out,)`` and int64
    ``(n_out, K)`` (``K`` = Pillow's ``ksize``), so that output ``i`` is
    ``clip8(2**21 + sum_j in[first[i] + j] * k[i, j] >> 22)`` over ``j < count[i]``
    (``k[i, j] = 0`` for ``j >= count[i]``).
    """
    if interpolation not in _SUPPORT:
        raise ValueError(f"interpolation must be one of {FILTERS}, got {interpolation!r}")
    if n_in < 1 or n_out < 1:
        raise ValueError(f"sizes must be positive, got {n_in} -> {n_out}")
    # precompute_coeffs(inSize, in0=0.0f, in1=(float)inSize, outSize, ...)
    scale = float(n_in) / float(n_out)
    filterscale = scale if scale >= 1.0 else 1.0
    support = _SUPPORT[interpolation] * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    center = 0.0 + (np.arange(n_out, dtype=np.float64) + 0.5) * scale
    inv = 1.0 / filterscale
    first = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)  # (int) truncates
    end = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), n_in)
    count = end - first
    taps = np.arange(ksize, dtype=np.int64)
    used = taps[None, :] < count[:, None]
    arg = ((taps[None, :] + first[:, None]).astype(np.float64) - center[:, None] + 0.5) * inv
    w = np.where(used, _filter(interpolation, arg), 0.0)
    ww = np.cumsum(w, axis=1)[:, -1]  # the C loop's running sum (cumsum is sequential; + 0.0 is exact)
    safe = np.where(ww != 0.0, ww, 1.0)
    w = np.where((ww != 0.0)[:, None], w / safe[:, None], w)
    scaled = w * float(1 << PRECISION_BITS)  # a power of two: exact
    k = np.trunc(np.where(w < 0, -0.5 + scaled, 0.5 + scaled)).astype(np.int64)
    for a in (first, count, k):
        a.setflags(write=False)
    return first, count, k


# --------------------------------------------------------------------------- device weights


class _Banded:
    """One axis's banded weights on a device: ``idx`` int64 ``(nb, span)`` (input positions of
    each block, clamped into the image where the weights are 0) and ``wt`` float64
    ``(nb, B, span)`` (output ``b * B + j`` is ``wt[b, j] @ in[idx[b]]``; the last block is
    padded with zero rows past the axis's outputs)."""

    __slots__ = ("idx", "wt", "nbytes")

    def __init__(self, idx: torch.Tensor, wt: torch.Tensor):
        self.idx, self.wt = idx, wt
        self.nbytes = idx.numel() * 8 + wt.numel() * 8


def _banded_numpy(n_in: int, n_out: int, interpolation: str, block: int):
    first, count, k = pil_coeffs(n_in, n_out, interpolation)
    nb = -(-n_out // block)
    starts = first[::block]  # first is non-decreasing: a block starts at its first output's window
    ends = np.maximum.reduceat(first + count, np.arange(0, n_out, block))
    span = int((ends - starts).max())
    idx = np.minimum(starts[:, None] + np.arange(span)[None, :], n_in - 1)
    w = np.zeros((nb, span, block), np.float64)
    K = k.shape[1]
    o = np.arange(n_out)
    b, col = o // block, o % block
    rel = first - starts[b]  # where output o's window starts inside its block's span
    taps = np.arange(K)
    rows = rel[:, None] + taps[None, :]
    keep = taps[None, :] < count[:, None]
    w[np.broadcast_to(b[:, None], rows.shape)[keep], rows[keep],
      np.broadcast_to(col[:, None], rows.shape)[keep]] = k[keep]
    return idx, np.ascontiguousarray(w.transpose(0, 2, 1))


_cache: "OrderedDict[tuple, _Banded]" = OrderedDict()
_cache_bytes = 0
_cache_lock = threading.Lock()


def _banded(n_in: int, n_out: int, interpolation: str, device: torch.device,
            block: int = _BLOCK) -> _Banded:
    """The cached ``_Banded`` of one axis on ``device`` (built on the CPU, uploaded once)."""
    global _cache_bytes
    key = (n_in, n_out, interpolation, str(device), block)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    idx, wt = _banded_numpy(n_in, n_out, interpolation, block)
    entry = _Banded(torch.from_numpy(idx).to(device), torch.from_numpy(wt).to(device))
    if device.type == "meta":
        return entry
    with _cache_lock:
        if key not in _cache:
            _cache[key] = entry
            _cache_bytes += entry.nbytes
        while _cache and (_cache_bytes > _CACHE_BYTES or len(_cache) > _CACHE_ENTRIES):
            _, old = _cache.popitem(last=False)
            _cache_bytes -= old.nbytes
    return entry


def clear_cache() -> None:
    """Drop every cached device weight (e.g. before measuring memory)."""
    global _cache_bytes
    with _cache_lock:
        _cache.clear()
        _cache_bytes = 0


# --------------------------------------------------------------------------- passes


def resample_axis(x: torch.Tensor, axis: int, n_out: int, interpolation: str,
                  *, block: int = _BLOCK) -> torch.Tensor:
    """One Pillow pass: uint8 ``x`` resampled along ``axis`` (``-1``: horizontal, ``-2``:
    vertical) to ``n_out``; uint8 C-contiguous result, rounded and clipped as Pillow's pass.
    ``block`` changes the blocking only (tests: the bits do not depend on it)."""
    if axis not in (-1, -2):
        raise ValueError(f"axis must be -1 (horizontal) or -2 (vertical), got {axis}")
    n_in = int(x.shape[axis])
    lead = tuple(int(s) for s in x.shape[:axis])
    a_len = math.prod(lead)
    c_len = 1 if axis == -1 else int(x.shape[-1])
    # (resampled axis, lines, columns): index_select then gathers each block's window as one
    # contiguous (nb * span, lines, columns) tensor, the layout bmm wants (no float64 copies).
    x3 = x.reshape(a_len, n_in, c_len).permute(1, 0, 2)
    band = _banded(n_in, n_out, interpolation, x.device, block)
    nb, span = band.idx.shape
    b = band.wt.shape[1]
    out = torch.empty((a_len, nb * b, c_len), dtype=torch.uint8, device=x.device)
    per = nb * max(span, b) * 8  # float64 bytes of one (line, column)
    c_step = max(1, min(c_len, _CHUNK_BYTES // per))
    a_step = max(1, min(a_len, _CHUNK_BYTES // (per * c_step)))
    flat_idx = band.idx.reshape(-1)
    for a0 in range(0, a_len, a_step):
        for c0 in range(0, c_len, c_step):
            part = x3[:, a0:a0 + a_step, c0:c0 + c_step]
            la, lc = int(part.shape[1]), int(part.shape[2])
            g = part.index_select(0, flat_idx).to(torch.float64).view(nb, span, la * lc)
            s = torch.bmm(band.wt, g)  # (nb, B, lines * columns): exact integer sums
            # Pillow: clip8((2**21 + s) >> 22); s is an exact integer, so this is exact too.
            s = s.add_(float(1 << (PRECISION_BITS - 1))).mul_(1.0 / (1 << PRECISION_BITS))
            v = s.floor_().clamp_(0, 255).to(torch.uint8).view(nb * b, la, lc)
            out[a0:a0 + la, :, c0:c0 + lc] = v.permute(1, 0, 2)
    out = out[:, :n_out]
    shape = lead + ((n_out,) if axis == -1 else (n_out, c_len))
    return out.reshape(shape).contiguous()


def resample(img: torch.Tensor, out_hw: tuple[int, int], interpolation: str,
             *, order: tuple[str, ...] | None = None) -> torch.Tensor:
    """uint8 ``(..., H, W)`` -> uint8 ``(..., H2, W2)``, ``PIL.Image.resize``'s bits.

    Args:
        img: uint8, rank >= 2, any device with float64 (CPU, CUDA).
        out_hw: ``(H2, W2)``, both >= 1.
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"lanczos"``.
        order: the passes to run (``("h", "v")`` ...); default the installed Pillow's
            (``resample_order.pil_pass_order``).

    Returns:
        C-contiguous uint8 ``(..., H2, W2)`` on ``img``'s device (a copy when nothing changes).
    """
    if not isinstance(img, torch.Tensor) or img.dtype != torch.uint8 or img.ndim < 2:
        raise ValueError(f"img must be a uint8 tensor of rank >= 2, got "
                         f"{getattr(img, 'dtype', type(img).__name__)} of shape "
                         f"{tuple(getattr(img, 'shape', ()))}")
    if interpolation not in FILTERS:
        raise ValueError(f"interpolation must be one of {FILTERS}, got {interpolation!r}; "
                         "nearest is resize.resize_like_pil's index_select")
    if img.device.type == "mps":
        raise NotImplementedError(
            "the Pillow-exact resize needs float64 matmul, which MPS does not have; "
            "resize on the CPU")
    h1, w1 = int(img.shape[-2]), int(img.shape[-1])
    h2, w2 = (int(v) for v in out_hw)
    if h2 < 1 or w2 < 1:
        raise ValueError(f"out_hw must be positive, got {out_hw!r}")
    if order is None:
        order = pil_pass_order((h1, w1), (h2, w2), interpolation)
    out = img
    for axis in order:
        out = resample_axis(out, -1, w2, interpolation) if axis == "h" else \
            resample_axis(out, -2, h2, interpolation)
    if out is img:
        return torch.empty(img.shape, dtype=img.dtype, device=img.device).copy_(img)
    return out
