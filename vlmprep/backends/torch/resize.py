"""Resize uint8 ``(C, H, W)`` tensors the way ``PIL.Image.resize`` does.

Shapes: ``img`` is ``(C, H, W)`` (or ``(N, C, H, W)``) uint8 on CPU or CUDA;
``out_hw = (H2, W2)``; the result is a C-contiguous uint8 ``(C, H2, W2)`` (or
``(N, C, H2, W2)``) on the same device.

Pillow resamples separably, rounding and clipping to uint8 between the
horizontal and the vertical pass, in an order that depends on the shapes (and,
for some shapes, on the Pillow version: ``resample_order.pil_pass_order``).
The path of an image is decided in ``resize_like_pil``, by device:

* Any device that is not the CPU (CUDA), and the CPU where torchvision has no
  antialiased Lanczos or where ``EXACT_ON_CPU`` is set: ``pil_resample.resample``,
  Pillow's integer coefficients applied as banded float64 products, bit for bit
  Pillow's output (0 levels, Pillow's pass order) for every filter and every
  ratio. torchvision's resize is never called on such a device: its CUDA
  antialiased kernels have no Lanczos (``aten::_upsample_lanczos2d_aa`` is CPU
  only) and run out of shared memory for one-axis downscales beyond ~94x
  (bicubic) / ~184x (bilinear).
* CPU (what the torch backend runs when the compiled kernels are not built; with
  them, ``ops.resize`` calls the compiled Pillow-exact resize instead): each pass
  is a separate one-dimensional ``torchvision.transforms.v2.functional.resize``
  (antialias=True) run in Pillow's order, on torchvision's native uint8 kernel
  (bicubic and lanczos always; bilinear on AVX2/AVX512/arm). It is a port of
  Pillow's fixed-point resampler with different coefficient precision, so a
  single pass is within 1 level of Pillow and the result within 2 (mean well
  below 0.05 levels on photos; see ``tests/backends/test_torch_resize.py``). A
  resize that changes only one side runs a single pass that touches only that
  axis. Where torchvision would go through float (bilinear without AVX2) the pass
  runs in float32 and is rounded half-up and clamped to uint8 before the next
  pass, exactly where Pillow rounds.

Two torch 2.14 kernel quirks of the torchvision path are worked around (both
only with a size-1 side): a vertical pass on a width-1 image runs as a
horizontal pass on the transpose (the float kernel returns a constant column
there, the uint8 kernel asserts on a 1x1 output), and every pass gets canonical
C-contiguous strides (the uint8 kernel misreads tensors whose size-1 dims carry
odd strides).

``nearest`` is not separable-with-rounding in Pillow: it is one
point-sampling step (``ImagingScaleAffine``) whose source index for output
pixel ``i`` is ``int(s/2 + i*s)`` accumulated in double, ``s = in/out``.
That index table is rebuilt here in Python floats and applied with
``index_select`` on every device, which is bit-exact; torchvision's
``NEAREST_EXACT`` differs by one source pixel where ``(i + 0.5) * s`` is an
integer.
"""
from __future__ import annotations

import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as F

from ..resample_order import pil_pass_order
from . import pil_resample

__all__ = ["resize_like_pil", "uses_exact_path", "EXACT_ON_CPU"]

#: Run the Pillow-exact device path (``pil_resample``) on the CPU too (tests, benchmarks).
EXACT_ON_CPU = False

_INTERPOLATIONS = ("bilinear", "bicubic", "lanczos")
_MODES = {"bilinear": "BILINEAR", "bicubic": "BICUBIC", "lanczos": "LANCZOS"}


def resize_like_pil(img: "torch.Tensor", out_hw: tuple[int, int], interpolation: str) -> "torch.Tensor":
    """Resize a uint8 ``(C, H, W)`` tensor to ``out_hw`` like ``PIL.Image.resize``.

    Args:
        img: uint8 ``(C, H, W)`` (a leading batch dim is accepted too), CPU or CUDA.
        out_hw: ``(H2, W2)``, both >= 1.
        interpolation: ``"nearest"``, ``"bilinear"``, ``"bicubic"`` or ``"lanczos"``
            (PIL's NEAREST, BILINEAR, BICUBIC, LANCZOS).

    Returns:
        uint8 ``(C, H2, W2)`` on ``img``'s device; a copy when the size does not change.
        Bit-exact with PIL where ``uses_exact_path(img.device)`` (and for ``nearest``),
        else within 2 levels (module docstring).

    Raises:
        TypeError / ValueError: not a uint8 tensor of rank 3 or 4, a bad size, an
            unknown interpolation.
    """
    return _resize_like_pil(img, out_hw, interpolation, force_float=False)


