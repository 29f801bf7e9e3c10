"""PDF pages rendered in worker processes (issue 31): ``render`` (a PDF's bytes + page -> ``(H, W,
3)`` uint8 RGB, pypdfium2's own pixels) with a time bound and a memory bound per page.

Why a process: PDFium cannot be interrupted and is not thread-safe. In-process, a hostile page
whose render never ends hangs the caller for good, a page whose content allocates without end
takes the host's memory, and every render of every thread waits on one lock. In a worker:

- time: the caller waits ``timeout_s`` for the page, then kills the worker (SIGKILL; the next
  page starts a fresh one) and the page is an ImageError;
- memory: the worker renders under an address-space limit (``RLIMIT_AS``, ``page_limit_bytes``):
  its own size, plus the page's bitmaps as planned, plus ``PAGE_WORK_BYTES`` for PDFium's working
  memory. An allocation past it fails inside the worker (MemoryError, or PDFium's own
  out-of-memory abort), never in the caller; a worker that dies is that page's ImageError;
- threads: one worker per concurrently rendering caller thread, at most ``os.cpu_count()``, so
  two threads render two pages at once.

Workers are persistent: started on first use (``WORKER_START_S`` measured below), reused across
pages and documents, each keeping the last ``CACHED_DOCUMENTS`` documents it was sent (keyed by
a digest of bytes and password: a document's bytes cross the pipe once per worker, not once per
page), and stopped at interpreter exit. Pixels come back through a memory file both processes
map (``memfd``: a pipe cost ~10 ms a Letter page in copies); replies are JSON, never pickles (a
worker that a hostile PDF compromised cannot run code in the caller by its reply).

A worker is a fresh interpreter (``subprocess`` with this file as its code), never a fork: a
fork of a process with torch's threads can deadlock, and multiprocessing's "spawn" re-imports
the caller's ``__main__`` (a script without the ``if __name__ == "__main__"`` guard would run
again in every worker). This module imports only the standard library at its top for that
reason: the worker loads it by path, without ``vlmprep``'s package ``__init__``.
"""
from __future__ import annotations

import atexit
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

__all__ = ["render", "page_limit_bytes", "shutdown", "CACHED_DOCUMENTS", "PAGE_WORK_BYTES",
           "WORKER_BASE_BYTES", "WORKER_START_S"]

#: A worker's own address space, measured (pypdfium2 5.15 / PDFium 159, numpy, Python 3.11, one
#: thread per BLAS pool, two malloc arenas): 192 MiB after a Letter page at 144 dpi (its pixel
#: file mapped, its watchdog thread's stack). For the docs' figures: each page's limit counts the
#: worker's size as it is then (``page_limit_bytes``), cached documents included.
WORKER_BASE_BYTES = 192 << 20
#: PDFium's working memory for one page beyond its output bitmaps: decoded images (at most the
#: page's pixels each, PDFium downsamples to the device), fonts, paths, clip masks. A page
#: needing more is refused (its ImageError names the bound), not given the host's memory.
PAGE_WORK_BYTES = 512 << 20
#: Output bytes per planned pixel: pypdfium2's BGR bitmap (3 bytes, rows padded to 4) and the
#: contiguous RGB copy sent back (3 bytes).
BYTES_PER_PIXEL = 6
#: Documents a worker keeps open (the most recent ones), and their bytes in all (the newest one
#: is kept whatever its size: ``max_source_bytes`` bounds it).
CACHED_DOCUMENTS = 4
CACHED_BYTES = 256 << 20
#: Seconds a worker may take to start (an interpreter, numpy, pypdfium2): ~0.2 s measured on a
#: loaded 2-core machine; the bound is for loaded CI machines, not a hang of the caller.
WORKER_START_S = 60.0
_KEEP_SHM_BYTES = 64 << 20  # a worker's pixel file is kept up to this size between pages


def page_limit_bytes(base: int, hw: tuple[int, int], work: int | None = None) -> int:
    """The address-space limit while rendering a page planned at ``hw`` = (H, W), for a worker
    of ``base`` bytes: ``base + 6 * H * W + work`` (None: ``PAGE_WORK_BYTES``).

    Given base 192 MiB and a Letter page at 144 dpi (1584, 1224) -> ~715 MiB; at the default
    ``max_source_pixels`` (178,956,970) the largest page's limit is ~1.7 GiB."""
    h, w = hw
    return base + BYTES_PER_PIXEL * (h + 1) * (w + 1) + (PAGE_WORK_BYTES if work is None else work)


