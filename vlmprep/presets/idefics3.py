"""Idefics3 and SmolVLM (``idefics3``): long side -> ``longest_edge`` (short side even-rounded),
each side up to a multiple of the tile M, ``rows x cols`` tiles of M x M row-major + a global
M x M image; LANCZOS; mean = std = 0.5. Prompt per image:
``<fake_token_around_image><row_r_col_c><image>*S`` per tile, ``\\n`` per row, then
``\\n<fake_token_around_image><global-img><image>*S<fake_token_around_image>``.

Defaults: HuggingFaceM4/Idefics3-8B-Llama3 (``size.longest_edge`` 1820 = 5 * 364, M = 364,
S = 169 = (364 / 14)^2 / 2^2 after the pixel shuffle). The class defaults differ (1456 = 4 * 364).
SmolVLM-256M/500M and SmolVLM2 checkpoints (``SmolVLMImageProcessor`` or ``Idefics3ImageProcessor``
configs): 2048 / 512, S = 64 (patch 16, shuffle 4); SmolVLM-Instruct (2B): 1536 / 384, S = 81
(patch 14, shuffle 3).
Video: SmolVLM's rule (``vlmprep.plan.idefics3``) with SmolVLM2's ``video_defaults()``.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ..plan.idefics3 import SMOLVLM_FPS, SMOLVLM_MAX_FRAMES
from ..plan.video import VideoOptions
from ._config import HALF, config_interpolation, config_normalize, config_types, need, normalize_steps
from .spec import FamilySpec, FormSpec, VideoSpec

IMAGE_PROCESSOR_TYPES = config_types("Idefics3ImageProcessor") + config_types("SmolVLMImageProcessor")

#: tile size M -> (ViT patch size, pixel-shuffle scale factor) of the public checkpoints; the
#: processor's ``image_seq_len`` is ``(M // patch) ** 2 // scale ** 2``. Other M: Idefics3's 14 / 2.
KNOWN_TILES = {364: (14, 2), 512: (16, 4), 384: (14, 3)}


def _pipeline(longest_edge: int, tile_size: int, split: bool = True, image_seq_len: int | None = None,
              mean=HALF, std=HALF, interpolation: str = "lanczos",
              rescale: float = 1 / 255, do_normalize: bool = True) -> Pipeline:
    patch, scale = KNOWN_TILES.get(tile_size, (14, 2))
    if image_seq_len is None:
        image_seq_len = int(((tile_size // patch) ** 2) / (scale ** 2))
    steps: list[ops.Op] = [
        ops.decode(),
        ops.idefics3_tile(longest_edge=longest_edge, tile_size=tile_size, split=split,
                          image_seq_len=image_seq_len, interpolation=interpolation),
    ]
    steps += normalize_steps(rescale, mean, std, do_normalize)
    steps += [ops.patchify(patch_size=patch, temporal_patch_size=1, merge_size=scale, order="tiles"),
              ops.pack(image_token="<image>", hf_output="idefics3")]
    return Pipeline(steps, name="idefics3")


def idefics3() -> Pipeline:
    return _pipeline(1820, 364)


def matches(cfg: Mapping[str, Any]) -> bool:
    return cfg.get("image_processor_type") in IMAGE_PROCESSOR_TYPES


def _edge(cfg: Mapping[str, Any], key: str, default: int) -> int:
    v = cfg.get(key)
    if v is None:
        return default
    if isinstance(v, Mapping) and isinstance(v.get("longest_edge"), int):
        return int(v["longest_edge"])
    raise ValueError(f"preprocessor_config: {key!r} expected {{'longest_edge': int}} (as Idefics3 / "
                     f"SmolVLM write it), got {v!r}")


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """``Idefics3ImageProcessor`` / ``SmolVLMImageProcessor`` config -> Pipeline.

    ``image_seq_len`` lives in the processor's config, not this file: taken from ``cfg`` when it
    is there, else from the tile size (``KNOWN_TILES``). ``do_resize=false`` and ``do_pad=false``
    (outputs of other shapes) are refused rather than silently ignored.
    """
    for key in ("do_resize", "do_pad"):
        if not need(cfg, key, True):
            raise ValueError(f"preprocessor_config: {key} expected true (every public Idefics3 / "
                             f"SmolVLM checkpoint), got false; vlmprep's idefics3 preset always "
                             f"resizes and pads: remove the key or build a Pipeline by hand")
    mean, std, rescale, do_norm = config_normalize(cfg, HALF, HALF)
    seq = cfg.get("image_seq_len")
    return _pipeline(_edge(cfg, "size", 4 * 364), _edge(cfg, "max_image_size", 364),
                     bool(need(cfg, "do_image_splitting", True)),
                     None if seq is None else int(seq), mean, std,
                     config_interpolation(cfg, "lanczos"), rescale, do_norm)


def processor_forces(pipeline: Pipeline) -> dict[str, Any]:
    """Image-processor kwargs the model's transformers Processor passes whatever the saved config
    says: none for this family."""
    return {}


PRESETS = {"idefics3": idefics3}


# -- video (SmolVLM) ---------------------------------------------------------------------------
#: transformers 5.24's ``SmolVLMVideoProcessor`` class defaults that decide a video's geometry
#: (its ``video_sampling`` dict, when the config has one, sets fps and num_frames = max_frames),
#: except ``do_sample_frames``: the class says False, but ``SmolVLMProcessor.apply_chat_template``
#: (how SmolVLM2 is documented to take videos) always passes fps / num_frames, which samples.
VIDEO_CLASS_DEFAULTS: dict[str, Any] = {"do_sample_frames": True, "fps": None, "num_frames": None}


def video_configs() -> dict[str, dict[str, Any]]:
    """family -> the video config of SmolVLM2 checkpoints (HuggingFaceTB/SmolVLM2-*-Video-Instruct):
    ``video_sampling`` fps 1, max_frames 64; frames resized to ``size.longest_edge`` then squashed
    to ``max_image_size``. ``do_sample_frames`` is True here: ``SmolVLMProcessor.apply_chat_template``
    always passes the fps / num_frames, which turns sampling on (the class default is off).
    Registered as ``idefics3``, the pipeline name of SmolVLM checkpoints (Idefics3 has no video)."""
    return {"idefics3": {
        "video_processor_type": "SmolVLMVideoProcessor", "processor_class": "SmolVLMProcessor",
        "video_sampling": {"fps": SMOLVLM_FPS, "max_frames": SMOLVLM_MAX_FRAMES}, "do_sample_frames": True,
        "size": {"longest_edge": 2048}, "max_image_size": {"longest_edge": 512}, "resample": 1,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    }}


def video_from_config(cfg: Mapping[str, Any], sampling: str = "transformers") -> VideoOptions:
    """VideoOptions from a SmolVLM video config (``video_preprocessor_config.json``, or a 4.x
    ``preprocessor_config.json`` with ``video_sampling``): its fps and max_frames (the processor's
    fps / num_frames), else top-level ``fps`` / ``num_frames``; sampling on unless the config says
    ``do_sample_frames: false``. Sizes come from the pipeline (``size`` / ``max_image_size``)."""
    d = VIDEO_CLASS_DEFAULTS
    vs = cfg.get("video_sampling") or {}
    if not isinstance(vs, Mapping):
        raise ValueError(f"video config: 'video_sampling' expected a dict with fps / max_frames, "
                         f"got {vs!r}")
    fps = vs.get("fps") if vs.get("fps") is not None else need(cfg, "fps", d["fps"])
    num = vs.get("max_frames") if vs.get("max_frames") is not None else need(cfg, "num_frames",
                                                                            d["num_frames"])
    return VideoOptions(fps=float(fps) if fps is not None else None,
                        num_frames=int(num) if num is not None else None,
                        do_sample_frames=bool(need(cfg, "do_sample_frames", d["do_sample_frames"])),
                        sampling=sampling, family="idefics3")


def video_defaults(family: str = "idefics3") -> VideoOptions:
    """SmolVLM2's VideoOptions (``video_configs()``): fps 1, 64 frames at most, sampling on."""
    return video_from_config(video_configs()[family])


# -- the family's declaration ------------------------------------------------------------------
FAMILY = FamilySpec(
    name="idefics3", presets=PRESETS, image_processor_types=IMAGE_PROCESSOR_TYPES,
    from_config=from_config, processor_forces=processor_forces,
    forms=(FormSpec(
        "idefics3",
        prompt_video_token="<video>",  # SmolVLMProcessor
        vllm_no_embeds="vLLM 0.33's Idefics3 / SmolVLM processor sizes the placeholder from the "
                       "image and rejects embedding items (idefics3.py get_replacement_idefics3: "
                       "mm_items.get_items('image', ImageProcessorItems) -> 'Invalid type of data "
                       "items')",
        vllm_no_video_embeds="vLLM 0.33's Idefics3 / SmolVLM model has no video input",
        sglang_not_passed="SGLang 0.5.23 has no Idefics3 model",
    ),),
    # SmolVLM2's video processor; registered as "idefics3", the pipeline name of SmolVLM checkpoints
    videos={"idefics3": VideoSpec(video_defaults, "idefics3", lambda: video_configs()["idefics3"],
                                  checkpoint="smolvlm")},
    video_from_config=video_from_config,
)
