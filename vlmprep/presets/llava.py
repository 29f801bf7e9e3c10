"""LLaVA-1.5 (``llava-1.5``): CLIP-336: short side -> 336, centre crop 336, CLIP mean/std.

Defaults: llava-hf/llava-1.5-*-hf (its ``CLIPImageProcessor`` config; class defaults are 224).
Tokens: (336 / 14)^2 = 576 copies of ``<image>`` (the CLS token is dropped by the default
feature-select strategy).
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import config_hw, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec

IMAGE_PROCESSOR_TYPES = config_types("CLIPImageProcessor")


def _pipeline(shortest_edge: int, crop_hw: tuple[int, int], patch: int, mean, std,
              interpolation: str = "bicubic", rescale: float = 1 / 255,
              do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.resize(mode="shortest_edge", size=shortest_edge, interpolation=interpolation),
        ops.center_crop(height=crop_hw[0], width=crop_hw[1]),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=1, order="tiles"),
              ops.pack(image_token="<image>", hf_output="images")]
    return Pipeline(steps, name="llava-1.5")


def llava_1_5() -> Pipeline:
    return _pipeline(336, (336, 336), 14, ops.CLIP_MEAN, ops.CLIP_STD)


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """``CLIPImageProcessor`` config (``size.shortest_edge``, ``crop_size``) -> Pipeline."""
    size = cfg.get("size", {"shortest_edge": 224})
    short = size if isinstance(size, int) else (size or {}).get("shortest_edge")
    if not isinstance(short, int):
        raise ValueError(f"preprocessor_config: 'size' expected {{'shortest_edge': n}}, got {size!r}")
    if not cfg.get("do_center_crop", True):
        raise ValueError("preprocessor_config: do_center_crop=false is not supported for "
                         "CLIPImageProcessor (tiles need one size); expected do_center_crop=true")
    mean, std, rescale, do_norm = config_normalize(cfg, ops.CLIP_MEAN, ops.CLIP_STD)
    return _pipeline(short, config_hw(cfg, "crop_size", (224, 224)), int(need(cfg, "patch_size", 14)),
                     mean, std, config_interpolation(cfg, "bicubic"), rescale, do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs the model's transformers Processor passes whatever the saved config
    says: none for this family."""
    return {}


PRESETS = {"llava-1.5": llava_1_5}

FAMILY = FamilySpec(
    name="llava", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec(
        "images",
        vllm_embeds="stacked",  # llava.py LlavaImageEmbeddingInputs ("bn", "ifs", "hs")
        sglang_not_passed="llava.py get_image_feature runs the vision tower on the feature",
    ),),
    vit_towers={"tile_tower": ("CLIPVisionModel",),
                "tile_model": ("LlavaModel", "LlavaForConditionalGeneration")},
)