def _resize_like_pil(img, out_hw, interpolation: str, *, force_float: bool):
    """``resize_like_pil``; ``force_float`` runs the float32 path on CPU too (for tests)."""
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"img must be a torch.Tensor, got {type(img).__name__}")
    if img.dtype != torch.uint8 or img.ndim not in (3, 4):
        raise ValueError(
            f"img must be a uint8 (C, H, W) tensor, got {img.dtype} of shape {tuple(img.shape)}"
        )
    try:
        h2, w2 = (int(v) for v in out_hw)
    except (TypeError, ValueError):
        raise ValueError(f"out_hw must be (height, width), got {out_hw!r}") from None
    if h2 < 1 or w2 < 1:
        raise ValueError(f"out_hw must be positive, got {out_hw!r}")
    h1, w1 = int(img.shape[-2]), int(img.shape[-1])

    if interpolation == "nearest":
        return _nearest(img, h2, w2)
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(
            f"interpolation must be one of ('nearest',) + {_INTERPOLATIONS}, got {interpolation!r}"
        )
    order = pil_pass_order((h1, w1), (h2, w2), interpolation)
    if not order:
        return _copy(img)
    mode = _mode(interpolation)
    if mode is None or uses_exact_path(img.device):
        return pil_resample.resample(img, (h2, w2), interpolation, order=order)
    use_uint8 = not force_float and _native_uint8_kernel(img.device, mode)
    out = img
    for axis in order:
        size = [int(out.shape[-2]), w2] if axis == "h" else [h2, int(out.shape[-1])]
        out = _pass(out, size, mode, use_uint8)
    return _standard(out)


def uses_exact_path(device: "torch.device | str") -> bool:
    """Whether ``resize_like_pil`` runs ``pil_resample`` (bit-exact) on ``device``: every
    device but the CPU, and the CPU when ``EXACT_ON_CPU`` is set."""
    return torch.device(device).type != "cpu" or EXACT_ON_CPU


def _mode(interpolation: str) -> "InterpolationMode | None":
    """torchvision's mode, or None where this torchvision has none (Lanczos before 0.27):
    then the exact path serves it."""
    return getattr(InterpolationMode, _MODES[interpolation], None)


def _native_uint8_kernel(device: torch.device, mode: InterpolationMode) -> bool:
    """Whether torchvision resizes uint8 natively here (else it converts to float)."""
    if device.type != "cpu":
        return False
    try:  # torchvision's own decision, when this private helper exists
        from torchvision.transforms.v2.functional._geometry import (
            _do_native_uint8_resize_on_cpu,
        )
    except ImportError:
        _do_native_uint8_resize_on_cpu = None
    if _do_native_uint8_resize_on_cpu is not None:
        return bool(_do_native_uint8_resize_on_cpu(mode))
    if mode != InterpolationMode.BILINEAR:
        return True
    import platform

    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") or platform.machine() in (
        "aarch64",
        "arm64",
    )


def _pass(img: torch.Tensor, size: list[int], mode: InterpolationMode, use_uint8: bool):
    """One one-dimensional pass (``size`` differs from ``img`` on one axis only), CPU only."""
    if img.device.type != "cpu":  # never on CUDA: no lanczos, shared-memory limits (docstring)
        raise AssertionError(f"the torchvision resize path runs on the CPU only, got {img.device}")
    if img.shape[-1] == 1 and size[0] != img.shape[-2]:
        # A vertical pass on a width-1 image runs as a horizontal pass on the
        # transpose (the same 1-D filter; bit-identical on the CPU uint8 kernel).
        # torch 2.14 gets the direct form wrong: the CPU float kernel returns a
        # constant column, the CPU uint8 kernel asserts when the output is 1x1.
        t = _standard(img.transpose(-1, -2))
        return _standard(_pass(t, [1, size[0]], mode, use_uint8).transpose(-1, -2))
    img = _standard(img)
    if use_uint8:
        return F.resize(img, size, interpolation=mode, antialias=True)
    out = F.resize(img.to(torch.float32), size, interpolation=mode, antialias=True)
    # Pillow's clip8: round half up, then clip to [0, 255].
    return out.add_(0.5).floor_().clamp_(0, 255).to(torch.uint8)


def _standard(x: torch.Tensor) -> torch.Tensor:
    """``x`` with C-contiguous strides, copying only when they differ.

    ``Tensor.contiguous()`` is not enough: it keeps any stride on a size-1 dim,
    and torch 2.14's uint8 antialiased kernel misreads such tensors (e.g. a
    ``(C, 2, 1)`` tensor with strides ``(2, 1, 2)``, which is what transposing a
    ``(C, 1, 2)`` one gives).
    """
    strides, step = [], 1
    for n in reversed(x.shape):
        strides.append(step)
        step *= n
    if x.stride() == tuple(reversed(strides)):
        return x
    return _copy(x)


def _nearest_index(n_in: int, n_out: int) -> list[int]:
    """Source indices of Pillow's NEAREST resize along one axis (``ImagingScaleAffine``)."""
    # _imaging.c's _resize passes the box as C floats (exact for sizes < 2**24);
    # the scale is a double, and the position is accumulated, not multiplied.
    step = float(n_in) / n_out
    pos = step * 0.5
    idx = []
    for _ in range(n_out):
        i = int(pos)
        idx.append(min(max(i, 0), n_in - 1))  # Pillow leaves out-of-range pixels 0; never hit for in/out >= 1
        pos += step
    return idx


def _nearest(img: torch.Tensor, h2: int, w2: int) -> torch.Tensor:
    h1, w1 = int(img.shape[-2]), int(img.shape[-1])
    out = img
    if h2 != h1:
        rows = torch.tensor(_nearest_index(h1, h2), dtype=torch.long, device=img.device)
        out = out.index_select(-2, rows)
    if w2 != w1:
        cols = torch.tensor(_nearest_index(w1, w2), dtype=torch.long, device=img.device)
        out = out.index_select(-1, cols)
    return _copy(out) if out is img else _standard(out)


def _copy(x: torch.Tensor) -> torch.Tensor:
    """A C-contiguous copy of ``x`` (``clone`` would keep a channels-last layout)."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device).copy_(x)
