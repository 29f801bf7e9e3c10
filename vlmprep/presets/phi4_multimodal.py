"""Phi-4-multimodal (``phi4-multimodal``, microsoft/Phi-4-multimodal-instruct):
``Phi4MultimodalImageProcessor`` (torchvision only, no PIL class in transformers 5.24) with the
checkpoint's ``dynamic_hd`` 36 and the class defaults (no transformers-format checkpoint file
seen): crops of 448 on a grid of ``ceil(W / 448) x ceil(H / 448)`` (or, above 36 crops, the
closest aspect ratio), the image aspect-fit into it (bilinear, as ``tvF.resize``'s default) and
padded with white right/bottom, a 448 x 448 global view first (the normalized canvas resized
with ``resample``, bicubic, without antialias: ``plan.Canvas.normalized``), mean = std = 0.5;
per-crop attention masks of 32 x 32 (patch 14). Prompt: each image token
``<|endoftext10|>`` repeated ``num_img_tokens`` times (``Phi4MultimodalProcessor``). Values and
sources: docs/presets/phi4-multimodal.md.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import (
    HALF,
    config_hw,
    config_interpolation,
    config_normalize,
    config_types,
    need,
    normalize_steps,
)
from .spec import FamilySpec, FormSpec

IMAGE_PROCESSOR_TYPES = config_types("Phi4MultimodalImageProcessor")
#: The prompt's image token, repeated ``num_img_tokens`` times (``Phi4MultimodalConfig``'s
#: ``image_token_id`` 200010).
IMAGE_TOKEN = "<|endoftext10|>"


def _pipeline(tile_size: int = 448, dynamic_hd: int = 36, patch: int = 14,
              global_interpolation: str = "bicubic", mean=HALF, std=HALF,
              rescale: float = 1 / 255, do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.phi4_hd(tile_size=tile_size, dynamic_hd=dynamic_hd, patch_size=patch,
                    interpolation="bilinear", global_interpolation=global_interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, merge_size=2, order="tiles"),
              ops.pack(image_token=IMAGE_TOKEN, hf_output="phi4_multimodal")]
    return Pipeline(steps, name="phi4-multimodal")


def phi4_multimodal() -> Pipeline:
    """microsoft/Phi-4-multimodal-instruct: 448 crops, at most 36, patch 14, bicubic global view."""
    return _pipeline()


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """A ``Phi4MultimodalImageProcessor`` config -> Pipeline (class defaults fill what is absent).
    ``resample`` is the global view's (the HD resize is ``tvF.resize``'s default, bilinear;
    lanczos is refused, as transformers fails on it); a non-square ``size`` is refused, as
    transformers refuses it."""
    h, w = config_hw(cfg, "size", (448, 448))
    if h != w:
        raise ValueError(f"preprocessor_config: size expected square (Phi4MultimodalImageProcessor "
                         f"only supports square sizes), got {h}x{w}; use one side")
    mean, std, rescale, do_norm = config_normalize(cfg, HALF, HALF)
    return _pipeline(h, int(need(cfg, "dynamic_hd", 36)), int(need(cfg, "patch_size", 14)),
                     config_interpolation(cfg, "bicubic"), mean, std, rescale, do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """``Phi4MultimodalProcessor`` passes the image kwargs through unchanged."""
    return {}


PRESETS = {"phi4-multimodal": phi4_multimodal}

_NOT_CHECKED = ("vLLM 0.33 serves Phi-4-multimodal only as Phi4MMForCausalLM (phi4mm.py), with "
                "the checkpoint's remote-code image processor, and its model reads only pixel "
                "input_image_embeds (checked in the engines venv); give the engines the images")
_SGLANG = ("SGLang 0.5.23 serves Phi-4-multimodal only as Phi4MMForCausalLM (phi4mm.py, the "
           "checkpoint's remote-code processor), whose get_image_feature runs the vision encoder "
           "on the feature")

FAMILY = FamilySpec(
    name="phi4_multimodal", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec("phi4_multimodal", vllm_no_embeds=_NOT_CHECKED,
                    sglang_not_passed=_SGLANG),),
)
