"""LLaVA-NeXT (``llava-next``) and LLaVA-OneVision (``llava-onevision``): "anyres" tiling.

Both: best pinpoint of ``image_grid_pinpoints`` (max effective resolution, then min waste),
aspect-fit bicubic resize, centred black padding, ``tile_size`` tiles row-major, and the whole
image squashed to one tile FIRST (``ops.anyres_tile``; geometry in ``vlmprep.plan.anyres``).

``llava-next``: llava-hf/llava-v1.6-*-hf: 336 tiles, 5 pinpoints up to 1008, CLIP mean/std;
processor: patch 14, strategy "default", num_additional_image_tokens 1 (class default size 224).
``llava-onevision``: llava-hf/llava-onevision-qwen2-*-ov-hf: 384 tiles, 36 pinpoints up to 2304,
mean = std = 0.5 (the class default is CLIP's), SigLIP /14 (27 x 27 = 729 per tile), strategy
"full", ``anyres_max_9`` pooling of the unpadded features. Images of a multi-image sample are
padded to a square with the mean colour and give one tile: ``multi_image=True``.
Video (OneVision only): ``video_defaults()``; the rule is ``vlmprep.plan.anyres``'s.
"""
from __future__ import annotations

from typing import Any, Mapping, cast

from .. import ops
from ..pipeline import Pipeline
from ..plan.video import VideoOptions
from ._config import HALF, config_hw, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec, VideoSpec

#: OneVision's pinpoints: every (384 i, 384 j), i, j in 1..6, row-major (the checkpoint's order).
ONEVISION_PINPOINTS = tuple((384 * i, 384 * j) for i in range(1, 7) for j in range(1, 7))

NEXT_TYPES = config_types("LlavaNextImageProcessor")
ONEVISION_TYPES = config_types("LlavaOnevisionImageProcessor")
IMAGE_PROCESSOR_TYPES = NEXT_TYPES + ONEVISION_TYPES


def _pipeline(name: str, tile_size: int, pinpoints, mean, std, *, patch: int = 14,
              max_num_patches: int = 0, num_additional_image_tokens: int = 0,
              strategy: str = "default", interpolation: str = "bicubic",
              rescale: float = 1 / 255, do_normalize: bool = True,
              square_mean=None, hf_output: str = "llava_next") -> Pipeline:
    # OneVision's pad-to-square colour is int(255 * m) of the processor's image_mean.
    fill = cast("tuple[int, int, int]",
                tuple(int(m * 255) for m in (square_mean if square_mean is not None else mean)))
    steps: list[ops.Op] = [
        ops.decode(),
        ops.anyres_tile(tile_size=tile_size, pinpoints=tuple(map(tuple, pinpoints)),
                        max_num_patches=max_num_patches,
                        num_additional_image_tokens=num_additional_image_tokens,
                        vision_feature_select_strategy=strategy, square_fill=fill,
                        interpolation=interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=1, order="tiles"),
              ops.pack(image_token="<image>", hf_output=hf_output)]
    return Pipeline(steps, name=name)


def llava_next() -> Pipeline:
    return _pipeline("llava-next", 336, ops.LLAVA_NEXT_PINPOINTS, ops.CLIP_MEAN, ops.CLIP_STD,
                     num_additional_image_tokens=1, strategy="default")


