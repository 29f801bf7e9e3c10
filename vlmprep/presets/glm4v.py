"""GLM-4.1V (``glm4v``): zai-org/GLM-4.1V-9B-Thinking's image and video preprocessing.

Image values (``checkpoints/glm4v.json``): size 12,544..9,633,792 pixels (= 28*28*2*6144; the
class default longest_edge is 11,760,000), patch 14, temporal patch 2, merge 2, CLIP mean/std,
BICUBIC (class default; the file has no ``resample``). The checkpoint's own
``preprocessor_config.json`` was not seen: these are its derived copies' values
(HF ``optimum-intel-internal-testing/tiny-random-glm4v``, ``hsb47gx6/AutoGLM-Phone-9B``; the
reference file FAMILIES2.md section 2). The resize is ``ops.glm4v_resize`` (``plan/glm4v.py``:
Qwen3-VL's video smart_resize over 2 frames); the rows are Qwen's (``merge_grouped``); the
prompt token is ``<|image|>``, once per merged patch.

Video values (``video_configs()``): the checkpoint's ``video_preprocessor_config.json`` (HF
``FriendliAI/GLM-4.1V-9B-Thinking``, a duplicate of the THUDM original): size
12,544..47,040,000 pixels for the whole clip; fps 2, max_duration 300 s and do_sample_frames
True are ``Glm4vVideoProcessor``'s class defaults (not in the file).
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ..plan.glm4v import IMAGE_TOKEN, MAX_DURATION, VIDEO_TOKEN
from ..plan.video import VideoOptions
from ._config import config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec, VideoSpec

#: Image-processor class names (4.x ``...Fast`` and 5.x spellings) of GLM-4.1V / GLM-4.5V configs.
IMAGE_PROCESSOR_TYPES = config_types("Glm4vImageProcessor")

#: ``Glm4vImageProcessor`` / ``Glm4vVideoProcessor`` class defaults (transformers 5.24): what a
#: config leaves out.
IMAGE_CLASS_DEFAULTS = {"min_pixels": 112 * 112, "max_pixels": 28 * 28 * 15000}
VIDEO_CLASS_DEFAULTS: dict[str, Any] = dict(min_pixels=112 * 112, max_pixels=28 * 28 * 2 * 30000,
                                            fps=2, do_sample_frames=True,
                                            max_duration=MAX_DURATION)


def _pipeline(min_pixels: int = 12544, max_pixels: int = 9_633_792, patch: int = 14,
              temporal: int = 2, merge: int = 2, mean: tuple = ops.CLIP_MEAN,
              std: tuple = ops.CLIP_STD, interpolation: str = "bicubic", rescale: float = 1 / 255,
              do_normalize: bool = True) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.glm4v_resize(factor=patch * merge, min_pixels=min_pixels, max_pixels=max_pixels,
                         temporal_factor=temporal, interpolation=interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [
        ops.patchify(patch_size=patch, temporal_patch_size=temporal, merge_size=merge,
                     order="merge_grouped"),
        ops.pack(image_token=IMAGE_TOKEN, hf_output="glm4v"),
    ]
    return Pipeline(steps, name="glm4v")


def glm4v() -> Pipeline:
    """GLM-4.1V-9B-Thinking: patch 14, merge 2, pixels 12,544..9,633,792 (budget counts 2 frames),
    CLIP mean/std, bicubic."""
    return _pipeline()


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def _size(cfg: Mapping[str, Any], defaults: Mapping[str, Any], where: str) -> tuple[int, int]:
    size = cfg.get("size") or {}
    if not isinstance(size, Mapping):
        raise ValueError(f"{where}: 'size' expected a dict with shortest_edge/longest_edge, got "
                         f"{size!r}")
    return (int(size.get("shortest_edge") or defaults["min_pixels"]),
            int(size.get("longest_edge") or defaults["max_pixels"]))


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """A Pipeline from a ``Glm4vImageProcessor`` ``preprocessor_config.json`` (``size``
    shortest_edge / longest_edge; the class defaults fill what is absent)."""
    if not cfg.get("do_resize", True):
        raise ValueError("preprocessor_config: do_resize=false is not supported for GLM-4.1V "
                         "(patchify needs sides that are multiples of patch*merge); expected "
                         "do_resize=true")
    lo, hi = _size(cfg, IMAGE_CLASS_DEFAULTS, "preprocessor_config")
    mean, std, rescale, do_norm = config_normalize(cfg, ops.CLIP_MEAN, ops.CLIP_STD)
    return _pipeline(lo, hi, int(need(cfg, "patch_size", 14)),
                     int(need(cfg, "temporal_patch_size", 2)), int(need(cfg, "merge_size", 2)),
                     mean, std, config_interpolation(cfg, "bicubic"), rescale, do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs ``Glm4vProcessor`` passes whatever the saved config says: none."""
    return {}


