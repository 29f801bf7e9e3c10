"""Image paths: the only way vlmprep opens a file named by a caller.

A path is stat'ed before anything opens it, only a regular file is ever opened (a FIFO,
``/dev/zero`` or a socket would block or never end), it is opened non-blocking (a FIFO swapped
in after the stat cannot block ``open``), and its size is checked against ``max_source_bytes``
before a byte is read. ``too_big`` is the one "over max_source_bytes" message of io/.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Any

from ..errors import ImageError
from ..ops import DEFAULT_MAX_SOURCE_BYTES

__all__ = ["too_big", "stat_image_file", "open_image_file", "read_at_most", "read_image_file"]

_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def too_big(n: int, max_bytes: int, where: str) -> ImageError:
    return ImageError(f"expected an encoded image of at most {max_bytes:,} bytes "
                      f"(decode.max_source_bytes), got {n:,} bytes {where}; pass a smaller "
                      f"image, or raise max_source_bytes= if the source is trusted")


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _missing(path: Any, e: OSError | ValueError) -> ImageError:
    """What stat/open found instead of a file, as an ImageError."""
    cwd = ""
    try:
        if not os.path.isabs(path):
            cwd = f" (relative paths resolve from {os.getcwd()})"
    except (ValueError, OSError, TypeError):
        pass
    if isinstance(e, ValueError):
        found, fix = "a path containing a NUL character", "remove the \\0 from the path"
    elif e.errno == errno.ENOENT:
        found, fix = "nothing", f"check the path{cwd}"
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                found = f"a broken symbolic link (to {os.readlink(path)!r})"
                fix = "point the link at an existing file"
        except (OSError, ValueError):
            pass
    elif e.errno in (errno.EACCES, errno.EPERM):
        found, fix = "a path it may not read (permission denied)", \
            "give the serving user read access to the file and its folders"
    elif e.errno == errno.ENAMETOOLONG:
        found, fix = "a name too long for the file system (over 255 bytes per component)", \
            "shorten the path"
    elif e.errno == errno.ENOTDIR:
        found, fix = "a path through something that is not a directory", f"check the path{cwd}"
    elif e.errno == errno.ELOOP:
        found, fix = "a loop of symbolic links", "fix the links"
    else:
        found, fix = f"an error ({e.strerror or e})", "check the path and the file system"
    return ImageError(f"expected an image file at this path, found {found}; {fix}")


def stat_image_file(path: Any, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> os.stat_result:
    """``os.stat`` of an image path, without opening it -> its stat result.

    Raises ImageError naming what is there instead of a regular file (nothing, a directory, a
    character device, a FIFO, a socket, a broken symlink, permission denied, ...) or when its
    size is above ``max_bytes``.
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:
        raise _missing(path, e) from e
    if not stat.S_ISREG(st.st_mode):
        fix = ("pass the path of a file inside it" if stat.S_ISDIR(st.st_mode)
               else "pass a regular file (special files are never read: they may not end)")
        raise ImageError(f"expected an image file at this path, found {_file_kind(st.st_mode)}; "
                         f"{fix}")
    if st.st_size > max_bytes:
        raise too_big(st.st_size, max_bytes, "in a file")
    return st


def open_image_file(path: Any, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES):
    """Open a regular file of at most ``max_bytes`` bytes -> unbuffered binary file object.

    Never opens a non-regular file (checked with ``stat`` first), never blocks (opened with
    ``O_NONBLOCK``; a FIFO swapped in after the stat is caught by ``fstat``). Raises ImageError.
    """
    stat_image_file(path, max_bytes)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except (OSError, ValueError) as e:
        raise _missing(path, e) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ImageError(f"expected an image file at this path, found "
                             f"{_file_kind(st.st_mode)}; pass a regular file")
        if st.st_size > max_bytes:
            raise too_big(st.st_size, max_bytes, "in a file")
        if getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)  # a regular file: back to plain reads
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def read_at_most(f: Any, max_bytes: int) -> bytes:
    """The bytes of binary file ``f`` from its position to its end, or its first ``max_bytes + 1``
    when it holds more (the caller refuses those): reads again after a short read (network FS)."""
    parts: list[bytes] = []
    n = 0
    while n <= max_bytes:
        chunk = f.read(min(max_bytes + 1 - n, 1 << 24))
        if not chunk:
            break
        parts.append(chunk)
        n += len(chunk)
    return b"".join(parts)


def read_image_file(path: Any, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> bytes:
    """The bytes of a regular image file, at most ``max_bytes`` (a file that grew past it
    after the stat is an ImageError too, found after reading ``max_bytes + 1``)."""
    with open_image_file(path, max_bytes) as f:
        try:
            out = read_at_most(f, max_bytes)
        except OSError as e:
            raise ImageError(f"expected a readable file, got {type(e).__name__}: {e.strerror}; "
                             f"check the file and its file system") from e
    if len(out) > max_bytes:
        raise too_big(len(out), max_bytes, "or more in a file that grew while read")
    return out
