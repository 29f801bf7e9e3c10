"""The manifest of an output folder (``manifest.json``): written atomically
(``write_manifest``), read bounded and checked before anything acts on it (``read_manifest``,
``check_manifest``), the old job's shard files for ``--overwrite`` (``job_units``,
``remove_job_shards``), and the Pipeline that made the shards (``manifest_pipeline``)."""
from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping

from ... import presets
from ...pipeline import Pipeline
from ..config import JobConfig
from .files import replace_atomic
from .names import FORMATS, NAME_RE, shard_parts

__all__ = ["MANIFEST", "MAX_MANIFEST_BYTES", "read_manifest", "check_manifest", "write_manifest",
           "job_units", "remove_job_shards", "manifest_pipeline", "load_manifest"]

MANIFEST = "manifest.json"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
MAX_MANIFEST_BYTES = 256 << 20  # ~600,000 shards' entries; a larger file is not read
_MAX_COUNT = 2**53 - 1  # JSON-exact ints: rows, tokens, samples
_MAX_BYTES = 1 << 40  # one shard file
_FIX = ("the manifest is damaged or was edited: rerun the job with vlmprep run ... --overwrite "
        "(it removes only files named as its shards), or delete the folder")


def load_manifest(path: Path) -> Any:
    """The parsed JSON of ``path`` (None when there is no file); bounded: a regular file of at
    most ``MAX_MANIFEST_BYTES`` (a FIFO or /dev/zero named manifest.json is never read)."""
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
    d = load_manifest(path)
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ValueError(f"read_manifest: expected a JSON object in {path}, got "
                         f"{type(d).__name__}; rerun the job into a new folder")
    return check_manifest(d, path)


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


def _check_shard_counts(f: str, got: dict[str, int], size: int | None,
                        bad: Callable[[str, str, Any], ValueError]) -> None:
    """A shard's counts (``got``: those present) against each other and ``shard_size``."""
    # shard_size bounds the samples of a shard; a PDF sample is one row per page
    read = "samples" if "samples" in got else "count"
    if read in got and size is not None and got[read] > size:
        raise bad(f"{f}.{read!r}", f"at most shard_size = {size} samples", got[read])
    if "count" not in got:
        return
    if got.get("samples", 0) > got["count"]:
        raise bad(f"{f}.'samples'", f"at most count = {got['count']}: a sample is at least a row",
                  got["samples"])
    if "bytes" in got and got["count"] > got["bytes"]:
        raise bad(f"{f}.'count'", f"at most its 'bytes' ({got['bytes']}): a row takes "
                  f"at least a byte", got["count"])
    if got.get("damaged", 0) > got["count"]:
        raise bad(f"{f}.'damaged'", f"at most count = {got['count']}", got["damaged"])
    if "ok" in got and "errors" in got and got["ok"] + got["errors"] != got["count"]:
        raise bad(f"{f}.'ok' + 'errors'", f"count = {got['count']}", got["ok"] + got["errors"])


def check_manifest(manifest: dict, path: str | os.PathLike) -> dict:
    """Check a manifest read from disk before anything acts on it; returns it unchanged.

    Every field is checked when present (older and hand-made manifests may lack some): types;
    ``format`` one of ``FORMATS``; every count, size and part number an int within bounds tied to
    the rest (``ok + errors == count``, ``samples <= shard_size`` (``count`` when a shard has
    no ``samples``: a PDF sample is one row per page), ``samples <= count``, ``damaged <= count``, ``count <= bytes``
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
            if not isinstance(unit, str) or not NAME_RE.match(unit):
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
        where = shard_parts(name) if isinstance(name, str) else None
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
               for k in ("count", "samples", "ok", "errors", "tokens", "bytes", "damaged")
               if info.get(k) is not None}
        _check_shard_counts(f, got, size, bad)
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
        d = load_manifest(Path(out_dir) / MANIFEST)
    except ValueError:
        return set()
    if not isinstance(d, dict):
        return set()
    found: set[str] = set()
    units, listed = d.get("units"), d.get("shards")
    if isinstance(units, Mapping):
        found |= {u for u in units if isinstance(u, str) and NAME_RE.match(u)}
    if isinstance(listed, Mapping):
        found |= {w[0] for w in (shard_parts(n) for n in listed if isinstance(n, str)) if w}
    return found


def remove_job_shards(out_dir: str | os.PathLike, units: set[str]) -> list[str]:
    """Remove the files of ``out_dir`` named as the writer names a shard of one of ``units``
    (``shard_name(unit, part, fmt)``, any part and format); returns their names. The work is
    one listing of the folder: no count from a manifest drives it, and nothing outside the
    folder or named otherwise is touched."""
    removed = []
    for entry in os.listdir(out_dir):
        where = shard_parts(entry)
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
    replace_atomic(Path(out_dir), MANIFEST, write)


def manifest_pipeline(manifest: Mapping[str, Any]) -> Pipeline:
    """The Pipeline that made a job's shards: ``manifest["pipeline"]`` (``Pipeline.to_dict()``)
    when the job stored it, else rebuilt from ``manifest["config"]`` (``JobConfig.to_json()``:
    the preset with its overrides, or the checkpoint's config file, which must be readable
    here). No Processor is built (the reading machine needs no GPU)."""
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