PRESETS = {"glm4v": glm4v}


# -- video -------------------------------------------------------------------------------------
def video_configs() -> dict[str, dict[str, Any]]:
    """family -> the checkpoint's ``video_preprocessor_config.json`` (FAMILIES2.md section 2)."""
    with open(os.path.join(os.path.dirname(__file__), "checkpoints", "glm4v.json"),
              encoding="utf-8") as f:
        image = json.load(f)
    return {"glm4v": {**{k: image[k] for k in ("patch_size", "temporal_patch_size", "merge_size",
                                                "image_mean", "image_std", "do_rescale")},
                      "size": {"shortest_edge": 12544, "longest_edge": 47040000},
                      "video_processor_type": "Glm4vVideoProcessor",
                      "processor_class": "Glm4vProcessor"}}


def video_from_config(cfg: Mapping[str, Any], sampling: str = "transformers") -> VideoOptions:
    """VideoOptions from a ``Glm4vVideoProcessor`` config, as transformers reads it (the class
    defaults fill what is absent). ``num_frames`` is not read: the processor's sampling ignores
    it. A ``max_duration`` other than 300 is refused (the plan uses the class value)."""
    d = VIDEO_CLASS_DEFAULTS
    if int(need(cfg, "max_duration", d["max_duration"])) != MAX_DURATION:
        raise ValueError(f"video_preprocessor_config: max_duration expected {MAX_DURATION} "
                         f"(Glm4vVideoProcessor's; vlmprep plans with it), got "
                         f"{cfg['max_duration']!r}; drop the key or process videos another way")
    if sampling != "transformers":
        raise ValueError(f"video: GLM-4.1V's sampling expected 'transformers' (its video "
                         f"processor's; no other is implemented), got {sampling!r}")
    lo, hi = _size(cfg, d, "video_preprocessor_config")
    return VideoOptions(fps=float(need(cfg, "fps", d["fps"])), num_frames=None,
                        min_pixels=lo, max_pixels=hi,
                        do_sample_frames=bool(need(cfg, "do_sample_frames", d["do_sample_frames"])),
                        sampling=sampling, family="glm4v")


def video_defaults(family: str = "glm4v") -> VideoOptions:
    """The public checkpoint's VideoOptions (``video_configs()``)."""
    return video_from_config(video_configs()[family])


_NOT_CHECKED = ("vLLM 0.33's Glm4v model takes image_embeds + image_grid_thw (glm4_1v.py "
                "Glm4vImageEmbeddingInputs), but its processor parses items with the generic "
                "MultiModalDataParser: the {'image_embeds', 'image_grid_thw'} dict is read as two "
                "images and fails ('Incorrect image source ... Got image_embeds'; checked against "
                "0.33.0 in the engines venv); give vLLM the images")

# -- the family's declaration ------------------------------------------------------------------
FAMILY = FamilySpec(
    name="glm4v", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec(
        "glm4v",  # pixel_values + image_grid_thw, as qwen2_vl; its own prompt / engine facts
        prompt_video_token=VIDEO_TOKEN,  # Glm4vProcessor (tokenizer.video_token)
        vllm_no_embeds=_NOT_CHECKED,
        vllm_no_video_embeds=_NOT_CHECKED,
        sglang_not_passed="SGLang 0.5.23's glm4v.py get_image_feature runs self.visual on the "
                          "feature"),),
    videos={"glm4v": VideoSpec(functools.partial(video_defaults, "glm4v"), "glm4v",
                               lambda: video_configs()["glm4v"])},
    video_from_config=video_from_config,
    # Qwen-like towers: hidden_states rows + grid_thw, the merger's rows (tests/adapters/test_vit.py)
    vit_towers={"qwen_tower": ("Glm4vVisionModel", "Glm4vMoeVisionModel"),
                "qwen_model": ("Glm4vModel", "Glm4vForConditionalGeneration", "Glm4vMoeModel",
                               "Glm4vMoeForConditionalGeneration")},
)
