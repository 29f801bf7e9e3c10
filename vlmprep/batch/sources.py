"""Inputs of a batch job: ``discover(inputs)`` -> one ``Unit`` per input; a Unit yields ``Sample``.

    units = discover(["photos/", "shards/000000.tar", "train.parquet", "paths.txt"])
    for u in units:
        n = u.count()                          # cheap: a listing, tar headers, parquet metadata
        for s in u.samples(0, 1000):           # s.id, s.source, s.data (encoded bytes) or s.error
            ...

A reader only reads bytes: nothing here decodes an image (the Processor does, and reports what
it cannot decode). A per-item problem (a missing file, a tar group without an image, a parquet
null, a value over the size cap, a corrupt tar member or parquet page) is a ``Sample`` with
``data=None`` and ``error`` set, never an exception out of ``samples()``. An input that cannot be
read at all (missing, not a tar / parquet, an image column of the wrong type) is a ValueError
from ``discover()`` naming it. Every read is bounded by ``max_bytes`` (default: the decode op's
``max_source_bytes`` default, vlmprep.ops.DEFAULT_MAX_SOURCE_BYTES; pass the Processor's own).

Kinds, ids and order (the same for every call, on every machine holding the same files):

- ``folder`` (a directory): every file under it, recursively, whose name matches ``glob``;
  default: the image extensions ``IMAGE_EXTENSIONS`` (any case). A ``glob`` with a "/" is matched
  against the relative path, one without against the file name; a leading ``**/`` also matches
  at the top level (fnmatch rules: ``*`` crosses "/"; case-sensitive). Names starting with "."
  (files and folders) are skipped. Symbolic links are followed; a folder already visited (a
  link loop, or two links to one folder) is listed once. Id = the relative posix path
  ("a/b/c.jpg"; bytes that are not UTF-8 are written as ``\\xNN``). Order: sorted by relative
  path. A sub-folder that cannot be listed is one error sample, id = its path + "/".
- ``tar`` (``.tar``, ``.tar.gz``, ``.tgz``; WebDataset): regular members grouped by key, as
  webdataset does: key = the member path up to the first "." of its base name ("d/000001" for
  "d/000001.seg.png"), extension = the rest, lower-cased; members without a "." in the base name
  are ignored. Id = key. Order: the order in which keys first appear in the tar. The image is
  the group's member with the first extension of ``IMAGE_EXTENSIONS`` present (jpg, jpeg, png,
  webp, ...); a group without one is an error sample. A repeated member (same key and
  extension) keeps the first. Unreadable data after a corrupt header is one error sample, id
  "@{offset}".
- ``parquet`` (``.parquet``, ``.pq``): rows in file order. Image column = ``column``, else the
  first of ``IMAGE_COLUMNS`` (image, jpg, jpeg, png, webp, img, bytes) whose type holds images,
  else the only such column. Types: binary (large_binary, binary_view) and the Hugging Face
  datasets ``struct<bytes: binary, path: string>`` (its bytes; when they are null, the file at
  ``path``, relative to the parquet file's folder, absolute as it is). Id = str(value of ``id_column``) (a string or
  integer column; a null id is an error sample with the default id) else ``row-{n}`` (n = the
  0-based row index in the file). Ids from ``id_column`` must be unique in a file; that is not
  checked here.
- ``list`` (``.txt``, ``.lst``): one image path per line, relative to the list file's folder
  (absolute paths as they are); blank lines and lines starting with "#" are skipped; spaces at
  both ends are stripped; UTF-8. Id = the line. A line repeated gets ``#2``, ``#3``, ... on its
  later ids (the image is read each time, as listed). Order: the lines' order.

``Sample.source`` (for messages): "photos/a/b.jpg", "000000.tar#000001", "train.parquet#17"
(row index), "paths.txt#3" (line number, from 1).

Unit names (for shard names): the input's base name without its extension ("photos",
"000000", "train"), characters other than letters, digits, ".", "_" and "-" replaced by "_",
at most 80 characters. Unique in the job, compared without case: the second "x" (in input
order) is "x-2", then "x-3", ... (skipping names already taken).

Inputs: a folder, a file of a kind above, or a pattern with * ? [ (matched when no such path
exists; sorted). The same file or folder given twice is a ValueError.
"""
from __future__ import annotations

