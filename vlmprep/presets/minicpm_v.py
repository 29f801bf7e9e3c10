"""MiniCPM-V 4.6 (``minicpmv4_6``, ``openbmb/MiniCPM-V-4.6``): ``MiniCPMV4_6ImageProcessor`` with
the checkpoint's values (``checkpoints/minicpm-v.json``): the source image resized to about
448 x 448 pixels, and up to 9 slices of about that size, sides multiples of 56 (patch 14 x the
"16x" downsample's 4), mean/std 0.5, bicubic. Rows are raster patches ``[c, py, px]``, one ViT
sequence per tile (``to_hf`` puts them side by side as transformers' ``(1, C, 14, L)``).
Prompt: each ``<|image_pad|>`` becomes ``<image>`` + n ``<|image_pad|>`` + ``</image>``, then
per slice ``<slice>`` + n + ``</slice>``, rows joined by a newline (n = the tile's patches / 16);
the processor's ``<image_id>k</image_id>`` prefix (its per-text image index) is not part of
the plan's placeholder (a plan does not know the texts: transformers' ``replace_image_token``
leaves it out too); ``adapters.transformers.expand_prompts`` writes it, as the processor does.
Values and sources: docs/presets/minicpm-v.md.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ..plan.minicpmv import IMAGE_TOKEN
from ._config import HALF, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec

IMAGE_PROCESSOR_TYPES = config_types("MiniCPMV4_6ImageProcessor")
#: ``downsample_mode`` -> patchify's merge_size: the side a token covers, in patches ("16x":
#: the ViT's merger and the downsample MLP, 2 x 2 each; "4x": one 2 x 2 merge).
MERGE = {"16x": 4, "4x": 2}


def _pipeline(max_slices: int = 9, scale: int = 448, slice_mode: bool = True, patch: int = 14,
              downsample: str = "16x", mean: tuple = HALF, std: tuple = HALF,
              interpolation: str = "bicubic", rescale: float = 1 / 255,
              do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.minicpmv_slice(max_slice_nums=max_slices, scale_resolution=scale,
                           slice_mode=slice_mode, interpolation=interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=MERGE[downsample],
                           order="raster"),
              ops.pack(image_token=IMAGE_TOKEN, hf_output="minicpmv")]
    return Pipeline(steps, name="minicpm-v")


def minicpm_v() -> Pipeline:
    """openbmb/MiniCPM-V-4.6's preprocessor_config.json: 9 slices, 448, patch 14, "16x"."""
    return _pipeline()


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """``MiniCPMV4_6ImageProcessor`` config -> Pipeline (class defaults fill what is absent: the
    checkpoint's values). ``do_resize`` false (slices of the image's own size, sides not
    multiples of the patch) and a ``downsample_mode`` other than "16x" / "4x" are refused."""
    if not need(cfg, "do_resize", True):
        raise ValueError("preprocessor_config: do_resize expected true, got false: MiniCPM-V's "
                         "patches need sides that are multiples of patch_size; set do_resize true")
    mode = need(cfg, "downsample_mode", "16x")
    if mode not in MERGE:
        raise ValueError(f"preprocessor_config: downsample_mode expected one of {sorted(MERGE)}, "
                         f"got {mode!r}; use the checkpoint's value")
    mean, std, rescale, do_norm = config_normalize(cfg, HALF, HALF)
    return _pipeline(int(need(cfg, "max_slice_nums", 9)), int(need(cfg, "scale_resolution", 448)),
                     bool(need(cfg, "slice_mode", True)), int(need(cfg, "patch_size", 14)), mode,
                     mean, std, config_interpolation(cfg, "bicubic"), rescale, do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """``MiniCPMV4_6Processor`` forces no image-processor kwarg."""
    return {}


PRESETS = {"minicpm-v": minicpm_v}

FAMILY = FamilySpec(
    name="minicpm_v", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec(
        "minicpmv",  # the prompt holds <|image_pad|> once per image, expanded to the placeholder
        # MiniCPMV4_6Processor._prepend_local_ids (use_image_id, the checkpoint's value)
        prompt_image_ids=("<image_id>", "</image_id>"),
        # minicpmv.py MiniCPMVMultiModalDataParser.embedding_fields: {image_embeds, image_sizes}
        vllm_embeds="sized",
        # its model would pass the feature through (minicpmv.py MiniCPMV4_6.get_image_feature)
        sglang_not_passed="SGLang 0.5.23's MiniCPM-V 4.6 processor (minicpmv4_6.py "
                          "MiniCPMV4_6MultimodalProcessor) sends every image_data item through "
                          "its own MiniCPMV4_6ImageProcessor.preprocess, a dict item included "
                          "('Unsupported image type: <class 'dict'>')",
    ),),
)
