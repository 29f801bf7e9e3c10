"""The ``folder`` input kind: every image (video, PDF) file under a directory, recursively.

Which files: those whose name matches ``glob``; default: the image extensions
``IMAGE_EXTENSIONS``, ``VIDEO_EXTENSIONS`` when the unit takes videos, then ``pdf`` (any case). A ``glob``
with a "/" is matched against the relative path, one without against the file name; a leading
``**/`` also matches at the top level (fnmatch rules: ``*`` crosses "/"; case-sensitive). Names
starting with "." (files and folders) are skipped. Symbolic links are followed; a folder already
visited (a link loop, or two links to one folder) is listed once. Id = the relative posix path
("a/b/c.jpg"; bytes that are not UTF-8 are written as ``\\xNN``). Order: sorted by relative
path. A sub-folder that cannot be listed is one error sample, id = its path + "/". A file named
with a video extension is a video sample (``Sample.video``).
"""
from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator

from ...errors import ImageError
from ...io.inputs import read_image_file
from .sample import Sample, is_video_name, media_extensions, safe_text
from .unit import Unit, kind_of, register_reader

__all__ = ["check_folder"]


def _read_file(path: str, max_bytes: int) -> tuple[bytes | None, str | None]:
    try:
        return read_image_file(path, max_bytes), None
    except ImageError as e:
        return None, str(e)


def _matches(rel: str, name: str, pattern: str | None, videos: bool) -> bool:
    if pattern is None:
        return name.rpartition(".")[2].lower() in media_extensions(videos) and "." in name
    target = rel if "/" in pattern else name
    if fnmatch.fnmatchcase(target, pattern):
        return True
    return pattern.startswith("**/") and fnmatch.fnmatchcase(rel, pattern[3:])


_LISTINGS: dict[tuple[str, str | None, bool], tuple[tuple[str, str | None], ...]] = {}


def _listing(unit: Unit, fresh: bool = False) -> tuple[tuple[str, str | None], ...]:
    """The folder's listing: made once per process (again when ``fresh``: discover() sees the
    folder as it is now), so every part of a job reads the same list."""
    key = (unit.path, unit.glob, unit.videos)
    got = None if fresh else _LISTINGS.get(key)
    if got is None:
        try:
            got = _folder_listing(unit.path, unit.glob, unit.videos)
        except OSError as e:
            raise ValueError(f"expected a readable folder at {unit.path!r}, got {e.strerror or e}; "
                             f"check the path and its permissions") from None
        if len(_LISTINGS) >= 16:
            _LISTINGS.pop(next(iter(_LISTINGS)))
        _LISTINGS[key] = got
    return got


def _folder_listing(root: str, pattern: str | None, videos: bool
                    ) -> tuple[tuple[str, str | None], ...]:
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
            elif _matches(rel, entry.name, pattern, videos):
                found.append((rel, None))
        stack.extend(reversed(subdirs))
    found.sort()
    return tuple(found)


def check_folder(unit: Unit) -> None:
    """discover()'s check: the folder lists (again, as it is now) and holds a matching file."""
    if _listing(unit, fresh=True):
        return
    kinds = "an image or video" if unit.videos else "an image"
    want = (f"matching {unit.glob!r}" if unit.glob
            else f"with {kinds} extension ({', '.join(media_extensions(unit.videos))})")
    hint = ""
    try:
        if {kind_of(f) for f in os.listdir(unit.path)} & {"tar", "parquet"}:
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
        sid = safe_text(rel)
        data, err2 = (None, err) if err else _read_file(os.path.join(unit.path, rel), unit.max_bytes)
        yield Sample(sid, f"{base}/{sid}", data, err2, video=is_video_name(rel))


register_reader("folder", _folder_count, _folder_samples)
