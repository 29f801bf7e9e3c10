"""Presets: one file per model family, each building a Pipeline from checkpoint values.

``vlmprep.presets.names()`` lists them; ``get(name, **overrides)`` builds one.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from ..pipeline import Pipeline
from . import internvl, llava, qwen, siglip

__all__ = ["names", "get", "from_config", "load_config", "FAMILIES"]

#: Family modules in the order their configs are tried by ``from_config``.
FAMILIES = (qwen, llava, internvl, siglip)
from . import pixtral, siglip2  # noqa: E402

FAMILIES += (pixtral, siglip2)
from . import llava_next  # noqa: E402

FAMILIES += (llava_next,)
from . import idefics3  # noqa: E402

FAMILIES += (idefics3,)
from . import gemma3, mllama  # noqa: E402

FAMILIES += (mllama, gemma3)

_BUILDERS: dict[str, Callable[[], Pipeline]] = {}
for _fam in FAMILIES:
    for _name, _fn in _fam.PRESETS.items():
        if _name in _BUILDERS:  # loud on conflicts
            raise RuntimeError(f"preset {_name!r} defined twice")
        _BUILDERS[_name] = _fn


def names() -> list[str]:
    """Preset names, e.g. ``['qwen2-vl', 'qwen3-vl']``."""
    return sorted(_BUILDERS)


def get(name: str, **overrides: Any) -> Pipeline:
    """The preset's Pipeline with the public checkpoint's values, changed by ``overrides``."""
    key = name.lower().replace("_", "-") if isinstance(name, str) else name
    if key not in _BUILDERS:
        raise KeyError(f"unknown preset {name!r}; expected one of {names()}, or build a "
                       f"vlmprep.Pipeline yourself")
    return _BUILDERS[key]().replace(**overrides)


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read ``preprocessor_config.json`` from a checkpoint folder or the file itself (offline)."""
    p = Path(path)
    if p.is_dir():
        p = p / "preprocessor_config.json"
    if not p.is_file():
        raise FileNotFoundError(f"expected a checkpoint folder holding preprocessor_config.json or "
                                f"the json file itself, got {str(path)!r} (not found); vlmprep "
                                f"never downloads: download the checkpoint first")
    with open(p, encoding="utf-8") as f:
        cfg = json.load(f)
    if not isinstance(cfg, dict):
        raise ValueError(f"{p}: expected a JSON object, got {type(cfg).__name__}")
    return cfg


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """The Pipeline for a transformers image-processor config dict."""
    for fam in FAMILIES:
        if fam.matches(cfg):
            return fam.from_config(cfg)
    raise ValueError(f"preprocessor_config: image_processor_type "
                     f"{cfg.get('image_processor_type')!r} is not a family vlmprep knows; "
                     f"expected one of "
                     f"{sorted(t for fam in FAMILIES for t in fam.IMAGE_PROCESSOR_TYPES)}; "
                     f"build a vlmprep.Pipeline by hand for other processors")
