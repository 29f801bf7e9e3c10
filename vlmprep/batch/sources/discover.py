"""``discover(inputs)``: the job's units, one per input, each opened and checked now.

Unit names (for shard names): the input's base name without its extension ("photos",
"000000", "train"), characters other than letters, digits, ".", "_" and "-" replaced by "_",
at most 80 characters. Unique in the job, compared without case: the second "x" (in input
order) is "x-2", then "x-3", ... (skipping names already taken).

Inputs: a folder, a file of a kind the package names, or a pattern with * ? [ (matched when no
such path exists; sorted). The same file or folder given twice is a ValueError.
"""
from __future__ import annotations

import glob as globlib
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ...ops import DEFAULT_MAX_SOURCE_BYTES
from .folder import check_folder
from .lists import list_count
from .parquet import parquet_resolve
from .paths import check_root
from .tar import tar_verify
from .unit import SUFFIXES, Unit, file_stamp, kind_of

__all__ = ["discover"]

_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_MAX = 80


def discover(inputs: Sequence[str] | str | os.PathLike, *, glob: str | None = None,
             column: str | None = None, id_column: str | None = None,
             max_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
             input_root: str | os.PathLike | None = None, videos: bool = True) -> list[Unit]:
    """The job's units, one per input, in input order (patterns expanded, sorted).

    Each input is opened here (a folder listed, a tar's headers walked and counted again by a
    scan of all its bytes, a parquet footer and schema, a list file read and its lines counted
    again), so an input that cannot be used is a ValueError now, naming it,
    not an error on every sample later. ``glob`` applies to folders, ``column`` / ``id_column``
    to parquet files; ``max_bytes`` caps every sample's bytes (the Processor's
    ``pipeline["decode"].max_source_bytes``). ``input_root``: the folder that paths inside the
    data (list lines, parquet ``path`` values) must resolve under (None: each input's own
    folder); a folder that is missing, or is under /proc, /dev or /sys, is a ValueError.
    ``videos``: folders and tars take video files too (``VIDEO_EXTENSIONS``, after the image
    ones); pass False for a Processor without a video rule (``proc.video_options is None``).
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
    root = None if input_root is None else check_root(input_root)
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
            unit = _open(path, glob, column, id_column, max_bytes, bool(videos))
            name = _unique(_stem(unit.path, unit.kind), taken)
            units.append(replace(unit, name=name, input_root=root))
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


def _open(path: str, glob: str | None, column: str | None, id_column: str | None,
          max_bytes: int, videos: bool) -> Unit:
    """Classify and check one input -> its Unit (name not yet assigned)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise ValueError(f"discover: expected an input folder or file at {path!r}, got "
                         f"{e.strerror or e}; check the path") from None
    apath = os.path.abspath(path)
    if stat.S_ISDIR(st.st_mode):
        unit = Unit("", "folder", apath, glob=glob, max_bytes=max_bytes, videos=videos)
        check_folder(unit)
        return unit
    kind = kind_of(path)
    if kind is None or not stat.S_ISREG(st.st_mode):
        got = "not a regular file" if kind else f"the file {os.path.basename(path)!r}"
        raise ValueError(f"discover: expected a folder of images, a WebDataset .tar, a .parquet file "
                         f"or a .txt / .lst list of paths at {path!r}, got {got}; pass one of those")
    stamp = file_stamp(apath)
    if kind == "tar":
        unit = Unit("", "tar", apath, max_bytes=max_bytes, stamp=stamp, videos=videos)
        tar_verify(unit.path, videos)  # its headers walked (cached for count and samples), and counted again
        return unit
    if kind == "list":
        unit = Unit("", "list", apath, max_bytes=max_bytes, stamp=stamp, videos=videos)
        list_count(unit)  # read, and its lines counted again
        return unit
    col = parquet_resolve(apath, column, id_column, videos)
    return Unit("", "parquet", apath, column=col, id_column=id_column, max_bytes=max_bytes,
                stamp=stamp, videos=videos)


def _stem(path: str, kind: str) -> str:
    base = os.path.basename(path.rstrip("/\\")) or kind
    if kind != "folder":
        low = base.lower()
        for suf in sorted(SUFFIXES, key=len, reverse=True):
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