# -- the worker (runs in the child interpreter) ------------------------------------------------
def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _watch_parent() -> None:  # pragma: no cover (in the worker)
    """Leave when the caller dies without closing the pipe cleanly (SIGKILL, libFuzzer's
    _exit) while a page renders, rather than finish an hour-long page. Not PR_SET_PDEATHSIG:
    that fires when the *thread* that started the worker ends, and workers outlive threads."""
    parent = os.getppid()

    def orphaned() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=orphaned, daemon=True).start()


class _WorkerLoop:  # pragma: no cover (in the worker)
    """The worker's side: open documents (cached), render pages into the pixel file, answer
    in JSON. One request at a time, in order."""

    def __init__(self, rfd: int, wfd: int, shm: int) -> None:
        import resource
        from multiprocessing.connection import Connection

        import pypdfium2
        self.pdfium = pypdfium2
        self.inp, self.out = Connection(rfd, writable=False), Connection(wfd, readable=False)
        self.shm = shm
        self.hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        self.mapped: Any = None  # the pixel file, mapped
        self.mapped_size = 0
        self.docs: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self.sizes: dict[str, int] = {}

    def answer(self, reply: dict) -> None:
        self.out.send_bytes(json.dumps(reply).encode())

    def limit(self, n: int | None) -> None:
        """Address space at most ``n`` bytes (None: back to the hard limit)."""
        import resource
        hard = self.hard
        soft = hard if n is None or (hard != resource.RLIM_INFINITY and n > hard) else n
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

    def run(self) -> None:
        self.answer({"ready": os.getpid()})
        while True:
            try:
                head = json.loads(self.inp.recv_bytes())
            except EOFError:  # the caller closed the pipe: shut down
                return
            if head["op"] == "doc":
                self.open(head["key"], head["password"], self.inp.recv_bytes())
            else:
                self.answer(self.render(head))

    def open(self, key: str, password: str | None, data: bytes) -> None:
        """Open and cache a document; a load failure is cached as its message (the render's
        reply carries it)."""
        try:
            self.limit(_vm_bytes() + PAGE_WORK_BYTES)
            self.docs[key] = self.pdfium.PdfDocument(data, password=password)
        except Exception as e:  # noqa: BLE001 (the render's reply carries it)
            self.docs[key] = f"{type(e).__name__} ({e})"
        finally:
            self.limit(None)
        self.sizes[key] = len(data)
        self.docs.move_to_end(key)
        while len(self.docs) > CACHED_DOCUMENTS or (
                len(self.docs) > 1 and sum(self.sizes.values()) > CACHED_BYTES):
            old, pdf = self.docs.popitem(last=False)
            self.sizes.pop(old)
            if not isinstance(pdf, str):
                pdf.close()

    def render(self, head: dict) -> dict:
        """One page into the pixel file -> ``{"shape"}``, or why not (``missing``,
        ``load_error``, ``error``); a MemoryError answers and ends the worker."""
        key = head["key"]
        pdf = self.docs.get(key)
        if pdf is None:
            return {"missing": True}
        self.docs.move_to_end(key)
        if isinstance(pdf, str):
            return {"load_error": pdf}
        try:
            self.limit(page_limit_bytes(_vm_bytes(), tuple(head["hw"]), head["work"]))
            page = pdf[head["page"]]
            try:
                bitmap = page.render(scale=head["scale"], rev_byteorder=True)
                return {"shape": self.write(bitmap.to_numpy()[..., :3])}
            finally:
                page.close()
        except MemoryError:
            # the heap may be half-updated: answer, then leave (the caller starts a fresh worker)
            self.answer({"memory": 1})
            os._exit(3)
        except Exception as e:  # noqa: BLE001 (PDFium on a damaged page: this page's error)
            return {"error": f"{type(e).__name__} ({e})"}
        finally:
            self.limit(None)

    def write(self, rgb: Any) -> list[int]:
        """``rgb`` copied into the pixel file (grown as needed; the map kept: a fresh map
        faults every page in) -> its shape. One copy, straight into what the caller reads."""
        import mmap

        import numpy as np
        shape, n = list(rgb.shape), rgb.size
        if os.fstat(self.shm).st_size < n:  # grown (or emptied by the caller after a big one)
            os.ftruncate(self.shm, n)
        size = os.fstat(self.shm).st_size
        if self.mapped is None or len(self.mapped) < n or self.mapped_size != size:
            if self.mapped is not None:
                self.mapped.close()
            self.mapped_size = size
            self.mapped = mmap.mmap(self.shm, size)
        np.copyto(np.frombuffer(self.mapped, np.uint8, n).reshape(shape), rgb)
        return shape


def _worker_main(rfd: int, wfd: int, shm: int) -> None:  # pragma: no cover (in the worker)
    _watch_parent()
    _WorkerLoop(rfd, wfd, shm).run()


