"""``write_shard``: a shard's rows checked, then written by its format's writer (``parquet``,
``safetensors``) through ``replace_atomic`` (``NAME.tmp``, then rename) while hashed."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..schema import ROW_COLUMNS, WORDS, with_defaults
from .files import Hashing, ids_sha256, replace_atomic
from .names import FORMATS, NAME_RE, ROWS_KEY, SCHEMA_KEY
from .parquet import write_parquet
from .safetensors import write_safetensors

__all__ = ["write_shard"]


def _check_meta(meta: Mapping[str, str], reserved: Sequence[str]) -> dict[str, str]:
    if not isinstance(meta, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in meta.items()):
        raise ValueError(f"write_shard: meta expected a dict of str -> str, got {meta!r:.200}; "
                         f"json.dumps non-string values first")
    bad = sorted(set(meta) & set(reserved))
    if bad:
        raise ValueError(f"write_shard: meta expected keys other than vlmprep's own {bad}, got "
                         f"them; rename those keys")
    return {k: meta[k] for k in sorted(meta)}


def _check_rows(rows: Sequence[Mapping[str, Any]]) -> tuple[str, str, list[int]]:
    """(dtype, layout, row_shape) shared by every row; ValueError otherwise."""
    for i, r in enumerate(rows):
        missing = [c for c in ROW_COLUMNS if c not in r]
        if missing:
            raise ValueError(f"write_shard: row {i} expected the keys {list(ROW_COLUMNS)}, got "
                             f"none for {missing}; make rows with vlmprep.batch.rows."
                             f"process_samples")
    if not rows:
        return "float32", "patches", []
    for key in ("dtype", "layout", "row_shape"):
        vals = sorted({json.dumps(r[key]) for r in rows})
        if len(vals) != 1:
            raise ValueError(f"write_shard: {key} expected one value for every row of a shard, got "
                             f"{vals}; write one job's rows per shard")
    dtype = rows[0]["dtype"]
    if dtype not in WORDS:
        raise ValueError(f"write_shard: dtype expected one of {list(WORDS)}, got {dtype!r}")
    return dtype, rows[0]["layout"], [int(v) for v in rows[0]["row_shape"]]


def write_shard(out_dir: str | os.PathLike, name: str, fmt: str,
                rows: Sequence[Mapping[str, Any]], meta: Mapping[str, str]) -> dict:
    """Write ``rows`` (``process_samples``' output) as the shard ``out_dir/name``.

    Writes ``name + ".tmp"`` and renames it (``os.replace``), so a kill leaves no half shard
    and a failed write leaves nothing. The bytes depend only on ``rows``, ``meta`` and the
    writer's library version. ``meta``: str -> str, stored in the file (e.g. the config hash).

    Returns ``{"name", "count", "ok", "errors", "tokens", "bytes", "sha256", "ids_sha256"}``:
    rows, good rows, error rows, LLM tokens of the good rows, file size, sha256 of the file,
    ``ids_sha256(ids)`` (the manifest keeps it to check a shard's samples); plus ``"videos"``
    (the video rows, good or not) when the shard holds any.
    """
    if fmt not in FORMATS:
        raise ValueError(f"write_shard: fmt expected one of {FORMATS}, got {fmt!r}")
    if not isinstance(name, str) or not NAME_RE.match(name) or not name.endswith("." + fmt):
        raise ValueError(f"write_shard: name expected a file name ending in '.{fmt}' (letters, "
                         f"digits, '.', '_', '-'), got {name!r}; use shard_name()")
    out = Path(out_dir)
    if not out.is_dir():
        raise ValueError(f"write_shard: out_dir expected an existing folder, got {str(out)!r}; "
                         f"create it first")
    rows = [with_defaults(r) for r in rows]  # rows made before videos: images
    dtype, layout, shape = _check_rows(rows)
    h = hashlib.sha256()
    if fmt == "parquet":
        meta_ = _check_meta(meta, [SCHEMA_KEY])
        replace_atomic(out, name, lambda f: write_parquet(Hashing(f, h), rows, meta_))
    else:
        meta_ = _check_meta(meta, [SCHEMA_KEY, ROWS_KEY])
        replace_atomic(out, name, lambda f: write_safetensors(Hashing(f, h), rows, meta_,
                                                                dtype, layout, shape))
    ok = [r for r in rows if r["status"] == "ok"]
    videos = sum(r["modality"] == "video" for r in rows)
    return {"name": name, "count": len(rows), "ok": len(ok), "errors": len(rows) - len(ok),
            "tokens": sum(int(r["num_tokens"]) for r in ok),
            "bytes": (out / name).stat().st_size, "sha256": h.hexdigest(),
            "ids_sha256": ids_sha256([str(r["id"]) for r in rows]),
            **({"videos": videos} if videos else {})}
