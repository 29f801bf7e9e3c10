"""``vlmprep bench --documents`` (issue 31): pages/s and peak RSS of one PDF, vlmprep's
``Processor.stream`` against a PDF renderer plus the transformers image processor, with the
render alone timed apart.

The PDF is made here, deterministically from a seed, with pypdfium2's API (``make_pdf``): US
Letter pages (612 x 792 pt) like a paper's, about 48 lines of 10-pt Helvetica text and one or two
JPEG figures each (photo mosaics of the pictures scikit-image ships). It is written to a
temporary file: every side reads it from its path, as its users do.

Measured per thread count (vlmprep's own threads, torch and OpenCV: ``timing.thread_count``), each
configuration in its own fresh subprocess (so its peak RSS is its own), once for ``--pages`` pages
and once for twice as many (the same pages, then more: page ``k`` is the same in both files):

- ``vlmprep``: ``for part in Processor(preset).stream(Document(path, dpi=dpi),
  pages_per_batch=B)``: plan from the page tree, then render, resize, normalize, patchify, pack,
  ``B`` pages at a time; each part is dropped before the next, as in a user's loop.
- ``render_floor``: pypdfium2 alone rendering the same pages at the same dpi in the measuring
  process, one page at a time (``page.render(scale=dpi/72).to_numpy()``, what vlmprep renders):
  PDFium is not thread-safe, so this is one thread whatever the thread count.
- ``baseline_<backend>``: what a transformers user writes: the PDF renderer (PyMuPDF
  ``page.get_pixmap(matrix=Matrix(dpi/72, dpi/72))`` -> PIL image; else pdf2image ``convert_from_path(dpi=dpi)`` where
  poppler is installed; else pypdfium2's own render -> PIL) makes the list of ALL the pages'
  PIL images first (pdf2image's ``convert_from_path`` returns that list), then the family's
  transformers image processor (``hf.build``: the checkpoint's config, the ``pil`` and
  ``torchvision`` classes ``--compare hf`` uses) is called on ``B`` pages at a time
  (``return_tensors="pt"``), each output dropped before the next call.

Nothing is asserted: it only measures. With ``rounds > 1`` the sides are measured round-robin and
the median round is reported (every round's pages/s kept). The defaults (100 and 200 pages, threads
1 and 2, one round) took about 6.5 minutes on a 2-core machine; the report gives the wall time.
"""
from __future__ import annotations

import ctypes
import gc
import hashlib
import io
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .. import kernels
from . import env as bench_env

if TYPE_CHECKING:
    from ..pack import PackedBatch

__all__ = ["DocumentBenchConfig", "make_pdf", "resolve_renderer", "vlmprep_parts", "measure_one",
           "run_documents", "child_main", "RENDERERS", "DEFINITIONS", "SCHEMA_VERSION",
           "TARGET_SPEEDUP"]

SCHEMA_VERSION = 1
#: Issue 31's target: vlmprep at least this many times the baseline's pages/s.
TARGET_SPEEDUP = 5.0
#: ``--baseline-renderer`` choices; "auto" takes the first of the others that runs here.
RENDERERS = ("auto", "pymupdf", "pdf2image", "pypdfium2")
LETTER_PT = (612.0, 792.0)

