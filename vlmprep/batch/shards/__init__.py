"""Shards: the files of a ``vlmprep run`` output folder, written atomically, read back bit-exact.

A folder holds ``manifest.json`` (``write_manifest``: the job's config, counts and per-shard
``sha256``; ``read_manifest`` checks it with ``check_manifest`` before anything uses it) and
shards named ``shard_name(unit, part, fmt)`` = ``"{unit}-{part:05d}.{ext}"``.
A shard holds the rows of ``vlmprep.batch.rows`` (one per sample, error rows included):

- **parquet** (needs pyarrow): one Arrow row per sample with the columns ``ROW_COLUMNS``:
  strings (``placeholder`` and ``video``, a video row's plan as JSON, large_string; ``modality``
  "image" / "video"), ``grid_thw`` / ``seqlens`` / ``row_shape`` /
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
  ``modality``, ``video``, ``dtype``, ``layout``, ``row_shape``. Both formats say
  ``vlmprep.shard_schema`` "2"; "1" shards (before videos: no ``modality`` / ``video``) read as
  images. vlmprep writes this file itself (the format is a
  length, a JSON header and the data): the package's writer orders the metadata by a hash
  map, so its bytes change from one process to the next (safetensors 0.8).

Both writers give the same bytes for the same rows and meta (nothing time- or process-
dependent is stored) and write ``name + ".tmp"`` then ``os.replace``: a killed writer leaves no
half shard, and a failed write leaves no file at all.

Modules: ``names`` (shard names, metadata keys), ``files`` (hashes, the atomic write),
``manifest`` (write, read, check; ``manifest_pipeline``), ``write`` (``write_shard``), one per
format writer (``parquet``, ``safetensors``), ``read`` (the readers, ``read_shards``) and
``source`` (``ShardSource``, the loader's random access).
"""
from __future__ import annotations

from .files import file_sha256, ids_sha256
from .manifest import (
    MANIFEST,
    check_manifest,
    job_units,
    manifest_pipeline,
    read_manifest,
    remove_job_shards,
    write_manifest,
)
from .names import FORMATS, shard_name
from .parquet import arrow_schema, rows_table
from .read import read_shard_rows, read_shards
from .source import ShardSource
from .write import write_shard

__all__ = ["FORMATS", "shard_name", "write_shard", "read_manifest", "check_manifest",
           "write_manifest", "job_units", "remove_job_shards",
           "read_shards", "read_shard_rows", "manifest_pipeline", "ShardSource", "MANIFEST",
           "ids_sha256", "file_sha256", "arrow_schema", "rows_table"]
