"""Ovis2, HF-converted (``ovis2``, ``thisisiron/Ovis2-*-hf``): ``Ovis2ImageProcessor`` with the
checkpoint's ``crop_to_patches``: up to 12 tiles of 448 chosen by the covering-area grid, the
thumbnail first, OpenAI CLIP mean/std, bicubic. Prompt: each ``<image>`` becomes ``<IMG_START>``
+ 256 ``<IMG_ATOM>`` (the thumbnail, or the only tile) + ``<IMG_GRID>``, then, with more than one
tile, 256 atoms per tile with ``<IMG_COL>`` between columns and ``<IMG_ROW>`` between rows, then
``<IMG_END>`` (``Ovis2Processor.replace_image_token``; 256 = (448 / 14)^2 / 4, the checkpoint's
``image_seq_length``). Values and sources: docs/presets/ovis2.md.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import config_hw, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec

IMAGE_PROCESSOR_TYPES = config_types("Ovis2ImageProcessor")
#: The token a prompt holds once per image (``Ovis2Processor.image_token``, hard-coded).
PROMPT_IMAGE_TOKEN = "<image>"
#: The token repeated per visual embedding (``image_token_id`` 151665 in ``Ovis2Config``).
IMAGE_ATOM = "<IMG_ATOM>"


def _pipeline(tile_size: int = 448, min_tiles: int = 1, max_tiles: int = 12, covering: bool = True,
              mean=ops.CLIP_MEAN, std=ops.CLIP_STD, interpolation: str = "bicubic",
              rescale: float = 1 / 255, do_normalize: bool = True, patch: int = 14) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.ovis2_tile(tile_size=tile_size, min_tiles=min_tiles, max_tiles=max_tiles,
                       covering=covering, interpolation=interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=2, order="tiles"),
              ops.pack(image_token=IMAGE_ATOM, hf_output="ovis2")]
    return Pipeline(steps, name="ovis2")


def ovis2() -> Pipeline:
    """thisisiron/Ovis2-2B-hf's preprocessor_config.json: 448 tiles, 1..12, covering grid."""
    return _pipeline()


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """``Ovis2ImageProcessor`` config -> Pipeline (class defaults fill what is absent: 384 tiles,
    ``crop_to_patches`` false). Without ``crop_to_patches`` (or with ``max_patches`` 1) an image is
    one squashed tile (``max_tiles=1``); a non-square ``size``, and ``do_resize`` false without
    tiling (images of their own size), are refused."""
    h, w = config_hw(cfg, "size", (384, 384))
    if h != w:
        raise ValueError(f"preprocessor_config: 'size' expected a square tile, got {h}x{w}; "
                         f"build the Pipeline by hand")
    crop = bool(need(cfg, "crop_to_patches", False))
    if not crop and not need(cfg, "do_resize", True):
        raise ValueError("preprocessor_config: do_resize expected true (or crop_to_patches), got "
                         "false: images would keep their own size; set do_resize true")
    lo, hi = int(need(cfg, "min_patches", 1)), int(need(cfg, "max_patches", 12))
    mean, std, rescale, do_norm = config_normalize(cfg, ops.CLIP_MEAN, ops.CLIP_STD)
    return _pipeline(h, lo if crop else 1, hi if crop else 1,
                     bool(need(cfg, "use_covering_area_grid", True)), mean, std,
                     config_interpolation(cfg, "bicubic"), rescale, do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """``Ovis2Processor`` forces no image-processor kwarg (the checkpoint's config says
    ``crop_to_patches``)."""
    return {}


PRESETS = {"ovis2": ovis2}


FAMILY = FamilySpec(
    name="ovis2", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec(
        "ovis2",
        prompt_image_token=PROMPT_IMAGE_TOKEN,  # expanded to the <IMG_START>..<IMG_END> placeholder
        vllm_no_embeds="vLLM 0.33 serves no Ovis2ForConditionalGeneration (only Ovis and "
                       "Ovis2.5, with their own preprocessing; checked in the engines venv); give "
                       "the engines the images",
        sglang_not_passed="SGLang 0.5.23 has no Ovis2 model",
    ),),
    # last_hidden_state per tile (hidden_stride merged); the models' get_image_features: the
    # visual-vocabulary embeddings per tile (tests/adapters/test_vit.py)
    vit_towers={"tile_tower": ("Ovis2VisionModel",),
                "tile_model": ("Ovis2Model", "Ovis2ForConditionalGeneration")},
)