DEFINITIONS = {
    "pages_per_s": "pages / wall seconds of one timed pass over the whole document (warm-up, "
                   "imports and the PDF's writing excluded); with rounds > 1 the run of median "
                   "seconds of the rounds (rounds_pages_per_s: every round's)",
    "ms_per_page": "1000 / pages_per_s",
    "vlmprep": "for part in Processor(preset, dtype).stream(Document(path, dpi=dpi), "
               "pages_per_batch): plan, render (pypdfium2), resize, normalize, patchify, pack; "
               "each part dropped before the next",
    "render_floor": "pypdfium2 alone: page.render(scale=dpi/72, rev_byteorder=True).to_numpy() of "
                    "every page, one at a time, in the measuring process (one thread: PDFium is "
                    "not thread-safe); the least vlmprep's render can cost",
    "baseline": "the baseline renderer makes a list of every page as a PIL RGB image (render_s), "
                "then the transformers image processor runs on pages_per_batch pages per call, "
                "return_tensors='pt', each output dropped before the next call (process_s)",
    "speedup": "vlmprep pages_per_s / the baseline's pages_per_s (same page count and threads)",
    "x_render_floor": "vlmprep seconds / render_floor seconds (1.0: vlmprep costs only its render)",
    "speedup_bound": "baseline seconds / render_floor seconds: the speedup vlmprep would have if "
                     "it cost nothing beyond pypdfium2's render",
    "peak_rss_mib": "the measuring subprocess's peak resident memory (Linux VmHWM; elsewhere "
                    "getrusage ru_maxrss): imports, processor, warm-up and the timed pass",
    "span_peak_rss_mib": "peak resident memory of the timed pass alone (Linux VmHWM, reset by "
                         "/proc/self/clear_refs when it starts); rss_before_mib: resident memory "
                         "when it starts",
    "worker_peak_rss_mib": "peak of the subprocess's own child processes that ran during the "
                           "timed pass (page-render workers), if any: the sum of each one's VmHWM "
                           "(polled every 50 ms), or the largest reaped one (RUSAGE_CHILDREN) when "
                           "it grew, whichever is larger; peak_rss_total_mib adds it to "
                           "peak_rss_mib",
    "rss_growth_mib": "max_peak_rss_total_mib (the largest of the rounds) at 2x pages minus at 1x "
                      "pages; per_page_kib: that over the added pages",
    "cpu_cores_used": "CPU seconds (the process, its reaped children, and the live ones the "
                      "50-ms poll saw) / wall seconds of the timed pass",
    "load_average_before": "os.getloadavg() before the measurement (after: _after)",
}


@dataclass
class DocumentBenchConfig:
    """What ``run_documents`` measures.

    Fields:
        preset: a preset name whose checkpoint config ``hf`` has (default "qwen2-vl").
        pages: pages of the document (also measured at twice as many when ``scaling``).
        dpi: render resolution of every side (default 150).
        threads: thread counts (vlmprep, torch, OpenCV; None: the libraries' defaults).
        pages_per_batch: vlmprep's ``stream(pages_per_batch=)`` and the baseline's pages per
            processor call.
        warmup: untimed pages processed before the timed pass, in the measuring process.
        dtype: vlmprep's output dtype (float32 is the like-for-like one).
        renderer: the baseline's renderer (``RENDERERS``).
        hf_backends: the transformers processor backends ("pil", "torchvision"; None: both
            where this transformers has them).
        scaling: also measure twice the pages (peak RSS against page count).
        seed: the document's text and figures.
        rounds: measurements of each side per page count and thread count, taken round-robin
            (every side once per round, so a load change hits them alike); the median one (by
            seconds) is reported, with every round's pages/s.
    """

    preset: str = "qwen2-vl"
    pages: int = 100
    dpi: float = 150.0
    threads: list[int | None] = field(default_factory=lambda: [1, 2])
    pages_per_batch: int = 1
    warmup: int = 2
    dtype: str = "float32"
    renderer: str = "auto"
    hf_backends: list[str] | None = None
    scaling: bool = True
    seed: int = 0
    rounds: int = 1


# -- the document --------------------------------------------------------------------------------
_WORDS = ("the of and a to in is we that for model vision language image page token patch "
          "encoder layer attention results table figure show method data training with on as "
          "by this are from our which each resolution text document benchmark accuracy").split()
_LINE_PT = 12.0       # 10-pt text on 12-pt leading
_MARGIN_PT = 72.0     # one inch
_FIGURES = 4          # distinct figure images, reused across pages as a paper's are not (fine)


def _figures(seed: int) -> list[bytes]:
    """JPEG bytes of ``_FIGURES`` photo mosaics (600x400 px), deterministic from ``seed``."""
    from PIL import Image  # deferred: heavy

    from .images import mosaic
    out = []
    for k in range(_FIGURES):
        buf = io.BytesIO()
        Image.fromarray(mosaic((400, 600), seed=seed * _FIGURES + k)).save(buf, "JPEG", quality=85)
        out.append(buf.getvalue())
    return out


