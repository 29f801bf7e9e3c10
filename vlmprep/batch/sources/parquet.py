"""The ``parquet`` input kind (``.parquet``, ``.pq``): one sample per row, in file order.

Image column = ``column``, else the first of ``IMAGE_COLUMNS`` (then ``VIDEO_COLUMNS``, for a
unit that takes videos) whose type holds bytes, else the only such column. A row is a video
sample (``Sample.video``) when its column is named as a video column or its struct ``path`` has
a video extension; rows.py also routes by the container's first bytes. Types: binary
(large_binary, binary_view) and the Hugging Face datasets ``struct<bytes: binary, path:
string>`` (its bytes; when they are null, the file at ``path``, relative to the parquet file's
folder, under the input root: ``paths``). Id = str(value of ``id_column``) else ``row-{n}``.
pyarrow reads the rows (imported on first use: it is optional); before it reads a row group, the
page headers of the columns read are read by us (``thrift.chunk_pages``) and a page over
``_page_limit`` is never decompressed. The full rules: ``vlmprep.batch.sources``.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from .paths import read_unit_path
from .sample import Sample, is_video_name
from .thrift import Chunk, chunk_pages, footer_chunks
from .unit import Unit, register_reader

__all__ = ["IMAGE_COLUMNS", "VIDEO_COLUMNS", "parquet_resolve"]

#: Parquet image column names tried in order when no column is given.
IMAGE_COLUMNS = ("image", "jpg", "jpeg", "png", "webp", "img", "bytes")
#: Video column names, tried after the image ones (a unit that takes videos); a row of a column
#: so named is a video sample.
VIDEO_COLUMNS = ("video", "mp4", "mkv", "webm", "avi", "mov")
_PARQUET_BATCH = 8  # rows per decoded parquet batch: bounds memory to a few images ...
_PARQUET_BUFFER = 1 << 20  # ... and pages streamed in 1 MiB reads, not a whole column chunk at once

# A page is decompressed whole; one larger than this (uncompressed), or than its values can be
# if each is within max_bytes, is never decompressed: a 17.9 KB file can hold a 300 MB zstd page.
_PARQUET_PAGE_MAX = 256 << 20
_PARQUET_PAGE_SLACK = 64 << 10  # a page's levels and value lengths, over its values' bytes


def _pyarrow():
    try:  # deferred: pyarrow is optional (vlmprep[parquet]) and heavy
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("expected pyarrow for parquet inputs, got it not installed; fix: pip install "
                         "vlmprep[parquet]") from None
    return pa, pq


def _image_type(t: Any) -> str | None:
    """"binary", "struct" (HF datasets Image: struct<bytes, path>) or None (not image bytes)."""
    pa, _ = _pyarrow()
    if _is_binary(pa, t):
        return "binary"
    if pa.types.is_struct(t):
        idx = t.get_field_index("bytes")
        if idx >= 0 and _is_binary(pa, t.field(idx).type):
            return "struct"
    return None


def _is_binary(pa: Any, t: Any) -> bool:
    view = getattr(pa.types, "is_binary_view", None)
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or (view is not None and view(t)))


def _parquet_file(path: str, buffer_size: int = 0) -> Any:
    _, pq = _pyarrow()
    try:
        return pq.ParquetFile(path, buffer_size=buffer_size)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged footer
        raise ValueError(f"expected a parquet file at {path!r}, got one that does not open "
                         f"({type(e).__name__}: {e}); check or rebuild the file") from None


def parquet_resolve(path: str, column: str | None, id_column: str | None,
                    videos: bool = True) -> str:
    """The image (or video) column's name (checked, or auto-detected); checks id_column too."""
    pa, _ = _pyarrow()
    schema = _parquet_file(path).schema_arrow
    cols = {f.name: f.type for f in schema}
    listing = ", ".join(f"{n}: {t}" for n, t in cols.items()) or "none"
    want = "binary or struct<bytes: binary, path: string>"
    if column is not None:
        if column not in cols:
            raise ValueError(f"discover: expected an image column {column!r} in {path!r}, got the "
                             f"columns {listing}; pass column= (--column) naming one of them")
        if _image_type(cols[column]) is None:
            raise ValueError(f"discover: expected the column {column!r} of {path!r} to hold image "
                             f"bytes ({want}), got {cols[column]}; pass column= (--column) naming an "
                             f"image-bytes column")
        resolved = column
    else:
        names = IMAGE_COLUMNS + (VIDEO_COLUMNS if videos else ())
        named = [c for c in names if c in cols and _image_type(cols[c])]
        typed = [c for c, t in cols.items() if _image_type(t)]
        if named:
            resolved = named[0]
        elif len(typed) == 1:
            resolved = typed[0]
        else:
            got = f"{len(typed)} such columns ({', '.join(typed)})" if typed else f"none (columns: {listing})"
            raise ValueError(f"discover: expected one image-bytes column ({want}) in {path!r}, or one "
                             f"named {', '.join(names)}; got {got}; pass column= (--column)")
    if id_column is not None:
        if id_column not in cols:
            raise ValueError(f"discover: expected an id column {id_column!r} in {path!r}, got the "
                             f"columns {listing}; pass id_column= (--id-column) naming one, or none "
                             f"(ids row-N)")
        t = cols[id_column]
        view = getattr(pa.types, "is_string_view", None)
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
                or (view is not None and view(t))):
            raise ValueError(f"discover: expected the id column {id_column!r} of {path!r} to be a "
                             f"string or integer column, got {t}; pass id_column= naming one")
    return resolved


