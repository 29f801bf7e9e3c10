"""``match="torchvision"`` on the torch backend: transformers' torchvision-backend pixels, bit for bit.

vLLM and SGLang run transformers' torchvision-backend ("fast") image processors, whose pixels
differ from the PIL backend's (the models' training pixels, vlmprep's default) by up to 15 levels
on photos (docs/concepts.md, "Pixels"). This backend reproduces the torchvision processor's
CPU pixels instead, with the same calls:

* resize: one ``torchvision.transforms.v2.functional.resize(uint8 (C, H, W), antialias=True)``
  per canvas (torchvision's native uint8 kernel on the CPU: one horizontal-then-vertical pass
  with its own fixed-point rounding), where the default torch backend runs Pillow's passes;
* normalize: rescale fused into mean and std as ``TorchvisionBackend.rescale_and_normalize``
  does, ``(x - mean * (1 / rescale)) / (std * (1 / rescale))`` in float32.

Everything else (the plan's canvases, crops, padding, tiles, the rows) is the torch backend's.
CPU only: on CUDA transformers resizes in float and swaps LANCZOS for BICUBIC (a different
path). ``SIZING_OPS`` lists the sizing ops whose families are checked bit-exact against the
torchvision processors (tests/backends/test_torchvision_match.py); any other is refused when the
Backend is made.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as F

from ... import ops
from ...pipeline import Pipeline
from ..base import register_geometry_lowerings
from ..context import Context
from ..registry import lowering
from . import Backend as _TorchBackend
from . import ops as _torch_ops

__all__ = ["Backend", "MODES", "SIZING_OPS", "resize", "normalize_tensor", "normalize_levels"]

#: The registry key of this backend's lowerings (the user's backend name stays "torch").
B = "torch:torchvision"
#: Sizing ops (one per family) whose pipelines equal the torchvision processors bit for bit.
SIZING_OPS = ("smart_resize", "resize", "anyres_tile", "internvl_tile", "canvas_tile",
              "idefics3_tile", "pixtral_resize", "naflex_resize", "pan_and_scan")

#: Our interpolation names -> transformers' torchvision modes (``pil_torch_interpolation_mapping``).
MODES = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC,
         "lanczos": InterpolationMode.LANCZOS, "nearest": InterpolationMode.NEAREST_EXACT}


def resize(img: torch.Tensor, hw: tuple[int, int], interpolation: str) -> torch.Tensor:
    """uint8 ``(C, H, W)`` -> uint8 ``(C, h, w)``, as ``TorchvisionBackend.resize``: one
    antialiased ``tvF.resize`` of the image.

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
    if h > 1 and w > 1:
        if not img.permute(1, 2, 0).is_contiguous():
            img = img.permute(1, 2, 0).contiguous().permute(2, 0, 1)
    else:
        img = img.contiguous()
    return F.resize(img, [int(hw[0]), int(hw[1])], interpolation=MODES[interpolation],
                    antialias=True)


register_geometry_lowerings(B, resize, _torch_ops.cut)
lowering(B, "decode")(_torch_ops.decode)
lowering(B, "patchify")(_torch_ops.patchify)


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


@lowering(B, "normalize")
def normalize(op: ops.normalize, imgs: list[torch.Tensor], ctx: Context) -> list[torch.Tensor]:
    """uint8 tiles ``(C, h, w)`` -> float32 tiles (``normalize_tensor``)."""
    return [normalize_tensor(op, x) for x in imgs]


class Backend(_TorchBackend):
    """The torch backend with transformers' torchvision-backend resize and normalize."""

    name = B
    normalize_levels: Callable[..., Any] = staticmethod(normalize_levels)
    resize_in_kernel = False  # the compiled resize is Pillow's

    def __init__(self, pipeline: Pipeline, device: str, dtype: str):
        sizing = [op.name for op in pipeline.ops if op.sizing]
        bad = [n for n in sizing if n not in SIZING_OPS]
        if bad:
            raise ValueError(
                f"match='torchvision': expected a pipeline whose sizing op is one of {SIZING_OPS} "
                f"(checked bit-exact against transformers' torchvision processors), got "
                f"{bad[0]!r} in {pipeline.name!r}; use match='pil' (the default)")
        if not device.startswith("cpu"):
            raise ValueError(
                f"match='torchvision': expected device='cpu' (transformers' torchvision processor "
                f"resizes uint8 natively only on the CPU; on CUDA it resizes in float), got "
                f"device={device!r}; use device='cpu', or match='pil'")
        super().__init__(pipeline, device, dtype)