import fnmatch
import functools
import glob as globlib
import os
import re
import stat
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ImageError
from ..io.inputs import read_image_file
from ..ops import DEFAULT_MAX_SOURCE_BYTES

__all__ = ["Sample", "Unit", "discover", "KINDS", "IMAGE_EXTENSIONS", "IMAGE_COLUMNS"]

KINDS = ("folder", "tar", "parquet", "list")
#: File extensions of images (folder default glob; the tar image member priority, in order).
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff")
#: Parquet image column names tried in order when no column is given.
IMAGE_COLUMNS = ("image", "jpg", "jpeg", "png", "webp", "img", "bytes")
_SUFFIXES = {".tar": "tar", ".tar.gz": "tar", ".tgz": "tar", ".parquet": "parquet", ".pq": "parquet",
             ".txt": "list", ".lst": "list"}
# webdataset's base_plus_ext: key = path up to the first dot of the base name, ext = the rest.
_WDS_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_MAX = 80
_PARQUET_BATCH = 8  # rows per decoded parquet batch: bounds memory to a few images ...
_PARQUET_BUFFER = 1 << 20  # ... and pages streamed in 1 MiB reads, not a whole column chunk at once
_TAR_TAIL = 64 << 10  # more unread bytes than this after the last tar header: a corrupt header


@dataclass(frozen=True)
class Sample:
    """One input image, encoded: ``data`` (bytes, never decoded here) or ``error`` (why not)."""
    id: str
    source: str
    data: bytes | None
    error: str | None = None

    def __repr__(self) -> str:
        what = f"{len(self.data)} bytes" if self.data is not None else f"error={self.error!r}"
        return f"Sample(id={self.id!r}, source={self.source!r}, {what})"


@dataclass(frozen=True)
class Unit:
    """One input (a folder, tar, parquet file or path list): a picklable description (paths and
    options only). A process lists a folder once (discover() lists it again) and scans a tar or
    list file once per version (by path, size and mtime)."""
    name: str
    kind: str
    path: str
    glob: str | None = None        # folder: the file pattern (None: IMAGE_EXTENSIONS)
    column: str | None = None      # parquet: the image column (resolved by discover)
    id_column: str | None = None   # parquet: the id column (None: "row-{n}")
    max_bytes: int = DEFAULT_MAX_SOURCE_BYTES

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Unit: expected kind one of {KINDS}, got {self.kind!r}; make units "
                             f"with discover()")

    def count(self) -> int:
        """Number of samples (a listing, tar headers, parquet metadata; no image is read)."""
        return _READERS[self.kind][0](self)

    def samples(self, start: int = 0, stop: int | None = None) -> Iterator[Sample]:
        """Samples ``start`` (inclusive) to ``stop`` (exclusive; None: the end), in the unit's
        fixed order: ``list(u.samples(a, b)) == list(u.samples())[a:b]``."""
        for name, v in (("start", start), ("stop", stop)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"Unit.samples: expected {name} an int >= 0, got {v!r}; "
                                 f"pass sample indices (0 .. count())")
        if stop is not None and stop <= start:
            return iter(())
        return _READERS[self.kind][1](self, start, stop)


