"""Pixtral (``pixtral``): floor-scale to the longest edge, ceil to the patch, break tokens.

Defaults: mistral-community/pixtral-12b (``longest_edge`` 1024, patch 16, merge 1, BICUBIC,
CLIP mean/std); the class defaults happen to be the same. Mistral-Small-3.1/3.2 (and Magistral,
LightOnOCR: the same image processor) use patch 14, merge 2, ``longest_edge`` 1540::

    vlmprep.Processor("pixtral", patch_size=14, merge_size=2, longest_edge=1540)
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec

IMAGE_PROCESSOR_TYPES = config_types("PixtralImageProcessor")


def _pipeline(patch: int = 16, merge: int = 1, longest_edge: int = 1024, mean=ops.CLIP_MEAN,
              std=ops.CLIP_STD, interpolation: str = "bicubic", rescale: float = 1 / 255,
              do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [ops.decode(),
                           ops.pixtral_resize(longest_edge=longest_edge,
                                              interpolation=interpolation)]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=merge,
                           order="raster"),
              # [IMG] per token; pixtral_resize adds the [IMG_BREAK] / [IMG_END] row tokens.
              ops.pack(image_token="[IMG]", hf_output="pixtral")]
    return Pipeline(steps, name="pixtral")


def pixtral() -> Pipeline:
    """mistral-community/pixtral-12b: patch 16, merge 1, longest edge 1024, CLIP mean/std."""
    return _pipeline()


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def _side(cfg: Mapping[str, Any], key: str, inner: tuple[str, ...], default: int) -> int:
    """``patch_size`` / ``size`` as an int or a dict; one square value (we support no other)."""
    v = cfg.get(key)
    if v is None:
        return default
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, Mapping):
        if "longest_edge" in inner and v.get("longest_edge"):
            return int(v["longest_edge"])
        h, w = v.get("height"), v.get("width")
        if h is not None and h == w:
            return int(h)
    raise ValueError(f"preprocessor_config: {key!r} expected an int or "
                     f"{{{', '.join(repr(k) + ': n' for k in inner)}}} with one value, got {v!r}; "
                     f"vlmprep supports square patches and a longest_edge size")


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """A ``PixtralImageProcessor`` config -> Pipeline.

    The merge lives in the processor (``processor_config.json``: ``spatial_merge_size``), not
    in this file: a ``spatial_merge_size`` key here wins; absent, it is 2 for patch 14 (every
    Mistral-Small-3.x / Magistral / LightOnOCR checkpoint) and 1 otherwise (Pixtral-12B).
    Override with ``from_pretrained(path, merge_size=...)`` where that guess is wrong.
    """
    if not cfg.get("do_resize", True):
        raise ValueError("preprocessor_config: do_resize=false is not supported for Pixtral "
                         "(patchify needs sides that are multiples of the patch); expected "
                         "do_resize=true")
    patch = _side(cfg, "patch_size", ("height", "width"), 16)
    merge = int(need(cfg, "spatial_merge_size", 2 if patch == 14 else 1))
    mean, std, rescale, do_norm = config_normalize(cfg, ops.CLIP_MEAN, ops.CLIP_STD)
    return _pipeline(patch, merge, _side(cfg, "size", ("longest_edge", "height", "width"), 1024),
                     mean, std, config_interpolation(cfg, "bicubic"), rescale, do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs the model's transformers Processor passes whatever the saved config
    says: ``PixtralProcessor`` passes ``patch_size = patch * spatial_merge_size``."""
    p = pipeline.patchify
    return {"patch_size": p.patch_size * p.merge_size}


PRESETS = {"pixtral": pixtral}

FAMILY = FamilySpec(
    name="pixtral", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec(
        "pixtral",
        vllm_no_embeds="vLLM 0.33 takes no Pixtral embeddings (its processor rejects embedding "
                       "items: 'Invalid type of data items'; llava.py: 'Pixtral-HF does not "
                       "support image_embeds.'; the Mistral-format PixtralForConditionalGeneration "
                       "takes images only)",
        sglang_not_passed="pixtral.py get_image_feature runs the vision encoder on the feature",
    ),),
)