def _text_line(pdf: Any, page: Any, text: str, x: float, y: float, size: float = 10.0) -> None:
    import pypdfium2.raw as c  # deferred: optional extra
    obj = c.FPDFPageObj_NewTextObj(pdf.raw, b"Helvetica", ctypes.c_float(size))
    buf = ctypes.create_string_buffer((text + "\x00").encode("utf-16-le"))
    if not c.FPDFText_SetText(obj, ctypes.cast(buf, c.FPDF_WIDESTRING)):
        raise RuntimeError("FPDFText_SetText failed")
    c.FPDFPageObj_Transform(obj, 1, 0, 0, 1, x, y)
    c.FPDFPage_InsertObject(page.raw, obj)  # the page owns it now


def _figure(pdf: Any, page: Any, jpeg: bytes, x: float, y: float, w: float, h: float) -> None:
    import pypdfium2 as pdfium  # deferred: optional extra
    img = pdfium.PdfImage.new(pdf)
    img.load_jpeg(io.BytesIO(jpeg), inline=False)
    img.set_matrix(pdfium.PdfMatrix().scale(w, h).translate(x, y))
    page.insert_obj(img)


def make_pdf(pages: int, seed: int = 0) -> bytes:
    """The bytes of a ``pages``-page US Letter PDF like a paper's: a title line, 10-pt Helvetica
    body text, one figure on every page (300x200 pt) and a second, smaller one (220x146 pt) on
    every other page, each with a caption. Deterministic from ``seed``; page ``k`` does not
    depend on ``pages`` (the 2x document starts with the 1x one's pages)."""
    import numpy as np  # deferred: heavy
    try:
        import pypdfium2 as pdfium  # deferred: optional extra
    except ImportError as e:
        raise ValueError(f"--documents makes its PDF with pypdfium2: pip install 'vlmprep[pdf]' "
                         f"({e})") from None
    figs = _figures(seed)
    pdf = pdfium.PdfDocument.new()
    w_pt, h_pt = LETTER_PT
    for p in range(pages):
        rng = np.random.default_rng([seed, p])
        page = pdf.new_page(w_pt, h_pt)
        y = h_pt - _MARGIN_PT
        _text_line(pdf, page, f"{p + 1}. " + " ".join(rng.choice(_WORDS, 6)).title(),
                   _MARGIN_PT, y, 14.0)
        y -= 2 * _LINE_PT
        first = int(rng.integers(2, 9))  # both figures fit on the page from these lines
        fig_at = {first: (300.0, 200.0)}
        if p % 2 == 1:
            fig_at[first + int(rng.integers(3, 7))] = (220.0, 146.0)
        line = 0
        while y > _MARGIN_PT:
            if line in fig_at and y - fig_at[line][1] - 3 * _LINE_PT >= _MARGIN_PT:
                fw, fh = fig_at[line]
                _figure(pdf, page, figs[int(rng.integers(_FIGURES))], (w_pt - fw) / 2,
                        y - fh, fw, fh)
                y -= fh + _LINE_PT
                _text_line(pdf, page, f"Figure {p + 1}.{line}: " + " ".join(rng.choice(_WORDS, 8)),
                           (w_pt - fw) / 2, y, 9.0)
                y -= 1.5 * _LINE_PT
            words = int(rng.integers(11, 16))
            _text_line(pdf, page, " ".join(rng.choice(_WORDS, words)), _MARGIN_PT, y)
            y -= _LINE_PT
            line += 1
        page.gen_content()
        page.close()
    out = io.BytesIO()
    pdf.save(out)
    pdf.close()
    # PDFium writes a random file /ID into the trailer and the time of day, to the second, into
    # the Info dictionary's /CreationDate: both are fixed here, in place (the same byte lengths,
    # so the cross-reference offsets stay right); two calls a second apart differed before
    ident = hashlib.md5(f"vlmprep bench {seed} {pages}".encode()).hexdigest().upper().encode()
    data = re.sub(rb"/ID\s*\[\s*<[0-9A-Fa-f]{32}>\s*<[0-9A-Fa-f]{32}>\s*\]",
                  b"/ID[<" + ident + b"><" + ident + b">]", out.getvalue())
    return re.sub(rb"(/CreationDate\(D:)\d{14}", rb"\g<1>20260101000000", data)


