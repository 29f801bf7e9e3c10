"""Gemma 3 (``gemma3``): ``Gemma3ImageProcessor``. Squash to 896 x 896 BILINEAR, mean = std =
0.5; optional pan-and-scan crops of the original image, each squashed to 896 too.
SigLIP/14 sees 64 x 64 patches per sequence, pooled 4 x 4 into 256 soft tokens.

Defaults: google/gemma-3-4b-it (and 12b/27b): size 896, resample 2 (bilinear). Its pan-and-scan
fields are saved as null; ``Gemma3Processor`` fills them: off, min crop 256, max 4 crops, ratio
1.2. Turn it on with ``do_pan_and_scan=True``. The class default size is 224.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import HALF, config_hw, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec

IMAGE_PROCESSOR_TYPES = config_types("Gemma3ImageProcessor")
#: Gemma3Processor's ``boi_token``: what a prompt holds once per image (the processor expands it
#: to ``\n\n<start_of_image>`` + soft tokens + ``<end_of_image>\n\n``).
BOI_TOKEN = "<start_of_image>"
#: Gemma3Processor's ``images_kwargs`` (used where the config says null): off, min crop 256, max
#: 4 crops, ratio 1.2, which are the ``pan_and_scan`` op's defaults (defined there once).
PAN_AND_SCAN_DEFAULTS = {k: getattr(ops.pan_and_scan(), k) for k in ops.pan_and_scan.field_names()
                         if "pan_and_scan" in k}


def _pipeline(hw: tuple[int, int], mean, std, interpolation: str = "bilinear",
              rescale: float = 1 / 255, do_normalize: bool = True, patch: int = 14,
              pool: int = 4, **pan_and_scan: Any) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.pan_and_scan(height=hw[0], width=hw[1], interpolation=interpolation,
                         **{**PAN_AND_SCAN_DEFAULTS, **pan_and_scan}),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    # merge_size = the 4 x 4 average pool: (896 / 14)^2 / 16 = 256 soft tokens per sequence.
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=pool, order="tiles"),
              ops.pack(image_token="<image_soft_token>", prefix="\n\n" + BOI_TOKEN,
                       suffix="<end_of_image>\n\n", hf_output="gemma3")]
    return Pipeline(steps, name="gemma3")


def gemma3() -> Pipeline:
    return _pipeline((896, 896), HALF, HALF)


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """``Gemma3ImageProcessor`` config -> Pipeline; null pan-and-scan fields take
    Gemma3Processor's defaults. ``image_seq_length`` (256) must match the 4 x 4 pooled grid."""
    hw = config_hw(cfg, "size", (224, 224))
    mean, std, rescale, do_norm = config_normalize(cfg, HALF, HALF)
    pas = {k: need(cfg, k, v) for k, v in PAN_AND_SCAN_DEFAULTS.items()}
    pas["do_pan_and_scan"] = bool(pas["do_pan_and_scan"])
    pipe = _pipeline(hw, mean, std, config_interpolation(cfg, "bilinear"), rescale, do_norm, **pas)
    seq = cfg.get("image_seq_length")
    pf = pipe.patchify  # the soft tokens of one sequence: patches pooled merge x merge
    grid = (hw[0] // pf.patch_size) * (hw[1] // pf.patch_size) // pf.merge_size ** 2
    if seq is not None and int(seq) != grid:
        raise ValueError(f"preprocessor_config: image_seq_length expected {grid} ((size / 14)^2 "
                         f"pooled 4 x 4), got {seq!r}; build the Pipeline by hand for this model")
    return pipe


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs the model's transformers Processor passes whatever the saved config
    says: ``Gemma3Processor``'s images_kwargs fill the (null) pan-and-scan fields."""
    return dict(PAN_AND_SCAN_DEFAULTS)


PRESETS = {"gemma3": gemma3}


FAMILY = FamilySpec(
    name="gemma3", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec(
        "gemma3",
        prompt_image_token=BOI_TOKEN,  # the processor expands it (placeholder around the soft tokens)
        vllm_no_embeds="vLLM 0.33 takes no Gemma 3 embeddings (its processor rejects embedding "
                       "items: 'Invalid type of data items'; gemma3_mm.py: 'Gemma3 does not "
                       "support image_embeds.')",
        sglang_precomputed=("Gemma3ForConditionalGeneration",),  # a 3-D feature of the text hidden size
    ),),
)
