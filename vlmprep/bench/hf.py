"""``vlmprep bench --compare hf``: the transformers image processors of a preset, as users run them.

Each preset's processors are built from the public checkpoint's ``preprocessor_config.json``
(``vlmprep/presets/checkpoints/``: the values the presets are built from), plus the kwargs the model's
``Processor`` forces whatever the saved config says. Two backends per family (transformers 5):
``pil`` (``<Family>ImageProcessorPil``) and ``torchvision`` (``<Family>ImageProcessor``).
Inputs are the same encoded bytes vlmprep gets, opened with PIL and converted to RGB inside the
timed call, which is what a user of these processors does.

transformers is imported only here, and only when ``--compare hf`` asks for it.
"""
from __future__ import annotations

import io
import json
import os
from typing import TYPE_CHECKING, Any, Sequence

from .. import presets

if TYPE_CHECKING:
    from ..pipeline import Pipeline

__all__ = ["BACKENDS", "available_backends", "CHECKPOINTS", "checkpoint_config", "config_for", "class_names",
           "processor_kwargs", "build", "call"]

#: transformers processor backends compared, in report order.
BACKENDS = ("pil", "torchvision")

# Keys transformers' processors do not take as kwargs, or that only the saved file spells.
_DROP = ("image_processor_type", "processor_class", "crop_size", "do_center_crop", "data_format",
         "default_to_square")


#: The public checkpoints' preprocessor_config.json files the presets are built from (one per
#: preset, plus ``smolvlm``, a checkpoint that resolves to ``idefics3``).
CHECKPOINTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "presets",
                           "checkpoints")


def checkpoint_config(preset: str) -> dict:
    """The public checkpoint's ``preprocessor_config.json`` of preset ``preset``."""
    path = os.path.join(CHECKPOINTS, f"{preset}.json")
    if not os.path.exists(path):
        have = sorted(f[:-5] for f in os.listdir(CHECKPOINTS) if f.endswith(".json"))
        raise ValueError(f"--compare hf: no checkpoint config for preset {preset!r}; expected one "
                         f"of {have}, or pass --preset a checkpoint folder")
    with open(path) as f:
        return json.load(f)


def config_for(preset_arg: str, pipeline: "Pipeline") -> dict:
    """The config the transformers processors are built from: the checkpoint file when
    ``--preset`` is a path, else the preset's embedded checkpoint config. Checks that it resolves
    to ``pipeline`` (so both sides run the same configuration)."""
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
    """Constructor kwargs: the config's values plus what the model's Processor forces (each
    family's ``presets.<family>.processor_forces``)."""
    kw = {k: v for k, v in cfg.items() if k not in _DROP and v is not None}
    if cfg.get("do_center_crop"):
        kw.update(do_center_crop=True, crop_size=cfg["crop_size"])
    if pipeline.name in presets.names():  # a hand-built pipeline: the config's values only
        kw.update(presets.family(pipeline.name).processor_forces(pipeline))
    return kw


def _transformers():
    try:
        import transformers  # deferred: optional, heavy
    except ImportError as e:
        raise ValueError(f"--compare hf needs transformers (the processors it compares against): "
                         f"pip install transformers ({e})") from None
    return transformers


def available_backends(cfg: dict) -> tuple[str, ...]:
    """The BACKENDS whose class this transformers has (LFM2-VL, Llama 4, Phi-4: no PIL class);
    a ValueError when none is there."""
    tf = _transformers()
    names = class_names(cfg)
    have = tuple(b for b in BACKENDS if getattr(tf, names[b], None) is not None)
    if not have:
        raise ValueError(f"--compare hf: transformers {tf.__version__} has none of "
                         f"{sorted(names.values())}; expected transformers >= 5")
    return have


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
    from PIL import Image  # deferred: heavy
    images = [Image.open(io.BytesIO(b)).convert("RGB") for b in items]
    kw = {"device": device} if device != "cpu" else {}
    return dict(proc(images, return_tensors="pt", **kw))
