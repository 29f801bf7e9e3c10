"""Presets: one file per model family, each building a Pipeline from checkpoint values.

``vlmprep.presets.names()`` lists them; ``get(name, **overrides)`` builds one. Each family module
declares everything family-specific once, as ``FAMILY = FamilySpec(...)`` (``presets/spec.py``):
its presets, config reader, ``to_hf`` forms with the engines' facts, video defaults and ViT
towers. Every table of families is derived here from ``FAMILIES`` (``forms()``,
``video_families()``, ``vit_towers()``) and read by the layers above (processor, adapters).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..pipeline import Pipeline
from . import (
    _config,
    gemma3,
    glm4v,
    idefics3,
    internvl,
    lfm2_vl,
    llama4,
    llava,
    llava_next,
    minicpm_v,
    mllama,
    ovis2,
    phi4_multimodal,
    pixtral,
    qwen,
    siglip,
    siglip2,
)
from .spec import FamilySpec, FormSpec, VideoSpec

if TYPE_CHECKING:
    from ..plan.video import VideoOptions

__all__ = ["names", "get", "family", "from_config", "load_config", "FAMILIES", "path_shaped",
           "unknown_preset", "FamilySpec", "FormSpec", "VideoSpec", "spec", "forms",
           "video_families", "video_defaults", "video_checkpoint", "video_pipeline", "video_reader",
           "video_options_from_config", "vit_towers",
           "register"]

#: The family modules, in the order their configs are tried by ``from_config``. Each declares
#: ``FAMILY`` (a ``FamilySpec``); its module also keeps ``PRESETS``, ``IMAGE_PROCESSOR_TYPES``,
#: ``matches(cfg)``, ``from_config(cfg)`` and ``processor_forces(pipeline)`` as functions of its
#: own. Every list of presets, forms, video families and towers is derived from this tuple
#: (``register`` adds a family at run time).
FAMILIES: tuple[Any, ...] = (qwen, llava, internvl, siglip, pixtral, siglip2, llava_next,
                             idefics3, mllama, gemma3, ovis2, glm4v, lfm2_vl, minicpm_v,
                             llama4, phi4_multimodal)


def spec(fam: Any) -> FamilySpec:
    """The ``FamilySpec`` a family module (an entry of ``FAMILIES``) declares as ``FAMILY``."""
    s = getattr(fam, "FAMILY", None)
    if not isinstance(s, FamilySpec):
        raise TypeError(f"presets: expected a family module declaring FAMILY = "
                        f"vlmprep.presets.FamilySpec(...), got {getattr(fam, '__name__', fam)!r} "
                        f"with FAMILY {type(s).__name__}; declare it (docs/architecture.md, "
                        f"'A new model family')")
    return s


@dataclass(frozen=True)
class _Tables:
    family_of: dict[str, Any]          # preset name -> family module
    forms: dict[str, FormSpec]         # to_hf form -> its facts, merged over the families
    videos: dict[str, VideoSpec]       # video family -> its defaults and preset
    video_readers: dict[str, FamilySpec]  # pipeline (preset) name -> the spec reading its config
    towers: dict[str, tuple[str, ...]]  # vit kind -> transformers class names


def _merge_form(a: FormSpec, b: FormSpec, who: str) -> FormSpec:
    """Two families' declarations of one form: each fact from whichever declares it; loud when
    both declare it differently."""
    out: dict[str, Any] = {}
    for f in fields(FormSpec):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, dict):
            clash = [k for k in set(x) & set(y) if x[k] != y[k]]
            if clash:
                raise RuntimeError(f"presets: form {a.name!r}: {f.name}[{clash[0]!r}] declared "
                                   f"twice with different values ({who}); declare it once")
            out[f.name] = {**x, **y}
        elif x and y and x != y:
            raise RuntimeError(f"presets: form {a.name!r}: {f.name} declared twice with "
                               f"different values ({who}: {x!r} vs {y!r}); declare it once")
        else:
            out[f.name] = x or y
    return replace(a, **out)


#: The last tables built and the families they were built from (compared by identity: a family
#: may be any object, hashable or not); replaced in one assignment (threads read it freely).
_LAST: tuple[tuple[Any, ...], _Tables | None] = ((), None)


def _tables(families: tuple[Any, ...]) -> _Tables:
    """Every family table, derived from ``families`` (built again only when they change)."""
    global _LAST
    fams, tables = _LAST
    if tables is not None and len(fams) == len(families) and \
            all(a is b for a, b in zip(fams, families)):
        return tables
    tables = _build(families)
    _LAST = (families, tables)
    return tables


def _build(families: tuple[Any, ...]) -> _Tables:
    """Every family table, derived from ``families``; loud on a name two families claim."""
    family_of: dict[str, Any] = {}
    forms_: dict[str, FormSpec] = {}
    form_of: dict[str, str] = {}
    videos: dict[str, VideoSpec] = {}
    readers: dict[str, FamilySpec] = {}
    towers: dict[str, list[str]] = {}
    tower_of: dict[str, str] = {}
    for fam in families:
        s = spec(fam)
        for name in s.presets:
            if name in family_of:
                raise RuntimeError(f"preset {name!r} defined twice ({spec(family_of[name]).name}, "
                                   f"{s.name})")
            family_of[name] = fam
        for form in s.forms:
            if form.name in forms_:
                forms_[form.name] = _merge_form(forms_[form.name], form,
                                                f"{form_of[form.name]}, {s.name}")
                form_of[form.name] += f", {s.name}"
            else:
                forms_[form.name], form_of[form.name] = form, s.name
        for vf, v in s.videos.items():
            if vf in videos:
                raise RuntimeError(f"presets: video family {vf!r} declared twice (by {s.name} and "
                                   f"another family); declare it once")
            videos[vf] = v
            if s.video_from_config is not None:
                readers[v.preset] = s
        for kind, classes in s.vit_towers.items():
            for c in classes:
                if c in tower_of:
                    raise RuntimeError(f"presets: ViT class {c!r} declared twice ({tower_of[c]}, "
                                       f"{s.name}); declare it once")
                tower_of[c] = s.name
                towers.setdefault(kind, []).append(c)
    return _Tables(family_of, forms_, videos, readers, {k: tuple(v) for k, v in towers.items()})


def _now() -> _Tables:
    return _tables(FAMILIES)


_now()  # a name claimed twice fails at import


def register(fam: Any) -> None:
    """Add a family after the built-in ones: ``fam`` is a module (or any object) declaring
    ``FAMILY = FamilySpec(...)``. Its presets, forms, video families and towers are then seen by
    every layer (``get``, ``Processor``, the adapters). Loud, and nothing changes, when one of
    its names is already taken."""
    global FAMILIES
    spec(fam)
    if any(f is fam for f in FAMILIES):
        return
    _tables(FAMILIES + (fam,))  # checks before anything changes
    FAMILIES = FAMILIES + (fam,)


def forms() -> dict[str, FormSpec]:
    """to_hf form name -> its ``FormSpec``, merged over the families that use it (``images``:
    LLaVA-1.5's facts; SigLIP uses the form too and declares none)."""
    return dict(_now().forms)


def video_families() -> dict[str, VideoSpec]:
    """Video family (``"qwen2-vl"``, ``"qwen2.5-vl"``, ...) -> its ``VideoSpec``."""
    return dict(_now().videos)


def _video_spec(family: str) -> VideoSpec:
    videos = _now().videos
    if isinstance(family, str) and family in videos:
        return videos[family]
    raise ValueError(f"video: expected a family with video defaults, one of {sorted(videos)}, got "
                     f"{family!r}; pass vlmprep.plan.video.VideoOptions(family=...) and a Pipeline "
                     f"for another")


def video_defaults(family: str) -> "VideoOptions":
    """The public checkpoint's video options of ``family`` (e.g. ``"qwen3-vl"``), as declared in
    its preset module (``FAMILY.videos``)."""
    return _video_spec(family).defaults()


def video_checkpoint(family: str) -> tuple[str, dict[str, Any]]:
    """``family``'s public checkpoint as a folder would hold it: (the ``checkpoints/`` image
    config shipped beside its video config, that video processor config as transformers reads
    it; ``VideoSpec.config``). ValueError for a family that declares no config."""
    s = _video_spec(family)
    if s.config is None:
        raise ValueError(f"video: expected a family that declares its checkpoint's video config "
                         f"(VideoSpec.config), got {family!r}; declare it in its preset module")
    return s.checkpoint or s.preset, dict(s.config())


def video_pipeline(family: str, **overrides: Any) -> Pipeline:
    """The Pipeline videos of ``family`` are planned with (``"qwen2.5-vl"``: the ``qwen2-vl``
    preset's), changed by ``overrides``."""
    return get(_video_spec(family).preset, **overrides)


def video_reader(pipeline_name: str) -> "Callable[[Mapping[str, Any]], VideoOptions] | None":
    """The family's ``video_from_config`` for a pipeline of that name (a video family's preset),
    else None (a pipeline without video)."""
    s = _now().video_readers.get(pipeline_name)
    return s.video_from_config if s is not None else None


def video_options_from_config(pipeline: Pipeline, cfg: Mapping[str, Any]) -> "VideoOptions | None":
    """A checkpoint's video processor config -> its VideoOptions, read by the family that plans
    ``pipeline``'s videos (``_config.video_options_from_config``); None without video."""
    return _config.video_options_from_config(pipeline, cfg, video_reader(pipeline.name))


def vit_towers() -> dict[str, tuple[str, ...]]:
    """``spec.VIT_KINDS`` key -> the transformers classes ``adapters.vit.encode`` runs that way."""
    return dict(_now().towers)


def names() -> list[str]:
    """Preset names, e.g. ``['qwen2-vl', 'qwen3-vl']``."""
    return sorted(_now().family_of)


def _key(name: str) -> str:
    key = name.lower().replace("_", "-") if isinstance(name, str) else name
    if key not in _now().family_of:
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
    return _now().family_of[_key(name)]


def get(name: str, **overrides: Any) -> Pipeline:
    """The preset's Pipeline with the public checkpoint's values, changed by ``overrides``."""
    key = _key(name)
    return spec(_now().family_of[key]).presets[key]().replace(**overrides)


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read the image processor's config from a checkpoint folder (``preprocessor_config.json``,
    or transformers 5's ``processor_config.json`` with it under ``"image_processor"``) or from
    either json file itself (offline)."""
    p = Path(path)
    if p.is_dir():
        old, new = p / "preprocessor_config.json", p / "processor_config.json"
        p = old if old.is_file() or not new.is_file() else new
    if not p.is_file():
        raise FileNotFoundError(f"expected a checkpoint folder holding preprocessor_config.json "
                                f"(or processor_config.json) or the json file itself, got "
                                f"{str(path)!r} (not found); vlmprep never downloads: download "
                                f"the checkpoint first")
    with open(p, encoding="utf-8") as f:
        cfg = json.load(f)
    if not isinstance(cfg, dict):
        raise ValueError(f"{p}: expected a JSON object, got {type(cfg).__name__}")
    if p.name == "processor_config.json" or ("image_processor_type" not in cfg
                                             and isinstance(cfg.get("image_processor"), dict)):
        nested = cfg.get("image_processor")
        if not isinstance(nested, dict):
            raise ValueError(f"{p}: expected the image processor's config under "
                             f"\"image_processor\" (transformers 5's processor_config.json), got "
                             f"keys {sorted(cfg)[:12]}; pass preprocessor_config.json instead")
        cfg = nested
    return cfg


def from_config(cfg: Mapping[str, Any]) -> Pipeline:
    """The Pipeline for a transformers image-processor config dict."""
    for fam in FAMILIES:
        s = spec(fam)
        if s.matches(cfg) and s.from_config is not None:
            return s.from_config(cfg)
    raise ValueError(f"preprocessor_config: image_processor_type "
                     f"{cfg.get('image_processor_type')!r} is not a family vlmprep knows; "
                     f"expected one of "
                     f"{sorted(t for fam in FAMILIES for t in spec(fam).image_processor_types)}; "
                     f"build a vlmprep.Pipeline by hand for other processors")
