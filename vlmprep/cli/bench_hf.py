"""``vlmprep bench --compare hf``: the transformers image processors of a preset, as users run them.

Each preset's processors are built from the public checkpoint's ``preprocessor_config.json``
(embedded below: the values the presets are built from), plus the kwargs the model's
``Processor`` forces whatever the saved config says. Two backends per family (transformers 5):
``pil`` (``<Family>ImageProcessorPil``) and ``torchvision`` (``<Family>ImageProcessor``).
Inputs are the same encoded bytes vlmprep gets, opened with PIL and converted to RGB inside the
timed call, which is what a user of these processors does.

transformers is imported only here, and only when ``--compare hf`` asks for it.
"""
from __future__ import annotations

import functools
import io
import json
import os
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from ..spec.pipeline import Pipeline

__all__ = ["BACKENDS", "checkpoint_config", "config_for", "class_names", "processor_kwargs",
           "build", "call"]

#: transformers processor backends compared, in report order.
BACKENDS = ("pil", "torchvision")

# Each preset's public checkpoint preprocessor_config.json (tests/data/configs holds the same).
_CONFIGS_JSON = """{
 "gemma3": {"do_convert_rgb": null, "do_normalize": true, "do_pan_and_scan": null, "do_rescale":
    true, "do_resize": true, "image_mean": [0.5, 0.5, 0.5], "image_processor_type":
    "Gemma3ImageProcessor", "image_seq_length": 256, "image_std": [0.5, 0.5, 0.5],
    "pan_and_scan_max_num_crops": null, "pan_and_scan_min_crop_size": null,
    "pan_and_scan_min_ratio_to_activate": null, "processor_class": "Gemma3Processor",
    "resample": 2, "rescale_factor": 0.00392156862745098, "size": {"height": 896, "width": 896}},
 "idefics3": {"do_convert_rgb": true, "do_image_splitting": true, "do_normalize": true,
    "do_pad": true, "do_rescale": true, "do_resize": true, "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "Idefics3ImageProcessor", "image_std": [0.5, 0.5, 0.5],
    "max_image_size": {"longest_edge": 364}, "processor_class": "Idefics3Processor", "resample":
    1, "rescale_factor": 0.00392156862745098, "size": {"longest_edge": 1820}},
 "internvl": {"crop_size": null, "crop_to_patches": false, "data_format": "channels_first",
    "default_to_square": true, "do_center_crop": null, "do_convert_rgb": true, "do_normalize":
    true, "do_rescale": true, "do_resize": true, "image_mean": [0.485, 0.456, 0.406],
    "image_processor_type": "GotOcr2ImageProcessorFast", "image_std": [0.229, 0.224, 0.225],
    "max_patches": 12, "min_patches": 1, "processor_class": "InternVLProcessor", "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"height": 448, "width": 448}},
 "llava-1.5": {"crop_size": {"height": 336, "width": 336}, "do_center_crop": true,
    "do_convert_rgb": true, "do_normalize": true, "do_rescale": true, "do_resize": true,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type":
    "CLIPImageProcessor", "image_std": [0.26862954, 0.26130258, 0.27577711], "processor_class":
    "LlavaProcessor", "resample": 3, "rescale_factor": 0.00392156862745098, "size":
    {"shortest_edge": 336}},
 "llava-next": {"crop_size": {"height": 336, "width": 336}, "do_center_crop": true,
    "do_convert_rgb": true, "do_normalize": true, "do_pad": true, "do_rescale": true,
    "do_resize": true, "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336],
    [336, 1008]], "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type":
    "LlavaNextImageProcessor", "image_std": [0.26862954, 0.26130258, 0.27577711],
    "processor_class": "LlavaNextProcessor", "resample": 3, "rescale_factor":
    0.00392156862745098, "size": {"shortest_edge": 336}},
 "llava-onevision": {"do_convert_rgb": true, "do_normalize": true, "do_pad": true, "do_rescale":
    true, "do_resize": true, "image_grid_pinpoints": [[384, 384], [384, 768], [384, 1152], [384,
    1536], [384, 1920], [384, 2304], [768, 384], [768, 768], [768, 1152], [768, 1536], [768,
    1920], [768, 2304], [1152, 384], [1152, 768], [1152, 1152], [1152, 1536], [1152, 1920],
    [1152, 2304], [1536, 384], [1536, 768], [1536, 1152], [1536, 1536], [1536, 1920], [1536,
    2304], [1920, 384], [1920, 768], [1920, 1152], [1920, 1536], [1920, 1920], [1920, 2304],
    [2304, 384], [2304, 768], [2304, 1152], [2304, 1536], [2304, 1920], [2304, 2304]],
    "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "LlavaOnevisionImageProcessor",
    "image_std": [0.5, 0.5, 0.5], "processor_class": "LlavaOnevisionProcessor", "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"height": 384, "width": 384}},
 "mllama": {"do_convert_rgb": true, "do_normalize": true, "do_pad": true, "do_rescale": true,
    "do_resize": true, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_processor_type": "MllamaImageProcessor", "image_std": [0.26862954, 0.26130258,
    0.27577711], "max_image_tiles": 4, "processor_class": "MllamaProcessor", "resample": 2,
    "rescale_factor": 0.00392156862745098, "size": {"height": 560, "width": 560}},
 "pixtral": {"do_convert_rgb": true, "do_normalize": true, "do_rescale": true, "do_resize":
    true, "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type":
    "PixtralImageProcessor", "image_std": [0.26862954, 0.26130258, 0.27577711], "patch_size":
    {"height": 16, "width": 16}, "processor_class": "PixtralProcessor", "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"longest_edge": 1024}},
 "qwen2-vl": {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
    "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.48145466, 0.4578275,
    0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711], "image_processor_type":
    "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor"},
 "qwen3-vl": {"size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16,
    "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5,
    0.5, 0.5], "processor_class": "Qwen3VLProcessor", "image_processor_type":
    "Qwen2VLImageProcessorFast"},
 "siglip": {"do_normalize": true, "do_rescale": true, "do_resize": true, "image_mean": [0.5,
    0.5, 0.5], "image_processor_type": "SiglipImageProcessor", "image_std": [0.5, 0.5, 0.5],
    "processor_class": "SiglipProcessor", "resample": 3, "rescale_factor": 0.00392156862745098,
    "size": {"height": 384, "width": 384}},
 "siglip2-naflex": {"do_convert_rgb": null, "do_normalize": true, "do_rescale": true,
    "do_resize": true, "image_mean": [0.5, 0.5, 0.5], "image_processor_type":
    "Siglip2ImageProcessor", "image_std": [0.5, 0.5, 0.5], "max_num_patches": 256, "patch_size":
    16, "processor_class": "Siglip2Processor", "resample": 2, "rescale_factor":
    0.00392156862745098}
}
"""