# -- the sides measured ----------------------------------------------------------------------------
def resolve_renderer(name: str) -> str:
    """``--baseline-renderer`` -> the renderer used: "auto" is PyMuPDF when it imports, else
    pdf2image when it imports and poppler's ``pdftoppm`` is on PATH, else pypdfium2. A named one
    that cannot run here is a ValueError saying how to get it."""
    if name not in RENDERERS:
        raise ValueError(f"--baseline-renderer: expected one of {', '.join(RENDERERS)}, got "
                         f"{name!r}")
    why = {r: _renderer_missing(r) for r in RENDERERS[1:]}
    if name == "auto":
        return next(r for r in RENDERERS[1:] if why[r] is None or r == "pypdfium2")
    if why[name]:
        raise ValueError(f"--baseline-renderer {name}: {why[name]}")
    return name


def _renderer_missing(name: str) -> str | None:
    mod = {"pymupdf": "pymupdf", "pdf2image": "pdf2image", "pypdfium2": "pypdfium2"}[name]
    try:
        __import__(mod)
    except ImportError as e:
        return f"it does not import here ({e}): pip install {mod}"
    if name == "pdf2image" and shutil.which("pdftoppm") is None:
        return "poppler's pdftoppm is not on PATH (apt-get install poppler-utils)"
    return None


def _renderer_version(name: str) -> str | None:
    try:
        return metadata.version({"pymupdf": "pymupdf"}.get(name, name))
    except metadata.PackageNotFoundError:
        return None


def vlmprep_parts(proc: Any, path: str, dpi: float, pages_per_batch: int
                  ) -> Iterator["PackedBatch"]:
    """What the bench times for vlmprep: ``proc.stream(Document(path, dpi=dpi),
    pages_per_batch=...)`` (the public streaming path; its parts concatenated equal
    ``proc(documents=[Document(path, dpi=dpi)])``)."""
    from .. import Document
    return proc.stream(Document(path, dpi=dpi), pages_per_batch=pages_per_batch)


def render_floor_pages(path: str, dpi: float) -> Iterator[Any]:
    """Every page rendered by pypdfium2 alone as vlmprep renders it, one at a time:
    ``(H, W, 3)`` uint8 arrays."""
    import pypdfium2 as pdfium  # deferred: optional extra
    pdf = pdfium.PdfDocument(path)
    try:
        for k in range(len(pdf)):
            page = pdf[k]
            try:
                yield page.render(scale=dpi / 72.0, rev_byteorder=True).to_numpy()[..., :3]
            finally:
                page.close()
    finally:
        pdf.close()


def baseline_pages(renderer: str, path: str, dpi: float, first: int | None = None) -> list[Any]:
    """The list of every page (or the first ``first``) as a PIL RGB image, as a transformers user
    makes it with ``renderer`` ("pymupdf", "pdf2image" or "pypdfium2")."""
    from PIL import Image  # deferred: heavy
    if renderer == "pymupdf":
        import pymupdf  # deferred: optional (the baseline)
        out = []
        with pymupdf.open(path) as doc:
            for k, page in enumerate(doc):
                if first is not None and k >= first:
                    break
                pix = page.get_pixmap(matrix=pymupdf.Matrix(dpi / 72.0, dpi / 72.0))
                out.append(Image.frombytes("RGB", (pix.width, pix.height), pix.samples))
        return out
    if renderer == "pdf2image":
        import pdf2image  # deferred: optional (the baseline)
        kw = {"last_page": first} if first is not None else {}
        return [im.convert("RGB") for im in pdf2image.convert_from_path(path, dpi=dpi, **kw)]
    import pypdfium2 as pdfium  # deferred: optional extra
    pdf = pdfium.PdfDocument(path)
    try:
        n = len(pdf) if first is None else min(first, len(pdf))
        out = []
        for k in range(n):
            page = pdf[k]
            out.append(page.render(scale=dpi / 72.0).to_pil().convert("RGB"))
            page.close()
        return out
    finally:
        pdf.close()


