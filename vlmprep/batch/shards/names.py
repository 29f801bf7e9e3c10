"""Shard file names (``shard_name``: ``"{unit}-{part:05d}.{ext}"``, and back: ``shard_parts``)
and the keys a shard's own metadata holds."""
from __future__ import annotations

import re

from ..config import FORMATS

__all__ = ["FORMATS", "shard_name", "shard_parts", "NAME_RE", "SCHEMA_KEY", "SCHEMA_VERSION",
           "SCHEMA_VERSIONS_READ", "ROWS_KEY"]

SCHEMA_KEY = "vlmprep.shard_schema"
#: "2": rows have ``modality`` and ``video`` (videos, issue 29); "1" shards (images only, without
#: those columns) are still read.
SCHEMA_VERSION = "2"
SCHEMA_VERSIONS_READ = ("1", "2")
ROWS_KEY = "vlmprep.rows"
NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_SHARD_RE = re.compile(r"^([A-Za-z0-9._-]+)-(\d{5,})\.(parquet|safetensors)$")  # shard_name's


def shard_name(unit_name: str, part: int, fmt: str) -> str:
    """``f"{unit_name}-{part:05d}.{ext}"``; e.g. ``shard_name("photos", 3, "parquet")`` ->
    ``"photos-00003.parquet"``."""
    if fmt not in FORMATS:
        raise ValueError(f"shard_name: fmt expected one of {FORMATS}, got {fmt!r}")
    if not isinstance(unit_name, str) or not NAME_RE.match(unit_name):
        raise ValueError(f"shard_name: unit_name expected letters, digits, '.', '_' or '-', got "
                         f"{unit_name!r}; use the name discover() gave the unit")
    if isinstance(part, bool) or not isinstance(part, int) or part < 0:
        raise ValueError(f"shard_name: part expected an int >= 0, got {part!r}")
    return f"{unit_name}-{part:05d}.{fmt}"


def shard_parts(name: str) -> tuple[str, int, str] | None:
    """``(unit, part, fmt)`` when ``name`` is exactly what ``shard_name`` makes, else None."""
    m = _SHARD_RE.match(name)
    if m is None or f"{int(m.group(2)):05d}" != m.group(2):
        return None
    return m.group(1), int(m.group(2)), m.group(3)
