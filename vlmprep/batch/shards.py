"""Shards: the files of a ``vlmprep run`` output folder, written atomically, read back bit-exact.

A folder holds ``manifest.json`` (``write_manifest``: the job's config, counts and per-shard
``sha256``; ``read_manifest`` checks it with ``check_manifest`` before anything uses it) and
shards named ``shard_name(unit, part, fmt)`` = ``"{unit}-{part:05d}.{ext}"``.
A shard holds the rows of ``vlmprep.batch.rows`` (one per sample, error rows included):

- **parquet** (needs pyarrow): one Arrow row per sample with the columns ``ROW_COLUMNS``:
  strings (``placeholder`` large_string), ``grid_thw`` / ``seqlens`` / ``row_shape`` /
  ``orig_hw`` ``list<int32>``, ``num_patches`` int64, ``num_tokens`` int32, ``pixel_values``
  large_binary (raw little-endian bytes; bfloat16 as 2-byte words, ``dtype`` names it). Row
  groups of at most ~64 MiB of pixels, so one sample is read without reading the whole file.
  The file's key-value metadata is the job's ``meta`` plus ``vlmprep.shard_schema``.
- **safetensors** (read with the safetensors package): ``pixel_values`` (every good row packed,
  ``(total_rows, *row_shape)``, the job's dtype), ``cu_seqlens`` int32, ``grid_thw`` (num_seqs,
  3) int64, ``image_index`` (num_seqs,) int64 (row of the shard each sequence belongs to),
  ``num_tokens`` / ``num_patches`` (rows,) int64, ``orig_hw`` (rows, 2) int64, ``placeholders``
  uint8 (UTF-8, concatenated) with ``placeholder_offsets`` (rows + 1,) int64 (placeholders
  can be ~200 kB each: the safetensors header is capped at 100 MB). The str->str metadata is
  ``meta`` plus ``vlmprep.rows``: JSON of ``ids``, ``sources``, ``status``, ``errors``,
  ``dtype``, ``layout``, ``row_shape``. vlmprep writes this file itself (the format is a
  length, a JSON header and the data): the package's writer orders the metadata by a hash
  map, so its bytes change from one process to the next (safetensors 0.8).

Both writers give the same bytes for the same rows and meta (nothing time- or process-
dependent is stored) and write ``name + ".tmp"`` then ``os.replace``: a killed writer leaves no
half shard, and a failed write leaves no file at all.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Iterator, Mapping, Sequence

from .rows import ROW_COLUMNS, WORDS, batch_from_rows

if TYPE_CHECKING:
    from ..pack import PackedBatch
    from ..pipeline import Pipeline

__all__ = ["FORMATS", "shard_name", "write_shard", "read_manifest", "check_manifest",
           "write_manifest", "job_units", "remove_job_shards",
           "read_shards", "read_shard_rows", "manifest_pipeline", "ShardSource", "MANIFEST",
           "ids_sha256", "file_sha256", "arrow_schema", "rows_table"]

FORMATS = ("parquet", "safetensors")
MANIFEST = "manifest.json"
SCHEMA_KEY = "vlmprep.shard_schema"
SCHEMA_VERSION = "1"
_ROWS_KEY = "vlmprep.rows"
_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_SHARD_RE = re.compile(r"^([A-Za-z0-9._-]+)-(\d{5,})\.(parquet|safetensors)$")  # shard_name's
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
MAX_MANIFEST_BYTES = 256 << 20  # ~600,000 shards' entries; a larger file is not read
_MAX_COUNT = 2**53 - 1  # JSON-exact ints: rows, tokens, samples
_MAX_BYTES = 1 << 40  # one shard file
_FIX = ("the manifest is damaged or was edited: rerun the job with vlmprep run ... --overwrite "
        "(it removes only files named as its shards), or delete the folder")
_ROW_GROUP_BYTES = 64 << 20
_ST_DTYPES = {"float32": "F32", "bfloat16": "BF16", "uint8": "U8"}
_ST_ITEMSIZE = {"F32": 4, "BF16": 2, "U8": 1, "I32": 4, "I64": 8}
_INSTALL = "pip install vlmprep[parquet]"


def _need(module: str, what: str) -> Any:
    """Import an optional dependency, or ValueError naming the extra."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        pkg = module.split(".")[0]
        raise ValueError(f"{what}: expected the {pkg} package, got none installed; "
                         f"{_INSTALL} (or pip install {pkg})") from None


# -- names, hashes, manifest ------------------------------------------------------------------
def shard_name(unit_name: str, part: int, fmt: str) -> str:
    """``f"{unit_name}-{part:05d}.{ext}"``; e.g. ``shard_name("photos", 3, "parquet")`` ->
    ``"photos-00003.parquet"``."""
    if fmt not in FORMATS:
        raise ValueError(f"shard_name: fmt expected one of {FORMATS}, got {fmt!r}")
    if not isinstance(unit_name, str) or not _NAME_RE.match(unit_name):
        raise ValueError(f"shard_name: unit_name expected letters, digits, '.', '_' or '-', got "
                         f"{unit_name!r}; use the name discover() gave the unit")
    if isinstance(part, bool) or not isinstance(part, int) or part < 0:
        raise ValueError(f"shard_name: part expected an int >= 0, got {part!r}")
    return f"{unit_name}-{part:05d}.{fmt}"