# -- one measurement, in its own process -----------------------------------------------------------
def _status_kib(pid: str, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _descendants() -> set[str]:
    """The pids of this process's live descendants (Linux; none elsewhere)."""
    seen: set[str] = set()
    todo = [str(os.getpid())]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{pid}/task/{t}/children", encoding="utf-8") as f:
                    kids = f.read().split()
            except OSError:
                continue
            for k in kids:
                if k not in seen:
                    seen.add(k)
                    todo.append(k)
    return seen


class _WorkerWatch:
    """The peak resident memory of the child processes (page-render workers) that live during a
    span: a thread reads every live descendant's VmHWM every ``period`` s; ``stop()`` returns the
    sum over those processes of each one's peak (an upper bound when they did not peak together).
    Children of the imports (before ``start``) that are gone by then are not counted."""

    def __init__(self, period: float = 0.05) -> None:
        self.period = period
        self.peaks: dict[str, int] = {}
        self.cpu: dict[str, tuple[float, float]] = {}  # pid -> (first, last) CPU seconds seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _look(self) -> None:
        for pid in _descendants():
            self.peaks[pid] = max(self.peaks.get(pid, 0), _status_kib(pid, "VmHWM"))
            c = _proc_cpu_s(pid)
            if c is not None:
                self.cpu[pid] = (self.cpu.get(pid, (c, c))[0], c)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._look()

    def start(self) -> None:
        self._look()
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self._look()
        return sum(self.peaks.values())

    def cpu_s(self) -> float:
        """CPU seconds the watched children used while watched."""
        return sum(last - first for first, last in self.cpu.values())


def _proc_cpu_s(pid: str) -> float | None:
    """utime + stime of a live process, in seconds (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _mib(kib: float) -> float:
    return round(kib / 1024, 1)


def _maxrss_kib(who: int) -> int:
    kib = resource.getrusage(who).ru_maxrss
    return kib // 1024 if sys.platform == "darwin" else kib  # bytes there


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def measure_one(spec: dict) -> dict:
    """One configuration in this process: ``spec`` has ``kind`` ("vlmprep", "render_floor" or
    "baseline"), ``path``, ``dpi``, ``threads``, ``pages_per_batch``, ``warmup``, ``preset``,
    ``dtype``, and for the baseline ``renderer`` and ``hf_backend``. -> the timing, memory and
    output-shape dict (``DEFINITIONS``). Run it in a fresh process for a meaningful peak RSS
    (``run_documents`` does)."""
    import torch  # noqa: F401  # deferred: heavy; loaded first, as every side loads it

    from .timing import thread_count
    kind, path, dpi = spec["kind"], spec["path"], float(spec["dpi"])
    ppb, warmup = int(spec["pages_per_batch"]), int(spec["warmup"])
    with thread_count(spec.get("threads")) as eff:
        timed, info = _prepare(kind, spec, path, dpi, ppb, warmup)
        gc.collect()
        span = bench_env.PeakRss()
        before = _status_kib("self", "VmRSS")
        load0 = _load()
        watch = _WorkerWatch()
        reaped0 = _maxrss_kib(resource.RUSAGE_CHILDREN)
        hwm0 = _status_kib("self", "VmHWM")  # the process's peak so far (start() resets it)
        watch.start()
        span.start()
        cpu0, t0 = _cpu_s(), time.perf_counter()
        counts = timed()
        wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
        span_peak = span.peak_mib()
        live = watch.stop()
        cpu += watch.cpu_s()
    pages = counts.pop("pages")
    # VmHWM, not ru_maxrss: a forked child's ru_maxrss starts at its parent's RSS and survives
    # exec (Linux), so a measuring process started from a large one would report the parent's
    self_kib = (max(hwm0, int(span_peak * 1024)) if hwm0 and span.scope == "span"
                else _maxrss_kib(resource.RUSAGE_SELF))
    reaped = _maxrss_kib(resource.RUSAGE_CHILDREN)  # a larger child than the imports' ran
    worker_kib = max(live, reaped if reaped > reaped0 else 0)
    return {"kind": kind, **eff, "pages": pages, "seconds": round(wall, 3),
            "pages_per_s": round(pages / wall, 3) if wall > 0 else None,
            "ms_per_page": round(1000 * wall / pages, 2) if pages else None,
            "cpu_cores_used": round(cpu / wall, 2) if wall > 0 else None,
            "peak_rss_mib": _mib(self_kib), "span_peak_rss_mib": span_peak,
            "span_scope": span.scope, "rss_before_mib": _mib(before),
            "worker_peak_rss_mib": _mib(worker_kib),
            "peak_rss_total_mib": _mib(self_kib + worker_kib),
            "load_average_before": load0, "load_average_after": _load(), **counts, **info}


def _prepare(kind: str, spec: dict, path: str, dpi: float, ppb: int, warmup: int
             ) -> tuple[Callable[[], dict], dict]:
    """Build the side, run its warm-up, and return (the timed pass, facts about the side)."""
    if kind == "render_floor":
        for _, _a in zip(range(warmup), render_floor_pages(path, dpi)):
            pass

        def floor() -> dict:
            n, hw = 0, None
            for a in render_floor_pages(path, dpi):
                n, hw = n + 1, a.shape[:2]
            return {"pages": n, "page_hw": list(hw) if hw else None}
        return floor, {"renderer": f"pypdfium2 {_renderer_version('pypdfium2')}"}
    if kind == "vlmprep":
        return _prepare_vlmprep(spec, path, dpi, ppb, warmup)
    if kind == "baseline":
        return _prepare_baseline(spec, path, dpi, ppb, warmup)
    raise ValueError(f"measure_one: unknown kind {kind!r}")


def _prepare_vlmprep(spec: dict, path: str, dpi: float, ppb: int, warmup: int
                     ) -> tuple[Callable[[], dict], dict]:
    from .. import Document, Processor
    proc = Processor(spec["preset"], dtype=spec["dtype"])
    if warmup:
        for part in proc.stream(Document(path, dpi=dpi, pages=[0] * warmup), pages_per_batch=1):
            del part

    def run() -> dict:
        n = rows = 0
        grid = None
        for part in vlmprep_parts(proc, path, dpi, ppb):
            n += len(part.num_tokens)
            rows += int(part.pixel_values.shape[0])
            if grid is None:
                grid = part.grid_thw[0].tolist()
            del part  # dropped before the next part, as in a user's loop
        return {"pages": n, "rows": rows, "first_grid_thw": grid}
    return run, {"processor": f"vlmprep {bench_env.versions()['vlmprep']}"}


def _prepare_baseline(spec: dict, path: str, dpi: float, ppb: int, warmup: int
                      ) -> tuple[Callable[[], dict], dict]:
    from .. import presets
    from . import hf
    renderer = spec["renderer"]
    pipe = presets.get(spec["preset"])
    hf_proc = hf.build(hf.config_for(spec["preset"], pipe), pipe, spec["hf_backend"])
    if warmup:
        page0 = baseline_pages(renderer, path, dpi, first=1)
        for _ in range(warmup):
            hf_proc(images=page0, return_tensors="pt")
        del page0
    def run() -> dict:
        t0 = time.perf_counter()
        pages = baseline_pages(renderer, path, dpi)  # every page, as convert_from_path returns
        t1 = time.perf_counter()
        rows, grid = 0, None
        out: Any = None
        for a in range(0, len(pages), ppb):
            out = None  # the previous output is dropped first, as in a user's loop
            out = hf_proc(images=pages[a:a + ppb], return_tensors="pt")
            rows += int(out["pixel_values"].shape[0])
            if grid is None:
                grid = out["image_grid_thw"][0].tolist() if "image_grid_thw" in out else None
        hw = [pages[0].height, pages[0].width] if pages else None
        return {"pages": len(pages), "rows": rows, "first_grid_thw": grid, "page_hw": hw,
                "render_s": round(t1 - t0, 3), "process_s": round(time.perf_counter() - t1, 3)}
    return run, {"renderer": f"{renderer} {_renderer_version(renderer)}",
                 "processor": f"transformers {type(hf_proc).__name__}"}


def child_main(argv: list[str] | None = None) -> int:
    """The measuring subprocess: ``argv[0]`` is the spec as JSON; prints the result as one JSON
    line on stdout."""
    spec = json.loads((argv if argv is not None else sys.argv[1:])[0])
    print(json.dumps(measure_one(spec)), flush=True)
    return 0


_CHILD = ("import sys; from vlmprep.bench.documents import child_main; "
          "sys.exit(child_main(sys.argv[1:]))")


def run_child(spec: dict, timeout_s: float | None = None) -> dict:
    """``measure_one(spec)`` in a fresh Python process (this interpreter, this vlmprep)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], capture_output=True,
                       text=True, env=env, timeout=timeout_s, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"--documents: the measuring subprocess for {spec['kind']} failed "
                           f"(exit {r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# -- the whole run ---------------------------------------------------------------------------------
