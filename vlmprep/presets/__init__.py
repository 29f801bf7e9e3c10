"""Presets: one file per model family, each building a Pipeline from checkpoint values.

``vlmprep.presets.names()`` lists them; ``get(name, **overrides)`` builds one.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from ..pipeline import Pipeline
from . import gemma3, idefics3, internvl, llava, llava_next, mllama, pixtral, qwen, siglip, siglip2

__all__ = ["names", "get", "family", "from_config", "load_config", "FAMILIES", "path_shaped",
           "unknown_preset"]

#: The family modules, in the order their configs are tried by ``from_config``. Each has
#: ``PRESETS`` (name -> builder), ``IMAGE_PROCESSOR_TYPES``, ``matches(cfg)``, ``from_config(cfg)``
#: and ``processor_forces(pipeline)``. Every list of presets is derived from this tuple.
FAMILIES = (qwen, llava, internvl, siglip, pixtral, siglip2, llava_next, idefics3, mllama, gemma3)


def _registry() -> dict[str, Any]:
    """preset name -> its family module; loud on a name defined twice."""
    out: dict[str, Any] = {}
    for fam in FAMILIES:
        for name in fam.PRESETS:
            if name in out:
                raise RuntimeError(f"preset {name!r} defined twice ({out[name].__name__}, "
                                   f"{fam.__name__})")
            out[name] = fam
    return out


_FAMILY_OF = _registry()


def names() -> list[str]:
    """Preset names, e.g. ``['qwen2-vl', 'qwen3-vl']``."""
    return sorted(_FAMILY_OF)


def _key(name: str) -> str:
    key = name.lower().replace("_", "-") if isinstance(name, str) else name
    if key not in _FAMILY_OF:
        raise KeyError(unknown_preset(name))
    return key


def path_shaped(name: str) -> bool:
    """Whether ``name`` reads as a file system path (a separator, ``~`` or ``.`` first, or a
    ``.json`` end) rather than a preset name; ``Org/Name`` hub repo ids are path-shaped too."""
    return (os.sep in name or "/" in name or name.startswith(("~", "."))
            or name.lower().endswith(".json"))


def unknown_preset(name: object, path_fix: str = "pass the checkpoint folder (or hub repo id "
                   "'Org/Name') to vlmprep.Processor.from_pretrained") -> str:
    """The message for a preset name not registered: the names, the nearest ones ("did you
    mean"), and for a path-shaped name the absolute path that was checked (it does not exist)."""
    import difflib
    msg = f"unknown preset {name!r}; expected one of {names()}"
    if not isinstance(name, str):
        return msg
    key = name.lower().replace("_", "-")
    # compare with and without dashes: "qwen2vl" and "qwen-2-vl" both mean "qwen2-vl"
    bare = {n.replace("-", ""): n for n in names()}
    near = [n for n in names() if len(key) >= 3 and n.startswith(key)]  # "siglip2", "qwen"
    near += [n for n in difflib.get_close_matches(key, names(), n=3, cutoff=0.6) if n not in near]
    near += [bare[b] for b in difflib.get_close_matches(key.replace("-", ""), bare, n=3,
                                                        cutoff=0.8) if bare[b] not in near]
    if near:
        msg += f"; did you mean {' or '.join(repr(n) for n in near[:3])}?"
    full = os.path.abspath(os.path.expanduser(name))
    if os.path.exists(full):  # Processor('<a checkpoint folder>'): a preset name is expected there
        msg += f"; {full} exists as a path: {path_fix}"
    elif path_shaped(name):
        msg += f"; as a path it does not exist (checked {full}): check the path, or {path_fix}"
    else:
        msg += "; or build a vlmprep.Pipeline yourself"
    return msg


def family(name: str) -> Any:
    """The family module (``vlmprep.presets.<family>``) that defines preset ``name``."""
    return _FAMILY_OF[_key(name)]


def get(name: str, **overrides: Any) -> Pipeline:
    """The preset's Pipeline with the public checkpoint's values, changed by ``overrides``."""
    key = _key(name)
    return _FAMILY_OF[key].PRESETS[key]().replace(**overrides)


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
