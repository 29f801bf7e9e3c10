"""``Unit``: one input of a batch job (a folder, tar, parquet file or path list), a picklable
description whose ``count()`` / ``samples()`` go to its kind's reader; the kinds, the file
suffixes that name them, and the stamp (size and content fingerprint) that says a file is the
one ``discover()`` counted.

Each kind's module registers its reader here (``register_reader``) when it is imported; the
package ``vlmprep.batch.sources`` imports them all, so a Unit always finds its reader.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ...ops import DEFAULT_MAX_SOURCE_BYTES
from .sample import Sample

__all__ = ["Unit", "KINDS", "SUFFIXES", "kind_of", "file_stamp", "register_reader"]

KINDS = ("folder", "tar", "parquet", "list")
SUFFIXES = {".tar": "tar", ".tar.gz": "tar", ".tgz": "tar", ".parquet": "parquet", ".pq": "parquet",
            ".txt": "list", ".lst": "list"}

Count = Callable[["Unit"], int]
Samples = Callable[["Unit", int, "int | None"], Iterator[Sample]]
_READERS: dict[str, tuple[Count, Samples]] = {}


def register_reader(kind: str, count: Count, samples: Samples) -> None:
    """The reader of ``kind``: ``count(unit)`` and ``samples(unit, start, stop)``."""
    if kind not in KINDS:
        raise ValueError(f"register_reader: expected kind one of {KINDS}, got {kind!r}")
    _READERS[kind] = (count, samples)


def kind_of(path: str) -> str | None:
    """The kind a file's suffix names ("tar", "parquet", "list"), or None."""
    low = path.lower()
    for suf in sorted(SUFFIXES, key=len, reverse=True):
        if low.endswith(suf):
            return SUFFIXES[suf]
    return None


@dataclass(frozen=True)
class Unit:
    """One input (a folder, tar, parquet file or path list): a picklable description (paths and
    options only). A process lists a folder once (discover() lists it again) and scans a tar or
    list file once per version (by path, size and mtime)."""
    name: str
    kind: str
    path: str
    glob: str | None = None        # folder: the file pattern (None: the media extensions)
    column: str | None = None      # parquet: the image column (resolved by discover)
    id_column: str | None = None   # parquet: the id column (None: "row-{n}")
    max_bytes: int = DEFAULT_MAX_SOURCE_BYTES
    # list / parquet: the folder every path inside the data must resolve under (a realpath;
    # None: the input's own folder, resolved when read)
    input_root: str | None = None
    # tar / parquet / list: (size, fingerprint) of the file when discover() counted it; a reader
    # that finds it changed raises ValueError (its samples would shift), never reads the new one
    stamp: tuple[int, str] | None = None
    # folder / tar: video files are samples too (VIDEO_EXTENSIONS after the image ones); False
    # for a job whose family has no video rule, which reads exactly the images it always read
    videos: bool = True

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


def file_stamp(path: str) -> tuple[int, str]:
    try:
        size = os.stat(path).st_size
        return size, _fingerprint(path, size)
    except OSError as e:
        raise ValueError(f"expected a readable input file at {path!r}, got {e.strerror or e}; check "
                         f"the path and its permissions") from None


def _check_stamp(unit: Unit) -> None:
    if unit.stamp is None:
        return
    now = file_stamp(unit.path)
    if now != unit.stamp:
        raise ValueError(f"expected the {unit.kind} input {unit.path!r} unchanged since discover() "
                         f"counted it ({unit.stamp[0]:,} bytes, fingerprint {unit.stamp[1]}), got "
                         f"{now[0]:,} bytes, fingerprint {now[1]}: its samples would shift; fix: "
                         f"run the job again on the file as it is now (--overwrite), or restore it")
