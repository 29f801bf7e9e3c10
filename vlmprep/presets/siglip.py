"""SigLIP v1 (``siglip``): squash to S x S, mean = std = 0.5; one tile, no placeholder of its own.

Defaults: google/siglip-so400m-patch14-384 (384 x 384, patch 14 -> 27 x 27 = 729 tokens);
the class default is 224.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import HALF, config_hw, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec

IMAGE_PROCESSOR_TYPES = config_types("SiglipImageProcessor")


def _pipeline(hw: tuple[int, int], patch: int, mean, std, interpolation: str = "bicubic",
              rescale: float = 1 / 255, do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [ops.decode(), ops.resize(mode="fixed", height=hw[0], width=hw[1],
                                                    interpolation=interpolation)]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=1, order="tiles"),
              # SigLIP inserts no text of its own (PaliGemma etc. add theirs): tokens = patches.
              ops.pack(image_token="", hf_output="images")]
    return Pipeline(steps, name="siglip")


def siglip() -> Pipeline:
    return _pipeline((384, 384), 14, HALF, HALF)


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """``SiglipImageProcessor`` config -> Pipeline (the patch size lives in the model config:
    14 unless the image-processor config carries ``patch_size``)."""
    mean, std, rescale, do_norm = config_normalize(cfg, HALF, HALF)
    return _pipeline(config_hw(cfg, "size", (224, 224)), int(need(cfg, "patch_size", 14)), mean,
                     std, config_interpolation(cfg, "bicubic"), rescale, do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs the model's transformers Processor passes whatever the saved config
    says: none for this family."""
    return {}


PRESETS = {"siglip": siglip}

FAMILY = FamilySpec(
    name="siglip", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    # "images" is LLaVA-1.5's form too (its engine facts are declared there): SigLIP has no LLM
    # image token, so no engine takes its embeddings.
    forms=(FormSpec("images"),),
    vit_towers={"tile_tower": ("SiglipVisionModel",)},
)
