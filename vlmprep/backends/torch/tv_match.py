"""``match="torchvision"`` on the torch backend: transformers' torchvision-backend pixels, bit for bit.

vLLM and SGLang run transformers' torchvision-backend ("fast") image processors, whose pixels
differ from the PIL backend's (the models' training pixels, vlmprep's default) by up to 15 levels
on photos (docs/concepts.md, "Pixels"). This backend reproduces the torchvision processor's
CPU pixels instead, with the same calls:

* resize: one ``torchvision.transforms.v2.functional.resize(uint8 (C, H, W), antialias=True)``
  per canvas (torchvision's native uint8 kernel on the CPU: one horizontal-then-vertical pass
  with its own fixed-point rounding), where the default torch backend runs Pillow's passes;
* normalize: rescale fused into mean and std as ``TorchvisionBackend.rescale_and_normalize``
  does, ``(x - mean * (1 / rescale)) / (std * (1 / rescale))`` in float32; in bfloat16 where
  the sizing op declares ``hf_normalize_dtype = "bfloat16"`` (Llama 4: ``normalize_bf16``).

* a ``plan.Canvas.normalized`` canvas (Phi-4-multimodal's global view): this normalize on its
  parent, then ``tvF.resize(..., antialias=False)`` of the float32 canvas, as ``_preprocess``
  does (``fusion.NORMALIZED_CANVAS``; the torch backend's ``resize_normalized``).

Everything else (the plan's canvases, crops, padding, tiles, the rows) is the torch backend's.
CPU only: on CUDA transformers resizes in float and swaps LANCZOS for BICUBIC (a different
path). ``SIZING_OPS`` lists the sizing ops whose families are checked bit-exact against the
torchvision processors (tests/backends/test_torchvision_match.py); any other is refused when the
Backend is made.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ... import ops
from ...pipeline import Pipeline
from ..base import register_geometry_lowerings
from ..context import Context
from ..registry import lowering
from ..tv_exact import MODES, host_compiles, normalize_levels, normalize_tensor, resize
from ..video import register_video
from . import Backend as _TorchBackend
from . import ops as _torch_ops

__all__ = ["Backend", "MODES", "SIZING_OPS", "resize", "normalize_tensor", "normalize_levels"]

#: The registry key of this backend's lowerings (the user's backend name stays "torch").
B = "torch:torchvision"
#: Sizing ops (one per family) whose pipelines equal the torchvision processors bit for bit: those
#: declared ``torchvision_exact`` in ``vlmprep.ops`` (in the order they are defined there).
SIZING_OPS = tuple(name for name, cls in ops.OP_TYPES.items()
                   if cls.sizing and cls.torchvision_exact)


register_geometry_lowerings(B, resize, _torch_ops.cut, _torch_ops.resize_normalized)
lowering(B, "decode")(_torch_ops.decode)
lowering(B, "patchify")(_torch_ops.patchify)
register_video(B)  # the torch backend's video lowering (video pixels are torchvision's anyway)


@lowering(B, "normalize")
def normalize(op: ops.normalize, imgs: list[torch.Tensor], ctx: Context) -> list[torch.Tensor]:
    """uint8 tiles ``(C, h, w)`` -> float32 tiles (``normalize_tensor``)."""
    return [normalize_tensor(op, x) for x in imgs]


def normalize_bf16(op: ops.normalize, x: torch.Tensor) -> torch.Tensor:
    """uint8 ``(C, ...)`` -> float32 holding ``Llama4ImageProcessor.rescale_and_normalize``'s
    bfloat16 values: ``tvF.normalize(x.to(bfloat16) * rescale, mean, std)``, each step rounded
    to bfloat16 (a sizing op with ``hf_normalize_dtype = "bfloat16"``)."""
    from torchvision.transforms.v2 import functional as tvF
    y = x.to(torch.bfloat16) * op.rescale
    y = y if y.dim() >= 3 else y.unsqueeze(-1)
    return tvF.normalize(y, list(op.mean), list(op.std)).reshape(x.shape).to(torch.float32)


def _normalize_bf16(op: ops.normalize, imgs: list[torch.Tensor], ctx: Context) -> list[torch.Tensor]:
    return [normalize_bf16(op, x) for x in imgs]


def normalize_levels_bf16(op: ops.normalize, levels: Any) -> torch.Tensor:
    """``normalize_levels`` with ``normalize_bf16``'s arithmetic (the fused paths' lut)."""
    return normalize_bf16(op, torch.from_numpy(levels).t().contiguous()).t()


def _bf16_normalize(pipeline: Pipeline) -> bool:
    """The sizing op's processor rescales and normalizes in bfloat16 (both steps on: transformers
    does one of them alone in float32)."""
    norm = next((op for op in pipeline.ops if isinstance(op, ops.normalize)), None)
    bf16 = any(getattr(type(op), "hf_normalize_dtype", "float32") == "bfloat16"
               for op in pipeline.ops if op.sizing)
    return bf16 and norm is not None and norm.rescale != 1.0 and not (
        norm.mean == (0.0, 0.0, 0.0) and norm.std == (1.0, 1.0, 1.0))


class Backend(_TorchBackend):
    """The torch backend with transformers' torchvision-backend resize and normalize."""

    name = B
    normalize_levels: Callable[..., Any] = staticmethod(normalize_levels)
    resize_match = "torchvision"

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
        # The kernels resize while they write the rows (the fused executors, as the Pillow
        # path's) where their torchvision match stands in for tvF.resize on this host
        # (tv_exact.host_compiles: x86-64, torchvision's native uint8 resize, not nearest).
        sizing_op: Any = next(op for op in pipeline.ops if op.sizing)
        self.resize_in_kernel = host_compiles(sizing_op.interpolation)
        super().__init__(pipeline, device, dtype)
        if _bf16_normalize(pipeline):  # Llama 4: transformers normalizes in bfloat16
            self.normalize_levels = normalize_levels_bf16
            self.lowerings = [_normalize_bf16 if op.name == "normalize" else fn
                              for op, fn in zip(self.ops, self.lowerings)]
