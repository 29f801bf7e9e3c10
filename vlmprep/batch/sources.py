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

Nothing is lost silently. A part of an input that cannot be read (a damaged or cut tar region,
a parquet row group whose pages do not read, rows a reader did not give) is an error sample with
``damaged=True``, and the readable rest is still read; a batch job that meets one ends with
``complete`` False. ``count()`` always equals the samples ``samples()`` gives. A tar, parquet or
list file changed after discover() counted it (``Unit.stamp``: size and content fingerprint) is
a ValueError from ``count()`` / ``samples()``, never samples shifted to another version.

Kinds, ids and order (the same for every call, on every machine holding the same files):

- ``folder`` (a directory): every file under it, recursively, whose name matches ``glob``;
  default: the image extensions ``IMAGE_EXTENSIONS`` (any case). A ``glob`` with a "/" is matched
  against the relative path, one without against the file name; a leading ``**/`` also matches
  at the top level (fnmatch rules: ``*`` crosses "/"; case-sensitive). Names starting with "."
  (files and folders) are skipped. Symbolic links are followed; a folder already visited (a
  link loop, or two links to one folder) is listed once. Id = the relative posix path
  ("a/b/c.jpg"; bytes that are not UTF-8 are written as ``\\xNN``). Order: sorted by relative
  path. A sub-folder that cannot be listed is one error sample, id = its path + "/".
- ``tar`` (``.tar``, ``.tar.gz``, ``.tgz``; WebDataset; gzip, bz2 or xz detected by content):
  regular members grouped by key, as webdataset does: key = the member path up to the first "."
  of its base name ("d/000001" for "d/000001.seg.png"), extension = the rest, lower-cased;
  members without a "." in the base name are ignored. Id = key. Order: the order in which keys
  first appear in the tar. The image is the group's member with the first extension of
  ``IMAGE_EXTENSIONS`` present (jpg, jpeg, png, webp, ...); a group without one is an error
  sample, and so is one whose image member is a symbolic or hard link (never followed; a link
  that is not the image is ignored). A repeated member (same key and extension) keeps the
  first. Headers: ustar, GNU
  (long names), pax (``path``, ``size``; global headers ignored), v7; read by our own walker
  (``_tar_walk``), member data read by offset. Damage (``damaged`` error samples, messages
  expected / got / fix): bytes that are not a valid header where one must be are one error
  sample, id "@{offset}" (offset in the tar's bytes; of a compressed tar, in its decompressed
  stream), and the walk resumes at the next valid ustar header found by scanning forward (any
  alignment: a span cut out shifts the rest); a group with a member that is cut (the data ends
  inside it) or whose size is false (a valid header lies inside its stated data or padding; a
  pax size that disagrees with its header's size, or that no header after it confirms) is an
  error sample;
  non-zero bytes after the end-of-archive zero blocks, a tar that ends without them, and a
  compressed stream that is cut, corrupt or followed by other bytes are "@{offset}" error
  samples. Zero blocks followed by a valid header read on (concatenated tars). discover() also
  counts the tar's headers independently (a plain scan for every valid ustar header, following
  no size) and refuses, naming the tar, one holding a header the walk did not read (a size that
  lands exactly on a later header, or an uncompressed tar stored inside the shard).
- ``parquet`` (``.parquet``, ``.pq``): rows in file order. Image column = ``column``, else the
  first of ``IMAGE_COLUMNS`` (image, jpg, jpeg, png, webp, img, bytes) whose type holds images,
  else the only such column. Types: binary (large_binary, binary_view) and the Hugging Face
  datasets ``struct<bytes: binary, path: string>`` (its bytes; when they are null, the file at
  ``path``, relative to the parquet file's folder, under the input root: below). Id =
  str(value of ``id_column``) (a string or integer column; a null id is an error sample with
  the default id) else ``row-{n}`` (n = the 0-based row index in the file). Ids from
  ``id_column`` must be unique in a file; that is not checked here. Before pyarrow reads a row
  group, the page headers of the columns read are read from the file (``_chunk_pages``): a page
  whose uncompressed size is over ``_page_limit`` (more than its values can hold at
  ``max_bytes`` each, or more than max(max_bytes, 256 MiB)) is never decompressed: its rows are
  error samples naming the page, and the row group's other rows error samples saying why
  (pyarrow reads a row group's pages together). Page headers that do not parse, a damaged page,
  and rows a row group's metadata counts that pyarrow does not give are ``damaged`` error
  samples; a footer whose row count disagrees with its row groups is one more, id
  "@row-{n}".
- ``list`` (``.txt``, ``.lst``): one image path per line, relative to the list file's folder,
  under the input root (below); blank lines and lines starting with "#" are skipped; spaces at
  both ends are stripped; UTF-8. Id = the line. A line repeated gets ``#2``, ``#3``, ... on its
  later ids (the image is read each time, as listed). Order: the lines' order. The entries are
  counted again by line ends (\\n, \\r\\n, \\r): a line holding another line break (\\x0b,
  \\x85, \\u2028, ...) is a ValueError, not two paths.

Paths inside data (list lines, parquet ``path`` values) are data, not the caller's choice: one
is read only when it resolves under the unit's input root (``discover(input_root=)``, ``vlmprep
run --input-root``; default: the input's own folder): joined to the input's folder, symbolic links
resolved (realpath), then compared. An absolute path elsewhere, a ``..`` leaving the root, a link
inside the root to a file outside it, and anything under ``NEVER_READ`` (/proc, /dev, /sys:
never, whatever the root) are error samples "expected a path under ROOT ..., got ...". The open
does not follow a link as the last component (O_NOFOLLOW) and, on Linux, the opened file's own
path (/proc/self/fd) is checked again, so a path swapped for a link after the check is refused
(``_read_data_path``). Tar members are never resolved as paths (links are not followed). No
error here or in the decoder's messages quotes the bytes read.

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

import bisect
import bz2
import errno
import fnmatch
import functools
import glob as globlib
import hashlib
import lzma
import os
import re
import stat
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ImageError
from ..io.inputs import read_at_most, read_image_file, stat_image_file
from ..ops import DEFAULT_MAX_SOURCE_BYTES

__all__ = ["Sample", "Unit", "discover", "read_data_path", "KINDS", "IMAGE_EXTENSIONS",
           "IMAGE_COLUMNS", "NEVER_READ"]

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
#: Never read through a path inside data, whatever the input root: kernel and device files.
NEVER_READ = ("/proc", "/dev", "/sys")
_OPEN_DATA = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
              | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))