def ids_sha256(ids: Sequence[str]) -> str:
    """sha256 hex of the ids as a compact JSON list (unambiguous for any id text)."""
    text = json.dumps(list(ids), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 hex of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _replace_atomic(out_dir: Path, name: str, write) -> None:
    """``write(file)`` into ``name + ".tmp"``, then rename over ``name``; on any failure the
    temporary file is removed and the error re-raised (no partial file is ever visible)."""
    tmp = out_dir / (name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, out_dir / name)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _load_manifest(path: Path) -> Any:
    """The parsed JSON of ``path`` (None when there is no file); bounded: a regular file of at
    most ``MAX_MANIFEST_BYTES`` (a FIFO or /dev/zero named manifest.json is never read)."""
    import stat
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ValueError(f"read_manifest: expected a readable {path}, got {type(e).__name__}: "
                         f"{e}; fix its permissions, or rerun the job into a new folder") from None
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MANIFEST_BYTES:
        got = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"{st.st_size:,} bytes"
        raise ValueError(f"read_manifest: expected {path} to be a regular file of at most "
                         f"{MAX_MANIFEST_BYTES:,} bytes, got {got}; {_FIX}")
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_MANIFEST_BYTES + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"read_manifest: expected a readable UTF-8 {path}, got "
                         f"{type(e).__name__}: {e}; fix its permissions, or rerun the job into "
                         f"a new folder") from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"read_manifest: expected JSON in {path}, got a parse error ({e}); the "
                         f"file is damaged: rerun the job into a new folder (shards are not "
                         f"trusted without their manifest)") from None


def read_manifest(out_dir: str | os.PathLike) -> dict | None:
    """``out_dir/manifest.json`` as a dict, checked by ``check_manifest`` before anything acts
    on it; None when there is none. A manifest that is not a JSON object, or fails a check, is a
    ValueError naming the file and the field (expected / got / fix)."""
    path = Path(out_dir) / MANIFEST
    d = _load_manifest(path)
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ValueError(f"read_manifest: expected a JSON object in {path}, got "
                         f"{type(d).__name__}; rerun the job into a new folder")
    return check_manifest(d, path)