def _group_rows(md: Any, chunks: list[list[Chunk]] | str
                ) -> tuple[list[int], list[str | None], str | None]:
    """(rows of each row group, why a group's rows are not read (None: they are read), why the
    footer's row counts do not hold (None: they do)). A row group's row count is one varint of
    the footer, trusted only as far as its column chunks back it: every column chunk holds at
    least one value per row (exactly one in a column not repeated, more in a list), so a group
    gets the fewest of its declared rows and its chunks' value counts, and a group declaring
    more is damaged (its rows error rows, not read); footer column chunks that do not read give
    0 rows. Else a 1.5 KB file saying 1.9 billion rows in a row group was 1.9 billion error rows
    (found by fuzz/fuzz_parquet.py: 2 GB, minutes). A damaged footer can also say -19 rows."""
    said = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    rows: list[int] = []
    why: list[str | None] = []
    for rg, n in enumerate(said):
        cols = chunks[rg] if not isinstance(chunks, str) and rg < len(chunks) else []
        if not cols:
            rows.append(0)
            why.append(None)
            continue
        least = min(cols, key=lambda c: c.num_values)
        rows.append(min(max(0, n), least.num_values))
        why.append(None if n <= least.num_values else (
            f"expected row group {rg}'s row count to be at most its column chunks' value counts "
            f"(a row is at least one value of each column), got {n:,} rows in its metadata and "
            f"{least.num_values:,} value(s) in column {least.path!r}; its rows are not read; the "
            f"file is damaged; fix: rewrite or download it again"))
    if isinstance(chunks, str):
        broken = (f"could not read the column chunks from the footer ({chunks}), so none of its "
                  f"{md.num_rows:,} rows ({len(said)} row groups) are read")
    elif len(chunks) != len(said) or any(not g for g in chunks):
        broken = (f"got {len(chunks)} row groups' column chunks in the footer for "
                  f"{len(said)} row groups, {sum(map(len, chunks)):,} chunks in all; "
                  f"{sum(rows):,} of the {md.num_rows:,} rows it says are given")
    elif sum(rows) != md.num_rows or rows != said:
        broken = (f"got {md.num_rows:,} rows in the footer, {sum(said):,} in its row groups and "
                  f"{sum(rows):,} that their column chunks hold (all given, read or as error rows)")
    else:
        return rows, why, None
    return rows, why, (f"expected the parquet footer's row count to match its row groups and their "
                       f"column chunks, {broken}; the file is damaged; fix: rewrite or download it "
                       f"again")