@dataclass(frozen=True)
class Sample:
    """One input image, encoded: ``data`` (bytes, never decoded here) or ``error`` (why not)."""
    id: str
    source: str
    data: bytes | None
    error: str | None = None
    # an error for a part of the input that could not be read (a damaged tar region or parquet
    # page): the job that meets one does not report complete
    damaged: bool = False

    def __repr__(self) -> str:
        what = f"{len(self.data)} bytes" if self.data is not None else f"error={self.error!r}"
        return f"Sample(id={self.id!r}, source={self.source!r}, {what}{', damaged' * self.damaged})"


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
    # list / parquet: the folder every path inside the data must resolve under (a realpath;
    # None: the input's own folder, resolved when read)
    input_root: str | None = None
    # tar / parquet / list: (size, fingerprint) of the file when discover() counted it; a reader
    # that finds it changed raises ValueError (its samples would shift), never reads the new one
    stamp: tuple[int, str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Unit: expected kind one of {KINDS}, got {self.kind!r}; make units "
                             f"with discover()")

    def count(self) -> int:
        """Number of samples (a listing, tar headers, parquet metadata; no image is read)."""
        _check_stamp(self)
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
        _check_stamp(self)
        return _READERS[self.kind][1](self, start, stop)


def _fingerprint(path: str, size: int) -> str:
    """A file's content fingerprint: all of it up to 1 MiB, else its first and last 64 KiB,
    hashed; with its size, what says "the same file" on every machine (mtimes differ between
    copies)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        if size <= 1 << 20:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        else:
            h.update(f.read(64 << 10))
            f.seek(size - (64 << 10))
            h.update(f.read(64 << 10))
    return h.hexdigest()


def _stamp(path: str) -> tuple[int, str]:
    try:
        size = os.stat(path).st_size
        return size, _fingerprint(path, size)
    except OSError as e:
        raise ValueError(f"expected a readable input file at {path!r}, got {e.strerror or e}; check "
                         f"the path and its permissions") from None


def _check_stamp(unit: Unit) -> None:
    if unit.stamp is None:
        return
    now = _stamp(unit.path)
    if now != unit.stamp:
        raise ValueError(f"expected the {unit.kind} input {unit.path!r} unchanged since discover() "
                         f"counted it ({unit.stamp[0]:,} bytes, fingerprint {unit.stamp[1]}), got "
                         f"{now[0]:,} bytes, fingerprint {now[1]}: its samples would shift; fix: "
                         f"run the job again on the file as it is now (--overwrite), or restore it")


# -- discover ------------------------------------------------------------------------------------
def discover(inputs: Sequence[str] | str | os.PathLike, *, glob: str | None = None,
             column: str | None = None, id_column: str | None = None,
             max_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
             input_root: str | os.PathLike | None = None) -> list[Unit]:
    """The job's units, one per input, in input order (patterns expanded, sorted).

    Each input is opened here (a folder listed, a tar's headers walked and counted again by a
    scan of all its bytes, a parquet footer and schema, a list file read and its lines counted
    again), so an input that cannot be used is a ValueError now, naming it,
    not an error on every sample later. ``glob`` applies to folders, ``column`` / ``id_column``
    to parquet files; ``max_bytes`` caps every sample's bytes (the Processor's
    ``pipeline["decode"].max_source_bytes``). ``input_root``: the folder that paths inside the
    data (list lines, parquet ``path`` values) must resolve under (None: each input's own
    folder); a folder that is missing, or is under /proc, /dev or /sys, is a ValueError.
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
    root = None if input_root is None else _check_root(input_root)
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
            units.append(replace(unit, name=name, input_root=root))
    return units


def _check_root(given: Any) -> str:
    """input_root -> its realpath: an existing folder outside NEVER_READ, else ValueError."""
    try:
        path = os.fspath(given)
        real = os.path.realpath(path) if isinstance(path, str) and path else None
    except (TypeError, ValueError):
        real = None
    if real is None:
        raise ValueError(f"discover: expected input_root a folder path (str) or None, got "
                         f"{given!r}; pass the folder that paths inside the data are under")
    if _never_read(real):
        raise ValueError(f"discover: expected input_root outside {', '.join(NEVER_READ)}, got "
                         f"{path!r} (resolved: {real!r}); nothing there is ever read through data: "
                         f"copy the images to a folder and pass that (--input-root)")
    if not os.path.isdir(real):
        raise ValueError(f"discover: expected input_root an existing folder, got {path!r} "
                         f"(resolved: {real!r}), which is not one; check the path (--input-root)")
    return real


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
    stamp = _stamp(apath)
    if kind == "tar":
        unit = Unit("", "tar", apath, max_bytes=max_bytes, stamp=stamp)
        _tar_verify(unit.path)  # its headers walked (cached for count and samples), and counted again
        return unit
    if kind == "list":
        unit = Unit("", "list", apath, max_bytes=max_bytes, stamp=stamp)
        _list_count(unit)  # read, and its lines counted again
        return unit
    col = _parquet_resolve(apath, column, id_column)
    return Unit("", "parquet", apath, column=col, id_column=id_column, max_bytes=max_bytes,
                stamp=stamp)


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


# -- paths named inside data (list lines, parquet path values) -----------------------------------
def _under(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip("/") + "/")


def _never_read(real: str) -> bool:
    return any(_under(real, p) for p in NEVER_READ)


def _data_root(unit: Unit) -> str:
    """The realpath paths inside this unit's data must resolve under."""
    return unit.input_root or os.path.realpath(os.path.dirname(unit.path))


def _refused(real: str, given: str, root: str) -> str | None:
    """Why the resolved path ``real`` of ``given`` may not be read, or None."""
    top = next((p for p in NEVER_READ if _under(real, p)), None)
    if top is not None:  # (its resolved form is not shown: /proc/self is the pid, run to run)
        return (f"expected a path outside {', '.join(NEVER_READ)}, got {given!r}, which is under "
                f"{top}; nothing there is ever read through data, whatever the input root; fix: "
                f"copy the image under the input root")
    shown = f"{given!r}" if real == given else f"{given!r} (resolved: {real!r})"
    if not _under(real, root):
        return (f"expected a path under {root!r} (the input root), got {shown}; fix: pass "
                f"--input-root (input_root=) naming a folder that holds it, or fix the path")
    return None


