"""Llama-3.2-Vision (``mllama``): ``MllamaImageProcessor``. Up to 4 tiles of 560 on the best
canvas, aspect-fit BILINEAR resize, 0-padded bottom/right, row-major tiles, CLIP mean/std.
One ``<|image|>`` token per image in the prompt (cross-attention reads the tiles).

Defaults: meta-llama/Llama-3.2-11B-Vision(-Instruct) (also 90B): size 560, max_image_tiles 4,
resample 2 (bilinear), CLIP mean/std. The class defaults differ: size 224, mean = std = 0.5.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import HALF, config_hw, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec

IMAGE_PROCESSOR_TYPES = config_types("MllamaImageProcessor")


def _pipeline(tile_size: int, max_tiles: int, mean, std, interpolation: str = "bilinear",
              rescale: float = 1 / 255, do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.canvas_tile(tile_size=tile_size, max_tiles=max_tiles, interpolation=interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    # ViT-H/14: 40 x 40 patches per 560 tile (the model adds its CLS token: 1601).
    steps += [ops.patchify(patch_size=14, temporal_patch_size=1, merge_size=1, order="tiles"),
              ops.pack(image_token="<|image|>", hf_output="mllama")]
    return Pipeline(steps, name="mllama")


def mllama() -> Pipeline:
    return _pipeline(560, 4, ops.CLIP_MEAN, ops.CLIP_STD)


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """``MllamaImageProcessor`` config -> Pipeline (class defaults where a key is absent, as
    transformers reads the file). ``do_pad`` / ``do_resize`` false are refused, as transformers
    refuses them."""
    for key in ("do_pad", "do_resize"):
        if need(cfg, key, True) is not True:
            raise ValueError(f"preprocessor_config: {key!r} expected true (MllamaImageProcessor "
                             f"supports nothing else), got {cfg[key]!r}")
    h, w = config_hw(cfg, "size", (224, 224))
    if h != w:
        raise ValueError(f"preprocessor_config: 'size' expected a square tile, got {h}x{w}")
    mean, std, rescale, do_norm = config_normalize(cfg, HALF, HALF)
    return _pipeline(h, int(need(cfg, "max_image_tiles", 4)), mean, std,
                     config_interpolation(cfg, "bilinear"), rescale, do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs the model's transformers Processor passes whatever the saved config
    says: none for this family."""
    return {}


PRESETS = {"mllama": mllama}

FAMILY = FamilySpec(
    name="mllama", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec(
        "mllama",
        vllm_no_embeds="vLLM 0.33 has no Mllama model (MllamaForConditionalGeneration was removed "
                       "in 0.10.2)",
        sglang_not_passed="mllama.py runs the vision model on the feature",
    ),),
)