def _shard_parts(name: str) -> tuple[str, int, str] | None:
    """``(unit, part, fmt)`` when ``name`` is exactly what ``shard_name`` makes, else None."""
    m = _SHARD_RE.match(name)
    if m is None or f"{int(m.group(2)):05d}" != m.group(2):
        return None
    return m.group(1), int(m.group(2)), m.group(3)


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def check_manifest(manifest: dict, path: str | os.PathLike) -> dict:
    """Check a manifest read from disk before anything acts on it; returns it unchanged.

    Every field is checked when present (older and hand-made manifests may lack some): types;
    ``format`` one of ``FORMATS``; every count, size and part number an int within bounds tied to
    the rest (``ok + errors == count <= shard_size``, ``damaged <= count``, ``count <= bytes``
    (a row is at least a byte), ``bytes <= 2**40``, a unit's ``parts == ceil(count / shard_size) <= count``, a shard's
    part below its unit's ``parts``); unit names as ``shard_name`` takes them; shard names exactly
    as ``shard_name`` makes them (no folder part, no ``..``: nothing outside the folder is named),
    in the manifest's format; sha256 fields 64 hex digits. Unknown keys are left alone (nothing
    reads them). Refusal: ValueError naming the file and the field (expected / got / fix).
    """
    def bad(field: str, expected: str, got: Any) -> ValueError:
        return ValueError(f"read_manifest: {path} expected {expected} at {field}, got "
                          f"{_show(got)}; {_FIX}")

    def num(field: str, v: Any, hi: int = _MAX_COUNT, lo: int = 0) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise bad(field, f"an int in [{lo}, {hi}]", v)
        return v

    for key in ("vlmprep_version", "config_hash", "output"):
        if key in manifest and not isinstance(manifest[key], str):
            raise bad(repr(key), "a string", manifest[key])
    for key in ("config", "pipeline", "summary"):
        if manifest.get(key) is not None and not isinstance(manifest[key], Mapping):
            raise bad(repr(key), "an object", manifest[key])
    if "complete" in manifest and not isinstance(manifest["complete"], bool):
        raise bad("'complete'", "true or false", manifest["complete"])
    fmt = manifest.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise bad("'format'", f"one of {list(FORMATS)}", fmt)
    inputs = manifest.get("inputs")
    if inputs is not None and not (isinstance(inputs, list)
                                   and all(isinstance(i, str) for i in inputs)):
        raise bad("'inputs'", "a list of paths", inputs)
    cfg = manifest.get("config")
    size = cfg.get("shard_size") if isinstance(cfg, Mapping) else None
    if size is not None:
        size = num("'config'.'shard_size'", size, lo=1)
    units = manifest.get("units")
    parts: dict[str, int] = {}
    if units is not None:
        if not isinstance(units, Mapping):
            raise bad("'units'", "an object of {unit name: {count, parts}}", units)
        for unit, info in units.items():
            if not isinstance(unit, str) or not _NAME_RE.match(unit):
                raise bad("'units'", "unit names of letters, digits, '.', '_', '-'", unit)
            if not isinstance(info, Mapping):
                raise bad(f"'units'.{unit!r}", "an object {count, parts}", info)
            count = info.get("count")
            if count is not None:
                num(f"'units'.{unit!r}.'count'", count)
            if "parts" in info:
                field = f"'units'.{unit!r}.'parts'"
                p = num(field, info["parts"])
                if count is not None and size is not None and p != -(-count // size):
                    raise bad(field, f"ceil(count {count} / shard_size {size}) = "
                              f"{-(-count // size)}", p)
                if count is not None and p > count:  # every part holds a sample
                    raise bad(field, f"at most count = {count}", p)
                parts[unit] = p
    shards = manifest.get("shards")
    if shards is None:
        return manifest
    if not isinstance(shards, Mapping):
        raise ValueError(f"read_manifest: {path} expected a 'shards' object of {{name: info}}, "
                         f"got {type(shards).__name__}; {_FIX}")
    for name, info in shards.items():
        where = _shard_parts(name) if isinstance(name, str) else None
        if where is None or (fmt is not None and where[2] != fmt):
            exts = [fmt] if fmt is not None else list(FORMATS)
            raise bad("'shards'", f"shard file names as the writer makes them ('{{unit}}-"
                      f"{{part:05d}}.{{ext}}', ext in {exts}; no folder part)", name)
        unit, part, _ = where
        if unit in parts and part >= parts[unit]:
            raise bad(f"'shards'.{name!r}", f"a part below the unit's {parts[unit]} parts", part)
        if not isinstance(info, Mapping):
            raise bad(f"'shards'.{name!r}", "an object (the shard's info)", info)
        f = f"'shards'.{name!r}"
        got = {k: num(f"{f}.{k!r}", info[k], _MAX_BYTES if k == "bytes" else _MAX_COUNT)
               for k in ("count", "ok", "errors", "tokens", "bytes", "damaged")
               if info.get(k) is not None}
        if "count" in got:
            if size is not None and got["count"] > size:
                raise bad(f"{f}.'count'", f"at most shard_size = {size} rows", got["count"])
            if "bytes" in got and got["count"] > got["bytes"]:
                raise bad(f"{f}.'count'", f"at most its 'bytes' ({got['bytes']}): a row takes "
                          f"at least a byte", got["count"])
            if got.get("damaged", 0) > got["count"]:
                raise bad(f"{f}.'damaged'", f"at most count = {got['count']}", got["damaged"])
            if "ok" in got and "errors" in got and got["ok"] + got["errors"] != got["count"]:
                raise bad(f"{f}.'ok' + 'errors'", f"count = {got['count']}",
                          got["ok"] + got["errors"])
        for k, want in (("unit", unit), ("part", part), ("name", name)):
            if k in info and info[k] != want:
                raise bad(f"{f}.{k!r}", f"{want!r} (from the shard's name)", info[k])
        for k in ("sha256", "ids_sha256"):
            v = info.get(k)
            if v is not None and not (isinstance(v, str) and _HEX64.match(v)):
                raise bad(f"{f}.{k!r}", "64 lowercase hex digits", v)
        reasons = info.get("reasons")
        if reasons is not None:
            if not isinstance(reasons, Mapping) or not all(isinstance(k, str)
                                                           for k in reasons):
                raise bad(f"{f}.'reasons'", "an object of {reason: count}", reasons)
            total = sum(num(f"{f}.'reasons'.{k!r}", v) for k, v in reasons.items())
            if total > got.get("errors", _MAX_COUNT):
                raise bad(f"{f}.'reasons'", f"counts summing to at most errors = "
                          f"{got.get('errors')}", total)
    return manifest


def job_units(out_dir: str | os.PathLike) -> set[str]:
    """The unit names an old job in ``out_dir`` names (its manifest's ``units`` keys and the
    units of the shard names under ``shards``), each checked as ``shard_name`` takes it; empty
    when the manifest is missing or unreadable. For ``--overwrite``, which must not trust the
    rest of a damaged manifest."""
    try:
        d = _load_manifest(Path(out_dir) / MANIFEST)
    except ValueError:
        return set()
    if not isinstance(d, dict):
        return set()
    found: set[str] = set()
    units, listed = d.get("units"), d.get("shards")
    if isinstance(units, Mapping):
        found |= {u for u in units if isinstance(u, str) and _NAME_RE.match(u)}
    if isinstance(listed, Mapping):
        found |= {w[0] for w in (_shard_parts(n) for n in listed if isinstance(n, str)) if w}
    return found


def remove_job_shards(out_dir: str | os.PathLike, units: set[str]) -> list[str]:
    """Remove the files of ``out_dir`` named as the writer names a shard of one of ``units``
    (``shard_name(unit, part, fmt)``, any part and format); returns their names. The work is
    one listing of the folder: no count from a manifest drives it, and nothing outside the
    folder or named otherwise is touched."""
    removed = []
    for entry in os.listdir(out_dir):
        where = _shard_parts(entry)
        if where is None or where[0] not in units:
            continue
        try:
            os.remove(os.path.join(out_dir, entry))
            removed.append(entry)
        except FileNotFoundError:
            pass
    return removed


def write_manifest(out_dir: str | os.PathLike, manifest: Mapping[str, Any]) -> None:
    """Write ``out_dir/manifest.json`` atomically (temporary file, fsync, rename): a reader sees
    the old manifest or the new one, never a mix."""
    text = json.dumps(manifest, indent=1, ensure_ascii=False, allow_nan=False) + "\n"

    def write(f: BinaryIO) -> None:
        f.write(text.encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())
    _replace_atomic(Path(out_dir), MANIFEST, write)


# -- writing ----------------------------------------------------------------------------------
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
    ``ids_sha256(ids)`` (the manifest keeps it to check a shard's samples).
    """
    if fmt not in FORMATS:
        raise ValueError(f"write_shard: fmt expected one of {FORMATS}, got {fmt!r}")
    if not isinstance(name, str) or not _NAME_RE.match(name) or not name.endswith("." + fmt):
        raise ValueError(f"write_shard: name expected a file name ending in '.{fmt}' (letters, "
                         f"digits, '.', '_', '-'), got {name!r}; use shard_name()")
    out = Path(out_dir)
    if not out.is_dir():
        raise ValueError(f"write_shard: out_dir expected an existing folder, got {str(out)!r}; "
                         f"create it first")
    dtype, layout, shape = _check_rows(rows)
    h = hashlib.sha256()
    if fmt == "parquet":
        meta_ = _check_meta(meta, [SCHEMA_KEY])
        _replace_atomic(out, name, lambda f: _write_parquet(_Hashing(f, h), rows, meta_))
    else:
        meta_ = _check_meta(meta, [SCHEMA_KEY, _ROWS_KEY])
        _replace_atomic(out, name, lambda f: _write_safetensors(_Hashing(f, h), rows, meta_,
                                                                dtype, layout, shape))
    ok = [r for r in rows if r["status"] == "ok"]
    return {"name": name, "count": len(rows), "ok": len(ok), "errors": len(rows) - len(ok),
            "tokens": sum(int(r["num_tokens"]) for r in ok),
            "bytes": (out / name).stat().st_size, "sha256": h.hexdigest(),
            "ids_sha256": ids_sha256([str(r["id"]) for r in rows])}


class _Hashing:
    """A write-only binary file that hashes what goes through it (no second read)."""

    def __init__(self, f: BinaryIO, h: Any):
        self._f, self._h, self._pos = f, h, 0
        self.closed = False

    def write(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        self._h.update(mv)
        self._f.write(mv)
        self._pos += mv.nbytes
        return mv.nbytes

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:  # the real file is closed by its owner
        self.closed = True

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False


def arrow_schema() -> Any:
    """The parquet shard's Arrow schema (``pyarrow.Schema``, columns ``ROW_COLUMNS``, no
    metadata). Needs pyarrow."""
    pa = _need("pyarrow", "arrow_schema")
    ints = pa.list_(pa.int32())
    return pa.schema([
        ("id", pa.string()), ("source", pa.string()), ("status", pa.string()),
        ("error", pa.string()), ("dtype", pa.string()), ("layout", pa.string()),
        ("grid_thw", ints), ("seqlens", ints), ("num_patches", pa.int64()),
        ("num_tokens", pa.int32()), ("placeholder", pa.large_string()), ("row_shape", ints),
        ("orig_hw", ints), ("pixel_values", pa.large_binary())])


def rows_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    """``rows`` as a ``pyarrow.Table`` with the shard's column types (``arrow_schema()``), no
    metadata: what the parquet writer stores, and what the Ray integration returns from
    ``map_batches`` (explicit types: an all-None column would otherwise become Arrow null)."""
    pa = _need("pyarrow", "rows_table")
    schema = arrow_schema()
    return pa.Table.from_pydict({c: [r[c] for r in rows] for c in ROW_COLUMNS}, schema=schema)


def _groups(rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """Row ranges of ~``_ROW_GROUP_BYTES`` of pixels each (at least one row per group)."""
    out, start, size = [], 0, 0
    for i, r in enumerate(rows):
        n = len(r["pixel_values"])
        if i > start and size + n > _ROW_GROUP_BYTES:
            out.append((start, i))
            start, size = i, 0
        size += n
    out.append((start, len(rows)))
    return out


def _write_parquet(f: _Hashing, rows: Sequence[Mapping[str, Any]], meta: dict[str, str]) -> None:
    pa = _need("pyarrow", "write_shard (parquet)")
    pq = _need("pyarrow.parquet", "write_shard (parquet)")
    schema = arrow_schema().with_metadata({**meta, SCHEMA_KEY: SCHEMA_VERSION})
    lists = ("grid_thw", "seqlens", "row_shape", "orig_hw")  # codecs go by leaf column path
    codecs = {f"{c}.list.element" if c in lists else c: "zstd" for c in ROW_COLUMNS}
    codecs["pixel_values"] = "none"  # float noise does not compress; the time is the writer's
    sink = pa.PythonFile(f, mode="w")
    with pq.ParquetWriter(sink, schema, compression=codecs,
                          use_dictionary=["status", "dtype", "layout", "source"],
                          write_statistics=["id", "status", "num_patches", "num_tokens"]) as w:
        for a, b in _groups(rows):
            w.write_table(rows_table(rows[a:b]).replace_schema_metadata(schema.metadata),
                          row_group_size=max(1, b - a))


def _st_header_entry(dtype: str, shape: Sequence[int], start: int) -> tuple[dict, int]:
    end = start + math.prod(shape) * _ST_ITEMSIZE[dtype]
    return {"dtype": dtype, "shape": [int(s) for s in shape], "data_offsets": [start, end]}, end


def _write_safetensors(f: _Hashing, rows: Sequence[Mapping[str, Any]], meta: dict[str, str],
                       dtype: str, layout: str, shape: list[int]) -> None:
    import numpy as np
    ok_rows = [r for r in rows if r["status"] == "ok"]
    seqlens = [int(n) for r in ok_rows for n in r["seqlens"]]
    cu = np.zeros(len(seqlens) + 1, dtype="<i4")
    np.cumsum(seqlens, out=cu[1:])
    grid = np.array([int(v) for r in ok_rows for v in r["grid_thw"]], dtype="<i8").reshape(-1, 3)
    index = np.array([i for i, r in enumerate(rows) if r["status"] == "ok"
                      for _ in r["seqlens"]], dtype="<i8")
    ph = [str(r["placeholder"]).encode("utf-8") for r in rows]
    offsets = np.zeros(len(rows) + 1, dtype="<i8")
    np.cumsum([len(p) for p in ph], out=offsets[1:])
    small = {
        "cu_seqlens": ("I32", cu), "grid_thw": ("I64", grid), "image_index": ("I64", index),
        "num_tokens": ("I64", np.array([int(r["num_tokens"]) for r in rows], dtype="<i8")),
        "num_patches": ("I64", np.array([int(r["num_patches"]) for r in rows], dtype="<i8")),
        "orig_hw": ("I64", np.array([[int(v) for v in r["orig_hw"]] for r in rows],
                                    dtype="<i8").reshape(-1, 2)),
        "placeholder_offsets": ("I64", offsets),
    }
    pv_bytes = sum(len(r["pixel_values"]) for r in ok_rows)
    itemsize = _ST_ITEMSIZE[_ST_DTYPES[dtype]]
    row_elems = math.prod(shape) if shape else 1
    pv_shape = [pv_bytes // (itemsize * row_elems), *shape]
    # Data order as safetensors writes it: wider elements first (aligned), then by name.
    entries: list[tuple[str, str, Sequence[int], Any]] = [
        (k, t, a.shape, a) for k, (t, a) in small.items()]
    entries.append(("pixel_values", _ST_DTYPES[dtype], pv_shape, None))
    entries.append(("placeholders", "U8", [int(offsets[-1])], None))
    entries.sort(key=lambda e: (-_ST_ITEMSIZE[e[1]], e[0]))
    info = {"ids": [str(r["id"]) for r in rows], "sources": [str(r["source"]) for r in rows],
            "status": [str(r["status"]) for r in rows],
            "errors": [None if r["error"] is None else str(r["error"]) for r in rows],
            "dtype": dtype, "layout": layout, "row_shape": shape}
    header: dict[str, Any] = {"__metadata__": {
        **meta, SCHEMA_KEY: SCHEMA_VERSION,
        _ROWS_KEY: json.dumps(info, sort_keys=True, separators=(",", ":"))}}
    pos = 0
    for k, t, shp, _ in entries:
        header[k], pos = _st_header_entry(t, shp, pos)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors pads it
    f.write(len(text).to_bytes(8, "little"))
    f.write(text)
    for k, _, _, a in entries:
        if k == "pixel_values":
            for r in ok_rows:
                f.write(r["pixel_values"])
        elif k == "placeholders":
            for p in ph:
                f.write(p)
        else:
            f.write(np.ascontiguousarray(a).tobytes())


# -- reading ----------------------------------------------------------------------------------
def manifest_pipeline(manifest: Mapping[str, Any]) -> "Pipeline":
    """The Pipeline that made a job's shards: ``manifest["pipeline"]`` (``Pipeline.to_dict()``)
    when the job stored it, else rebuilt from ``manifest["config"]`` (``JobConfig.to_json()``:
    the preset with its overrides, or the checkpoint's config file, which must be readable
    here). No Processor is built (the reading machine needs no GPU)."""
    from .. import presets
    from ..pipeline import Pipeline
    if isinstance(manifest.get("pipeline"), Mapping):
        try:
            return Pipeline.from_dict(manifest["pipeline"])
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(f"read_shards: manifest pipeline expected Pipeline.to_dict() "
                             f"output, got one it refuses ({e}); was it written by another "
                             f"vlmprep version?") from None
    cfg = manifest.get("config")
    if not isinstance(cfg, Mapping):
        raise ValueError(f"read_shards: manifest expected a 'pipeline' or a 'config' object, got "
                         f"neither (keys {sorted(manifest)[:12]}); rerun the job with "
                         f"vlmprep run")
    from .config import JobConfig
    job = JobConfig.from_json(cfg)
    overrides = dict(job.overrides)
    if job.preset is not None:
        return presets.get(job.preset, **overrides)
    assert job.checkpoint is not None
    try:
        cfg_file = presets.load_config(job.checkpoint)
    except (OSError, ValueError) as e:
        raise ValueError(f"read_shards: the job's checkpoint config expected readable here, got "
                         f"{job.checkpoint!r}: {e}; copy the checkpoint's "
                         f"preprocessor_config.json to that path") from None
    return presets.from_config(cfg_file).replace(**overrides)


def _shard_rows_parquet(path: Path, groups: Sequence[int] | None = None
                        ) -> Iterator[list[dict]]:
    """The rows of a parquet shard, one list per row group (only ``groups`` when given)."""
    pf = _parquet_file(path)
    names = pf.schema_arrow.names
    missing = [c for c in ROW_COLUMNS if c not in names]
    if missing:
        raise ValueError(f"read_shards: {path} expected the columns {list(ROW_COLUMNS)}, got "
                         f"none for {missing}; is it a vlmprep shard?")
    for g in range(pf.num_row_groups) if groups is None else groups:
        yield _read_group(path, pf, g, list(ROW_COLUMNS)).to_pylist()


def _read_group(path: Path, pf: Any, g: int, columns: list[str]) -> Any:
    """Row group ``g`` of a parquet shard; a damaged one is a ValueError (expected / got / fix)."""
    pa = _need("pyarrow", "read_shards (parquet)")
    try:
        return pf.read_row_group(g, columns=columns)
    except (pa.ArrowException, OSError) as e:
        raise _damaged(path, e) from None


def _damaged(path: Path, e: Exception) -> ValueError:
    return ValueError(f"read_shards: {str(path)!r} expected a vlmprep shard, got a file its "
                      f"reader refuses ({type(e).__name__}: {str(e)[:200]}); the file is damaged "
                      f"or foreign: delete it and rerun with vlmprep run ... --resume")


def _parquet_file(path: Path) -> Any:
    """``pyarrow.parquet.ParquetFile`` of a shard, its schema version checked."""
    pa = _need("pyarrow", "read_shards (parquet)")
    pq = _need("pyarrow.parquet", "read_shards (parquet)")
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise _damaged(path, e) from None
    _check_schema(path, pf.schema_arrow.metadata or {})
    return pf


def _check_schema(path: Path, metadata: Mapping[Any, Any]) -> None:
    got = metadata.get(SCHEMA_KEY) or metadata.get(SCHEMA_KEY.encode())
    if isinstance(got, bytes):
        got = got.decode()
    if got != SCHEMA_VERSION:
        raise ValueError(f"read_shards: {path} expected {SCHEMA_KEY}={SCHEMA_VERSION!r}, got "
                         f"{got!r}; it was written by another vlmprep version: rerun the job")


class _SafetensorsShard:
    """One safetensors shard: the per-row index from its header and small tensors, and rows
    read on demand (a slice of ``pixel_values``; safetensors maps the file)."""

    def __init__(self, path: Path):
        st = _need("safetensors", "read_shards (safetensors)")
        self.path = path
        try:
            with st.safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                _check_schema(path, meta)
                try:
                    self.info = json.loads(meta[_ROWS_KEY])
                except (KeyError, json.JSONDecodeError) as e:
                    raise ValueError(f"read_shards: {path} expected JSON under {_ROWS_KEY!r}, "
                                     f"got {type(e).__name__}; is it a vlmprep shard?") from None
                t = {k: f.get_tensor(k) for k in ("grid_thw", "image_index", "num_tokens",
                                                  "num_patches", "orig_hw",
                                                  "placeholder_offsets", "placeholders")}
        except ValueError:
            raise
        except Exception as e:  # noqa: BLE001 (SafetensorError, OSError: one message)
            raise _damaged(path, e) from None
        n = len(self.info["ids"])
        self.grid = t["grid_thw"].tolist()
        self.num_tokens = t["num_tokens"].tolist()
        self.num_patches = t["num_patches"].tolist()
        self.orig_hw = t["orig_hw"].tolist()
        off = t["placeholder_offsets"].tolist()
        raw = t["placeholders"].numpy().tobytes()
        try:
            self.placeholders = [raw[off[i]:off[i + 1]].decode("utf-8") for i in range(n)]
        except (UnicodeDecodeError, IndexError) as e:
            raise _damaged(path, e) from None
        index = t["image_index"].tolist()
        self.seqs: list[list[int]] = [[] for _ in range(n)]  # sequence numbers of each row
        for s, i in enumerate(index):
            self.seqs[i].append(s)
        tiles = self.info["layout"] == "tiles"
        self.first_row: list[int] = []  # first pixel row of each shard row
        at = 0
        for i in range(n):
            self.first_row.append(at)
            at += len(self.seqs[i]) if tiles else int(self.num_patches[i])

    def __len__(self) -> int:
        return len(self.info["ids"])

    def rows(self, positions: Sequence[int]) -> list[dict]:
        import torch
        st = _need("safetensors", "read_shards (safetensors)")
        info = self.info
        tiles = info["layout"] == "tiles"
        out = []
        with st.safe_open(str(self.path), framework="pt") as f:
            pv = f.get_slice("pixel_values")
            for i in positions:
                grid = [int(v) for s in self.seqs[i] for v in self.grid[s]]
                lens = [g[0] * g[1] * g[2] for g in (self.grid[s] for s in self.seqs[i])]
                data = b""
                if info["status"][i] == "ok":
                    n = len(lens) if tiles else int(self.num_patches[i])
                    a = self.first_row[i]
                    x = pv[a:a + n]
                    if x.dtype == torch.bfloat16:
                        x = x.view(torch.int16)
                    data = x.contiguous().numpy().astype(WORDS[info["dtype"]][0],
                                                         copy=False).tobytes()
                out.append({
                    "id": info["ids"][i], "source": info["sources"][i],
                    "status": info["status"][i], "error": info["errors"][i],
                    "dtype": info["dtype"], "layout": info["layout"], "grid_thw": grid,
                    "seqlens": lens, "num_patches": int(self.num_patches[i]),
                    "num_tokens": int(self.num_tokens[i]), "placeholder": self.placeholders[i],
                    "row_shape": list(info["row_shape"]), "orig_hw": list(self.orig_hw[i]),
                    "pixel_values": data})
        return out


def read_shard_rows(path: str | os.PathLike) -> list[dict]:
    """Every row of one shard file (parquet or safetensors, by its extension), in order."""
    p = Path(path)
    if p.suffix == ".parquet":
        return [r for g in _shard_rows_parquet(p) for r in g]
    if p.suffix == ".safetensors":
        sh = _SafetensorsShard(p)
        return sh.rows(range(len(sh)))
    raise ValueError(f"read_shard_rows: expected a .parquet or .safetensors file, got {str(p)!r}")


def _open_folder(out_dir: str | os.PathLike, partial: bool) -> tuple[Path, dict, list[str]]:
    """Validate an output folder -> (folder, manifest, shard names in job order)."""
    out = Path(out_dir)
    if not out.is_dir():
        raise ValueError(f"read_shards: expected an output folder of vlmprep run, got "
                         f"{str(out)!r} ({'not a folder' if out.exists() else 'no such folder'}); "
                         f"pass the --output folder of the job")
    manifest = read_manifest(out)
    if manifest is None:
        raise ValueError(f"read_shards: expected {MANIFEST} in {str(out)!r}, got none; pass the "
                         f"--output folder of a vlmprep run (the manifest is written after the "
                         f"first shard)")
    shards = manifest.get("shards")
    if not isinstance(shards, Mapping) or not all(isinstance(v, Mapping)
                                                  for v in shards.values()):
        raise ValueError(f"read_shards: {out / MANIFEST} expected a 'shards' object of "
                         f"{{name: info}}, got {type(shards).__name__}; rerun the job")
    if not partial and manifest.get("complete") is not True:
        raise ValueError(f"read_shards: expected a complete job in {str(out)!r}, got "
                         f"complete={manifest.get('complete')!r} ({len(shards)} shards so far); "
                         f"finish it with vlmprep run ... --resume, or pass partial=True to read "
                         f"the shards written so far")
    units = list(manifest.get("units") or {})
    rank = {u: k for k, u in enumerate(units)}

    def key(name: str) -> tuple[int, str, int, str]:
        m = re.match(r"^(.*)-(\d{5,})\.[a-z]+$", name)  # shard_name's form; parts may pass 99999
        unit, part = (m.group(1), int(m.group(2))) if m else (name, 0)
        return (rank.get(unit, len(units)), unit, part, name)

    names = sorted(shards, key=key)
    for name in names:
        info = shards[name]
        if Path(name).name != name or Path(name).suffix[1:] not in FORMATS:
            raise ValueError(f"read_shards: {out / MANIFEST} expected shard file names ending in "
                             f"{['.' + f for f in FORMATS]}, got {name!r}; rerun the job")
        path = out / name
        if not path.is_file():
            raise ValueError(f"read_shards: expected shard {str(path)!r} (listed in the manifest), "
                             f"got no such file; rerun with vlmprep run ... --resume to rewrite it")
        size = path.stat().st_size
        if info.get("bytes") is not None and size != info["bytes"]:
            raise ValueError(f"read_shards: shard {str(path)!r} expected {info['bytes']} bytes "
                             f"(the manifest), got {size}; the file is damaged or was replaced: "
                             f"delete it and rerun with --resume")
    return out, manifest, names


def _verify(path: Path, info: Mapping[str, Any]) -> None:
    want = info.get("sha256")
    if want is None:
        return
    got = file_sha256(path)
    if got != want:
        raise ValueError(f"read_shards: shard {str(path)!r} expected sha256 {want} (the "
                         f"manifest), got {got}; the file is damaged or was replaced: delete it "
                         f"and rerun with vlmprep run ... --resume")


def _shard_row_chunks(path: Path) -> Iterator[list[dict]]:
    """A shard's rows in chunks (parquet row groups; ~256 rows of a safetensors shard)."""
    if path.suffix == ".parquet":
        yield from _shard_rows_parquet(path)
        return
    sh = _SafetensorsShard(path)
    for a in range(0, len(sh), 256):
        yield sh.rows(range(a, min(a + 256, len(sh))))


def read_shards(out_dir: str | os.PathLike, *, batched: bool = False,
                include_errors: bool = False, verify: bool = True, partial: bool = False
                ) -> "Iterator[tuple[str, PackedBatch]] | Iterator[tuple[list[str], PackedBatch]]":
    """Iterate a ``vlmprep run`` output folder in job order (input units, then parts).

    Yields ``(id, PackedBatch of one image)`` per sample, bit-exact with what ``Processor``
    returns for that image (pixel_values in the job's dtype, on the CPU; ``to_hf()`` works);
    ``batched=True``: one ``(ids, PackedBatch)`` per shard (a shard of only error rows, with
    ``include_errors=False``, yields nothing). Error rows (images the job skipped; the
    manifest counts them) are left out unless ``include_errors=True``: then they come as a
    batch whose ``errors[k]`` is an ImageError with the reason, as ``Processor(errors="skip")``
    gives them.

    Checked before the first item: the folder, ``manifest.json`` (present, valid, ``complete``
    unless ``partial=True``), every listed shard present with the manifest's size. With
    ``verify=True`` each shard's sha256 is checked against the manifest before it is read
    (one extra read of the file). Any failure: ValueError saying expected / got / fix.
    """
    out, manifest, names = _open_folder(out_dir, partial)
    pipeline = manifest_pipeline(manifest)
    return _iter_shards(out, manifest, names, pipeline, batched, include_errors, verify)


def _iter_shards(out: Path, manifest: Mapping[str, Any], names: list[str], pipeline: "Pipeline",
                 batched: bool, include_errors: bool, verify: bool) -> Iterator[Any]:
    for name in names:
        path = out / name
        if verify:
            _verify(path, manifest["shards"][name])
        if batched:
            rows = [r for chunk in _shard_row_chunks(path) for r in chunk
                    if include_errors or r["status"] == "ok"]
            if rows:
                yield [str(r["id"]) for r in rows], batch_from_rows(rows, pipeline)
            continue
        for chunk in _shard_row_chunks(path):
            for r in chunk:
                if include_errors or r["status"] == "ok":
                    yield str(r["id"]), batch_from_rows([r], pipeline)


# -- random access: the loader's shard source -------------------------------------------------
class ShardSource:
    """The samples of a ``vlmprep run`` output folder as a map-style source: already processed,
    so ``vlmprep.loader.DataLoader(ShardSource(dir), batch_size=...)`` reads shards and never
    decodes an image (no Processor).

    ``len(src)``: samples (good ones; error rows too with ``include_errors=True``), in job
    order. ``src.ids[i]`` / ``src.num_tokens[i]``: from the shards' small columns, read once
    here (pixels are not read). ``src[i]`` -> ``(id, PackedBatch of one image)``;
    ``src.read(indices)`` -> one PackedBatch of those samples in that order, bit-exact with
    ``Processor(errors="skip")`` over the same images (CPU tensors; move with ``.to()``).
    The folder is validated as ``read_shards`` does; with ``verify=True`` a shard's sha256 is
    checked the first time it is read. Safe to share between threads. Parquet reads whole row
    groups (~64 MiB of pixels; the last few are kept), so a shuffled order costs more reads
    than a sequential one; safetensors reads only the rows asked for.
    """

    def __init__(self, out_dir: str | os.PathLike, *, include_errors: bool = False,
                 verify: bool = True, partial: bool = False, cache_groups: int = 4):
        self.out_dir, self.manifest, names = _open_folder(out_dir, partial)
        self.pipeline = manifest_pipeline(self.manifest)
        self.include_errors = bool(include_errors)
        self.verify = bool(verify)
        self._lock = threading.Lock()
        self._verified: set[str] = set()
        self._groups: "OrderedDict[tuple[str, int], list[dict]]" = OrderedDict()
        self._cache_groups = max(1, int(cache_groups))
        self._st: dict[str, _SafetensorsShard] = {}
        self.ids: list[str] = []
        self.num_tokens: list[int] = []
        # item -> (shard name, row group or -1, position in the group / shard)
        self._where: list[tuple[str, int, int]] = []
        for name in names:
            path = self.out_dir / name
            if path.suffix == ".parquet":
                self._index_parquet(name, path)
            else:
                self._index_safetensors(name, path)

    def __getstate__(self) -> dict:
        """Picklable for worker processes (torch DataLoader): without the lock and the caches."""
        state = self.__dict__.copy()
        del state["_lock"]
        state["_groups"] = OrderedDict()
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _keep(self, status: str) -> bool:
        return self.include_errors or status == "ok"

    def _index_parquet(self, name: str, path: Path) -> None:
        pf = _parquet_file(path)
        for g in range(pf.num_row_groups):
            t = _read_group(path, pf, g, ["id", "status", "num_tokens"]).to_pydict()
            for k, (sid, status, tok) in enumerate(zip(t["id"], t["status"], t["num_tokens"])):
                if self._keep(status):
                    self.ids.append(str(sid))
                    self.num_tokens.append(int(tok) if status == "ok" else 0)
                    self._where.append((name, g, k))

    def _index_safetensors(self, name: str, path: Path) -> None:
        sh = self._st[name] = _SafetensorsShard(path)
        for k in range(len(sh)):
            status = sh.info["status"][k]
            if self._keep(status):
                self.ids.append(str(sh.info["ids"][k]))
                self.num_tokens.append(int(sh.num_tokens[k]) if status == "ok" else 0)
                self._where.append((name, -1, k))

    def __len__(self) -> int:
        return len(self._where)

    def __repr__(self) -> str:
        return (f"ShardSource({str(self.out_dir)!r}, {len(self)} samples, "
                f"pipeline={self.pipeline.name!r})")

    def __getitem__(self, i: int) -> "tuple[str, PackedBatch]":
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"ShardSource: index expected an int, got {type(i).__name__}")
        if not -len(self) <= i < len(self):
            raise IndexError(f"ShardSource: index {i} out of range for {len(self)} samples")
        i %= len(self)
        return self.ids[i], self.read([i])

    def _checked(self, name: str) -> None:
        if not self.verify or name in self._verified:
            return
        _verify(self.out_dir / name, self.manifest["shards"][name])
        with self._lock:
            self._verified.add(name)

    def _group(self, name: str, g: int) -> list[dict]:
        key = (name, g)
        with self._lock:
            hit = self._groups.get(key)
            if hit is not None:
                self._groups.move_to_end(key)
                return hit
        rows = next(_shard_rows_parquet(self.out_dir / name, [g]))
        with self._lock:
            self._groups[key] = rows
            while len(self._groups) > self._cache_groups:
                self._groups.popitem(last=False)
        return rows

    def rows(self, indices: Sequence[int]) -> list[dict]:
        """The rows of items ``indices`` (positions in this source), in that order."""
        out: list[dict | None] = [None] * len(indices)
        st_wanted: dict[str, list[tuple[int, int]]] = {}
        for j, i in enumerate(indices):
            name, g, k = self._where[i]
            self._checked(name)
            if g >= 0:
                out[j] = self._group(name, g)[k]
            else:
                st_wanted.setdefault(name, []).append((j, k))
        for name, pairs in st_wanted.items():
            for (j, _), r in zip(pairs, self._st[name].rows([k for _, k in pairs])):
                out[j] = r
        return [r for r in out if r is not None]

    def read(self, indices: Sequence[int]) -> "PackedBatch":
        """One PackedBatch of items ``indices`` in that order (CPU tensors)."""
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self):
                raise IndexError(f"ShardSource.read: index expected 0 <= i < {len(self)}, got "
                                 f"{i!r}")
        return batch_from_rows(self.rows(indices), self.pipeline)
