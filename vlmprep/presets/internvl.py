"""InternVL 2.5 / 3 / 3.5, HF-converted (``internvl``): ``GotOcr2ImageProcessor`` with
``crop_to_patches`` (``InternVLProcessor`` forces it): 1..12 tiles of 448 + a thumbnail, ImageNet
mean/std, bicubic. Tokens: ``<img>`` + 256 ``<IMG_CONTEXT>`` per tile + ``</img>``
(256 = (448 / 14)^2 / 4 after the 0.5 pixel shuffle); vLLM counts the two brackets too.
"""
from __future__ import annotations

from typing import Any, Mapping

from .. import ops
from ..pipeline import Pipeline
from ._config import config_hw, config_interpolation, config_normalize, config_types, need, normalize_steps

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
