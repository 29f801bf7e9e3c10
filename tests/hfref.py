"""transformers image processors built from a checkpoint's preprocessor_config.json (the oracle)."""
from __future__ import annotations

import functools
import json
from pathlib import Path

CONFIGS = Path(__file__).parent / "data" / "configs"

# preset -> (PIL-backend class, torchvision-backend class, kwargs the model's processor forces)
_CLASSES = {
    "qwen2-vl": ("Qwen2VLImageProcessorPil", "Qwen2VLImageProcessor", {}),
    "qwen3-vl": ("Qwen2VLImageProcessorPil", "Qwen2VLImageProcessor", {}),
    "siglip": ("SiglipImageProcessorPil", "SiglipImageProcessor", {}),
    "llava-1.5": ("CLIPImageProcessorPil", "CLIPImageProcessor", {}),
    # InternVLProcessor forces crop_to_patches=True whatever the saved config says.
    "internvl": ("GotOcr2ImageProcessorPil", "GotOcr2ImageProcessor", {"crop_to_patches": True}),
    # LlavaNextProcessor's images_kwargs force do_pad=True (batch padding of the crops).
    "llava-next": ("LlavaNextImageProcessorPil", "LlavaNextImageProcessor", {"do_pad": True}),
    "llava-onevision": ("LlavaOnevisionImageProcessorPil", "LlavaOnevisionImageProcessor", {}),
    # PixtralProcessor passes patch_size = patch * spatial_merge_size (16 * 1 for Pixtral-12B).
    "pixtral": ("PixtralImageProcessorPil", "PixtralImageProcessor", {"patch_size": 16}),
    "siglip2-naflex": ("Siglip2ImageProcessorPil", "Siglip2ImageProcessor", {}),
    "idefics3": ("Idefics3ImageProcessorPil", "Idefics3ImageProcessor", {}),
    # Not a preset name: a SmolVLM2 checkpoint config, read by from_pretrained into `idefics3`.
    "smolvlm": ("SmolVLMImageProcessorPil", "SmolVLMImageProcessor", {}),
    "mllama": ("MllamaImageProcessorPil", "MllamaImageProcessor", {}),
    # Gemma3Processor's images_kwargs fill the config's null pan-and-scan fields (off by default).
    "gemma3": ("Gemma3ImageProcessorPil", "Gemma3ImageProcessor",
               {"do_pan_and_scan": False, "pan_and_scan_min_crop_size": 256,
                "pan_and_scan_max_num_crops": 4, "pan_and_scan_min_ratio_to_activate": 1.2}),
}
_DROP = ("image_processor_type", "processor_class", "crop_size", "do_center_crop", "data_format",
         "default_to_square")


def config(preset: str) -> dict:
    return json.loads((CONFIGS / f"{preset}.json").read_text())


@functools.lru_cache(maxsize=None)
def hf_processor(preset: str, backend: str, raw: bool = False):
    """``backend``: "pil" (the oracle) or "torchvision". ``raw``: no rescale/normalize."""
    import transformers
    pil_name, tv_name, forced = _CLASSES[preset]
    cfg = config(preset)
    keep = {k: v for k, v in cfg.items() if k not in _DROP and v is not None}
    if cfg.get("do_center_crop"):
        keep.update(do_center_crop=True, crop_size=cfg["crop_size"])
    keep.update(forced)
    if raw:
        keep.update(do_rescale=False, do_normalize=False)
    return getattr(transformers, pil_name if backend == "pil" else tv_name)(**keep)


def hf_outputs(preset: str, backend: str, images: list, raw: bool = False) -> dict:
    return dict(hf_processor(preset, backend, raw)(images, return_tensors="pt"))
