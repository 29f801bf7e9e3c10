"""vlmprep as stages of a user's own Ray Data pipeline (``pip install vlmprep[ray]``; public as
``vlmprep.integrations.ray``): ``Preprocess`` (encoded images -> rows in the shard schema, one
Processor per actor), ``plan_tokens`` (header-only token counts) and ``rows_from_batch`` (a
``Preprocess`` output batch -> row dicts). How to use them: ``vlmprep.integrations.ray``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

try:
    import pyarrow as pa
    from ray.data.block import BlockAccessor
except ImportError as _e:  # the extra is optional; say how to get it
    raise ImportError(f"vlmprep.integrations.ray: expected the ray package (Ray Data), got "
                      f"ImportError: {_e}; fix: pip install vlmprep[ray]") from _e

import numpy as np

from ...processor import Processor
from ..config import JobConfig, job_config
from ..rows import ROW_COLUMNS, process_samples
from ..shards import rows_table
from ..sources import Sample, read_data_path

__all__ = ["Preprocess", "plan_tokens", "rows_from_batch", "object_array"]


# -- input columns ----------------------------------------------------------------------------------
def _columns(batch: Any) -> dict[str, Any]:
    """A map_batches batch (dict of numpy arrays, pyarrow Table or pandas DataFrame) -> name ->
    sequence of values."""
    if isinstance(batch, Mapping):
        return dict(batch)
    if hasattr(batch, "column_names") and hasattr(batch, "column"):  # pyarrow.Table
        return {name: batch.column(name) for name in batch.column_names}
    if hasattr(batch, "columns") and hasattr(batch, "to_numpy"):  # pandas.DataFrame
        return {str(name): batch[name].to_numpy() for name in batch.columns}
    raise TypeError(f"batch: expected a dict of columns, a pyarrow.Table or a pandas.DataFrame "
                    f"(map_batches' batch formats), got {type(batch).__name__}")


def _values(col: Any) -> list:
    """A column as a list of Python values (pyarrow scalars unwrapped)."""
    if hasattr(col, "to_pylist"):  # pyarrow Array / ChunkedArray
        return col.to_pylist()
    return list(col)


def _require(cols: Mapping[str, Any], name: str, arg: str) -> None:
    if name not in cols:
        hint = ("read_binary_files(include_paths=True) gives 'bytes' and 'path'; "
                "read_webdataset(decoder=None) gives '__key__' and one column per extension "
                "('jpg', 'png', ...); a Hugging Face image column is a {bytes, path} struct")
        raise ValueError(f"{arg}: expected a column of the batch, got {name!r} and columns "
                         f"{sorted(cols)}; fix: pass {arg}=<one of them> ({hint})")


def _read_path(path: str, max_bytes: int, root: str | None) -> tuple[bytes | None, str | None]:
    """The bytes of a struct's ``path`` (when ``bytes`` is null), read as ``vlmprep run`` reads
    paths inside data (``batch.sources.read_data_path``): only under the config's
    ``input_root`` (relative paths from there), never /proc, /dev or /sys, a regular file of at
    most ``max_bytes``; with no ``input_root`` no path is read (a row names no host file)."""
    if root is None:
        return None, (f"expected image bytes in the {{bytes, path}} struct, got null bytes and the "
                      f"path {path!r}; paths inside data are read only under an input root: fix: "
                      f"set input_root in the config (JobConfig(input_root=DIR)) to the folder "
                      f"the paths are under")
    data, err = read_data_path(path, root, root, max_bytes)
    if err is not None:
        err = f"the {{bytes, path}} struct has null bytes and its path is unusable: {err}"
    return data, err


def _encoded(value: Any, max_bytes: int, root: str | None) -> tuple[bytes | None, str | None]:
    """One cell of the image column -> (encoded bytes, None) or (None, reason).

    Accepted: bytes-like (object arrays of bytes, pyarrow binary), a Hugging Face ``{bytes, path}``
    struct (a dict; ``path`` is read, under ``root`` only, when ``bytes`` is null). Null is None,
    or NaN where ``read_webdataset`` fills a group's missing member."""
    if hasattr(value, "as_py"):  # a pyarrow scalar
        value = value.as_py()
    if isinstance(value, Mapping):
        data, path = value.get("bytes"), value.get("path")
        if data is None:
            if not path:
                return None, "the {bytes, path} struct has neither bytes nor a path"
            return _read_path(str(path), max_bytes, root)
        value = data
    if value is None or (isinstance(value, float) and value != value):  # read_webdataset: NaN
        return None, "no image bytes (null)"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), None
    if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 1:
        return value.tobytes(), None
    return None, (f"expected encoded image bytes or a {{bytes, path}} struct, got "
                  f"{type(value).__name__}")


