"""InternVL 2.5 / 3 / 3.5, HF-converted (``internvl``): ``GotOcr2ImageProcessor`` with
``crop_to_patches`` (``InternVLProcessor`` forces it): 1..12 tiles of 448 + a thumbnail, ImageNet
mean/std, bicubic. Tokens: ``<img>`` + 256 ``<IMG_CONTEXT>`` per tile + ``</img>``
(256 = (448 / 14)^2 / 4 after the 0.5 pixel shuffle); vLLM counts the two brackets too.
Video: ``video_defaults()``; the rule is ``vlmprep.plan.internvl``'s (frames as one-tile images).
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ..plan.video import VideoOptions
from ._config import config_hw, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec, VideoSpec

#: ImageNet's mean / std (only InternVL's checkpoints use them).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_PROCESSOR_TYPES = config_types("GotOcr2ImageProcessor")


def _pipeline(tile_size: int, min_tiles: int, max_tiles: int, mean, std,
              interpolation: str = "bicubic", rescale: float = 1 / 255, do_normalize: bool = True,
              patch: int = 14) -> Pipeline:
    steps: list[ops.Op] = [
        ops.decode(),
        ops.internvl_tile(tile_size=tile_size, min_tiles=min_tiles, max_tiles=max_tiles,
                 thumbnail=True, interpolation=interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=2, order="tiles"),
              ops.pack(image_token="<IMG_CONTEXT>", prefix="<img>", suffix="</img>",
                       extra_tokens=2, hf_output="got_ocr2")]
    return Pipeline(steps, name="internvl")


def internvl() -> Pipeline:
    return _pipeline(448, 1, 12, IMAGENET_MEAN, IMAGENET_STD)


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """``GotOcr2ImageProcessor`` config -> Pipeline. ``crop_to_patches`` is taken as true whatever
    the file says, as ``InternVLProcessor`` does; ``max_patches=1`` gives one squashed tile."""
    h, w = config_hw(cfg, "size", (384, 384))
    if h != w:
        raise ValueError(f"preprocessor_config: 'size' expected a square tile, got {h}x{w}")
    mean, std, rescale, do_norm = config_normalize(cfg, IMAGENET_MEAN, IMAGENET_STD)
    return _pipeline(h, int(need(cfg, "min_patches", 1)), int(need(cfg, "max_patches", 12)), mean,
                     std, config_interpolation(cfg, "bicubic"), rescale, do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs the model's transformers Processor passes whatever the saved config
    says: ``InternVLProcessor`` forces ``crop_to_patches=True``."""
    return {"crop_to_patches": True}


PRESETS = {"internvl": internvl}


# -- video -------------------------------------------------------------------------------------
#: transformers 5.24's ``InternVLVideoProcessor`` class defaults that decide a video's geometry.
VIDEO_CLASS_DEFAULTS: dict[str, Any] = {"do_sample_frames": False, "fps": None, "num_frames": None,
                                        "initial_shift": True, "size": {"height": 384, "width": 384}}


def video_configs() -> dict[str, dict[str, Any]]:
    """family -> the video config transformers 5.x builds the checkpoint's video processor from:
    OpenGVLab/InternVL3-*-hf's ``video_preprocessor_config.json`` values (448x448 frames, bicubic,
    ImageNet mean/std; no frame sampling unless asked: every frame of the clip)."""
    return {"internvl": {
        "video_processor_type": "InternVLVideoProcessor", "processor_class": "InternVLProcessor",
        "size": {"height": 448, "width": 448}, "resample": 3, "do_resize": True,
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": list(IMAGENET_MEAN), "image_std": list(IMAGENET_STD), "do_convert_rgb": True,
    }}


def video_from_config(cfg: Mapping[str, Any], sampling: str = "transformers") -> VideoOptions:
    """VideoOptions from an InternVL ``video_preprocessor_config.json`` (class defaults fill what
    is absent). Frames are resized to the pipeline's tile (``size`` must be that square: 448 in
    the checkpoints); ``initial_shift`` other than true (sample each segment's middle) is refused."""
    d = VIDEO_CLASS_DEFAULTS
    size = cfg.get("size") or d["size"]
    if not (isinstance(size, Mapping) and size.get("height") and size.get("height") == size.get("width")):
        raise ValueError(f"video_preprocessor_config: 'size' expected a square {{'height': s, "
                         f"'width': s}} (the tile), got {size!r}")
    if need(cfg, "initial_shift", True) is not True:
        raise ValueError(f"video_preprocessor_config: initial_shift expected true (the class "
                         f"default, every checkpoint), got {cfg.get('initial_shift')!r}; remove it")
    fps, num = need(cfg, "fps", d["fps"]), need(cfg, "num_frames", d["num_frames"])
    return VideoOptions(fps=float(fps) if fps is not None else None,
                        num_frames=int(num) if num is not None else None,
                        do_sample_frames=bool(need(cfg, "do_sample_frames", d["do_sample_frames"])),
                        sampling=sampling, family="internvl")


def video_defaults(family: str = "internvl") -> VideoOptions:
    """The public checkpoint's VideoOptions (``video_configs()``)."""
    return video_from_config(video_configs()[family])


# -- the family's declaration ------------------------------------------------------------------
FAMILY = FamilySpec(
    name="internvl", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec(
        "got_ocr2",
        prompt_video_token="<video>",  # InternVLProcessor (tokenizer.video_token)
        vllm_embeds="stacked",  # interns1.py InternS1ImageEmbeddingInputs ("ni", "tifs", "hs")
        vllm_no_video_embeds="vLLM 0.33's InternVL-hf model (interns1.py) sizes each video "
                             "placeholder from video_num_patches, which only its own processor "
                             "returns (embedding items have none)",
        sglang_precomputed=("InternVLChatModel",),  # any non-4-D feature
    ),),
    videos={"internvl": VideoSpec(video_defaults, "internvl", lambda: video_configs()["internvl"])},
    video_from_config=video_from_config,
    vit_towers={"tile_tower": ("InternVLVisionModel",),
                "tile_model": ("InternVLModel", "InternVLForConditionalGeneration")},
)
