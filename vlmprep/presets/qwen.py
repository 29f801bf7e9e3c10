"""Qwen2-VL / Qwen2.5-VL (``qwen2-vl``) and Qwen3-VL (``qwen3-vl``).

Defaults are the public checkpoints' ``preprocessor_config.json`` values, not the
transformers class defaults (class default max_pixels is 1,003,520: 12.8x lower).
Video defaults (``video_defaults``) are the checkpoints' video processor configs, read as
transformers 5.x reads them (``VIDEO_CONFIGS``).
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ..plan.video import VideoOptions
from ._config import HALF, config_interpolation, config_normalize, need, normalize_steps
from .spec import FamilySpec, FormSpec, VideoSpec

#: Image-processor class names (4.x and 5.x spellings) that this family's configs carry.
IMAGE_PROCESSOR_TYPES = (
    "Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast", "Qwen2VLImageProcessorPil",
)


def _pipeline(name: str, patch: int, min_pixels: int, max_pixels: int,
              mean: tuple[float, float, float], std: tuple[float, float, float],
              temporal: int = 2, merge: int = 2, interpolation: str = "bicubic",
              rescale: float = 1 / 255, do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.smart_resize(factor=patch * merge, min_pixels=min_pixels, max_pixels=max_pixels,
                         interpolation=interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [
        ops.patchify(patch_size=patch, temporal_patch_size=temporal, merge_size=merge,
                     order="merge_grouped"),
        ops.pack(image_token="<|image_pad|>"),  # to_hf "auto": qwen2_vl
    ]
    return Pipeline(steps, name=name)


def qwen2_vl() -> Pipeline:
    """Qwen2-VL-* / Qwen2.5-VL-*: patch 14, merge 2, pixels 3136..12,845,056, CLIP mean/std."""
    return _pipeline("qwen2-vl", 14, 3136, 12_845_056, ops.CLIP_MEAN, ops.CLIP_STD)


def qwen3_vl() -> Pipeline:
    """Qwen3-VL-*: patch 16, merge 2, pixels 65,536..16,777,216, mean = std = 0.5."""
    return _pipeline("qwen3-vl", 16, 65_536, 16_777_216, HALF, HALF)


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """A Pipeline from a Qwen2VL ``preprocessor_config.json`` (4.x or 5.x spelling).

    As transformers does: top-level ``min_pixels`` / ``max_pixels`` win over
    ``size.shortest_edge`` / ``size.longest_edge``; the class defaults fill what is absent.
    """
    size = cfg.get("size") or {}
    if not isinstance(size, Mapping):
        raise ValueError(f"preprocessor_config: 'size' expected a dict with shortest_edge/"
                         f"longest_edge, got {size!r}")
    min_pixels = cfg.get("min_pixels") or size.get("shortest_edge") or 56 * 56
    max_pixels = cfg.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280
    patch = int(need(cfg, "patch_size", 14))
    mean, std, rescale, do_norm = config_normalize(cfg, ops.CLIP_MEAN, ops.CLIP_STD)
    name = "qwen3-vl" if patch == 16 else "qwen2-vl"
    if not cfg.get("do_resize", True):
        raise ValueError("preprocessor_config: do_resize=false is not supported for Qwen "
                         "(patchify needs sides that are multiples of patch*merge); "
                         "expected do_resize=true")
    return _pipeline(
        name, patch, int(min_pixels), int(max_pixels), mean, std,
        temporal=int(need(cfg, "temporal_patch_size", 2)), merge=int(need(cfg, "merge_size", 2)),
        interpolation=config_interpolation(cfg, "bicubic"), rescale=rescale, do_normalize=do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs the model's transformers Processor passes whatever the saved config
    says: none for this family."""
    return {}


PRESETS = {"qwen2-vl": qwen2_vl, "qwen3-vl": qwen3_vl}


# -- video -------------------------------------------------------------------------------------
#: transformers 5.24's class defaults of the two Qwen video processors (what a config leaves out).
VIDEO_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "Qwen2VLVideoProcessor": dict(min_pixels=128 * 28 * 28, max_pixels=28 * 28 * 768, fps=None,
                                  num_frames=None, min_frames=4, max_frames=768,
                                  do_sample_frames=False, max_video_tokens=128000),
    "Qwen3VLVideoProcessor": dict(min_pixels=128 * 32 * 32, max_pixels=32 * 32 * 768, fps=2,
                                  num_frames=None, min_frames=4, max_frames=768,
                                  do_sample_frames=True, max_video_tokens=768),
}


def _checkpoint(name: str) -> dict[str, Any]:
    with open(os.path.join(os.path.dirname(__file__), "checkpoints", f"{name}.json"),
              encoding="utf-8") as f:
        return json.load(f)


def video_configs() -> dict[str, dict[str, Any]]:
    """family -> the config transformers 5.x builds the checkpoint's video processor from.

    Qwen2-VL-* and Qwen2.5-VL-* ship no ``video_preprocessor_config.json``: transformers falls back
    to ``preprocessor_config.json`` (its min/max_pixels become the video size; every frame is kept,
    ``do_sample_frames`` being False). Qwen3-VL-* ship one (Qwen/Qwen3-VL-8B-Instruct: a clip
    budget of 4096..25,165,824 pixels, 2 fps, 4..768 frames).
    """
    qwen2 = _checkpoint("qwen2-vl")
    return {
        "qwen2-vl": qwen2,
        "qwen2.5-vl": {**qwen2, "processor_class": "Qwen2_5_VLProcessor"},
        "qwen3-vl": {
            "size": {"longest_edge": 25165824, "shortest_edge": 4096},
            "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            "do_sample_frames": True, "fps": 2, "min_frames": 4, "max_frames": 768,
            "processor_class": "Qwen3VLProcessor", "video_processor_type": "Qwen3VLVideoProcessor",
        },
    }