# -- output columns ---------------------------------------------------------------------------------
def object_array(values: Sequence) -> np.ndarray:
    """A 1-D object array (equal-length lists stay list cells, not a 2-D array)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _with_passthrough(batch: Any, cols: Mapping[str, Any], drop: set[str], new: Any) -> Any:
    """``new`` (a pyarrow Table) with the batch's other columns appended, converted as Ray
    converts a map_batches output (tensor columns stay Ray tensors)."""
    keep = [c for c in cols if c not in drop]
    if not keep:
        return new
    if hasattr(batch, "column_names") and hasattr(batch, "select"):  # pyarrow.Table
        extra = batch.select(keep)
    else:
        block = BlockAccessor.batch_to_block({c: cols[c] for c in keep})
        extra = BlockAccessor.for_block(block).to_arrow()
    for name in extra.column_names:
        new = new.append_column(extra.field(name), extra.column(name))
    return new


def _py(v: Any) -> Any:
    """A cell as the plain Python value a row holds (numpy scalars and arrays unwrapped)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (np.ndarray, list, tuple)):
        return [_py(x) for x in v]
    return v


def rows_from_batch(batch: Any) -> list[dict]:
    """A batch ``Preprocess`` returned (or read back from its rows) -> one dict per row with the
    keys ``ROW_COLUMNS`` as ``rows.process_samples`` makes them; ``batch_from_rows(rows,
    pipeline)`` turns the ok rows into the PackedBatch a model takes."""
    cols = _columns(batch)
    missing = [c for c in ROW_COLUMNS if c not in cols]
    if missing:
        raise ValueError(f"rows_from_batch: expected the columns {list(ROW_COLUMNS)} (Preprocess's "
                         f"output), got {sorted(cols)}; missing {missing}")
    vals = {c: _values(cols[c]) for c in ROW_COLUMNS}
    n = len(vals[ROW_COLUMNS[0]])
    return [{c: _py(vals[c][i]) for c in ROW_COLUMNS} for i in range(n)]