# -- discover ------------------------------------------------------------------------------------
def discover(inputs: Sequence[str] | str | os.PathLike, *, glob: str | None = None,
             column: str | None = None, id_column: str | None = None,
             max_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> list[Unit]:
    """The job's units, one per input, in input order (patterns expanded, sorted).

    Each input is opened here (a folder listed, a tar's first header, a parquet footer and
    schema, a list file read), so an input that cannot be used is a ValueError now, naming it,
    not an error on every sample later. ``glob`` applies to folders, ``column`` / ``id_column``
    to parquet files; ``max_bytes`` caps every sample's bytes (the Processor's
    ``pipeline["decode"].max_source_bytes``).
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [os.fspath(inputs)]
    inputs = list(inputs)
    if not inputs:
        raise ValueError("discover: expected at least one input, got none; pass folders, .tar, "
                         ".parquet or .txt files")
    for name, v in (("glob", glob), ("column", column), ("id_column", id_column)):
        if v is not None and (not isinstance(v, str) or not v):
            raise ValueError(f"discover: expected {name} a non-empty str or None, got {v!r}")
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
        raise ValueError(f"discover: expected max_bytes an int >= 1, got {max_bytes!r}")
    units: list[Unit] = []
    seen: dict[str, str] = {}
    taken: set[str] = set()
    for given in inputs:
        for path in _expand(given):
            real = os.path.realpath(path)
            if real in seen:
                raise ValueError(f"discover: expected each input once, got {path!r} twice (also "
                                 f"as {seen[real]!r}); remove the repeat")
            seen[real] = path
            unit = _open(path, glob, column, id_column, max_bytes)
            name = _unique(_stem(unit.path, unit.kind), taken)
            units.append(replace(unit, name=name))
    return units


def _expand(given: Any) -> list[str]:
    try:
        path = os.fspath(given)
    except TypeError:
        raise ValueError(f"discover: expected each input a path (str), got {type(given).__name__}; "
                         f"pass folder / file paths") from None
    if not isinstance(path, str) or not path:
        raise ValueError(f"discover: expected each input a non-empty str path, got {given!r}")
    if os.path.lexists(path) or not any(c in path for c in "*?["):
        return [path]
    found = sorted(globlib.glob(path, recursive=True))
    if not found:
        raise ValueError(f"discover: expected the pattern {path!r} to match inputs, got no match; "
                         f"check the pattern and the current folder ({os.getcwd()})")
    return found


def _kind(path: str) -> str | None:
    low = path.lower()
    for suf in sorted(_SUFFIXES, key=len, reverse=True):
        if low.endswith(suf):
            return _SUFFIXES[suf]
    return None


def _open(path: str, glob: str | None, column: str | None, id_column: str | None,
          max_bytes: int) -> Unit:
    """Classify and check one input -> its Unit (name not yet assigned)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise ValueError(f"discover: expected an input folder or file at {path!r}, got "
                         f"{e.strerror or e}; check the path") from None
    apath = os.path.abspath(path)
    if stat.S_ISDIR(st.st_mode):
        unit = Unit("", "folder", apath, glob=glob, max_bytes=max_bytes)
        _check_folder(unit)
        return unit
    kind = _kind(path)
    if kind is None or not stat.S_ISREG(st.st_mode):
        got = "not a regular file" if kind else f"the file {os.path.basename(path)!r}"
        raise ValueError(f"discover: expected a folder of images, a WebDataset .tar, a .parquet file "
                         f"or a .txt / .lst list of paths at {path!r}, got {got}; pass one of those")
    if kind == "tar":
        unit = Unit("", "tar", apath, max_bytes=max_bytes)
        _tar_scan(unit.path)  # its headers must read (cached for count and samples)
        return unit
    if kind == "list":
        unit = Unit("", "list", apath, max_bytes=max_bytes)
        _list_entries(unit.path)
        return unit
    col = _parquet_resolve(apath, column, id_column)
    return Unit("", "parquet", apath, column=col, id_column=id_column, max_bytes=max_bytes)


def _stem(path: str, kind: str) -> str:
    base = os.path.basename(path.rstrip("/\\")) or kind
    if kind != "folder":
        low = base.lower()
        for suf in sorted(_SUFFIXES, key=len, reverse=True):
            if low.endswith(suf):
                base = base[: -len(suf)]
                break
    name = _NAME_BAD.sub("_", base).lstrip(".-")[:_NAME_MAX]
    return name or kind


def _unique(name: str, taken: set[str]) -> str:
    out, k = name, 1
    while out.casefold() in taken:
        k += 1
        out = f"{name}-{k}"
    taken.add(out.casefold())
    return out


def _text(s: str) -> str:
    """A str that encodes as UTF-8: undecodable file-name bytes (surrogate escapes) as \\xNN."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _read_file(path: str, max_bytes: int) -> tuple[bytes | None, str | None]:
    try:
        return read_image_file(path, max_bytes), None
    except ImageError as e:
        return None, str(e)


# -- folder --------------------------------------------------------------------------------------
def _matches(rel: str, name: str, pattern: str | None) -> bool:
    if pattern is None:
        return name.rpartition(".")[2].lower() in IMAGE_EXTENSIONS and "." in name
    target = rel if "/" in pattern else name
    if fnmatch.fnmatchcase(target, pattern):
        return True
    return pattern.startswith("**/") and fnmatch.fnmatchcase(rel, pattern[3:])


_LISTINGS: dict[tuple[str, str | None], tuple[tuple[str, str | None], ...]] = {}


def _listing(unit: Unit, fresh: bool = False) -> tuple[tuple[str, str | None], ...]:
    """The folder's listing: made once per process (again when ``fresh``: discover() sees the
    folder as it is now), so every part of a job reads the same list."""
    key = (unit.path, unit.glob)
    got = None if fresh else _LISTINGS.get(key)
    if got is None:
        try:
            got = _folder_listing(unit.path, unit.glob)
        except OSError as e:
            raise ValueError(f"expected a readable folder at {unit.path!r}, got {e.strerror or e}; "
                             f"check the path and its permissions") from None
        if len(_LISTINGS) >= 16:
            _LISTINGS.pop(next(iter(_LISTINGS)))
        _LISTINGS[key] = got
    return got


def _folder_listing(root: str, pattern: str | None) -> tuple[tuple[str, str | None], ...]:
    """(relative path, listing error or None) of the matching files, sorted by path."""
    found: list[tuple[str, str | None]] = []
    visited: set[tuple[int, int]] = set()
    stack = [""]  # depth first over sorted names: which link to a folder lists it is fixed
    while stack:
        rel_dir = stack.pop()
        here = os.path.join(root, rel_dir) if rel_dir else root
        try:
            st = os.stat(here)
            if (st.st_dev, st.st_ino) in visited:  # a link loop, or a second link to a folder
                continue
            visited.add((st.st_dev, st.st_ino))
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            if not rel_dir:
                raise
            found.append((rel_dir + "/", f"could not list this folder: {e.strerror or e}; check "
                                         f"its permissions"))
            continue
        subdirs = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = False
            if is_dir:
                subdirs.append(rel)
            elif _matches(rel, entry.name, pattern):
                found.append((rel, None))
        stack.extend(reversed(subdirs))
    found.sort()
    return tuple(found)


def _check_folder(unit: Unit) -> None:
    if _listing(unit, fresh=True):
        return
    want = (f"matching {unit.glob!r}" if unit.glob
            else f"with an image extension ({', '.join(IMAGE_EXTENSIONS)})")
    hint = ""
    try:
        if {_kind(f) for f in os.listdir(unit.path)} & {"tar", "parquet"}:
            hint = " (it holds .tar / .parquet files: pass those files, e.g. DIR/*.tar)"
    except OSError:
        pass
    raise ValueError(f"discover: expected files {want} under the folder {unit.path!r}, got none"
                     f"{hint}; check the folder, or pass glob= (--glob)")


def _folder_count(unit: Unit) -> int:
    return len(_listing(unit))


def _folder_samples(unit: Unit, start: int, stop: int | None) -> Iterator[Sample]:
    base = os.path.basename(unit.path)
    for rel, err in _listing(unit)[start:stop]:
        sid = _text(rel)
        data, err2 = (None, err) if err else _read_file(os.path.join(unit.path, rel), unit.max_bytes)
        yield Sample(sid, f"{base}/{sid}", data, err2)


# -- tar (WebDataset) ----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Group:
    key: str
    member: tarfile.TarInfo | None
    error: str | None


def _tar_scan(path: str) -> tuple[_Group, ...]:
    try:
        st = os.stat(path)
    except OSError as e:
        raise ValueError(f"expected a readable tar file at {path!r}, got {e.strerror or e}; "
                         f"check the path") from None
    return _tar_scan_cached(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _tar_scan_cached(path: str, size: int, mtime_ns: int) -> tuple[_Group, ...]:
    """The tar's groups from its headers only (no member data read), in first-seen key order."""
    groups: dict[str, dict[str, tarfile.TarInfo]] = {}
    try:
        tf = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError, EOFError, ValueError) as e:
        raise ValueError(f"discover: expected a tar file (WebDataset shard) at {path!r}, got one "
                         f"that does not open ({type(e).__name__}: {e}); check or rebuild the "
                         f"file") from None
    tail_error: _Group | None = None
    compressed = _compressed(path)
    with tf:
        try:
            for m in tf:
                if not m.isreg():
                    continue
                hit = _WDS_KEY.match(m.name)
                if hit is None:
                    continue
                groups.setdefault(hit.group(1), {}).setdefault(hit.group(2).lower(), m)
        except (tarfile.TarError, OSError, EOFError, ValueError) as e:
            off = tf.offset
            if off < size or compressed:  # else the file ends inside the last member: its sample says so
                tail_error = _Group(f"@{off}", None, f"unreadable tar header at byte {off} "
                                                     f"({type(e).__name__}: {e}); the members after "
                                                     f"it are not read; rebuild the shard")
        if tail_error is None and not compressed:
            tail_error = _tar_tail(path, tf.offset, size)
    out: list[_Group] = []
    for key, members in groups.items():
        ext = next((e for e in IMAGE_EXTENSIONS if e in members), None)
        if ext is None:
            out.append(_Group(key, None, f"no image member in group (members: "
                                         f"{', '.join(sorted(members))}); expected one named "
                                         f"KEY.<{'|'.join(IMAGE_EXTENSIONS)}>"))
        else:
            out.append(_Group(key, members[ext], None))
    if tail_error is not None:
        out.append(tail_error)
    return tuple(out)