def llava_onevision() -> Pipeline:
    return _pipeline("llava-onevision", 384, ONEVISION_PINPOINTS, HALF, HALF,
                     max_num_patches=9, num_additional_image_tokens=0, strategy="full",
                     hf_output="llava_onevision")


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def _tile_size(cfg: Mapping[str, Any], default: int) -> int:
    """The tile side as the image processors take it (``crop_size.height``, else ``size``).
    Every tile is then resized to ``size`` and centre-cropped to ``crop_size``: both must be that
    same square (no-ops, as in the checkpoints) for one tile size."""
    size = cfg.get("size") or {}
    if isinstance(size, int) and not isinstance(size, bool):
        size = {"shortest_edge": size}
    if isinstance(size, Mapping) and "shortest_edge" in size:
        s_hw = (int(size["shortest_edge"]),) * 2
    else:
        s_hw = config_hw(cfg, "size", (default, default))
    c_hw = config_hw(cfg, "crop_size", s_hw) if cfg.get("crop_size") else s_hw
    if not s_hw[0] == s_hw[1] == c_hw[0] == c_hw[1]:
        raise ValueError(f"preprocessor_config: expected square tiles with size == crop_size, got "
                         f"size {cfg.get('size')!r}, crop_size {cfg.get('crop_size')!r}; vlmprep "
                         f"supports the checkpoints' equal values only")
    return s_hw[0]


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """``LlavaNextImageProcessor`` / ``LlavaOnevisionImageProcessor`` config -> Pipeline.

    Processor fields (``patch_size``, ``vision_feature_select_strategy``,
    ``num_additional_image_tokens``, ``vision_aspect_ratio``) live in the checkpoint's
    ``processor_config.json``; read here when present, else the checkpoint's values.
    """
    onevision = cfg.get("image_processor_type") in ONEVISION_TYPES
    if onevision:
        mean, std, rescale, do_norm = config_normalize(cfg, ops.CLIP_MEAN, ops.CLIP_STD)
        raw_mean = tuple(need(cfg, "image_mean", ops.CLIP_MEAN))
        aspect = str(need(cfg, "vision_aspect_ratio", "anyres_max_9"))
        max_np = int(aspect[len("anyres_max_"):]) if aspect.startswith("anyres_max_") else 0
        return _pipeline(
            "llava-onevision", _tile_size(cfg, 384),
            need(cfg, "image_grid_pinpoints", ONEVISION_PINPOINTS), mean, std,
            patch=int(need(cfg, "patch_size", 14)), max_num_patches=max_np,
            num_additional_image_tokens=int(need(cfg, "num_additional_image_tokens", 0)),
            strategy=str(need(cfg, "vision_feature_select_strategy", "full")),
            interpolation=config_interpolation(cfg, "bicubic"), rescale=rescale,
            do_normalize=do_norm, square_mean=raw_mean, hf_output="llava_onevision")
    mean, std, rescale, do_norm = config_normalize(cfg, ops.CLIP_MEAN, ops.CLIP_STD)
    return _pipeline(
        "llava-next", _tile_size(cfg, 224),
        need(cfg, "image_grid_pinpoints", ops.LLAVA_NEXT_PINPOINTS), mean, std,
        patch=int(need(cfg, "patch_size", 14)),
        num_additional_image_tokens=int(need(cfg, "num_additional_image_tokens", 1)),
        strategy=str(need(cfg, "vision_feature_select_strategy", "default")),
        interpolation=config_interpolation(cfg, "bicubic"), rescale=rescale, do_normalize=do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs the model's transformers Processor passes whatever the saved config
    says: ``LlavaNextProcessor``'s images_kwargs force ``do_pad=True`` (OneVision: none)."""
    return {"do_pad": True} if pipeline.name == "llava-next" else {}


PRESETS = {"llava-next": llava_next, "llava-onevision": llava_onevision}


# -- video (llava-onevision) -------------------------------------------------------------------
#: transformers 5.24's ``LlavaOnevisionVideoProcessor`` class defaults that decide a video's
#: geometry (what a ``video_preprocessor_config.json`` leaves out).
VIDEO_CLASS_DEFAULTS: dict[str, Any] = {"do_sample_frames": False, "fps": None, "num_frames": None,
                                        "size": {"height": 384, "width": 384}}


def video_configs() -> dict[str, dict[str, Any]]:
    """family -> the video config transformers 5.x builds the checkpoint's video processor from:
    llava-hf/llava-onevision-qwen2-*-ov-hf's ``video_preprocessor_config.json`` values (384x384
    frames, bicubic, mean = std = 0.5, no frame sampling unless asked: every frame of the clip)."""
    return {"llava-onevision": {
        "video_processor_type": "LlavaOnevisionVideoProcessor",
        "processor_class": "LlavaOnevisionProcessor",
        "size": {"height": 384, "width": 384}, "resample": 3, "do_resize": True,
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "do_convert_rgb": True,
    }}


def video_from_config(cfg: Mapping[str, Any], sampling: str = "transformers") -> VideoOptions:
    """VideoOptions from a OneVision ``video_preprocessor_config.json`` (class defaults fill what
    is absent). Frames are resized to the pipeline's tile (``size`` must be that square: 384 in
    every checkpoint)."""
    d = VIDEO_CLASS_DEFAULTS
    size = cfg.get("size") or d["size"]
    if not (isinstance(size, Mapping) and size.get("height") and size.get("height") == size.get("width")):
        raise ValueError(f"video_preprocessor_config: 'size' expected a square {{'height': s, "
                         f"'width': s}} (the tile), got {size!r}")
    fps, num = need(cfg, "fps", d["fps"]), need(cfg, "num_frames", d["num_frames"])
    return VideoOptions(fps=float(fps) if fps is not None else None,
                        num_frames=int(num) if num is not None else None,
                        do_sample_frames=bool(need(cfg, "do_sample_frames", d["do_sample_frames"])),
                        sampling=sampling, family="llava-onevision")


def video_defaults(family: str = "llava-onevision") -> VideoOptions:
    """The public checkpoint's VideoOptions (``video_configs()``)."""
    return video_from_config(video_configs()[family])


# -- the family's declaration ------------------------------------------------------------------
_LLAVA_SGLANG = "llava.py get_image_feature runs the vision tower on the feature"

FAMILY = FamilySpec(
    name="llava_next", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(
        FormSpec("llava_next",
                 vllm_embeds="stacked",  # llava_next.py LlavaNextImageEmbeddingInputs ("bn", "ifs", "hs")
                 sglang_not_passed=_LLAVA_SGLANG),
        FormSpec("llava_onevision",
                 prompt_video_token="<video>",  # LlavaOnevisionProcessor
                 vllm_embeds="stacked",  # llava_onevision.py ("bn", "ifs", "hs")
                 vllm_no_video_embeds="vLLM 0.33's LlavaOnevisionForConditionalGeneration reads "
                                      "only pixel_values_videos (llava_onevision.py "
                                      "_parse_and_validate_video_input never reads video_embeds)",
                 sglang_not_passed=_LLAVA_SGLANG),
    ),
    videos={"llava-onevision": VideoSpec(video_defaults, "llava-onevision",
                                         lambda: video_configs()["llava-onevision"])},
    video_from_config=video_from_config,
    vit_towers={"anyres_model": ("LlavaNextModel", "LlavaNextForConditionalGeneration",
                                 "LlavaOnevisionModel", "LlavaOnevisionForConditionalGeneration")},
)