# -- the caller's side -------------------------------------------------------------------------
class WorkerDied(Exception):
    """The worker ended (killed, crashed, out of memory) before answering."""


class _Worker:
    """One worker process and its two pipes; used by one caller thread at a time."""

    def __init__(self) -> None:
        from multiprocessing.connection import Connection
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        # stderr to a file, not a pipe nobody reads (a chatty PDFium would block on it)
        self.log = tempfile.TemporaryFile()
        # the pixels: a memory file both map (a pipe costs ~10 ms a Letter page in copies)
        self.shm = os.memfd_create("vlmprep-page", os.MFD_CLOEXEC)
        code = ("import importlib.util as u, sys; sys.path[:] = " + repr(sys.path) + "; "
                "s = u.spec_from_file_location('_vlmprep_page_worker', " + repr(__file__) + "); "
                "m = u.module_from_spec(s); s.loader.exec_module(m); "
                f"m._worker_main({req_r}, {rep_w}, {self.shm})")
        # one thread per BLAS pool and two malloc arenas: threads the worker never uses would
        # each reserve address space under its limit
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", code],
                                         pass_fds=(req_r, rep_w, self.shm),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=self.log, env=env)
        except BaseException:
            os.close(self.shm)
            self.log.close()
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        self.send = Connection(req_w, readable=False)
        self.recv = Connection(rep_r, writable=False)
        self.keys: collections.deque[str] = collections.deque(maxlen=CACHED_DOCUMENTS)
        try:
            ok = self.recv.poll(WORKER_START_S) and "ready" in json.loads(self.recv.recv_bytes())
        except (EOFError, OSError, ValueError):
            ok = False
        if not ok:
            why = self.ended()
            self.kill()
            from ..errors import ImageError
            raise ImageError(f"expected a PDF render worker ({sys.executable} with pypdfium2 and "
                             f"numpy) to start within {WORKER_START_S:g} s, got {why}; check "
                             f"that `{sys.executable} -c 'import pypdfium2, numpy'` works")

    def ended(self) -> str:
        """Why the worker stopped, for an error: its exit status and stderr's last line."""
        try:
            rc = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "no answer (still running)"
        how = (f"killed by {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.valid_signals()
               else f"exit status {rc}")
        self.log.seek(0)
        tail = self.log.read()[-2000:].decode(errors="replace").strip().splitlines()
        return how + (f": {tail[-1]}" if tail else "")

    def request(self, head: dict, data: bytes | None = None) -> None:
        try:
            self.send.send_bytes(json.dumps(head).encode())
            if data is not None:
                self.send.send_bytes(data)
        except OSError as e:  # a broken pipe: the worker is gone
            raise WorkerDied(self.ended()) from e

    def reply(self, deadline: float) -> dict | None:
        """The next reply, None past ``deadline``; WorkerDied when the worker ended."""
        try:
            if not self.recv.poll(max(0.0, deadline - time.monotonic())):
                return None
            return json.loads(self.recv.recv_bytes())
        except (EOFError, OSError) as e:
            raise WorkerDied(self.ended()) from e

    def kill(self) -> None:
        """SIGKILL and reap (no zombie), close the pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for c in (self.send, self.recv):
            c.close()
        self.log.close()
        os.close(self.shm)

    def stop(self, wait_s: float = 1.0) -> None:
        """Close its input (the worker exits at EOF); kill it if it is still there after wait_s."""
        self.send.close()
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.recv.close()
        self.log.close()
        os.close(self.shm)

    def pixels(self, shape: tuple[int, ...]) -> Any:
        """The page the worker left in the memory file, copied out (the file is reused)."""
        import mmap

        import numpy as np
        n = int(np.prod(shape))
        if os.fstat(self.shm).st_size < n:
            raise WorkerDied(f"{os.fstat(self.shm).st_size} bytes of pixels for a {shape} page")
        out = np.empty(shape, np.uint8)
        with mmap.mmap(self.shm, n, prot=mmap.PROT_READ) as mm:
            src = np.frombuffer(mm, np.uint8, n).reshape(shape)
            np.copyto(out, src)
            del src
        if n > _KEEP_SHM_BYTES:  # a large page's memory is given back, not held while idle
            os.ftruncate(self.shm, 0)
        return out


class _Pool:
    """Idle workers, reused; one more started while every worker is busy, up to the CPUs."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.idle: list[_Worker] = []
        self.count = 0  # workers alive: idle + busy (+ starting)
        self.limit = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                         else (os.cpu_count() or 1))
        self.closed = False

    def take(self, key: str) -> _Worker:
        with self.cond:
            while not self.idle and self.count >= self.limit:
                self.cond.wait(1.0)  # and look again: an idle worker may have died meanwhile
            dead = [w for w in self.idle if w.proc.poll() is not None]  # killed from outside
            for w in dead:
                self.idle.remove(w)
                self.count -= 1
                w.kill()
            if self.idle:  # prefer a worker that has the document open already
                k = next((i for i, w in enumerate(self.idle) if key in w.keys), -1)
                return self.idle.pop(k)
            self.count += 1
        try:
            return _Worker()  # outside the lock: other threads keep using idle workers
        except BaseException:
            self.lost()
            raise

    def give(self, w: _Worker) -> None:
        with self.cond:
            if self.closed:
                w.stop()
                return
            self.idle.append(w)
            self.cond.notify()

    def lost(self) -> None:
        with self.cond:
            self.count -= 1
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            idle, self.idle = self.idle, []
            self.count -= len(idle)
        for w in idle:
            w.stop()


