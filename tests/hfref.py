"""transformers image processors built from a checkpoint's preprocessor_config.json (the oracle)."""
from __future__ import annotations

import functools
import json
from pathlib import Path

CONFIGS = Path(__file__).parent / "data" / "configs"


def config(preset: str) -> dict:
    return json.loads((CONFIGS / f"{preset}.json").read_text())


@functools.lru_cache(maxsize=None)
def hf_processor(preset: str, backend: str, raw: bool = False):
    """``backend``: "pil" (the oracle) or "torchvision". ``raw``: no rescale/normalize."""
    from transformers import Qwen2VLImageProcessor, Qwen2VLImageProcessorPil
    cfg = {k: v for k, v in config(preset).items()
           if k not in ("image_processor_type", "processor_class")}
    if raw:
        cfg.update(do_rescale=False, do_normalize=False)
    cls = Qwen2VLImageProcessorPil if backend == "pil" else Qwen2VLImageProcessor
    return cls(**cfg)


def hf_outputs(preset: str, backend: str, images: list, raw: bool = False) -> dict:
    return dict(hf_processor(preset, backend, raw)(images, return_tensors="pt"))
