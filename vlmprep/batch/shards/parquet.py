"""The parquet shard writer (needs pyarrow): one Arrow row per sample with the columns
``ROW_COLUMNS`` (``arrow_schema``), row groups of at most ~64 MiB of pixels, the job's metadata
plus ``vlmprep.shard_schema`` in the file's key-value metadata. ``rows_table`` is also what the
Ray stage ``Preprocess`` returns."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..schema import ROW_COLUMNS
from .files import Hashing, need
from .names import SCHEMA_KEY, SCHEMA_VERSION

__all__ = ["arrow_schema", "rows_table", "write_parquet"]

_ROW_GROUP_BYTES = 64 << 20


def arrow_schema() -> Any:
    """The parquet shard's Arrow schema (``pyarrow.Schema``, columns ``ROW_COLUMNS``, no
    metadata). Needs pyarrow."""
    pa = need("pyarrow", "arrow_schema")
    ints = pa.list_(pa.int32())
    return pa.schema([
        ("id", pa.string()), ("source", pa.string()), ("status", pa.string()),
        ("error", pa.string()), ("dtype", pa.string()), ("layout", pa.string()),
        ("grid_thw", ints), ("seqlens", ints), ("num_patches", pa.int64()),
        ("num_tokens", pa.int32()), ("placeholder", pa.large_string()), ("row_shape", ints),
        ("orig_hw", ints), ("pixel_values", pa.large_binary()), ("modality", pa.string()),
        ("video", pa.large_string())])


def rows_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    """``rows`` as a ``pyarrow.Table`` with the shard's column types (``arrow_schema()``), no
    metadata: what the parquet writer stores, and what the Ray integration returns from
    ``map_batches`` (explicit types: an all-None column would otherwise become Arrow null)."""
    pa = need("pyarrow", "rows_table")
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


def write_parquet(f: Hashing, rows: Sequence[Mapping[str, Any]], meta: dict[str, str]) -> None:
    pa = need("pyarrow", "write_shard (parquet)")
    pq = need("pyarrow.parquet", "write_shard (parquet)")
    schema = arrow_schema().with_metadata({**meta, SCHEMA_KEY: SCHEMA_VERSION})
    lists = ("grid_thw", "seqlens", "row_shape", "orig_hw")  # codecs go by leaf column path
    codecs = {f"{c}.list.element" if c in lists else c: "zstd" for c in ROW_COLUMNS}
    codecs["pixel_values"] = "none"  # float noise does not compress; the time is the writer's
    sink = pa.PythonFile(f, mode="w")
    with pq.ParquetWriter(sink, schema, compression=codecs,
                          use_dictionary=["status", "dtype", "layout", "source", "modality"],
                          write_statistics=["id", "status", "num_patches", "num_tokens"]) as w:
        for a, b in _groups(rows):
            w.write_table(rows_table(rows[a:b]).replace_schema_metadata(schema.metadata),
                          row_group_size=max(1, b - a))
