"""The shard readers: a parquet shard by row group (pyarrow), a safetensors shard by rows
(``SafetensorsShard``: its per-row index, then slices of ``pixel_values``); an output folder
validated against its manifest (``open_folder``) and read in job order (``read_shards``,
``read_shard_rows``), each shard's sha256 checked first (``check_sha256``)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from ...pipeline import Pipeline
from ..rows import batch_from_rows
from ..schema import ROW_COLUMNS, WORDS, with_defaults
from .files import file_sha256, need
from .manifest import MANIFEST, manifest_pipeline, read_manifest
from .names import FORMATS, ROWS_KEY, SCHEMA_KEY, SCHEMA_VERSION, SCHEMA_VERSIONS_READ

if TYPE_CHECKING:
    from ...pack import PackedBatch

__all__ = ["read_shards", "read_shard_rows", "open_folder", "check_sha256", "parquet_file", "read_group",
           "shard_rows_parquet", "SafetensorsShard"]


def shard_rows_parquet(path: Path, groups: Sequence[int] | None = None
                        ) -> Iterator[list[dict]]:
    """The rows of a parquet shard, one list per row group (only ``groups`` when given); a
    schema "1" shard's rows get ``modality`` / ``video`` (``schema.with_defaults``)."""
    pf = parquet_file(path)
    names = pf.schema_arrow.names
    missing = [c for c in ROW_COLUMNS if c not in with_defaults({n: None for n in names})]
    if missing:
        raise ValueError(f"read_shards: {path} expected the columns {list(ROW_COLUMNS)}, got "
                         f"none for {missing}; is it a vlmprep shard?")
    cols = [c for c in ROW_COLUMNS if c in names]
    for g in range(pf.num_row_groups) if groups is None else groups:
        yield [with_defaults(r) for r in read_group(path, pf, g, cols).to_pylist()]


def read_group(path: Path, pf: Any, g: int, columns: list[str]) -> Any:
    """Row group ``g`` of a parquet shard; a damaged one is a ValueError (expected / got / fix)."""
    pa = need("pyarrow", "read_shards (parquet)")
    try:
        return pf.read_row_group(g, columns=columns)
    except (pa.ArrowException, OSError) as e:
        raise _damaged(path, e) from None


def _damaged(path: Path, e: Exception) -> ValueError:
    return ValueError(f"read_shards: {str(path)!r} expected a vlmprep shard, got a file its "
                      f"reader refuses ({type(e).__name__}: {str(e)[:200]}); the file is damaged "
                      f"or foreign: delete it and rerun with vlmprep run ... --resume")


def parquet_file(path: Path) -> Any:
    """``pyarrow.parquet.ParquetFile`` of a shard, its schema version checked."""
    pa = need("pyarrow", "read_shards (parquet)")
    pq = need("pyarrow.parquet", "read_shards (parquet)")
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
    if got not in SCHEMA_VERSIONS_READ:
        raise ValueError(f"read_shards: {path} expected {SCHEMA_KEY} one of "
                         f"{list(SCHEMA_VERSIONS_READ)} (this vlmprep writes {SCHEMA_VERSION!r}), "
                         f"got {got!r}; it was written by another vlmprep version: rerun the job")


class SafetensorsShard:
    """One safetensors shard: the per-row index from its header and small tensors, and rows
    read on demand (a slice of ``pixel_values``; safetensors maps the file)."""

    def __init__(self, path: Path):
        st = need("safetensors", "read_shards (safetensors)")
        self.path = path
        try:
            with st.safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                _check_schema(path, meta)
                try:
                    self.info = json.loads(meta[ROWS_KEY])
                except (KeyError, json.JSONDecodeError) as e:
                    raise ValueError(f"read_shards: {path} expected JSON under {ROWS_KEY!r}, "
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

    def modality(self, i: int) -> str:
        """Row ``i``'s modality ("image" in a schema "1" shard, which has none)."""
        mods = self.info.get("modality")
        return str(mods[i]) if mods else "image"

    def rows(self, positions: Sequence[int]) -> list[dict]:
        import torch  # deferred: torch is heavy; only reading pixels back needs it
        st = need("safetensors", "read_shards (safetensors)")
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
                    "pixel_values": data, "modality": self.modality(i),
                    "video": (info.get("video") or [None] * len(self))[i]})
        return out


def read_shard_rows(path: str | os.PathLike) -> list[dict]:
    """Every row of one shard file (parquet or safetensors, by its extension), in order."""
    p = Path(path)
    if p.suffix == ".parquet":
        return [r for g in shard_rows_parquet(p) for r in g]
    if p.suffix == ".safetensors":
        sh = SafetensorsShard(p)
        return sh.rows(range(len(sh)))
    raise ValueError(f"read_shard_rows: expected a .parquet or .safetensors file, got {str(p)!r}")


def open_folder(out_dir: str | os.PathLike, partial: bool) -> tuple[Path, dict, list[str]]:
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


def check_sha256(path: Path, info: Mapping[str, Any]) -> None:
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
        yield from shard_rows_parquet(path)
        return
    sh = SafetensorsShard(path)
    for a in range(0, len(sh), 256):
        yield sh.rows(range(a, min(a + 256, len(sh))))


def read_shards(out_dir: str | os.PathLike, *, batched: bool = False,
                include_errors: bool = False, verify: bool = True, partial: bool = False
                ) -> "Iterator[tuple[str, PackedBatch]] | Iterator[tuple[list[str], PackedBatch]]":
    """Iterate a ``vlmprep run`` output folder in job order (input units, then parts).

    Yields ``(id, PackedBatch of one image)`` per sample, bit-exact with what ``Processor``
    returns for that image (pixel_values in the job's dtype, on the CPU; ``to_hf()`` works); a
    video sample's batch is what ``proc([], videos=[that video])`` returns (no image, the video
    in ``batch.videos``; ``to_hf()`` gives ``pixel_values_videos``, ``video_grid_thw``, ...).
    ``batched=True``: one ``(ids, PackedBatch)`` per shard (a shard of only error rows, with
    ``include_errors=False``, yields nothing); ``ids`` in row order, the images among them the
    batch's items and the videos ``batch.videos``' items, each in that order. Error rows (images the job skipped; the
    manifest counts them) are left out unless ``include_errors=True``: then they come as a
    batch whose ``errors[k]`` is an ImageError with the reason, as ``Processor(errors="skip")``
    gives them.

    Checked before the first item: the folder, ``manifest.json`` (present, valid, ``complete``
    unless ``partial=True``), every listed shard present with the manifest's size. With
    ``verify=True`` each shard's sha256 is checked against the manifest before it is read
    (one extra read of the file). Any failure: ValueError saying expected / got / fix.
    """
    out, manifest, names = open_folder(out_dir, partial)
    pipeline = manifest_pipeline(manifest)
    return _iter_shards(out, manifest, names, pipeline, batched, include_errors, verify)


def _iter_shards(out: Path, manifest: Mapping[str, Any], names: list[str], pipeline: Pipeline,
                 batched: bool, include_errors: bool, verify: bool) -> Iterator[Any]:
    for name in names:
        path = out / name
        if verify:
            check_sha256(path, manifest["shards"][name])
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