def _hf_backends(cfg: DocumentBenchConfig) -> tuple[list[str], dict[str, str]]:
    from .. import presets
    from . import hf
    pipe = presets.get(cfg.preset)
    hcfg = hf.config_for(cfg.preset, pipe)
    have = list(hf.available_backends(hcfg))
    want = cfg.hf_backends or have
    bad = [b for b in want if b not in have]
    if bad:
        raise ValueError(f"--documents: transformers backends {bad} are not available here; "
                         f"have {have}")
    names = hf.class_names(hcfg)
    return list(want), {b: names[b] for b in want}


def _plan_facts(cfg: DocumentBenchConfig, path: str) -> dict:
    from .. import Document, Processor
    plan = Processor(cfg.preset, dtype=cfg.dtype).plan(documents=[Document(path, dpi=cfg.dpi)])
    p0 = plan.images[0]
    return {"source_hw": list(p0.source_hw), "resized_hw": list(p0.resized_hw),
            "grid_thw": [list(g) for g in p0.grid_thw],
            "tokens_per_page": p0.num_tokens,
            "total_tokens": sum(p.num_tokens for p in plan.images)}


def run_documents(cfg: DocumentBenchConfig, log: Callable[[str], None] | None = None) -> dict:
    """Measure ``cfg`` -> the result dict (``DEFINITIONS``; JSON-able)."""
    log = log or (lambda msg: None)
    started = time.perf_counter()
    renderer = resolve_renderer(cfg.renderer)
    backends, classes = _hf_backends(cfg)
    counts = [cfg.pages, 2 * cfg.pages] if cfg.scaling else [cfg.pages]
    with tempfile.TemporaryDirectory(prefix="vlmprep-bench-") as d:
        paths, sizes = {}, {}
        for n in counts:
            t0 = time.perf_counter()
            data = make_pdf(n, cfg.seed)
            paths[n] = os.path.join(d, f"paper_{n}.pdf")
            with open(paths[n], "wb") as f:
                f.write(data)
            sizes[n] = len(data)
            log(f"PDF: {n} Letter pages, {len(data) / 1e6:.1f} MB, made in "
                f"{time.perf_counter() - t0:.1f} s")
        result = _new_result(cfg, renderer, backends, classes, sizes, _plan_facts(cfg, paths[cfg.pages]))
        kinds = [("render_floor", None), ("vlmprep", None)] + [("baseline", b) for b in backends]
        steps, step = len(counts) * len(cfg.threads) * len(kinds) * cfg.rounds, 0
        for n in counts:
            for t in cfg.threads:
                row: dict[str, Any] = {"pages": n, "threads": t if t is not None else "default"}
                runs: dict[str, list[dict]] = {}
                for k in range(cfg.rounds):
                    for kind, b in kinds:
                        spec = {"kind": kind, "path": paths[n], "dpi": cfg.dpi, "threads": t,
                                "pages_per_batch": cfg.pages_per_batch, "warmup": cfg.warmup,
                                "preset": cfg.preset, "dtype": cfg.dtype, "renderer": renderer,
                                "hf_backend": b}
                        m = run_child(spec)
                        name = kind if b is None else f"baseline_{b}"
                        runs.setdefault(name, []).append(m)
                        step += 1
                        log(f"[{step}/{steps}] {n} pages, threads={row['threads']} round {k + 1} "
                            f"{name}: {m['pages_per_s']:.2f} pages/s, peak RSS "
                            f"{m['peak_rss_total_mib']:.0f} MiB")
                for name, ms_ in runs.items():
                    row[name] = _median_run(ms_)
                _ratios(row, backends)
                result["results"].append(row)
    result["memory"] = _memory(result["results"], ["render_floor", "vlmprep"]
                               + [f"baseline_{b}" for b in backends])
    result["target"] = _target(result["results"], cfg.pages, backends)
    result["load_average_after"] = _load()
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def _new_result(cfg: DocumentBenchConfig, renderer: str, backends: list[str],
                classes: dict[str, str], sizes: dict[int, int], plan: dict) -> dict:
    vers = bench_env.versions()
    vers.update({"pypdfium2": _renderer_version("pypdfium2"),
                 "pymupdf": _renderer_version("pymupdf"),
                 "pdf2image": _renderer_version("pdf2image")})
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "vlmprep bench --documents",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": bench_env.machine(),
        "load_average_before": _load(),
        "versions": vers,
        "kernels": kernels.summary(),
        "preset": cfg.preset,
        "document": {"pages": cfg.pages, "dpi": cfg.dpi, "page_size_pt": list(LETTER_PT),
                     "seed": cfg.seed, "bytes": {str(k): v for k, v in sizes.items()},
                     "content": "a title, 10-pt Helvetica body text, one 300x200-pt JPEG figure "
                                "per page and a second 220x146-pt one on every other page, "
                                "captions", **plan},
        "config": {"threads": [t if t is not None else "default" for t in cfg.threads],
                   "page_counts": [cfg.pages, 2 * cfg.pages] if cfg.scaling else [cfg.pages],
                   "pages_per_batch": cfg.pages_per_batch, "warmup": cfg.warmup,
                   "rounds": cfg.rounds, "dtype": cfg.dtype, "baseline_renderer": renderer,
                   "baseline_renderer_version": _renderer_version(renderer),
                   "baseline_renderer_asked": cfg.renderer, "hf_backends": backends,
                   "hf_classes": classes,
                   "baseline_keeps": "a list of every page's PIL image, then one processor call "
                                     f"per {cfg.pages_per_batch} page(s)",
                   "vlmprep_keeps": f"one part of {cfg.pages_per_batch} page(s) at a time "
                                    "(Processor.stream)",
                   "isolation": "each measurement in a fresh subprocess"},
        "results": [],
        "definitions": DEFINITIONS,
    }


