"""SigLIP2 NaFlex (``siglip2-naflex``): scale search within a patch budget, [py, px, c] rows.

Defaults: google/siglip2-*-patch16-naflex (patch 16, ``max_num_patches`` 256, BILINEAR,
mean = std = 0.5; the same as the class defaults). ``max_num_patches`` is often raised per
call in transformers (256..1024): ``vlmprep.Processor("siglip2-naflex", max_num_patches=1024)``.

Colour: ``Siglip2ImageProcessor`` has ``do_convert_rgb=None``, so transformers crashes on RGBA,
LA or gray inputs; vlmprep's decode converts every input to RGB (transparency on white) as the
other families do, so those inputs work here and equal transformers fed the converted image.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import HALF, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec

IMAGE_PROCESSOR_TYPES = config_types("Siglip2ImageProcessor")


def _pipeline(patch: int = 16, max_num_patches: int = 256, mean=HALF, std=HALF,
              interpolation: str = "bilinear", rescale: float = 1 / 255,
              do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [ops.decode(),
                           ops.naflex_resize(max_num_patches=max_num_patches,
                                             interpolation=interpolation)]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=1,
                           order="naflex"),
              # No text of its own: tokens = valid patches, placeholder "".
              ops.pack(image_token="", hf_output="siglip2")]
    return Pipeline(steps, name="siglip2-naflex")


def siglip2_naflex() -> Pipeline:
    """google/siglip2-*-patch16-naflex: patch 16, at most 256 patches, bilinear, mean=std=0.5."""
    return _pipeline()


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """A ``Siglip2ImageProcessor`` config -> Pipeline (class defaults fill what is absent)."""
    if not cfg.get("do_resize", True):
        raise ValueError("preprocessor_config: do_resize=false is not supported for SigLIP2 "
                         "NaFlex (patchify needs sides that are multiples of the patch); "
                         "expected do_resize=true")
    mean, std, rescale, do_norm = config_normalize(cfg, HALF, HALF)
    return _pipeline(int(need(cfg, "patch_size", 16)), int(need(cfg, "max_num_patches", 256)),
                     mean, std, config_interpolation(cfg, "bilinear"), rescale, do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs the model's transformers Processor passes whatever the saved config
    says: none for this family."""
    return {}


PRESETS = {"siglip2-naflex": siglip2_naflex}

FAMILY = FamilySpec(
    name="siglip2", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec(
        "siglip2",
        vllm_no_embeds="SigLIP2 is a vision encoder, not a vLLM generation model",
        sglang_not_passed="a vision encoder, not an SGLang generation model",
    ),),
    vit_towers={"naflex": ("Siglip2VisionModel",)},
)
