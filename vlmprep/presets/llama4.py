"""Llama 4 (``llama4``, meta-llama/Llama-4-Scout-17B-16E-Instruct and Maverick-17B-128E):
``Llama4ImageProcessor`` (torchvision only, no PIL class in transformers 5.24) with the class
defaults, which the checkpoints' preprocessor_config.json equals (the converter builds the
processor with no arguments): tiles of 336 on the best-fit canvas of up to 16 tiles, the image
resized without distortion (bilinear) and 0-padded bottom/right, plus the global view (the whole
image squashed to 336x336) when there is more than one tile; mean = std = 0.5. Patches of 14,
pixel shuffle 0.5: 144 ``<|patch|>`` tokens per tile. Prompt: each ``<|image|>`` becomes
``<|image_start|>``, the tiles' rows (``<|tile_x_separator|>`` between columns,
``<|tile_y_separator|>`` after each row; only with more than one tile), ``<|image|>`` + 144
``<|patch|>`` (the global view or the only tile), ``<|image_end|>`` (``Llama4Processor``).
transformers rescales and normalizes in bfloat16 (see docs/presets/llama4.md). Values and
sources: docs/presets/llama4.md.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import HALF, config_hw, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec

IMAGE_PROCESSOR_TYPES = config_types("Llama4ImageProcessor")
#: The prompt's image token (``Llama4Processor.fake_image_token``), once per image.
PROMPT_IMAGE_TOKEN = "<|image|>"
#: The token repeated per visual embedding (``image_token_index`` 200092 in ``Llama4Config``).
PATCH_TOKEN = "<|patch|>"


def _pipeline(tile_size: int = 336, max_patches: int = 16, resize_to_max_canvas: bool = False,
              interpolation: str = "bilinear", patch: int = 14, downsample_ratio: int = 4,
              mean=HALF, std=HALF, rescale: float = 1 / 255, do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.llama4_tile(tile_size=tile_size, max_patches=max_patches,
                        resize_to_max_canvas=resize_to_max_canvas,
                        downsample_ratio=downsample_ratio, interpolation=interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=1, order="tiles"),
              ops.pack(image_token=PATCH_TOKEN, hf_output="llama4")]
    return Pipeline(steps, name="llama4")


def llama4() -> Pipeline:
    """The checkpoints' values (= ``Llama4ImageProcessor``'s class defaults): 336 tiles, up to 16,
    bilinear, mean = std = 0.5."""
    return _pipeline()


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """A ``Llama4ImageProcessor`` config -> Pipeline (the class defaults fill what is absent).
    ``do_resize`` false is refused (transformers refuses it), and so is a non-square ``size``
    (``find_supported_resolutions`` refuses it)."""
    if need(cfg, "do_resize", True) is not True:
        raise ValueError(f"preprocessor_config: 'do_resize' expected true (Llama4ImageProcessor "
                         f"refuses anything else), got {cfg['do_resize']!r}")
    h, w = config_hw(cfg, "size", (336, 336))
    if h != w:
        raise ValueError(f"preprocessor_config: 'size' expected a square tile, got {h}x{w}")
    mean, std, rescale, do_norm = config_normalize(cfg, HALF, HALF)
    return _pipeline(h, int(need(cfg, "max_patches", 16)),
                     bool(need(cfg, "resize_to_max_canvas", False)),
                     config_interpolation(cfg, "bilinear"), mean=mean, std=std, rescale=rescale,
                     do_normalize=do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """``Llama4Processor`` passes nothing to its image processor: no pixel or key changes."""
    return {}


PRESETS = {"llama4": llama4}

_NOT_CHECKED = ("vLLM 0.33's Llama 4 (mllama4.py) takes no image embeddings, only pixel inputs "
                "(checked in the engines venv); give the engines the images")
_SGLANG = "SGLang 0.5.23's mllama4.py get_image_feature runs the vision model on the feature"

FAMILY = FamilySpec(
    name="llama4", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec("llama4", prompt_image_token=PROMPT_IMAGE_TOKEN,
                    vllm_no_embeds=_NOT_CHECKED, sglang_not_passed=_SGLANG),),
    # The vision model only: its last_hidden_state (pixel shuffle + adapter MLP) per tile. The
    # full model's get_image_features is that same output (no pooler_output; the projector runs
    # in forward), so it is not declared (docs/presets/llama4.md).
    vit_towers={"tile_tower": ("Llama4VisionModel",)},
)
