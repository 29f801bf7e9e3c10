"""A tar's bytes, below its headers: the byte sources the walk reads (``PlainTar`` by offset,
``StreamTar`` decompressing gzip / bz2 / xz forward in bounded pieces) and the byte-level
header checks (number fields, the checksum, a scan for every valid ustar header at any
alignment). Offsets are in the tar's bytes (for a compressed tar: in its decompressed stream).
"""
from __future__ import annotations

import bisect
import bz2
import lzma
import os
import zlib
from typing import Any

__all__ = ["BLOCK", "ZERO_BLOCK", "TAR_CHUNK", "number_field", "checksum_ok", "headers_in",
           "PlainTar", "StreamTar", "scan_forward", "open_tar"]

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
TAR_CHUNK = 1 << 20      # bytes per read while scanning, skipping or decompressing
_HIGH = bytes(range(128, 256))
_TAR_MAGIC = {"gzip": b"\x1f\x8b", "bz2": b"BZh", "xz": b"\xfd7zXZ\x00"}


def number_field(field: bytes) -> int | None:
    """A tar number field: octal digits (NUL / space padded) or GNU base-256; None: neither."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    s = field.split(b"\0", 1)[0].strip()
    if not s:
        return 0
    if s.translate(None, b"01234567"):
        return None
    return int(s, 8)


def checksum_ok(blk: bytes) -> bool:
    stored = number_field(blk[148:156])
    if stored is None:
        return False
    b = blk[:148] + b"        " + blk[156:BLOCK]
    unsigned = sum(b)
    return stored == unsigned or stored == unsigned - 256 * (len(b) - len(b.translate(None, _HIGH)))


def headers_in(buf: bytes, base: int, lo: int, hi: int) -> list[int]:
    """Offsets ``base + i`` of the valid ustar headers (magic "ustar" and checksum) that start at
    ``i`` in [lo, hi) and lie whole in ``buf``; any alignment (a cut that removed bytes shifts
    the rest)."""
    out = []
    i = buf.find(b"ustar", lo + 257)
    while i != -1:
        o = i - 257
        if o >= hi or o + BLOCK > len(buf):
            break
        if checksum_ok(buf[o:o + BLOCK]):
            out.append(base + o)
        i = buf.find(b"ustar", i + 1)
    return out


class PlainTar:
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
        return scan_forward(self, lo, hi)[0]


class StreamTar:
    """A gzip / bz2 / xz tar as its decompressed bytes, made forward in pieces of at most
    ``TAR_CHUNK`` and kept only from the last read offset on (memory: the largest read); a
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
            return d.decompress(data, TAR_CHUNK)
        data = b""
        if d.needs_input:
            data = self._read_in()
            if not data:
                self._finish(cut)
                return b""
        return d.decompress(data, TAR_CHUNK)

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
            self.seen.extend(headers_in(window, base, max(0, self._scan_hw - base), len(window)))
            self._scan_hw = max(self._scan_hw, self._made - (BLOCK - 1))
            self._tail = window[-(BLOCK - 1):]
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
            self._keep = max(self._keep, self._made - (BLOCK - 1))
            if not self._produce():
                return None

    def drain(self) -> None:
        """Decompress (and scan) to the end, keeping nothing."""
        while True:
            self._keep = self._made
            if not self._produce():
                return


def scan_forward(src: Any, start: int, stop: int | None = None) -> tuple[int | None, int | None]:
    """(the first valid ustar header starting at or after ``start`` and before ``stop``, the
    first non-zero byte from ``start`` up to that header or the end), reading forward only."""
    nz = None
    w = start
    step = 16 << 10  # growing windows: many small damaged regions cost little each
    while stop is None or w < stop:
        buf = src.read(w, step + BLOCK - 1)
        if not buf:
            break
        span = min(step, len(buf), step if stop is None else stop - w)
        found = headers_in(buf, w, 0, span)
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
        step = min(2 * step, TAR_CHUNK)
    return None, nz


def open_tar(path: str, scan: bool) -> PlainTar | StreamTar:
    with open(path, "rb") as f:
        head = f.read(6)
    for name, magic in _TAR_MAGIC.items():
        if head.startswith(magic):
            return StreamTar(path, name, scan)
    return PlainTar(path)