def _parquet_count(unit: Unit) -> int:
    md = _parquet_file(unit.path).metadata
    fd = os.open(unit.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        rows, _, wrong = _group_rows(md, footer_chunks(fd))
    finally:
        os.close(fd)
    return sum(rows) + (wrong is not None)  # one error row when the footer's counts do not hold


def _parquet_samples(unit: Unit, start: int, stop: int | None) -> Iterator[Sample]:
    pa, _ = _pyarrow()
    pf = _parquet_file(unit.path, buffer_size=_PARQUET_BUFFER)
    assert unit.column is not None  # discover resolved it
    try:
        kind = _image_type(pf.schema_arrow.field(unit.column).type)
    except KeyError:
        kind = None
    if kind is None:
        raise ValueError(f"expected the image column {unit.column!r} in {unit.path!r}, got a file "
                         f"changed since discover(); run discover() again")
    cols = [unit.column] + ([unit.id_column] if unit.id_column else [])
    fd = os.open(unit.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        md = pf.metadata
        chunks = footer_chunks(fd)  # the footer's column chunks, read once
        group_rows, group_why, wrong = _group_rows(md, chunks)
        held = sum(group_rows)
        total = held if stop is None else min(stop, held)
        base = os.path.basename(unit.path)
        folder = os.path.dirname(unit.path)
        r0 = 0
        for rg, n_rg in enumerate(group_rows):
            lo, hi = max(start, r0), min(total, r0 + n_rg)
            if lo < hi:
                assert not isinstance(chunks, str)  # else every group holds 0 rows
                yield from _row_group(pa, pf, fd, unit, rg, r0, lo, hi, cols, kind, base, folder,
                                      group_why[rg] or chunks[rg], n_rg)
            r0 += n_rg
            if r0 >= total:
                break
    finally:
        os.close(fd)
    if wrong is not None and start <= held and (stop is None or stop > held):
        yield Sample(f"@row-{held}", f"{base}#{held}", None, wrong, damaged=True)


def _row_group(pa: Any, pf: Any, fd: int, unit: Unit, rg: int, r0: int, lo: int, hi: int,
               cols: list[str], kind: str, base: str, folder: str, group: list[Chunk] | str,
               n_rows: int) -> Iterator[Sample]:
    """Rows lo..hi (file indices) of row group rg, which starts at row r0. Its page headers are
    read first: pyarrow decompresses a row group's pages whole, so a page over the read bound
    (``_pages_over``) makes the rows error rows without being decompressed. ``group``: the row
    group's column chunks as the footer lists them (``thrift.footer_chunks``), or why its rows are
    not read (``_group_rows``: every row an error row with this message); ``n_rows``: its rows."""
    n = r0
    over = _pages_over(fd, unit, group, n_rows, cols, rg)
    if over is not None:
        rows, rest, damaged, ids_ok = over
        known = _fallback_ids(pf, unit, rg, r0, lo, hi) if ids_ok else [f"row-{k}" for k in range(lo, hi)]
        for k, sid in zip(range(lo, hi), known):
            yield Sample(sid, f"{base}#{k}", None, rows.get(k - r0, rest), damaged=damaged)
        return
    try:
        for batch in pf.iter_batches(batch_size=_PARQUET_BATCH, row_groups=[rg], columns=cols,
                                     use_threads=False):
            images = batch.column(0)
            ids = batch.column(1) if unit.id_column else None
            for j in range(batch.num_rows):
                if n >= hi:
                    return
                if n >= lo:
                    yield _parquet_row(unit, n, images[j], ids[j] if ids is not None else None, kind,
                                       base, folder)
                n += 1
        why = (f"expected {hi - r0:,} rows in row group {rg} (its metadata), got {n - r0:,} from "
               f"the reader; the file is damaged")
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged page
        why = (f"could not read row group {rg} of the parquet file ({type(e).__name__}: {e}); the "
               f"file is damaged")
    done = max(n, lo)
    for k, sid in zip(range(done, hi), _fallback_ids(pf, unit, rg, r0, done, hi)):
        yield Sample(sid, f"{base}#{k}", None, why, damaged=True)


def _page_limit(values: int, max_bytes: int) -> int:
    """The most uncompressed bytes a page of ``values`` values may hold (each within max_bytes,
    the page within max(max_bytes, _PARQUET_PAGE_MAX)), with slack for levels and lengths."""
    return (min(values * (max_bytes + 4), max(max_bytes, _PARQUET_PAGE_MAX))
            + _PARQUET_PAGE_SLACK + values)


def _pages_over(fd: int, unit: Unit, group: list[Chunk] | str, n_rows: int, cols: list[str],
                rg: int) -> tuple[dict[int, str], str, bool, bool] | None:
    """None when every page of the columns read is within ``_page_limit``; else (row in the
    group -> error for the rows of an over page, the error of the other rows, damaged, the id
    column may be read): a footer or page header that does not parse is damage (every row,
    damaged; so is a ``group`` that is a message)."""
    if isinstance(group, str):
        return {}, group, True, False
    rows: dict[int, str] = {}
    first: str | None = None
    broken: str | None = None
    ids_ok = True
    for col in group:
        path = col.path
        if not any(path == c or path.startswith(c + ".") for c in cols):
            continue
        is_id = bool(unit.id_column) and (path == unit.id_column
                                          or path.startswith(f"{unit.id_column}."))
        try:
            pages = chunk_pages(fd, col)
        except ValueError as e:
            broken = broken or (f"could not read the page headers of column {path!r} in row "
                                f"group {rg} ({e}); the file is damaged")
            ids_ok = ids_ok and not is_id
            continue
        for ptype, v0, nv, unc, comp in pages:
            if ptype not in (0, 2, 3) or unc <= _page_limit(nv, unit.max_bytes):
                continue
            span = range(n_rows) if ptype == 2 else range(v0, min(v0 + nv, n_rows))
            what = "dictionary page" if ptype == 2 else "page"
            msg = (f"expected parquet pages within the read bound (each value at most "
                   f"{unit.max_bytes:,} bytes, max_source_bytes), got a {what} of {unc:,} bytes "
                   f"uncompressed ({comp:,} compressed) holding {nv:,} value(s) of column "
                   f"{path!r} (rows {span.start}..{span.stop - 1} of row group {rg}); it is not "
                   f"decompressed; raise max_source_bytes if the file is trusted")
            for k in span:
                rows.setdefault(k, msg)
            first = first or f"rows {span.start}..{span.stop - 1} ({unc:,} bytes uncompressed)"
            ids_ok = ids_ok and not is_id
    if broken is not None:
        return {}, broken, True, ids_ok
    if first is None:
        return None
    rest = (f"not read: row group {rg} holds a parquet page over the read bound ({first}) and its "
            f"pages are read together; fix: raise max_source_bytes if the file is trusted, or "
            f"rewrite it with smaller row groups")
    return rows, rest, False, ids_ok


def _fallback_ids(pf: Any, unit: Unit, rg: int, r0: int, lo: int, hi: int) -> list[str]:
    """Ids of rows lo..hi when the image column cannot be read: the id column alone, else row-N."""
    default = [f"row-{k}" for k in range(lo, hi)]
    if not unit.id_column:
        return default
    try:
        vals = pf.read_row_group(rg, columns=[unit.id_column]).column(0).to_pylist()[lo - r0: hi - r0]
    except Exception:  # the id column is damaged too
        return default
    if len(vals) != hi - lo:
        return default
    return [str(v) if v is not None else d for v, d in zip(vals, default)]


def _parquet_row(unit: Unit, n: int, image: Any, id_value: Any, kind: str, base: str,
                 folder: str) -> Sample:
    sid = f"row-{n}"
    src = f"{base}#{n}"
    video = unit.column in VIDEO_COLUMNS
    if id_value is not None:
        v = id_value.as_py()
        if v is None:
            return Sample(sid, src, None, f"expected a value in the id column {unit.id_column!r}, got "
                                          f"null (row {n}); fill the ids or pass no id_column", video=video)
        sid = str(v)
    if not image.is_valid:
        return Sample(sid, src, None, f"expected image bytes in column {unit.column!r}, got null "
                                      f"(row {n})", video=video)
    path = None
    raw = image
    if kind == "struct":
        raw = image["bytes"]
        p = image["path"].as_py() if image.type.get_field_index("path") >= 0 else None
        path = p if isinstance(p, str) and p else None
        video = video or (path is not None and is_video_name(path))
    if raw.is_valid:
        buf = raw.as_buffer() if hasattr(raw, "as_buffer") else None
        size = buf.size if buf is not None else len(raw.as_py())
        if size > unit.max_bytes:
            return Sample(sid, src, None, f"expected image bytes of at most {unit.max_bytes:,} "
                                          f"(max_source_bytes), got {size:,} (row {n}); raise "
                                          f"max_source_bytes if the file is trusted", video=video)
        data = buf.to_pybytes() if buf is not None else bytes(raw.as_py())
        return Sample(sid, src, data, None, video=video)
    if path is None:
        return Sample(sid, src, None, f"expected image bytes or a path in column {unit.column!r}, "
                                      f"got both null (row {n})", video=video)
    data, err = read_unit_path(unit, folder, path)
    if err is not None:
        err = f"{err} (row {n}: bytes null, path {path!r}, read relative to the parquet file)"
    return Sample(sid, src, data, err, video=video)


register_reader("parquet", _parquet_count, _parquet_samples)
