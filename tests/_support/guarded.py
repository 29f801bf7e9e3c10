"""Arrays placed flush against an unmapped page, so an over-read or over-write crashes.

A heap buffer has readable bytes after its end (allocator padding, the next block), so a kernel
that reads a few bytes past an image's last row usually gets away with it. These arrays live in
their own mmap: ``guarded(..., where="end")`` puts the data's last byte at the end of a mapped
page followed by a PROT_NONE page (one byte past the end faults: SIGSEGV), ``where="start"``
puts the first byte right after a PROT_NONE page (one byte before the start faults).

    a = guarded((9, 17, 3), np.uint8)            # 459 bytes ending at a page boundary
    a[...] = img                                 # fill as any array
    t = torch.from_numpy(a)                      # shares the memory (torch ops see the guard)
    v = guarded_view(img, row_stride=60)         # a (h, w, 3) view with row stride 60 bytes

Run code that may fault in a subprocess (tests/_support/guarded.run_isolated): a fault kills the
process, which the parent then reports as a failed test instead of losing pytest.

Linux/glibc only (mmap + mprotect through libc); the memory is unmapped when the array and
every view of it are gone.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import signal
import subprocess
import sys

import numpy as np

__all__ = ["guarded", "guarded_copy", "guarded_view", "PAGE", "run_isolated"]

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mprotect.restype = ctypes.c_int


def _region(nbytes: int, where: str) -> tuple[mmap.mmap, int]:
    """A fresh mapping with one PROT_NONE guard page (after the data, or before it); returns
    the mapping and the data's byte offset in it."""
    if where not in ("end", "start"):
        raise ValueError(f"where: expected 'end' or 'start', got {where!r}")
    data_pages = max(1, -(-nbytes // PAGE))
    m = mmap.mmap(-1, (data_pages + 1) * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                  prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))  # keeps m exported (never closed early)
    guard = base + data_pages * PAGE if where == "end" else base
    if _libc.mprotect(ctypes.c_void_p(guard), PAGE, 0) != 0:  # PROT_NONE
        err = ctypes.get_errno()
        raise OSError(err, f"mprotect of the guard page failed: {os.strerror(err)}")
    offset = data_pages * PAGE - nbytes if where == "end" else PAGE
    return m, offset


def guarded(shape, dtype, where: str = "end") -> np.ndarray:
    """A C-contiguous writable array of ``shape`` and ``dtype`` (zeroed) whose bytes end exactly
    at a PROT_NONE page (``where="end"``) or start exactly after one (``where="start"``)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    nbytes = count * dtype.itemsize
    m, offset = _region(nbytes, where)
    return np.frombuffer(m, dtype=dtype, count=count, offset=offset).reshape(shape)


def guarded_copy(a, where: str = "end") -> np.ndarray:
    """``a``'s values in a guarded C-contiguous array (see guarded)."""
    a = np.asarray(a)
    out = guarded(a.shape, a.dtype, where)
    out[...] = a
    return out


def guarded_view(img: np.ndarray, row_stride: int | None = None, where: str = "end") -> np.ndarray:
    """A view of ``img``'s values (h, w, c) with rows ``row_stride`` bytes apart (>= w * c *
    itemsize; a crop of a wider canvas), the last row's last byte (``end``) or the first row's
    first byte (``start``) flush against the guard page."""
    img = np.asarray(img)
    h, w, c = img.shape
    item = img.dtype.itemsize
    row = w * c * item
    stride = row if row_stride is None else int(row_stride)
    if stride < row or stride % item:
        raise ValueError(f"row_stride: expected a multiple of {item} >= {row}, got {stride}")
    nbytes = (h - 1) * stride + row if h else 0
    flat = guarded((nbytes // item,), img.dtype, where)
    view = np.lib.stride_tricks.as_strided(flat, (h, w, c), (stride, c * item, item))
    view[...] = img
    return view


def run_isolated(code: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs Python ``code`` in a child process (cwd: the repository root, so ``tests.`` imports
    work) with extra environment ``env``; returns the finished process. A child killed by a
    signal has a negative returncode (-11: SIGSEGV); ``describe(proc)`` says so in words."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    full = dict(os.environ, **(env or {}))
    full["PYTHONPATH"] = root + os.pathsep + full.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], cwd=root, env=full, capture_output=True,
                          text=True, timeout=timeout)


def describe(proc: subprocess.CompletedProcess) -> str:
    """How a child ended, with the tail of its output (for assertion messages)."""
    rc = proc.returncode
    how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
    tail = (proc.stdout[-3000:] + "\n--- stderr ---\n" + proc.stderr[-3000:]).strip()
    return f"child {how}\n{tail}"


__all__ += ["describe"]
