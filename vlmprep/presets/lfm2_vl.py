"""LFM2-VL (``lfm2-vl``, LiquidAI/LFM2-VL-1.6B): ``Lfm2VlImageProcessor`` (torchvision only, no
PIL class in transformers 5.24) with the checkpoint's processor_config.json values: smart resize
to 64..256 tokens (patch 16, downsample 2), images above 1.5x the budget split into 2..10 tiles of
512 plus the smart-resized thumbnail, bilinear, mean = std = 0.5; SigLIP2-NaFlex rows
(``[py, px, c]``, one padded sequence of 1024 rows per tile). Prompt: each ``<image>`` becomes
``<|image_start|>``, per tile ``<|img_row_R_col_C|>`` + 256 ``<image>``, ``<|img_thumbnail|>`` +
the thumbnail's tokens, ``<|image_end|>`` (``Lfm2VlProcessor``). LFM2-VL-450M: tolerance 2.0, no
thumbnail (``presets.get("lfm2-vl", max_pixels_tolerance=2.0, use_thumbnail=False)`` or its
config). Values and sources: docs/presets/lfm2-vl.md.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import HALF, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec

IMAGE_PROCESSOR_TYPES = config_types("Lfm2VlImageProcessor")
#: The prompt's image token, also the token repeated per visual embedding (``image_token_id``
#: 396 in ``Lfm2VlConfig``).
IMAGE_TOKEN = "<image>"
#: ``Lfm2VlImageProcessor``'s class defaults (what a config leaves out).
CLASS_DEFAULTS: dict[str, Any] = {
    "tile_size": 512, "min_tiles": 2, "max_tiles": 10, "use_thumbnail": True,
    "min_image_tokens": 64, "max_image_tokens": 256, "max_pixels_tolerance": 2.0,
    "encoder_patch_size": 16, "downsample_factor": 2, "do_image_splitting": True,
}


def _pipeline(tile_size: int = 512, min_tiles: int = 2, max_tiles: int = 10,
              use_thumbnail: bool = True, min_image_tokens: int = 64, max_image_tokens: int = 256,
              max_pixels_tolerance: float = 1.5, special_tokens: bool = True,
              interpolation: str = "bilinear", patch: int = 16, downsample: int = 2,
              mean=HALF, std=HALF, rescale: float = 1 / 255, do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.lfm2_vl_tile(tile_size=tile_size, min_tiles=min_tiles, max_tiles=max_tiles,
                         use_thumbnail=use_thumbnail, min_image_tokens=min_image_tokens,
                         max_image_tokens=max_image_tokens,
                         max_pixels_tolerance=max_pixels_tolerance,
                         special_tokens=special_tokens, interpolation=interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=downsample,
                           order="naflex"),
              ops.pack(image_token=IMAGE_TOKEN, hf_output="lfm2_vl")]
    return Pipeline(steps, name="lfm2-vl")


def lfm2_vl() -> Pipeline:
    """LiquidAI/LFM2-VL-1.6B's processor_config.json: 512 tiles, 2..10, tolerance 1.5, thumbnail
    (the 450M: ``presets.get("lfm2-vl", max_pixels_tolerance=2.0, use_thumbnail=False)``)."""
    return _pipeline()


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """An ``Lfm2VlImageProcessor`` config -> Pipeline (the class defaults fill what is absent;
    ``do_image_splitting`` false -> ``min_tiles = max_tiles = 1``). ``do_resize`` false is refused
    (transformers resizes anyway: its ``_preprocess`` sets it true), and so is ``do_pad`` false
    (no mask or spatial_shapes)."""
    if not need(cfg, "do_pad", True):
        raise ValueError("preprocessor_config: do_pad expected true (the padded rows, "
                         "pixel_attention_mask and spatial_shapes), got false; drop the key")
    d = {k: need(cfg, k, v) for k, v in CLASS_DEFAULTS.items()}
    split = bool(d["do_image_splitting"])
    mean, std, rescale, do_norm = config_normalize(cfg, HALF, HALF)
    return _pipeline(int(d["tile_size"]), int(d["min_tiles"]) if split else 1,
                     int(d["max_tiles"]) if split else 1, bool(d["use_thumbnail"]),
                     int(d["min_image_tokens"]), int(d["max_image_tokens"]),
                     float(d["max_pixels_tolerance"]), True, config_interpolation(cfg, "bilinear"),
                     int(d["encoder_patch_size"]), int(d["downsample_factor"]), mean, std, rescale,
                     do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """``Lfm2VlProcessor`` forces ``return_row_col_info`` (rows, cols and sizes for the prompt,
    dropped from its output): no pixel or key of the image processor's output changes."""
    return {}


PRESETS = {"lfm2-vl": lfm2_vl}

_NOT_CHECKED = ("vLLM 0.33's LFM2-VL (lfm2_vl.py) takes no image embeddings, only pixel "
                "inputs (checked in the engines venv); give the engines the images")
_SGLANG = "SGLang 0.5.23's lfm2_vl.py get_image_feature runs the vision tower on the feature"

FAMILY = FamilySpec(
    name="lfm2_vl", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec("lfm2_vl", vllm_no_embeds=_NOT_CHECKED, sglang_not_passed=_SGLANG),),
    # The tower alone is a Siglip2VisionModel (declared by siglip2: the naflex kind, which pads
    # to this family's 1024 rows); the models: get_image_features (tests/adapters/test_vit.py)
    vit_towers={"naflex_model": ("Lfm2VlModel", "Lfm2VlForConditionalGeneration")},
)
