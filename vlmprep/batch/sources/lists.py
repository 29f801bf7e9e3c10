"""The ``list`` input kind (``.txt``, ``.lst``): one image (or video) path per line; a path
with a video extension is a video sample (``Sample.video``).

Paths are relative to the list file's folder, read under the input root (``paths``); blank
lines and lines starting with "#" are skipped; spaces at both ends are stripped; UTF-8. Id =
the line. A line repeated gets ``#2``, ``#3``, ... on its later ids (the image is read each
time, as listed). Order: the lines' order. The entries are counted again by line ends (\\n,
\\r\\n, \\r): a line holding another line break (\\x0b, \\x85, \\u2028, ...) is a ValueError,
not two paths.
"""
from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator

from .paths import read_unit_path
from .sample import Sample, is_video_name
from .unit import Unit, register_reader

__all__ = ["list_count"]


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
    under the unit's input root: ``read_unit_path``)."""
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


def list_count(unit: Unit) -> int:
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
        data, err = read_unit_path(unit, folder, p)
        yield Sample(sid, f"{base}#{lineno}", data, err, video=is_video_name(p))


register_reader("list", list_count, _list_samples)
