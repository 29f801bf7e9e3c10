"""transformers' torchvision resize and normalize, bit for bit: what the torch backend's
``match="torchvision"`` images and every backend's video frames use (backends/torch/tv_match.py,
backends/video.py), and every backend's ``resize_normalized`` (``plan.Canvas.normalized``). Its
own module so that the shared video lowering imports no backend.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as F

from .. import ops

__all__ = ["MODES", "resize", "resize_normalized", "host_compiles", "normalize_tensor", "normalize_levels"]

#: Our interpolation names -> transformers' torchvision modes (``pil_torch_interpolation_mapping``).
MODES = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC,
         "lanczos": InterpolationMode.LANCZOS, "nearest": InterpolationMode.NEAREST_EXACT}


def resize(img: torch.Tensor, hw: tuple[int, int], interpolation: str) -> torch.Tensor:
    """uint8 ``(C, H, W)`` -> uint8 ``(C, h, w)``, as ``TorchvisionBackend.resize``: one
    antialiased ``tvF.resize`` of the image. RGB bilinear, bicubic and lanczos go through the compiled
    resize's torchvision match when the kernels are loaded (the same bytes, see ``_compiled``).

    transformers hands it a C-contiguous image; torch's CPU uint8 kernel computes in
    channels-last memory either way (the same bits: tests/backends/test_torchvision_match.py),
    so an image in HWC memory (as decoded) is passed as it is, which saves the kernel a
    transposing copy (3x faster on a 1080p bicubic downscale). An image with a side of 1 is made C-contiguous, as
    transformers makes it (torch's kernel misreads odd strides on size-1 dims).
    """
    if img.device.type != "cpu":
        # torch's antialiased CUDA resize has no lanczos and runs out of shared memory on
        # one-axis downscales past ~94x (bicubic): transformers' pixels are the CPU kernel's.
        raise ValueError(f"tv_match.resize: expected a CPU tensor (transformers' torchvision "
                         f"pixels are the CPU uint8 kernel's), got {img.device}; use "
                         f"resize.resize_like_pil on other devices")
    c, h, w = img.shape
    if _compiled(img, interpolation):
        from .. import kernels
        # The compiled resize's torchvision match: torch's own uint8 arithmetic, the same bytes
        # (tests/kernels/test_resize_torchvision.py), from HWC memory without torch's unpacking.
        # (H, W, 3) with pixel stride 3 is what it reads; a CHW image is transposed once, as
        # torch's kernel would. The result is a (C, h, w) view of HWC memory, as torch's.
        hwc = img.permute(1, 2, 0)
        if hwc.stride(2) != 1 or hwc.stride(1) != 3:
            hwc = hwc.contiguous()
        return kernels.resize(hwc, (int(hw[0]), int(hw[1])), interpolation, match="torchvision").permute(2, 0, 1)
    if h > 1 and w > 1:
        if not img.permute(1, 2, 0).is_contiguous():
            img = img.permute(1, 2, 0).contiguous().permute(2, 0, 1)
    else:
        img = img.contiguous()
    return F.resize(img, [int(hw[0]), int(hw[1])], interpolation=MODES[interpolation],
                    antialias=True)


def resize_normalized(img: torch.Tensor, hw: tuple[int, int], interpolation: str) -> torch.Tensor:
    """float32 (or uint8) ``(C, H, W)`` -> the same dtype ``(C, h, w)``: a ``plan.Canvas`` with
    ``normalized=True``, as transformers' Phi-4-multimodal global view:
    ``TorchvisionBackend.resize(image, size, resample, antialias=False)``, i.e. ``tvF.resize(...,
    antialias=False)`` (``interpolate(mode, align_corners=False, antialias=False)``; an equal
    size returned as it is; uint8 on the CPU: torch's native uint8 kernel, as transformers' raw
    output). Every backend's ``resize_normalized`` (the same torch op, so the resize adds no
    difference of its own; on CUDA torch's device kernel, not checked against the CPU's).

    Made C-contiguous, as transformers' canvas is (torch's CPU kernels compute these either
    way; the copy keeps the claim independent of that).
    """
    if interpolation == "lanczos":
        raise ValueError(f"resize_normalized: expected 'nearest', 'bilinear' or 'bicubic', got "
                         f"{interpolation!r} (torchvision's lanczos needs antialias); use 'bicubic'")
    return F.resize(img.contiguous(), [int(hw[0]), int(hw[1])],
                    interpolation=MODES[interpolation], antialias=False)


def _compiled(img: torch.Tensor, interpolation: str) -> bool:
    """Whether ``resize`` may use the compiled resize: a CPU uint8 RGB image, on a host where it
    reproduces torchvision (``host_compiles``)."""
    if img.dtype != torch.uint8 or img.dim() != 3 or img.shape[0] != 3:
        return False
    return host_compiles(interpolation)


@functools.lru_cache(maxsize=None)
def host_compiles(interpolation: str) -> bool:
    """Whether the compiled resize's torchvision match stands in for ``tvF.resize`` here, for
    ``interpolation`` (decided once per process: it depends on the host only): an x86-64 host
    (where it is checked against torch's kernels), loaded kernels, bilinear, bicubic or lanczos,
    and torchvision resizing that uint8 natively here (elsewhere, e.g. a CPU without AVX2, its
    bilinear goes through float: other bytes, so tvF.resize stays; lanczos needs torch's
    antialiased uint8 lanczos, torch >= 2.14)."""
    import platform
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False  # aarch64: torch's NEON kernel is not checked against ours yet (tvF stays)
    if interpolation not in ("bilinear", "bicubic", "lanczos"):
        return False
    if interpolation == "lanczos" and not hasattr(torch._C._nn, "_upsample_lanczos2d_aa"):
        return False
    from .. import kernels
    if not kernels.available():
        return False
    try:
        from torchvision.transforms.v2.functional._geometry import _do_native_uint8_resize_on_cpu
    except ImportError:  # a torchvision without the helper: keep its own resize
        return False
    return bool(_do_native_uint8_resize_on_cpu(MODES[interpolation]))


def normalize_tensor(op: ops.normalize, x: torch.Tensor) -> torch.Tensor:
    """uint8 ``(C, ...)`` -> float32, as ``TorchvisionBackend.rescale_and_normalize``:
    ``tvF.normalize(x.float(), tensor(mean) * (1 / rescale), tensor(std) * (1 / rescale))``."""
    mean = torch.tensor(op.mean, device=x.device) * (1.0 / op.rescale)
    std = torch.tensor(op.std, device=x.device) * (1.0 / op.rescale)
    return _normalize(x.to(torch.float32), mean, std)


def _normalize(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """tvF.normalize's arithmetic on a float32 ``(C, ...)`` tensor: ``x.sub_(mean).div_(std)``."""
    shape = (-1,) + (1,) * (x.dim() - 1)
    return x.sub_(mean.view(shape)).div_(std.view(shape))


def normalize_levels(op: ops.normalize, levels: np.ndarray) -> torch.Tensor:
    """uint8 ``(256, C)`` levels -> float32 ``(256, C)`` by ``normalize_tensor`` (the fused
    paths' lut)."""
    return normalize_tensor(op, torch.from_numpy(levels).t().contiguous()).t()