# -- the stages -------------------------------------------------------------------------------------
class Preprocess:
    """Callable class for ``Dataset.map_batches``: encoded images -> rows in the shard schema.

    Args:
        config: a ``JobConfig`` or its ``to_json()`` dict (small and picklable: what Ray ships to
            each actor); the actor builds its one Processor (``config.processor()``,
            ``errors="skip"``) in ``__init__``.
        column: the image column: bytes (numpy object array, pyarrow binary) or Hugging Face
            ``{bytes, path}`` structs.
        id_column: the column giving each row's ``id`` (as ``str``); ``None``: the source, or ""
            (e.g. ``"path"`` after ``read_binary_files(include_paths=True)``, ``"__key__"`` after
            ``read_webdataset(decoder=None)``).
        source_column: the column naming where a row came from, for messages; ``None``: the id.

    ``__call__(batch)`` (N rows, any batch_format) returns N rows as a pyarrow Table: the columns
    ``vlmprep.batch.rows.ROW_COLUMNS`` with the parquet shard's types (``status`` "ok", or
    "error" with the reason in ``error``: a bad image never fails the job; list<int32>
    ``grid_thw``, ``seqlens``, ``row_shape``, ``orig_hw``; large_binary ``pixel_values``, the raw
    little-endian bytes of the image's rows, ``dtype`` naming them), then every input column but
    ``column`` (the encoded bytes are dropped; a name in ROW_COLUMNS is replaced).
    ``rows_from_batch`` turns a batch of it back into row dicts. Pass ``num_gpus`` (fractional
    allowed) and ``compute=ActorPoolStrategy(...)`` or ``concurrency`` to ``map_batches``, as
    for any Ray actor stage.
    """

    def __init__(self, config: JobConfig | Mapping[str, Any], column: str = "bytes",
                 id_column: str | None = "id", source_column: str | None = None):
        self.config = job_config(config)
        self.column = column
        self.id_column = id_column
        self.source_column = source_column
        self.proc: Processor = self.config.processor()
        self._max_bytes = int(self.proc.pipeline["decode"].max_source_bytes)  # type: ignore[attr-defined]

    def __call__(self, batch: Any) -> Any:
        cols = _columns(batch)
        _require(cols, self.column, "column")
        values = _values(cols[self.column])
        n = len(values)
        sources = self._strings(cols, self.source_column, "source_column", n)
        ids = self._strings(cols, self.id_column, "id_column", n)
        if self.id_column is None:
            ids = list(sources) if self.source_column is not None else [""] * n
        if self.source_column is None:
            sources = ids
        samples = []
        for v, i, s in zip(values, ids, sources, strict=True):
            data, err = _encoded(v, self._max_bytes, self.config.input_root)
            samples.append(Sample(id=i, source=s, data=data, error=err))
        rows = process_samples(self.proc, samples, fps=self.config.fps,
                               num_frames=self.config.num_frames,
                               document=self.config.document_options())
        # typed as the parquet shard (an all-None column would otherwise become Arrow null)
        return _with_passthrough(batch, cols, {self.column, *ROW_COLUMNS}, rows_table(rows))

    @staticmethod
    def _strings(cols: Mapping[str, Any], name: str | None, arg: str, n: int) -> list[str]:
        if name is None:
            return [""] * n
        _require(cols, name, arg)
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(_py(v))
                for v in _values(cols[name])]


_PLANNERS: dict[str, Processor] = {}  # per worker process: plan_tokens runs as stateless tasks


def _planner(config: Any) -> Processor:
    """The job's pipeline on the reference backend on the CPU (planning reads headers only and
    must not need the job's GPU), built once per process."""
    cfg = job_config(config)
    key = cfg.hash()
    if key not in _PLANNERS:
        _PLANNERS[key] = dataclasses.replace(cfg, backend="reference", device="cpu").processor()
    return _PLANNERS[key]


def plan_tokens(batch: Any, config: JobConfig | Mapping[str, Any], column: str = "bytes") -> Any:
    """Header-only token counts for ``map_batches`` (no pixel decoded; CPU tasks are enough):
    ``ds.map_batches(plan_tokens, fn_kwargs={"config": cfg}, batch_format="numpy")``.

    Returns a pyarrow Table: ``num_tokens`` (int64, what ``Preprocess`` and
    ``Processor.plan`` give; 0 for a bad image), ``height``, ``width`` (int64, from the header
    after EXIF orientation; 0 when unreadable), ``error`` (null, or the reason), then the batch's
    other columns. ``column`` holds the encoded images, in the forms ``Preprocess`` takes; it is
    kept for the heavy stage.
    """
    proc = _planner(config)
    cols = _columns(batch)
    _require(cols, column, "column")
    max_bytes = int(proc.pipeline["decode"].max_source_bytes)  # type: ignore[attr-defined]
    enc = [_encoded(v, max_bytes, job_config(config).input_root) for v in _values(cols[column])]
    n = len(enc)
    tokens, height, width = [0] * n, [0] * n, [0] * n
    errors: list[str | None] = [e for _, e in enc]
    good = [i for i, (d, _) in enumerate(enc) if d is not None]
    plan = proc.plan([enc[i][0] for i in good])
    for i, p in zip(good, plan.images, strict=True):
        height[i], width[i] = (int(x) for x in p.source_hw)
        if p.error is not None:
            errors[i] = p.error.reason
        else:
            tokens[i] = int(p.num_tokens)
    new = pa.table({"num_tokens": pa.array(tokens, pa.int64()), "height": pa.array(height, pa.int64()),
                    "width": pa.array(width, pa.int64()), "error": pa.array(errors, pa.string())})
    return _with_passthrough(batch, cols, set(new.column_names), new)