def _video_config(family: str) -> dict[str, Any]:
    return video_configs()[family]


def video_family(cfg: Mapping[str, Any]) -> str:
    """``"qwen3-vl"``, ``"qwen2.5-vl"`` or ``"qwen2-vl"`` from a video (or image) config."""
    if cfg.get("video_processor_type") == "Qwen3VLVideoProcessor" or cfg.get(
            "processor_class") == "Qwen3VLProcessor" or need(cfg, "patch_size", 14) == 16:
        return "qwen3-vl"
    return "qwen2.5-vl" if cfg.get("processor_class") == "Qwen2_5_VLProcessor" else "qwen2-vl"


def video_from_config(cfg: Mapping[str, Any], sampling: str = "transformers") -> VideoOptions:
    """VideoOptions from a ``video_preprocessor_config.json`` (or, for checkpoints without one,
    ``preprocessor_config.json``), as the transformers video processor reads it: the class
    defaults fill what is absent; Qwen2's top-level min_pixels / max_pixels win over ``size``."""
    family = video_family(cfg)
    d = VIDEO_CLASS_DEFAULTS["Qwen3VLVideoProcessor" if family == "qwen3-vl"
                             else "Qwen2VLVideoProcessor"]
    size = cfg.get("size") or {}
    if not isinstance(size, Mapping):
        raise ValueError(f"video_preprocessor_config: 'size' expected a dict with shortest_edge/"
                         f"longest_edge, got {size!r}")
    lo = size.get("shortest_edge") or d["min_pixels"]
    hi = size.get("longest_edge") or d["max_pixels"]
    if family != "qwen3-vl":  # Qwen2VLVideoProcessor.__init__ folds them into size
        lo = cfg.get("min_pixels") or lo
        hi = cfg.get("max_pixels") or hi
    fps = need(cfg, "fps", d["fps"])
    return VideoOptions(
        fps=float(fps) if fps is not None else None, num_frames=cfg.get("num_frames", d["num_frames"]),
        min_frames=int(need(cfg, "min_frames", d["min_frames"])),
        max_frames=int(need(cfg, "max_frames", d["max_frames"])),
        min_pixels=int(lo), max_pixels=int(hi),
        do_sample_frames=bool(need(cfg, "do_sample_frames", d["do_sample_frames"])),
        sampling=sampling, cap_pixels_per_frame=bool(cfg.get("cap_pixels_per_frame") or False),
        max_video_tokens=int(need(cfg, "max_video_tokens", d["max_video_tokens"])), family=family)


def video_defaults(family: str) -> VideoOptions:
    """The public checkpoint's VideoOptions of ``family`` (``video_configs()``)."""
    return video_from_config(video_configs()[family])


# -- the family's declaration ------------------------------------------------------------------
FAMILY = FamilySpec(
    name="qwen", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec(
        "qwen2_vl",  # pack(hf_output="auto") with patchify order "merge_grouped"
        prompt_video_token="<|video_pad|>",  # Qwen2-VL / Qwen2.5-VL / Qwen3-VL processors
        vllm_embeds="flat",  # qwen2_vl.py Qwen2VLMultiModalDataParser (also Qwen2.5 / Qwen3-VL)
        # SGLang 0.5.23: a 2-D feature whose last dim is not the 1176 of pixel rows
        sglang_precomputed=("Qwen2_5_VLForConditionalGeneration",),
        sglang_reencoded={
            "Qwen2VLForConditionalGeneration": "qwen2_vl.py get_image_feature runs self.visual "
                                               "on the feature",
            "Qwen3VLForConditionalGeneration": "qwen3_vl.py runs self.visual on the feature",
        }),),
    # "qwen2.5-vl": the qwen2-vl pipeline with Qwen2.5-VL's video processor (second_per_grid_ts)
    videos={f: VideoSpec(functools.partial(video_defaults, f), preset,
                         functools.partial(_video_config, f))
            for f, preset in (("qwen2-vl", "qwen2-vl"), ("qwen2.5-vl", "qwen2-vl"),
                              ("qwen3-vl", "qwen3-vl"))},
    video_from_config=video_from_config,
    vit_towers={
        "qwen_tower": ("Qwen2VisionTransformerPretrainedModel",
                       "Qwen2_5_VisionTransformerPretrainedModel", "Qwen3VLVisionModel",
                       "Qwen3VLMoeVisionModel"),
        "qwen_model": ("Qwen2VLModel", "Qwen2VLForConditionalGeneration", "Qwen2_5_VLModel",
                       "Qwen2_5_VLForConditionalGeneration", "Qwen3VLModel",
                       "Qwen3VLForConditionalGeneration", "Qwen3VLMoeModel",
                       "Qwen3VLMoeForConditionalGeneration"),
    },
)
