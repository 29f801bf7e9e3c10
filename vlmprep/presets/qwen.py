"""Qwen2-VL / Qwen2.5-VL (``qwen2-vl``) and Qwen3-VL (``qwen3-vl``).

Defaults are the public checkpoints' ``preprocessor_config.json`` values, not the
transformers class defaults (class default max_pixels is 1,003,520: 12.8x lower).
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import HALF, config_interpolation, config_normalize, need, normalize_steps

#: Image-processor class names (4.x and 5.x spellings) that this family's configs carry.
IMAGE_PROCESSOR_TYPES = (
    "Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast", "Qwen2VLImageProcessorPil",
)


def _pipeline(name: str, patch: int, min_pixels: int, max_pixels: int,
              mean: tuple[float, float, float], std: tuple[float, float, float],
              temporal: int = 2, merge: int = 2, interpolation: str = "bicubic",
              rescale: float = 1 / 255, do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.smart_resize(factor=patch * merge, min_pixels=min_pixels, max_pixels=max_pixels,
                         interpolation=interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [
        ops.patchify(patch_size=patch, temporal_patch_size=temporal, merge_size=merge,
                     order="merge_grouped"),
        ops.pack(image_token="<|image_pad|>"),  # to_hf "auto": qwen2_vl
    ]
    return Pipeline(steps, name=name)


def qwen2_vl() -> Pipeline:
    """Qwen2-VL-* / Qwen2.5-VL-*: patch 14, merge 2, pixels 3136..12,845,056, CLIP mean/std."""
    return _pipeline("qwen2-vl", 14, 3136, 12_845_056, ops.CLIP_MEAN, ops.CLIP_STD)


def qwen3_vl() -> Pipeline:
    """Qwen3-VL-*: patch 16, merge 2, pixels 65,536..16,777,216, mean = std = 0.5."""
    return _pipeline("qwen3-vl", 16, 65_536, 16_777_216, HALF, HALF)


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """A Pipeline from a Qwen2VL ``preprocessor_config.json`` (4.x or 5.x spelling).

    As transformers does: top-level ``min_pixels`` / ``max_pixels`` win over
    ``size.shortest_edge`` / ``size.longest_edge``; the class defaults fill what is absent.
    """
    size = cfg.get("size") or {}
    if not isinstance(size, Mapping):
        raise ValueError(f"preprocessor_config: 'size' expected a dict with shortest_edge/"
                         f"longest_edge, got {size!r}")
    min_pixels = cfg.get("min_pixels") or size.get("shortest_edge") or 56 * 56
    max_pixels = cfg.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280
    patch = int(need(cfg, "patch_size", 14))
    mean, std, rescale, do_norm = config_normalize(cfg, ops.CLIP_MEAN, ops.CLIP_STD)
    name = "qwen3-vl" if patch == 16 else "qwen2-vl"
    if not cfg.get("do_resize", True):
        raise ValueError("preprocessor_config: do_resize=false is not supported for Qwen "
                         "(patchify needs sides that are multiples of patch*merge); "
                         "expected do_resize=true")
    return _pipeline(
        name, patch, int(min_pixels), int(max_pixels), mean, std,
        temporal=int(need(cfg, "temporal_patch_size", 2)), merge=int(need(cfg, "merge_size", 2)),
        interpolation=config_interpolation(cfg, "bicubic"), rescale=rescale, do_normalize=do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs the model's transformers Processor passes whatever the saved config
    says: none for this family."""
    return {}


PRESETS = {"qwen2-vl": qwen2_vl, "qwen3-vl": qwen3_vl}
