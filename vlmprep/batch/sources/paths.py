"""Paths named inside data (list lines, parquet ``path`` values), read only under the unit's
input root; and the input root itself (``check_root``).

Paths inside data are data, not the caller's choice: one is read only when it resolves under
the unit's input root (``discover(input_root=)``, ``vlmprep run --input-root``; default: the
input's own folder): joined to the input's folder, symbolic links resolved (realpath), then
compared. An absolute path elsewhere, a ``..`` leaving the root, a link inside the root to a
file outside it, and anything under ``NEVER_READ`` (/proc, /dev, /sys: never, whatever the
root) are error samples "expected a path under ROOT ..., got ...". The open does not follow a
link as the last component (O_NOFOLLOW) and, on Linux, the opened file's own path
(/proc/self/fd) is checked again, so a path swapped for a link after the check is refused
(``read_data_path``). No error here quotes the bytes read.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Any

from ...errors import ImageError
from ...io.inputs import read_at_most, stat_image_file
from ...ops import DEFAULT_MAX_SOURCE_BYTES
from .unit import Unit

__all__ = ["NEVER_READ", "read_data_path", "read_unit_path", "check_root"]

#: Never read through a path inside data, whatever the input root: kernel and device files.
NEVER_READ = ("/proc", "/dev", "/sys")
_OPEN_DATA = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
              | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))


def check_root(given: Any) -> str:
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


def read_unit_path(unit: Unit, folder: str, given: str) -> tuple[bytes | None, str | None]:
    """``read_data_path`` of a path inside ``unit``'s data, under its input root."""
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