# Keys transformers' processors do not take as kwargs, or that only the saved file spells.
_DROP = ("image_processor_type", "processor_class", "crop_size", "do_center_crop", "data_format",
         "default_to_square")


@functools.lru_cache(maxsize=1)
def _configs() -> dict[str, dict]:
    return json.loads(_CONFIGS_JSON)


def checkpoint_config(preset: str) -> dict:
    """The public checkpoint's ``preprocessor_config.json`` of preset ``preset`` (a copy)."""
    cfgs = _configs()
    if preset not in cfgs:
        raise ValueError(f"--compare hf: no checkpoint config for preset {preset!r}; expected one "
                         f"of {sorted(cfgs)}, or pass --preset a checkpoint folder")
    return json.loads(json.dumps(cfgs[preset]))


def config_for(preset_arg: str, pipeline: "Pipeline") -> dict:
    """The config the transformers processors are built from: the checkpoint file when
    ``--preset`` is a path, else the preset's embedded checkpoint config. Checks that it resolves
    to ``pipeline`` (so both sides run the same configuration)."""
    from ..spec import presets
    if os.path.exists(preset_arg):
        cfg = presets.load_config(preset_arg)
    else:
        cfg = checkpoint_config(pipeline.name)
    if presets.from_config(cfg) != pipeline:
        raise ValueError(f"--compare hf: the checkpoint config of {pipeline.name!r} does not "
                         f"resolve to the pipeline being measured; compare only unchanged presets "
                         f"or checkpoint folders")
    return cfg


def class_names(cfg: dict) -> dict[str, str]:
    """``{"pil": "<Family>ImageProcessorPil", "torchvision": "<Family>ImageProcessor"}`` from the
    config's ``image_processor_type`` (4.x ``...Fast`` and 5.x spellings)."""
    t = str(cfg.get("image_processor_type") or "")
    for suffix in ("Fast", "Pil"):
        if t.endswith(suffix):
            t = t[:-len(suffix)]
    if not t.endswith("ImageProcessor"):
        raise ValueError(f"--compare hf: expected image_processor_type '<Family>ImageProcessor', "
                         f"got {cfg.get('image_processor_type')!r}")
    return {"pil": t + "Pil", "torchvision": t}


def processor_kwargs(cfg: dict, pipeline: "Pipeline") -> dict[str, Any]:
    """Constructor kwargs: the config's values plus what the model's Processor forces."""
    kw = {k: v for k, v in cfg.items() if k not in _DROP and v is not None}
    if cfg.get("do_center_crop"):
        kw.update(do_center_crop=True, crop_size=cfg["crop_size"])
    name = pipeline.name
    if name == "internvl":  # InternVLProcessor forces crop_to_patches=True
        kw["crop_to_patches"] = True
    elif name == "llava-next":  # LlavaNextProcessor's images_kwargs force do_pad=True
        kw["do_pad"] = True
    elif name == "pixtral":  # PixtralProcessor passes patch_size = patch * spatial_merge_size
        p = pipeline.patchify
        kw["patch_size"] = p.patch_size * p.merge_size
    elif name == "gemma3":  # Gemma3Processor's images_kwargs fill the null pan-and-scan fields
        kw.update(do_pan_and_scan=False, pan_and_scan_min_crop_size=256,
                  pan_and_scan_max_num_crops=4, pan_and_scan_min_ratio_to_activate=1.2)
    return kw


def _transformers():
    try:
        import transformers
    except ImportError as e:
        raise ValueError(f"--compare hf needs transformers (the processors it compares against): "
                         f"pip install transformers ({e})") from None
    return transformers


def build(cfg: dict, pipeline: "Pipeline", backend: str):
    """The transformers image processor for ``backend`` ("pil" or "torchvision")."""
    tf = _transformers()
    name = class_names(cfg)[backend]
    cls = getattr(tf, name, None)
    if cls is None:
        raise ValueError(f"--compare hf: transformers {tf.__version__} has no {name}; "
                         f"expected transformers >= 5 (its PIL and torchvision backends)")
    return cls(**processor_kwargs(cfg, pipeline))


def call(proc, items: Sequence[bytes], device: str = "cpu") -> dict:
    """Run ``proc`` on encoded images as a user does: PIL open + convert("RGB"), then the processor."""
    from PIL import Image
    images = [Image.open(io.BytesIO(b)).convert("RGB") for b in items]
    kw = {"device": device} if device != "cpu" else {}
    return dict(proc(images, return_tensors="pt", **kw))