_POOL = _Pool()


def shutdown() -> None:
    """Stop the idle workers (interpreter exit; tests). Busy ones stop when their page returns."""
    _POOL.close()
    with _POOL.cond:
        _POOL.closed = False  # later renders start fresh workers


def _exit() -> None:
    _POOL.close()


atexit.register(_exit)


def _forget_after_fork() -> None:
    """In a forked child: the workers and their pipes are the parent's. Drop them (closing our
    copies of the pipes only) and start this process's own on first use."""
    global _POOL
    for w in _POOL.idle:
        for c in (w.send, w.recv):
            c.close()
        os.close(w.shm)
    _POOL = _Pool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def render(data: bytes, key: str, password: str | None, page: int, scale: float,
           hw: tuple[int, int], timeout_s: float) -> Any:
    """``(H, W, 3)`` uint8 RGB, C-contiguous: page ``page`` (0-based) of the PDF ``data`` rendered
    at ``scale`` by pypdfium2 in a worker (``page.render(scale=..., rev_byteorder=True)
    .to_numpy()[..., :3]``, bit for bit), within ``timeout_s`` and ``page_limit_bytes(hw)``.
    ``key``: a digest of ``data`` and ``password`` (the worker's cache key). ``hw``: the planned
    (H, W); a render of another size is returned as it is (the caller compares).

    ImageError (expected / got / fix, no page named: the caller adds it) when the worker cannot
    start, the render takes longer than ``timeout_s`` (the worker is killed), PDFium fails, the
    page needs more memory than its limit, or the worker dies."""
    from ..errors import ImageError
    w = _POOL.take(key)
    ok = False
    try:
        deadline = time.monotonic() + timeout_s
        # the bound is the caller's (read here, per page), the worker applies it
        work = PAGE_WORK_BYTES
        head = {"op": "render", "key": key, "page": page, "scale": scale, "hw": list(hw),
                "work": work}
        if key not in w.keys:  # document and render in one go: no round trip for the load
            w.request({"op": "doc", "key": key, "password": password}, data)
            w.keys.append(key)
        w.request(head)
        r = w.reply(deadline)
        if r is not None and r.get("missing"):  # the worker dropped it from its cache: again
            w.request({"op": "doc", "key": key, "password": password}, data)
            w.keys.append(key)
            w.request(head)
            r = w.reply(deadline)
        if r is None:
            raise ImageError(f"expected the page to render within {timeout_s:g} s (Document("
                             f"timeout_s=...)), got no result after {timeout_s:g} s: the render "
                             f"was stopped (its worker process killed); leave the page out with "
                             f"pages=, or raise timeout_s= if the page is only slow")
        if "memory" in r:
            raise ImageError(f"expected a page that renders within its memory bound "
                             f"({page_limit_bytes(0, hw, work) / 2**20:,.0f} MiB beyond "
                             f"the render process's own size: its bitmaps and "
                             f"{work >> 20} MiB of PDFium's work), got MemoryError; "
                             f"leave the page out with pages=, or lower dpi=")
        if "load_error" in r or "error" in r:
            ok = True  # the worker answered: still good
            raise ImageError(f"expected a page PDFium can render, got "
                             f"{r.get('error') or r.get('load_error')}; repair the PDF or leave "
                             f"the page out with pages=")
        out = w.pixels(tuple(r["shape"]))
        ok = True
        return out
    except WorkerDied as e:
        raise ImageError(f"expected a page PDFium can render, got its render process ended "
                         f"({e}): PDFium crashed or ran out of its memory bound "
                         f"({page_limit_bytes(0, hw) / 2**20:,.0f} MiB beyond its own size); "
                         f"repair the PDF, leave the page out with pages=, or lower dpi=") from None
    finally:
        if ok:
            _POOL.give(w)
        else:  # timed out, died, or in an unknown state: never reused
            w.kill()
            _POOL.lost()