def _median_run(runs: list[dict]) -> dict:
    """The run of median seconds (the lower middle one of an even count), with every round's
    pages/s and load, and the largest peak RSS of any round."""
    pick = dict(sorted(runs, key=lambda m: m["seconds"])[(len(runs) - 1) // 2])
    pick["rounds_pages_per_s"] = [m["pages_per_s"] for m in runs]
    pick["rounds_load_average_before"] = [m["load_average_before"] for m in runs]
    pick["max_peak_rss_total_mib"] = max(m["peak_rss_total_mib"] for m in runs)
    return pick


def _ratios(row: dict, backends: list[str]) -> None:
    v, floor = row["vlmprep"]["seconds"], row["render_floor"]["seconds"]
    row["x_render_floor"] = round(v / floor, 2) if floor > 0 else None
    for b in backends:
        base = row[f"baseline_{b}"]
        row[f"speedup_vs_{b}"] = round(base["seconds"] / v, 2) if v > 0 else None
        row[f"speedup_bound_{b}"] = round(base["seconds"] / floor, 2) if floor > 0 else None
        row[f"same_grid_thw_{b}"] = base.get("first_grid_thw") == row["vlmprep"]["first_grid_thw"]
        row[f"baseline_render_share_{b}"] = round(base["render_s"] / base["seconds"], 3)


def _memory(rows: list[dict], names: list[str]) -> list[dict]:
    """Peak RSS against page count, per side and thread count."""
    out = []
    threads = list(dict.fromkeys(r["threads"] for r in rows))
    counts = sorted({r["pages"] for r in rows})
    for t in threads:
        for name in names:
            peaks = {r["pages"]: r[name]["max_peak_rss_total_mib"] for r in rows
                     if r["threads"] == t and name in r}
            m: dict[str, Any] = {"threads": t, "side": name,
                                 "peak_rss_total_mib": {str(k): v for k, v in peaks.items()}}
            if len(counts) == 2 and all(c in peaks for c in counts):
                g = peaks[counts[1]] - peaks[counts[0]]
                m.update(rss_growth_mib=round(g, 1),
                         per_page_kib=round(g * 1024 / (counts[1] - counts[0]), 1))
            out.append(m)
    return out


def _target(rows: list[dict], pages: int, backends: list[str]) -> dict:
    """Issue 31's target at the asked page count: vlmprep / the fastest baseline >= 5x."""
    per_thread = []
    for r in rows:
        if r["pages"] != pages:
            continue
        best = max(backends, key=lambda b: r[f"baseline_{b}"]["pages_per_s"])
        per_thread.append({"threads": r["threads"], "fastest_baseline": best,
                           "speedup": r[f"speedup_vs_{best}"],
                           "speedup_bound": r[f"speedup_bound_{best}"],
                           "met": bool(r[f"speedup_vs_{best}"] >= TARGET_SPEEDUP)})
    return {"speedup": TARGET_SPEEDUP, "pages": pages, "per_thread": per_thread,
            "met": bool(per_thread) and all(x["met"] for x in per_thread)}
