"""Input access for the probe: random access to bytes or a file, reading only what is asked for."""
from __future__ import annotations

import os
import sys

from vlmprep.errors import ImageError

from ..files import open_image_file

BLOCK = 8192  # read granularity for files; one block holds a typical header
# Bytes one probe may read from a file (each block is kept): a header walk touches a block per
# segment, so 65,536 long JPEG segments could otherwise read and hold 512 MiB.
MAX_READ = 32 << 20


class Bytes:
    """Random access to an in-memory file; ``at`` returns at most ``n`` bytes."""

    def __init__(self, buf: bytes | memoryview):
        self._buf = buf
        self.size = len(buf)

    def at(self, off: int, n: int) -> bytes:
        return bytes(self._buf[off:off + n]) if off >= 0 else b""

    def close(self) -> None:
        pass


class File:
    """Random access to a seekable file that reads only the blocks asked for.

    Blocks are cached, so re-reading a header is free, and a skipped segment is
    never read.  Offsets are relative to ``start``; ``size`` counts from there.
    """

    def __init__(self, fp, start: int, size: int, owned: bool):
        self._fp = fp
        self._start = start
        self._owned = owned
        self._blocks: dict[int, bytes] = {}
        self._read_total = 0  # bytes read so far (bounded by MAX_READ)
        self.size = size

    def at(self, off: int, n: int) -> bytes:
        n = min(n, self.size - off)
        if off < 0 or n <= 0:
            return b""
        first, last = off // BLOCK, (off + n - 1) // BLOCK
        i = first
        while i <= last:  # fetch each run of missing blocks with one read
            if i in self._blocks:
                i += 1
                continue
            j = i
            while j < last and j + 1 not in self._blocks:
                j += 1
            raw = self._read(i * BLOCK, (j - i + 1) * BLOCK)
            for k in range(i, j + 1):
                self._blocks[k] = raw[(k - i) * BLOCK:(k - i + 1) * BLOCK]
            i = j + 1
        lo = off - first * BLOCK
        if first == last:
            return self._blocks[first][lo:lo + n]
        return b"".join(self._blocks[k] for k in range(first, last + 1))[lo:lo + n]

    def _read(self, off: int, n: int) -> bytes:
        self._read_total += n
        if self._read_total > MAX_READ:
            raise ImageError(
                f"expected the image headers within {MAX_READ:,} bytes read; the header walk "
                f"needs more (at byte {off:,}); the file is corrupt or hostile: re-encode it"
            )
        parts, chunk = [], b""
        try:
            self._fp.seek(self._start + off)
            while n > 0:  # file objects may return short reads before EOF
                chunk = self._fp.read(n)
                if not chunk or not isinstance(chunk, (bytes, bytearray, memoryview)):
                    break
                parts.append(bytes(chunk))
                n -= len(chunk)
        except (OSError, ValueError) as exc:
            raise ImageError(
                f"expected a readable file; reading it failed ({exc}); check the file or pass its bytes"
            ) from exc
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise ImageError(
                f"expected a binary file object; read() returned {type(chunk).__name__}; "
                "open the file in binary mode ('rb')"
            )
        return b"".join(parts)

    def close(self) -> None:
        try:
            if self._owned:
                self._fp.close()
            else:
                self._fp.seek(self._start)
        except (OSError, ValueError) as exc:
            raise ImageError(
                f"expected a seekable file; restoring its position failed ({exc}); pass the bytes instead"
            ) from exc


def open_source(x) -> Bytes | File:
    if isinstance(x, bytes):
        return Bytes(x)
    if isinstance(x, (bytearray, memoryview)):
        try:
            mv = memoryview(x)
            return Bytes(mv.cast("B") if mv.c_contiguous else mv.tobytes())
        except (ValueError, TypeError) as exc:  # released view, odd formats
            raise ImageError(f"expected a readable byte buffer; {exc}; pass bytes") from exc
    if isinstance(x, (str, os.PathLike)):
        return open_path(x)
    if callable(getattr(x, "read", None)) and callable(getattr(x, "seek", None)):
        try:
            start = x.seek(0, os.SEEK_CUR)
            end = x.seek(0, os.SEEK_END)
            x.seek(start)
        except (OSError, ValueError, TypeError) as exc:
            raise ImageError(
                f"expected a seekable binary file object; seek() failed ({exc}); pass the bytes instead"
            ) from exc
        if not isinstance(start, int) or not isinstance(end, int):
            raise ImageError(
                "expected a file object whose seek() returns the position; it returned "
                f"{type(start).__name__}; pass the bytes instead"
            )
        return File(x, start, max(end - start, 0), owned=False)
    raise ImageError(
        f"expected bytes, a path or a binary file object; got {type(x).__name__}; "
        "probe reads encoded files (a decoded array or PIL image has no header to probe)"
    )


def open_path(path) -> File:
    # Regular files only, opened without blocking: a FIFO or device at the path would make
    # open() or read() wait forever. probe's reads are bounded, so no size limit here.
    fp = open_image_file(path, sys.maxsize)
    try:
        size = os.fstat(fp.fileno()).st_size
    except OSError as exc:
        fp.close()
        raise ImageError(f"expected a readable image file; stat failed ({exc}); check the path") from exc
    return File(fp, 0, size, owned=True)