def _compressed(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(6)
    return head[:2] == b"\x1f\x8b" or head[:3] == b"BZh" or head == b"\xfd7zXZ\x00"


def _tar_tail(path: str, offset: int, size: int) -> _Group | None:
    """tarfile stops at the first bad header as if the archive ended: more than a record of
    non-zero bytes after that point is a corrupt header, not padding."""
    rest = size - offset
    if rest <= 0:
        return None
    bad = rest > _TAR_TAIL
    if not bad:
        with open(path, "rb") as f:
            f.seek(offset)
            bad = f.read(rest).strip(b"\0") != b""
    if not bad:
        return None
    return _Group(f"@{offset}", None, f"unreadable tar data from byte {offset} ({rest} bytes: a "
                                      f"corrupt header); the members after it are not read; rebuild "
                                      f"the shard")


def _tar_count(unit: Unit) -> int:
    return len(_tar_scan(unit.path))


def _tar_samples(unit: Unit, start: int, stop: int | None) -> Iterator[Sample]:
    groups = _tar_scan(unit.path)[start:stop]
    base = os.path.basename(unit.path)
    tf: tarfile.TarFile | None = None
    try:
        for g in groups:
            src = f"{base}#{g.key}"
            m = g.member
            if m is None:
                yield Sample(g.key, src, None, g.error)
                continue
            if m.size > unit.max_bytes:
                yield Sample(g.key, src, None, f"expected an image member of at most {unit.max_bytes:,} "
                                               f"bytes (max_source_bytes), got {m.name!r} of {m.size:,} "
                                               f"bytes; raise max_source_bytes if the shard is trusted")
                continue
            try:
                if tf is None:
                    tf = tarfile.open(unit.path, "r:*")
                f = tf.extractfile(m)
                data = f.read(m.size) if f is not None else None
                if data is None or len(data) != m.size:
                    raise tarfile.ReadError("unexpected end of data")
            except (tarfile.TarError, OSError, EOFError, ValueError) as e:
                yield Sample(g.key, src, None, f"could not read tar member {m.name!r} "
                                               f"({type(e).__name__}: {e}); the shard is damaged")
                if tf is not None:
                    tf.close()
                    tf = None  # a compressed stream may be left mid-block: reopen for the next
                continue
            yield Sample(g.key, src, data, None)
    finally:
        if tf is not None:
            tf.close()


# -- parquet -------------------------------------------------------------------------------------
def _pyarrow():
    try:
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


def _parquet_resolve(path: str, column: str | None, id_column: str | None) -> str:
    """The image column's name (checked, or auto-detected); checks id_column too."""
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
        named = [c for c in IMAGE_COLUMNS if c in cols and _image_type(cols[c])]
        typed = [c for c, t in cols.items() if _image_type(t)]
        if named:
            resolved = named[0]
        elif len(typed) == 1:
            resolved = typed[0]
        else:
            got = f"{len(typed)} such columns ({', '.join(typed)})" if typed else f"none (columns: {listing})"
            raise ValueError(f"discover: expected one image-bytes column ({want}) in {path!r}, or one "
                             f"named {', '.join(IMAGE_COLUMNS)}; got {got}; pass column= (--column)")
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


def _parquet_count(unit: Unit) -> int:
    return int(_parquet_file(unit.path).metadata.num_rows)


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
    md = pf.metadata
    total = md.num_rows if stop is None else min(stop, md.num_rows)
    base = os.path.basename(unit.path)
    folder = os.path.dirname(unit.path)
    r0 = 0
    for rg in range(md.num_row_groups):
        n_rg = md.row_group(rg).num_rows
        lo, hi = max(start, r0), min(total, r0 + n_rg)
        if lo < hi:
            yield from _row_group(pa, pf, unit, rg, r0, lo, hi, cols, kind, base, folder)
        r0 += n_rg
        if r0 >= total:
            break


def _row_group(pa: Any, pf: Any, unit: Unit, rg: int, r0: int, lo: int, hi: int, cols: list[str],
               kind: str, base: str, folder: str) -> Iterator[Sample]:
    """Rows lo..hi (file indices) of row group rg, which starts at row r0."""
    n = r0
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
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged page
        why = (f"could not read row group {rg} of the parquet file ({type(e).__name__}: {e}); the "
               f"file is damaged")
        done = max(n, lo)
        for k, sid in zip(range(done, hi), _fallback_ids(pf, unit, rg, r0, done, hi)):
            yield Sample(sid, f"{base}#{k}", None, why)


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
    if id_value is not None:
        v = id_value.as_py()
        if v is None:
            return Sample(sid, src, None, f"expected a value in the id column {unit.id_column!r}, got "
                                          f"null (row {n}); fill the ids or pass no id_column")
        sid = str(v)
    if not image.is_valid:
        return Sample(sid, src, None, f"expected image bytes in column {unit.column!r}, got null "
                                      f"(row {n})")
    path = None
    raw = image
    if kind == "struct":
        raw = image["bytes"]
        p = image["path"].as_py() if image.type.get_field_index("path") >= 0 else None
        path = p if isinstance(p, str) and p else None
    if raw.is_valid:
        buf = raw.as_buffer() if hasattr(raw, "as_buffer") else None
        size = buf.size if buf is not None else len(raw.as_py())
        if size > unit.max_bytes:
            return Sample(sid, src, None, f"expected image bytes of at most {unit.max_bytes:,} "
                                          f"(max_source_bytes), got {size:,} (row {n}); raise "
                                          f"max_source_bytes if the file is trusted")
        data = buf.to_pybytes() if buf is not None else bytes(raw.as_py())
        return Sample(sid, src, data, None)
    if path is None:
        return Sample(sid, src, None, f"expected image bytes or a path in column {unit.column!r}, "
                                      f"got both null (row {n})")
    data, err = _read_file(os.path.join(folder, path), unit.max_bytes)
    if err is not None:
        err = f"{err} (row {n}: bytes null, path {path!r}, read relative to the parquet file)"
    return Sample(sid, src, data, err)


# -- list of paths -------------------------------------------------------------------------------
def _list_entries(path: str) -> tuple[tuple[str, int, str], ...]:
    try:
        st = os.stat(path)
    except OSError as e:
        raise ValueError(f"expected a readable list file at {path!r}, got {e.strerror or e}; check "
                         f"the path") from None
    return _list_cached(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _list_cached(path: str, size: int, mtime_ns: int) -> tuple[tuple[str, int, str], ...]:
    """(id, line number, path to read) per listed image."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"discover: expected a UTF-8 text list of paths at {path!r}, got bytes that "
                         f"are not UTF-8 (at byte {e.start}); write the list as UTF-8") from None
    except OSError as e:
        raise ValueError(f"discover: expected a readable list file at {path!r}, got "
                         f"{e.strerror or e}; check its permissions") from None
    folder = os.path.dirname(path)
    seen: dict[str, int] = {}
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        k = seen[line] = seen.get(line, 0) + 1
        out.append((line if k == 1 else f"{line}#{k}", lineno, os.path.join(folder, line)))
    return tuple(out)


def _list_count(unit: Unit) -> int:
    return len(_list_entries(unit.path))


def _list_samples(unit: Unit, start: int, stop: int | None) -> Iterator[Sample]:
    base = os.path.basename(unit.path)
    for sid, lineno, p in _list_entries(unit.path)[start:stop]:
        data, err = _read_file(p, unit.max_bytes)
        yield Sample(sid, f"{base}#{lineno}", data, err)


_READERS = {"folder": (_folder_count, _folder_samples), "tar": (_tar_count, _tar_samples),
            "parquet": (_parquet_count, _parquet_samples), "list": (_list_count, _list_samples)}
