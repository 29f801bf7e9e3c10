"""Helpers the commands share (pipeline from flags, tables, JSON); main.py only dispatches."""
from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from ..pipeline import Pipeline


def print_table(rows: list[dict], columns: Sequence[str]) -> None:
    """A plain aligned table on stdout."""
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


def load_pipeline(preset: str, sets: Sequence[str] = ()) -> Pipeline:
    """A preset name, or a checkpoint folder / preprocessor_config.json, with ``FIELD=VALUE`` overrides."""
    from .. import presets
    overrides: dict[str, Any] = {}
    for s in sets:
        k, sep, v = s.partition("=")
        if not sep:
            raise ValueError(f"--set: expected FIELD=VALUE, got {s!r}")
        try:
            overrides[k] = int(v)
        except ValueError:
            try:
                overrides[k] = float(v)
            except ValueError:
                overrides[k] = v
    if os.path.exists(preset):
        return presets.from_config(presets.load_config(preset)).replace(**overrides)
    return presets.get(preset, **overrides)