def _fd_path(fd: int) -> str | None:
    """The path the kernel holds for an open file (Linux /proc/self/fd), or None elsewhere."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _read_data_path(unit: Unit, folder: str, given: str) -> tuple[bytes | None, str | None]:
    return read_data_path(given, folder, _data_root(unit), unit.max_bytes)


def read_data_path(given: str, folder: str, root: str,
                   max_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> tuple[bytes | None, str | None]:
    """(bytes, None) of the file a path inside data names, else (None, why; never its bytes).

    ``given`` is joined to ``folder`` (the input's folder; an absolute path stays as it is), its
    symlinks resolved (realpath), and read only when that lies under ``root`` (the input root,
    resolved too) and outside NEVER_READ, at most ``max_bytes``. Against a swap between that
    check and the open (TOCTOU): the open does not follow a symlink as the last component
    (O_NOFOLLOW) and, on Linux, the opened file's own path (/proc/self/fd) is checked again, so
    a folder replaced by a link is refused too. Other readers of paths inside data (the Ray
    integration's struct paths) can use it as it is.
    """
    try:
        root = os.path.realpath(root)
        real = os.path.realpath(os.path.join(folder, given))
    except ValueError:  # a NUL inside the path
        return None, f"expected a path without NUL characters, got {given!r}; fix the path"
    why = _refused(real, given, root)
    if why is not None:
        return None, why
    try:
        stat_image_file(real, max_bytes)  # names what is there instead: nothing, a folder, a FIFO
        fd = os.open(real, _OPEN_DATA)
    except ImageError as e:
        return None, str(e)
    except OSError as e:
        got = ("a symbolic link swapped in after the check" if e.errno == errno.ELOOP
               else e.strerror or str(e))
        return None, (f"expected a readable image file at {given!r}, got {got}; check the file "
                      f"and its permissions")
    try:
        where = _fd_path(fd)
        if where is not None:
            why = _refused(where, given, root)
            if why is not None:
                return None, why
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, (f"expected a regular image file at {given!r}, got another kind of file "
                          f"(swapped in after the check); pass a regular file")
        os.set_blocking(fd, True)  # a regular file: plain reads
        with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
            out = read_at_most(f, max_bytes)
    except OSError as e:
        return None, (f"expected a readable image file at {given!r}, got {type(e).__name__}: "
                      f"{e.strerror}; check the file and its file system")
    finally:
        os.close(fd)
    if len(out) > max_bytes:
        return None, (f"expected an image file of at most {max_bytes:,} bytes "
                      f"(max_source_bytes), got more at {given!r} (it grew while read); pass a "
                      f"smaller image, or raise max_source_bytes if the files are trusted")
    return out, None


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
# Our own header walker, not tarfile: tarfile stops at the first bad header as if the archive
# ended, so a damaged shard lost every later member without a word. Offsets are in the tar's
# bytes (for a compressed tar: in its decompressed stream).
_BLOCK = 512
_ZERO_BLOCK = bytes(_BLOCK)
_TAR_CHUNK = 1 << 20      # bytes per read while scanning, skipping or decompressing
_TAR_META_MAX = 1 << 20   # a pax header or GNU long name larger than this is damage (not read)
_REGULAR = (b"0", b"\0", b"7")
_NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")  # links, devices, folders, FIFOs (as tarfile)
_HIGH = bytes(range(128, 256))
_TAR_MAGIC = {"gzip": b"\x1f\x8b", "bz2": b"BZh", "xz": b"\xfd7zXZ\x00"}


@dataclass(frozen=True)
class _Member:
    """A regular tar member: its name and where its data lies in the tar's bytes."""
    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class _Group:
    key: str
    member: _Member | None
    error: str | None
    damaged: bool = False  # the error is a part of the tar that could not be read


@dataclass(frozen=True)
class _TarIndex:
    groups: tuple[_Group, ...]
    headers: frozenset[int]                   # offsets of the ustar headers the walk read
    spans: tuple[tuple[int, int, str], ...]   # (data offset, size, name) of each member read
    stream: str | None                        # "gzip" | "bz2" | "xz"; None: not compressed
    scanned: tuple[int, ...] | None           # compressed: every valid ustar header in the stream


@dataclass
class _Entry:
    """A walk's finding, in file order: a member (``name`` set) or an unreadable region."""
    at: int
    name: str | None
    member: _Member | None = None
    error: str | None = None
    damaged: bool = True  # the error is damage (not an unsupported member kind)
    link: str | None = None  # a link member: what it is ("a symbolic link (to '...')")


@dataclass
class _Prev:
    """The header whose data ends where the walk stands: a false size shows up here."""
    at: int
    data: int
    size: int
    entry: _Entry | None
    what: str
    from_pax: bool = False


def _num(field: bytes) -> int | None:
    """A tar number field: octal digits (NUL / space padded) or GNU base-256; None: neither."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    s = field.split(b"\0", 1)[0].strip()
    if not s:
        return 0
    if s.translate(None, b"01234567"):
        return None
    return int(s, 8)


def _checksum_ok(blk: bytes) -> bool:
    stored = _num(blk[148:156])
    if stored is None:
        return False
    b = blk[:148] + b"        " + blk[156:_BLOCK]
    unsigned = sum(b)
    return stored == unsigned or stored == unsigned - 256 * (len(b) - len(b.translate(None, _HIGH)))


def _headers_in(buf: bytes, base: int, lo: int, hi: int) -> list[int]:
    """Offsets ``base + i`` of the valid ustar headers (magic "ustar" and checksum) that start at
    ``i`` in [lo, hi) and lie whole in ``buf``; any alignment (a cut that removed bytes shifts
    the rest)."""
    out = []
    i = buf.find(b"ustar", lo + 257)
    while i != -1:
        o = i - 257
        if o >= hi or o + _BLOCK > len(buf):
            break
        if _checksum_ok(buf[o:o + _BLOCK]):
            out.append(base + o)
        i = buf.find(b"ustar", i + 1)
    return out


def _pad(n: int) -> int:
    return -(-n // _BLOCK) * _BLOCK


def _tar_str(b: bytes) -> str:
    return _text(b.decode("utf-8", "surrogateescape"))


def _parse_header(blk: bytes) -> tuple[str, int, bytes, bool, str] | None:
    """(name, size, typeflag, ustar, link target) of a header block, else None: a ustar / GNU /
    pax header (magic and checksum), or a v7 one (checksum, a name, a known type, nothing after
    byte 257)."""
    ustar = blk[257:262] == b"ustar"
    t = blk[156:157]
    if not ustar and (blk[0] == 0 or t not in _REGULAR + _NO_DATA or blk[257:].strip(b"\0")):
        return None
    if not _checksum_ok(blk):
        return None
    size = _num(blk[124:136])
    if size is None:
        return None
    name = blk[:100].split(b"\0", 1)[0]
    prefix = blk[345:500].split(b"\0", 1)[0] if blk[257:263] == b"ustar\0" else b""
    if prefix:
        name = prefix + b"/" + name
    return _tar_str(name), size, t, ustar, _tar_str(blk[157:257].split(b"\0", 1)[0])


def _pax_records(raw: bytes) -> dict[str, str] | None:
    """The records "LEN KEY=VALUE\\n" of a pax header's data (up to a NUL), None if malformed."""
    out: dict[str, str] = {}
    i = 0
    while i < len(raw) and raw[i] != 0:
        sp = raw.find(b" ", i, i + 21)
        if sp <= i or not raw[i:sp].isdigit():  # no length: malformed (n = 0 never moved i on)
            return None
        n = int(raw[i:sp])
        if n <= sp - i + 1 or i + n > len(raw) or raw[i + n - 1] != 0x0A:
            return None
        key, eq, value = raw[sp + 1:i + n - 1].partition(b"=")
        if not eq:
            return None
        out[_tar_str(key)] = _tar_str(value)
        i += n
    return out


class _PlainTar:
    """An uncompressed tar file, read by offset."""
    stream = None
    error: str | None = None
    error_at: int | None = None

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self.end: int | None = os.fstat(self._fd).st_size

    def close(self) -> None:
        os.close(self._fd)

    def read(self, off: int, n: int) -> bytes:
        assert self.end is not None
        parts, got = [], 0
        while got < n and off + got < self.end:
            b = os.pread(self._fd, min(n - got, self.end - off - got), off + got)
            if not b:
                break
            parts.append(b)
            got += len(b)
        return b"".join(parts)

    def header_in(self, lo: int, hi: int) -> int | None:
        return _scan_forward(self, lo, hi)[0]


class _StreamTar:
    """A gzip / bz2 / xz tar as its decompressed bytes, made forward in pieces of at most
    ``_TAR_CHUNK`` and kept only from the last read offset on (memory: the largest read); a
    read behind that restarts the decompression (``rewinds``). With ``scan``, ``seen`` records
    every valid ustar header in the bytes made (the independent count). ``error``: why the
    stream ended early (cut, corrupt, other bytes after it), at decompressed byte ``error_at``;
    ``end``: the decompressed length, once known."""

    def __init__(self, path: str, stream: str, scan: bool) -> None:
        self.path, self.stream, self.scan = path, stream, scan
        self.seen: list[int] = []
        self.rewinds = 0
        self.end: int | None = None
        self.error: str | None = None
        self.error_at: int | None = None
        self._scan_hw = 0  # header starts below this were examined (over every pass)
        self._f: Any = None
        self._start()

    def _start(self) -> None:
        if self._f is not None:
            self._f.close()
        self._f = open(self.path, "rb")
        self._dec = self._decompressor()
        self._in = b""        # compressed bytes read, not yet given to the decompressor
        self._comp = 0        # compressed bytes read
        self._done = False
        self._made = 0        # decompressed bytes made
        self._buf = bytearray()
        self._buf_at = 0      # self._buf holds the decompressed bytes [_buf_at, _made)
        self._keep = 0        # bytes before this offset are dropped
        self._tail = b""      # the last 511 bytes made (a header across two pieces)

    def _decompressor(self) -> Any:
        if self.stream == "gzip":
            return zlib.decompressobj(31)
        if self.stream == "bz2":
            return bz2.BZ2Decompressor()
        return lzma.LZMADecompressor()

    def close(self) -> None:
        self._f.close()

    def _read_in(self) -> bytes:
        if self._in:
            data, self._in = self._in, b""
            return data
        data = self._f.read(64 << 10)  # small: an error loses only this piece's output
        self._comp += len(data)
        return data

    def _finish(self, why: str | None) -> None:
        self._done = True
        self.end = self._made
        if why is not None and self.error is None:
            self.error, self.error_at = why, self._made

    def _step(self) -> bytes:
        d = self._dec
        if d.eof:
            self._next_stream(d.unused_data)
            return b""
        cut = (f"the {self.stream} stream ends before its end marker (the file is cut at "
               f"compressed byte {self._comp:,})")
        if self.stream == "gzip":
            data = d.unconsumed_tail or self._read_in()
            if not data:
                out = d.flush()
                if not d.eof:
                    self._finish(cut)
                return out
            return d.decompress(data, _TAR_CHUNK)
        data = b""
        if d.needs_input:
            data = self._read_in()
            if not data:
                self._finish(cut)
                return b""
        return d.decompress(data, _TAR_CHUNK)

    def _next_stream(self, rest: bytes) -> None:
        """After one compressed stream: another (gzip members, bz2 / xz streams), zero padding
        or the end; other bytes are an error, not ignored."""
        while True:
            rest = rest.lstrip(b"\0")
            if len(rest) >= 6:
                break
            more = self._read_in()
            if not more:
                break
            rest += more
        if not rest:
            self._finish(None)
        elif rest.startswith(_TAR_MAGIC[self.stream]):
            self._dec = self._decompressor()
            self._in = rest
        else:
            self._finish(f"expected only {self.stream} data after a {self.stream} stream, got "
                         f"other bytes at compressed byte {self._comp - len(rest):,}")

    def _produce(self) -> bool:
        """Make the next piece of decompressed bytes; False at the end."""
        while not self._done:
            try:
                out = self._step()
            except (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError) as e:
                self._finish(f"the {self.stream} data is corrupt near compressed byte "
                             f"{self._comp:,} ({type(e).__name__}: {e})")
                return False
            if out:
                self._take(out)
                return True
        return False

    def _take(self, out: bytes) -> None:
        at = self._made
        self._made += len(out)
        if self.scan:
            window = self._tail + out
            base = at - len(self._tail)
            self.seen.extend(_headers_in(window, base, max(0, self._scan_hw - base), len(window)))
            self._scan_hw = max(self._scan_hw, self._made - (_BLOCK - 1))
            self._tail = window[-(_BLOCK - 1):]
        self._buf += out
        self._trim()

    def _trim(self) -> None:
        drop = min(self._keep - self._buf_at, len(self._buf))
        if drop > 0:
            del self._buf[:drop]
            self._buf_at += drop

    def read(self, off: int, n: int) -> bytes:
        if off < self._buf_at:
            self.rewinds += 1
            self._start()
        self._keep = off
        self._trim()
        while self._made < off + n and self._produce():
            pass
        i = off - self._buf_at
        return bytes(self._buf[i:i + n]) if i >= 0 else b""

    def header_in(self, lo: int, hi: int) -> int | None:
        """The first valid ustar header starting in [lo, hi), from ``seen`` (no re-read)."""
        while True:
            k = bisect.bisect_left(self.seen, lo)
            if k < len(self.seen):
                return self.seen[k] if self.seen[k] < hi else None
            if self._scan_hw >= hi:
                return None
            self._keep = max(self._keep, self._made - (_BLOCK - 1))
            if not self._produce():
                return None

    def drain(self) -> None:
        """Decompress (and scan) to the end, keeping nothing."""
        while True:
            self._keep = self._made
            if not self._produce():
                return


def _scan_forward(src: Any, start: int, stop: int | None = None) -> tuple[int | None, int | None]:
    """(the first valid ustar header starting at or after ``start`` and before ``stop``, the
    first non-zero byte from ``start`` up to that header or the end), reading forward only."""
    nz = None
    w = start
    step = 16 << 10  # growing windows: many small damaged regions cost little each
    while stop is None or w < stop:
        buf = src.read(w, step + _BLOCK - 1)
        if not buf:
            break
        span = min(step, len(buf), step if stop is None else stop - w)
        found = _headers_in(buf, w, 0, span)
        if nz is None:
            part = buf[:span if not found else found[0] - w]
            k = len(part) - len(part.lstrip(b"\0"))
            if k < len(part):
                nz = w + k
        if found:
            return found[0], nz
        if len(buf) <= span:
            break
        w += span
        step = min(2 * step, _TAR_CHUNK)
    return None, nz


def _tar_open(path: str, scan: bool) -> _PlainTar | _StreamTar:
    with open(path, "rb") as f:
        head = f.read(6)
    for name, magic in _TAR_MAGIC.items():
        if head.startswith(magic):
            return _StreamTar(path, name, scan)
    return _PlainTar(path)


def _tar_walk(src: _PlainTar | _StreamTar) -> tuple[list[_Entry], list[int]]:
    """Walk the tar's headers: (entries in file order, offsets of the ustar headers read).

    Each header's size says where the next one starts. Where there is none (a bad checksum,
    bytes that are not a header, the end of the data): if a valid header starts inside the
    previous member's stated data or padding, that member is an error (a false size, or bytes
    cut out of it) and the walk goes on from that header; else the bytes up to the next valid header (found by scanning
    forward, any alignment) are one unreadable region, and a member before it whose size only
    a pax record gave is an error too (not confirmed). A member whose data runs past the end is
    an error (the tar is cut). Zero blocks end the archive; a valid header after them is read
    on (concatenated tars), other bytes after them are a region."""
    entries: list[_Entry] = []
    headers: list[int] = []
    pos = 0
    prev: _Prev | None = None
    pax: dict[str, str] = {}
    long_name: str | None = None
    meta_bad: str | None = None  # the pax header before the next member was unreadable

    def region(at: int, why: str) -> _Entry:
        e = _Entry(at, None, None, why)
        entries.append(e)
        return e

    def fail(p: _Prev, why: str) -> None:
        target = p.entry if p.entry is not None else region(p.at, "")
        if not target.error or not target.damaged:
            target.error, target.damaged = f"{p.what}: {why}", True

    while True:
        blk = src.read(pos, _BLOCK)
        hdr = _parse_header(blk) if len(blk) == _BLOCK and blk != _ZERO_BLOCK else None
        if hdr is not None:
            name, size, t, ustar, target = hdr
            if ustar:
                headers.append(pos)
            data = pos + _BLOCK
            if t in (b"x", b"g", b"L", b"K"):
                what = f"the {'pax' if t in b'xg' else 'GNU long-name'} header at byte {pos:,}"
                p = _Prev(pos, data, size, None, what)
                if size > _TAR_META_MAX:
                    fail(p, f"expected at most {_TAR_META_MAX:,} bytes of names and records, got "
                            f"{size:,}; it is not read (the member after it keeps its short name); "
                            f"fix: rebuild the shard")
                else:
                    raw = src.read(data, size)
                    if len(raw) == size and t == b"x":
                        rec = _pax_records(raw)
                        pax = rec or {}
                        if rec is None:
                            meta_bad = (f"its pax header at byte {pos:,} does not parse (expected "
                                        f"records 'LEN KEY=VALUE'), so its name and size are not "
                                        f"known; fix: rebuild the shard")
                    elif len(raw) == size and t == b"L":
                        long_name = _tar_str(raw.split(b"\0", 1)[0])
                prev, pos = p, data + _pad(size)
                continue
            if long_name is not None:
                name = long_name
            name = pax.get("path", name)
            if t == b"\0" and name.endswith("/"):
                t = b"5"  # a v7 folder
            dsize = 0 if t in _NO_DATA else size
            err = meta_bad
            from_pax = False
            if "size" in pax and t not in _NO_DATA:
                v = pax["size"]
                if not (v.isascii() and v.isdigit()):
                    err = f"its pax size record {v!r} is not a number; fix: rebuild the shard"
                elif size and int(v) != size:  # writers set both alike when the header can hold it
                    err = (f"its pax size record ({int(v):,}) disagrees with its header's size "
                           f"({size:,}): a false size; it is not read; fix: rebuild the shard")
                elif not size:  # a size too large for the header: only the next header confirms it
                    dsize, from_pax = int(v), int(v) != 0
            what = f"member {name!r} (header at byte {pos:,})"
            entry = None
            if t in _REGULAR:
                entry = _Entry(pos, name, None if err else _Member(name, data, dsize),
                               err and f"{what}: {err}")
            elif t in (b"1", b"2"):  # kept to be named if a group's image is one: never followed
                kind = "hard" if t == b"1" else "symbolic"
                entry = _Entry(pos, name, link=f"a {kind} link (to {pax.get('linkpath', target)!r})")
            elif t == b"S":
                entry = _Entry(pos, name, None, f"{what}: a GNU sparse member (its stored data is "
                                                f"not the file); fix: rebuild the shard without "
                                                f"--sparse", damaged=False)
            if entry is not None:
                entries.append(entry)
            prev = _Prev(pos, data, dsize, entry, what, from_pax)
            pos = data + _pad(dsize)
            pax, long_name, meta_bad = {}, None, None
            continue
        # no header at pos: the end of the archive, or damage
        inside = src.header_in(prev.data, pos) if prev is not None and prev.data < pos else None
        if prev is not None and inside is not None:
            if inside < prev.data + prev.size:
                fail(prev, f"expected its stated size of {prev.size:,} bytes to end where a tar "
                           f"header begins, got it running over the valid header at byte "
                           f"{inside:,}: a false size (pax or ustar); it is not read; fix: "
                           f"rebuild the shard")
            else:  # in its padding: bytes were cut out of it or of its data (no telling which)
                fail(prev, f"expected its data and padding to end at byte {pos:,}, got the valid "
                           f"header at byte {inside:,} inside the padding: bytes are missing in "
                           f"it or after it (cut out); it is not read; fix: rebuild the shard")
            pos, prev, pax, long_name, meta_bad = inside, None, {}, None, None
            continue
        cut_note = f" ({src.error})" if src.error else ""
        if len(blk) < _BLOCK:  # the data ends here: the tar is cut
            end = src.end if src.end is not None else pos + len(blk)
            if prev is not None and prev.data + prev.size > end:
                fail(prev, f"expected {prev.size:,} bytes of data from byte {prev.data:,}, got "
                           f"{max(0, end - prev.data):,}: the tar ends inside it{cut_note}, so "
                           f"the shard is damaged (cut) and every member after it is lost; fix: "
                           f"copy or download the shard again")
            else:
                region(min(pos, end), f"expected a tar header or the end-of-archive marker (zero "
                                      f"blocks) at byte {min(pos, end):,}, got the end of the "
                                      f"data{cut_note}: the tar is cut (members after it are "
                                      f"lost); fix: copy or download the shard again")
            break
        if blk == _ZERO_BLOCK:  # the end-of-archive marker: only zeros may follow
            nxt, nz = _scan_forward(src, pos)
            if nz is not None:
                upto = f"the valid header at byte {nxt:,}" if nxt is not None else "the end"
                region(nz, f"expected zero blocks after the end-of-archive marker at byte "
                           f"{pos:,}, got other bytes from byte {nz:,} to {upto}{cut_note}: a "
                           f"damaged header or data, not read; fix: rebuild the shard")
            if nxt is None:
                break
            pos, prev, pax, long_name, meta_bad = nxt, None, {}, None, None
            continue
        if prev is not None and prev.from_pax:
            fail(prev, f"expected a tar header after its data (pax size {prev.size:,}) at byte "
                       f"{pos:,}, got unreadable bytes: the size is not confirmed, it is not read; "
                       f"fix: rebuild the shard")
        nxt, _ = _scan_forward(src, pos + 1)
        got = ("a header with a bad checksum or number field" if blk[257:262] == b"ustar"
               else "bytes that are not a tar header")
        upto = f"the next valid header at byte {nxt:,}" if nxt is not None else "the end"
        region(pos, f"expected a tar header at byte {pos:,}, got {got}; the bytes up to {upto} "
                    f"are not read (members there are lost){cut_note}; fix: rebuild the shard")
        if nxt is None:
            break
        pos, prev, pax, long_name, meta_bad = nxt, None, {}, None, None
    if isinstance(src, _StreamTar):
        src.drain()  # every header counted (_tar_verify), the stream's end checked
    if src.error is not None and not any(src.error in (e.error or "") for e in entries):
        region(src.error_at or 0, f"expected the whole {src.stream} stream, got {src.error}; "
                                  f"the members after it are lost; fix: copy or download the "
                                  f"shard again")
    entries.sort(key=lambda e: e.at)
    return entries, headers


def _tar_groups(entries: list[_Entry]) -> tuple[_Group, ...]:
    """WebDataset groups (first-seen key order) and unreadable regions, in file order."""
    order: list[str | _Entry] = []
    groups: dict[str, dict[str, _Member | str]] = {}
    damage: dict[str, tuple[str, bool]] = {}
    for e in entries:
        hit = _WDS_KEY.match(e.name) if e.name is not None else None
        if hit is None:
            if e.error:  # a region, or a damaged member without a key: still an error row
                order.append(e)
            continue
        key = _text(hit.group(1))
        if key not in groups:
            groups[key] = {}
            order.append(key)
        if e.error is not None:
            damage.setdefault(key, (e.error, e.damaged))
        elif e.member is not None or e.link is not None:
            groups[key].setdefault(hit.group(2).lower(), e.member or e.link or "")
    out: list[_Group] = []
    for o in order:
        if isinstance(o, _Entry):
            out.append(_Group(f"@{o.at}", None, o.error, o.damaged))
        elif o in damage:
            out.append(_Group(o, None, *damage[o]))
        else:
            members = groups[o]
            ext = next((x for x in IMAGE_EXTENSIONS if x in members), None)
            if ext is None:
                out.append(_Group(o, None, f"no image member in group (members: "
                                           f"{', '.join(sorted(members))}); expected one named "
                                           f"KEY.<{'|'.join(IMAGE_EXTENSIONS)}>"))
            elif isinstance(image := members[ext], str):
                out.append(_Group(o, None, f"expected the image member {o}.{ext} to be a regular "
                                           f"file, got {image}; links in a shard are never "
                                           f"followed; fix: store the image itself"))
            else:
                out.append(_Group(o, image, None))
    return tuple(out)


def _tar_index(path: str) -> _TarIndex:
    try:
        st = os.stat(path)
    except OSError as e:
        raise ValueError(f"expected a readable tar file at {path!r}, got {e.strerror or e}; "
                         f"check the path") from None
    return _tar_index_cached(path, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _tar_index_cached(path: str, size: int, mtime_ns: int) -> _TarIndex:
    """The tar's groups from one walk of its headers (member data is skipped: read by offset
    later; a compressed tar is decompressed once, in bounded pieces)."""
    try:
        src = _tar_open(path, scan=True)
    except OSError as e:
        raise ValueError(f"expected a readable tar file at {path!r}, got {e.strerror or e}; "
                         f"check the path and its permissions") from None
    try:
        entries, headers = _tar_walk(src)
        scanned = tuple(src.seen) if isinstance(src, _StreamTar) else None
    except OSError as e:
        raise ValueError(f"expected a readable tar file at {path!r}, got {e.strerror or e} "
                         f"while reading it; check the file and its file system") from None
    finally:
        src.close()
    if not headers and not any(e.name is not None for e in entries) and entries:
        raise ValueError(f"discover: expected a tar file (WebDataset shard) at {path!r}, got one "
                         f"that does not open (no tar header in it: {entries[0].error}); check or "
                         f"rebuild the file")
    spans = tuple((e.member.offset, e.member.size, e.member.name) for e in entries
                  if e.member is not None)
    return _TarIndex(_tar_groups(entries), frozenset(headers), spans, src.stream, scanned)


def _tar_verify(path: str) -> None:
    """The independent count: every valid ustar header in the tar's bytes (a plain scan that
    follows no size) must be one the walk read, else a ValueError naming the tar (a false size
    that lands on a later header hides the members between; so does an uncompressed tar stored
    inside the shard, which is refused the same way)."""
    idx = _tar_index(path)
    found = idx.scanned if idx.scanned is not None else _tar_block_scan(path)
    extra = sorted(set(found) - idx.headers)
    if not extra:
        return
    x = extra[0]
    inside = next((f"inside the data of member {n!r} (stated size {s:,}, from byte {o:,})"
                   for o, s, n in idx.spans if o <= x < o + s), "outside any member")
    raise ValueError(f"discover: expected the reader of {path!r} to read every tar header the file "
                     f"holds, got {len(extra)} header(s) that a plain scan finds and the walk does "
                     f"not (the first at byte {x:,}, {inside}): a member with a false size hides "
                     f"them, or an uncompressed tar is stored inside the shard; fix: rebuild the "
                     f"shard (compress archives stored inside it)")


def _tar_block_scan(path: str) -> list[int]:
    """Offsets of every valid ustar header in an uncompressed tar, by reading it end to end."""
    out: list[int] = []
    with open(path, "rb") as f:
        tail, at = b"", 0
        while True:
            chunk = f.read(_TAR_CHUNK)
            if not chunk:
                return out
            window = tail + chunk
            out.extend(_headers_in(window, at - len(tail), 0, len(window)))
            at += len(chunk)
            tail = window[-(_BLOCK - 1):]


def _tar_count(unit: Unit) -> int:
    return len(_tar_index(unit.path).groups)


def _tar_samples(unit: Unit, start: int, stop: int | None) -> Iterator[Sample]:
    idx = _tar_index(unit.path)
    base = os.path.basename(unit.path)
    src: _PlainTar | _StreamTar | None = None
    try:
        for g in idx.groups[start:stop]:
            where = f"{base}#{g.key}"
            m = g.member
            if m is None:
                yield Sample(g.key, where, None, g.error, damaged=g.damaged)
                continue
            if m.size > unit.max_bytes:
                yield Sample(g.key, where, None, f"expected an image member of at most "
                                                 f"{unit.max_bytes:,} bytes (max_source_bytes), got "
                                                 f"{m.name!r} of {m.size:,} bytes; raise "
                                                 f"max_source_bytes if the shard is trusted")
                continue
            try:
                if src is None:
                    src = _tar_open(unit.path, scan=False)
                data = src.read(m.offset, m.size)
                why = src.error or "the file is shorter"
            except OSError as e:
                data, why = b"", f"{type(e).__name__}: {e.strerror or e}"
            if len(data) != m.size:
                yield Sample(g.key, where, None, f"expected {m.size:,} bytes of member {m.name!r} "
                                                 f"from byte {m.offset:,}, got {len(data):,} "
                                                 f"({why}); the shard changed or is damaged; fix: "
                                                 f"copy the shard again and rerun", damaged=True)
                continue
            yield Sample(g.key, where, data, None)
    finally:
        if src is not None:
            src.close()


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


def _group_rows(md: Any) -> tuple[list[int], bool]:
    """(rows of each row group, negative counts read as 0; whether they add up to the footer's
    row count with none negative): a damaged footer can say -19 rows."""
    said = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
    rows = [max(0, n) for n in said]
    return rows, sum(rows) == md.num_rows and rows == said


def _parquet_count(unit: Unit) -> int:
    rows, agree = _group_rows(_parquet_file(unit.path).metadata)
    return sum(rows) + (not agree)  # one error row when the footer and its row groups disagree


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
    group_rows, agree = _group_rows(md)
    held = sum(group_rows)
    total = held if stop is None else min(stop, held)
    base = os.path.basename(unit.path)
    folder = os.path.dirname(unit.path)
    fd = os.open(unit.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        chunks: list[list[_Chunk]] | str | None = None  # the footer's column chunks, read once
        r0 = 0
        for rg, n_rg in enumerate(group_rows):
            lo, hi = max(start, r0), min(total, r0 + n_rg)
            if lo < hi:
                if chunks is None:
                    chunks = _footer_chunks(fd)
                group = (chunks if isinstance(chunks, str) else chunks[rg] if rg < len(chunks)
                         else f"the footer holds {len(chunks)} row groups, not {rg + 1}")
                yield from _row_group(pa, pf, fd, unit, rg, r0, lo, hi, cols, kind, base, folder,
                                      group, n_rg)
            r0 += n_rg
            if r0 >= total:
                break
    finally:
        os.close(fd)
    if not agree and start <= held and (stop is None or stop > held):
        yield Sample(f"@row-{held}", f"{base}#{held}", None,
                     f"expected the parquet footer's row count to match its row groups, got "
                     f"{md.num_rows:,} rows in the footer and {held:,} in the row groups (all "
                     f"read); the file is damaged; fix: rewrite or download it again",
                     damaged=True)


def _row_group(pa: Any, pf: Any, fd: int, unit: Unit, rg: int, r0: int, lo: int, hi: int,
               cols: list[str], kind: str, base: str, folder: str, group: list[_Chunk] | str,
               n_rows: int) -> Iterator[Sample]:
    """Rows lo..hi (file indices) of row group rg, which starts at row r0. Its page headers are
    read first: pyarrow decompresses a row group's pages whole, so a page over the read bound
    (``_pages_over``) makes the rows error rows without being decompressed. ``group``: the row
    group's column chunks as the footer lists them (``_footer_chunks``), or why they could not be
    read; ``n_rows``: its rows."""
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


# A page is decompressed whole; one larger than this (uncompressed), or than its values can be
# if each is within max_bytes, is never decompressed: a 17.9 KB file can hold a 300 MB zstd page.
_PARQUET_PAGE_MAX = 256 << 20
_PARQUET_PAGE_SLACK = 64 << 10  # a page's levels and value lengths, over its values' bytes
_PARQUET_MAX_PAGES = 1 << 20    # pages walked per column chunk, at most
_THRIFT_MAX_ITEMS = 1 << 16     # thrift fields and list items read per page header, at most


def _page_limit(values: int, max_bytes: int) -> int:
    """The most uncompressed bytes a page of ``values`` values may hold (each within max_bytes,
    the page within max(max_bytes, _PARQUET_PAGE_MAX)), with slack for levels and lengths."""
    return (min(values * (max_bytes + 4), max(max_bytes, _PARQUET_PAGE_MAX))
            + _PARQUET_PAGE_SLACK + values)


def _pages_over(fd: int, unit: Unit, group: list[_Chunk] | str, n_rows: int, cols: list[str],
                rg: int) -> tuple[dict[int, str], str, bool, bool] | None:
    """None when every page of the columns read is within ``_page_limit``; else (row in the
    group -> error for the rows of an over page, the error of the other rows, damaged, the id
    column may be read): a footer or page header that does not parse is damage (every row,
    damaged)."""
    if isinstance(group, str):
        return {}, (f"could not read the column chunks of row group {rg} from the parquet footer "
                    f"({group}); the file is damaged"), True, False
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
            pages = _chunk_pages(fd, col)
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


@dataclass(frozen=True)
class _Chunk:
    """One column chunk of a row group, as the footer's ColumnMetaData says."""
    path: str                # path_in_schema, dotted ("image.bytes")
    num_values: int
    compressed: int          # total_compressed_size: the chunk's bytes in the file
    data_at: int             # data_page_offset
    dict_at: int | None      # dictionary_page_offset, when the chunk has one


_FOOTER_MAX = 64 << 20          # a parquet footer larger than this is damage (pyarrow's own cap is 2 GiB)
_FOOTER_MAX_ITEMS = 1 << 22     # thrift fields and list items read from a footer, at most


def _footer_chunks(fd: int) -> list[list[_Chunk]] | str:
    """The column chunks of each row group, read from the file's footer (FileMetaData, thrift
    compact), or why they cannot be. Read here, not through pyarrow's metadata objects: pyarrow
    26 aborts the process (std::terminate, no Python exception) when a column chunk's size
    statistics do not match its levels (found by fuzz/fuzz_parquet.py)."""
    size = os.fstat(fd).st_size
    tail = os.pread(fd, 8, size - 8) if size >= 12 else b""
    if len(tail) != 8 or tail[4:] != b"PAR1":
        return "no PAR1 footer at the end of the file"
    n = int.from_bytes(tail[:4], "little")
    if not 0 < n <= min(_FOOTER_MAX, size - 12):
        return f"a footer of {n:,} bytes in a file of {size:,}"
    try:
        meta = _Thrift(fd, size - 8 - n, size - 8, keep=True, max_items=_FOOTER_MAX_ITEMS).struct()
        return [[_chunk_of(c) for c in _list_of(g, 1)] for g in _list_of(meta, 4)]
    except ValueError as e:
        return str(e)


def _list_of(struct: dict[int, Any], fid: int) -> list[dict[int, Any]]:
    v = struct.get(fid)
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise ValueError(f"expected a list of structs in footer field {fid}")
    return v


def _chunk_of(cc: dict[int, Any]) -> _Chunk:
    md = cc.get(3)  # ColumnChunk.meta_data
    if not isinstance(md, dict):
        raise ValueError("a column chunk without its metadata")
    parts = md.get(3)
    nums = [md.get(k) for k in (5, 7, 9)]
    dict_at = md.get(11)
    if (not isinstance(parts, list) or not all(isinstance(x, bytes) for x in parts)
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in nums)
            or not (dict_at is None or isinstance(dict_at, int) and not isinstance(dict_at, bool))):
        raise ValueError("a column chunk's path, value count, size or offsets are missing or "
                         "negative")
    path = ".".join(x.decode("utf-8", "backslashreplace") for x in parts)
    return _Chunk(path, nums[0], nums[1], nums[2], dict_at)  # type: ignore[arg-type]


def _chunk_pages(fd: int, col: _Chunk) -> list[tuple[int, int, int, int, int]]:
    """(page type, first value, values, uncompressed bytes, compressed bytes) of each page of a
    column chunk, from its page headers (type 0 data, 2 dictionary, 3 data v2); ValueError
    when they do not parse or do not add up to the chunk's values."""
    start = col.data_at
    if col.dict_at is not None and 0 < col.dict_at < start:
        start = col.dict_at
    end = start + col.compressed
    pages: list[tuple[int, int, int, int, int]] = []
    pos, values = start, 0
    while pos < end and values < col.num_values:
        if len(pages) >= _PARQUET_MAX_PAGES:
            raise ValueError(f"more than {_PARQUET_MAX_PAGES:,} pages in one column chunk")
        th = _Thrift(fd, pos, end)
        h = th.struct()
        ptype, unc, comp = h.get(1), h.get(2), h.get(3)
        sub = h.get({0: 5, 2: 7, 3: 8}.get(ptype, -1)) if isinstance(ptype, int) else None
        nv = sub.get(1) if isinstance(sub, dict) else 0 if ptype == 1 else None
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                   for x in (ptype, unc, comp, nv)):
            raise ValueError(f"a page header at byte {pos:,} without its type, sizes or value "
                             f"count")
        assert isinstance(nv, int) and isinstance(comp, int)
        pages.append((ptype, values, nv, unc, comp))  # type: ignore[arg-type]
        if ptype in (0, 3):
            values += nv
        pos = th.pos + comp
    if values != col.num_values:
        raise ValueError(f"its data pages hold {values:,} values, its metadata says "
                         f"{col.num_values:,}")
    return pages


class _Thrift:
    """A thrift compact-protocol reader at a file offset (pread, small reads), enough for a
    parquet PageHeader and FileMetaData: ints, bools and nested structs are kept, and with
    ``keep`` binaries and lists too (else skipped); maps are skipped. Bounded by ``limit`` (the
    column chunk's or footer's end) and ``max_items``."""

    def __init__(self, fd: int, pos: int, limit: int, keep: bool = False,
                 max_items: int = _THRIFT_MAX_ITEMS) -> None:
        self.fd, self.pos, self.limit, self.keep, self.max_items = fd, pos, limit, keep, max_items
        self._buf, self._at, self._items = b"", pos, 0

    def _byte(self) -> int:
        i = self.pos - self._at
        if not 0 <= i < len(self._buf):
            if self.pos >= self.limit:
                raise ValueError("a thrift struct runs past its column chunk or footer")
            self._buf, self._at, i = os.pread(self.fd, min(4096, self.limit - self.pos), self.pos), self.pos, 0
            if not self._buf:
                raise ValueError("the file ends inside a thrift struct")
        self.pos += 1
        return self._buf[i]

    def _count(self) -> None:
        self._items += 1
        if self._items > self.max_items:
            raise ValueError(f"a thrift struct of more than {self.max_items:,} items")

    def _varint(self) -> int:
        v = shift = 0
        for _ in range(10):
            b = self._byte()
            v |= (b & 0x7F) << shift
            if b < 0x80:
                return v
            shift += 7
        raise ValueError("a thrift varint longer than 10 bytes")

    def _int(self) -> int:
        v = self._varint()
        return (v >> 1) ^ -(v & 1)

    def _skip(self, n: int) -> None:
        if n < 0 or self.pos + n > self.limit:
            raise ValueError("a page header field runs past its column chunk")
        self.pos += n

    def _value(self, t: int, depth: int, in_list: bool = False) -> Any:
        if t in (1, 2):
            if in_list:  # a bool inside a list or map is a byte of its own
                self._byte()
                return None
            return t == 1
        if t == 3:
            self._byte()
            return None
        if t in (4, 5, 6):
            return self._int()
        if t == 7:
            self._skip(8)
            return None
        if t == 8:
            n = self._varint()
            at = self.pos
            self._skip(n)
            if not self.keep:
                return None
            raw = os.pread(self.fd, n, at)
            if len(raw) != n:
                raise ValueError("the file ends inside a thrift binary")
            return raw
        if t in (9, 10):
            h = self._byte()
            n = h >> 4 if h >> 4 != 15 else self._varint()
            items = []
            for _ in range(n):
                self._count()
                items.append(self._value(h & 0x0F, depth + 1, True))
            return items if self.keep else None
        if t == 11:
            n = self._varint()
            kv = self._byte() if n else 0
            for _ in range(n):
                self._count()
                self._value(kv >> 4, depth + 1, True)
                self._value(kv & 0x0F, depth + 1, True)
            return None
        if t == 12:
            return self.struct(depth + 1)
        raise ValueError(f"an unknown thrift type {t}")

    def struct(self, depth: int = 0) -> dict[int, Any]:
        if depth > 16:
            raise ValueError("thrift structs nested more than 16 deep")
        out: dict[int, Any] = {}
        fid = 0
        while True:
            self._count()
            h = self._byte()
            if h == 0:
                return out
            fid = fid + (h >> 4) if h >> 4 else self._int()
            out[fid] = self._value(h & 0x0F, depth)


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
    data, err = _read_data_path(unit, folder, path)
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
    """(id, line number, path as listed) per listed image (read relative to the list's folder,
    under the unit's input root: ``_read_data_path``)."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"discover: expected a UTF-8 text list of paths at {path!r}, got bytes that "
                         f"are not UTF-8 (at byte {e.start}); write the list as UTF-8") from None
    except OSError as e:
        raise ValueError(f"discover: expected a readable list file at {path!r}, got "
                         f"{e.strerror or e}; check its permissions") from None
    seen: dict[str, int] = {}
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        k = seen[line] = seen.get(line, 0) + 1
        out.append((line if k == 1 else f"{line}#{k}", lineno, line))
    return tuple(out)


def _list_count(unit: Unit) -> int:
    """The entries, counted again on the file's bytes (lines split at \\n, \\r\\n, \\r only): the
    reader splits lines as str.splitlines does, so a line holding another line break would
    silently become two paths; a mismatch is a ValueError naming the list."""
    n = len(_list_entries(unit.path))
    try:
        with open(unit.path, "rb") as f:
            lines = re.split(rb"\r\n|\r|\n", f.read())
        kept = [k for k, b in enumerate(lines, 1)
                if (t := b.decode("utf-8").strip()) and not t.startswith("#")]
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"expected a readable UTF-8 list file at {unit.path!r}, got {e}; check "
                         f"the file") from None
    if len(kept) != n:
        odd = next((k for k, b in enumerate(lines, 1)
                    if len(b.decode("utf-8").splitlines()) > 1), None)
        raise ValueError(f"discover: expected one path per line in {unit.path!r}, got {n} entries "
                         f"read and {len(kept)} counted by line ends (\\n, \\r\\n, \\r): a line "
                         f"holds another line break (\\x0b, \\x0c, \\x1c-\\x1e, \\x85, "
                         f"\\u2028 or \\u2029{f'; line {odd}' if odd else ''}), or the file "
                         f"changed while read; fix: write one path per line")
    return n


def _list_samples(unit: Unit, start: int, stop: int | None) -> Iterator[Sample]:
    base = os.path.basename(unit.path)
    folder = os.path.dirname(unit.path)
    for sid, lineno, p in _list_entries(unit.path)[start:stop]:
        data, err = _read_data_path(unit, folder, p)
        yield Sample(sid, f"{base}#{lineno}", data, err)


_READERS = {"folder": (_folder_count, _folder_samples), "tar": (_tar_count, _tar_samples),
            "parquet": (_parquet_count, _parquet_samples), "list": (_list_count, _list_samples)}
