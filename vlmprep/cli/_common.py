"""Helpers the commands share (pipeline from flags, tables, JSON); main.py only dispatches."""
from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, Sequence

from .. import presets
from ..processor import _REPO_ID

if TYPE_CHECKING:
    from ..pipeline import Pipeline


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


class UsageError(ValueError):
    """A mistake in the command line (a flag's value): ``main`` prints it and exits 2."""


def parse_value(v: str) -> Any:
    """A ``--set`` value: int, float, true/false, none, or a comma-separated list of those
    (``0.5,0.5,0.5`` or ``[0.5, 0.5, 0.5]`` -> a tuple); anything else stays a string."""
    text = v.strip()
    if text.startswith("[") and text.endswith("]") or text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
        return tuple(parse_value(p) for p in text.split(",") if p.strip())
    if "," in text:
        return tuple(parse_value(p) for p in text.split(","))
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _path_fix(name: str) -> str:
    """How to get the checkpoint ``name`` names: a hub repo id ("Org/Name", which is also a
    relative path) is downloaded with the ``hf`` CLI that huggingface_hub installs."""
    if _REPO_ID.match(name) and not name.lower().endswith(".json"):
        local = name.rsplit("/", 1)[1]
        return (f"if it is a hub repo id, download its config first: hf download {name} "
                f"preprocessor_config.json --local-dir {local}, then pass --preset {local} "
                f"(vlmprep run also takes --checkpoint {name})")
    return "give a preset name"


def load_pipeline(preset: str, sets: Sequence[str] = ()) -> Pipeline:
    """A preset name, or a checkpoint folder / preprocessor_config.json, with ``FIELD=VALUE``
    overrides (``--set``). A wrong field name or value raises UsageError naming the fields."""
    import difflib

    overrides: dict[str, Any] = {}
    for s in sets:
        k, sep, v = s.partition("=")
        if not sep or not k.strip():
            raise UsageError(f"--set: expected FIELD=VALUE (e.g. max_pixels=1003520 or "
                             f"mean=0.5,0.5,0.5), got {s!r}")
        overrides[k.strip()] = parse_value(v)
    if os.path.exists(preset):
        base = presets.from_config(presets.load_config(preset))
    elif preset.lower().replace("_", "-") in presets.names():
        base = presets.get(preset)
    else:  # a typo, or a checkpoint path that is not there: say which was checked
        raise UsageError(presets.unknown_preset(preset, _path_fix(preset)))
    known = sorted({f for op in base.ops for f in op.field_names()})
    for k in overrides:
        fld = k.split("__", 1)[-1]
        if fld not in known:
            near = difflib.get_close_matches(fld, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise UsageError(f"--set: preset {base.name!r} has no field {k!r}{hint} "
                             f"(valid fields: {', '.join(known)})")
    try:
        return base.replace(**overrides)
    except (TypeError, ValueError) as e:
        raise UsageError(f"--set: {e}") from None
