"""The measuring harness behind ``vlmprep bench`` and ``bench/run_scenarios.py``.

For each input set (e.g. four 1080p JPEG mosaics), thread count, backend and dtype it measures:

- **end to end**: ``Processor(...)(batch)`` called as users call it, on encoded bytes (probe,
  decode, resize, normalize, patchify, pack all included): images/s, megapixels/s, visual
  tokens/s, latency per batch and per image (batch latency / batch size), CPU cores used
  (process CPU time / wall time) and peak RSS;
- **stages**: the same images through the backend's own stages, one at a time (probe = header
  + plan; decode; resize = the sizing op's lowering; normalize + patchify + pack into a
  preallocated output, by the executor ``fusion.choose`` picks, at most ``fusion.ROWS``;
  transfer = host-to-device copy, 0 on the CPU). Their sum is close to the end-to-end time per
  image when the backend runs op by op; a backend that fuses or batches work shows up as a gap
  (both numbers are reported): the torch backend on the CPU resizes inside the rows kernel end
  to end (``fusion.RESIZE_ROWS``), its stages time the resize and the rows apart;
- **decode floor**: decode only, with every JPEG decoder the dependencies ship, on one thread;
  the fastest one's per-image time is the floor;
- **output-write floor**: streamed (non-temporal) stores of exactly the output bytes of each
  image (its ``pixel_values``, this dtype and row form) into reused buffers taken as the
  Processor takes its outputs (``kernels.empty``, the previous one still held), one thread
  (``kernels.stream_store``): the cheapest way this core can put those bytes in memory;
- **exact-resize floor**: the plan's canvases built from the decoded image by the compiled
  Pillow-exact resize alone (``kernels.resize``, one thread; crops as views), nothing else;
- **lower bound**: decode floor + write floor + resize floor: the time one thread needs at
  least when none of the three overlaps (on one core they do not: the resize computes, the
  stores stream, the decoder does both);
- **transformers** (``compare_hf``): its PIL-backend and torchvision-backend processors of the
  same preset, checkpoint config, on the same bytes and batches, PIL decode inside the timed call.

Ratios use per-image p50 latencies: ``ratio_vs_decode_floor = per_image_p50_ms /
decode_floor_ms``, ``ratio_vs_lower_bound = per_image_p50_ms / lower_bound_ms`` (the floors are
one thread's, whatever the row's thread count); ``speedup_vs_hf_<backend> = hf per_image_p50_ms /
per_image_p50_ms`` at the same image size, thread count and batch size. No result is asserted
here: it only measures.
"""
from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from ..pack import ROW_FORMS as pack_row_forms
from . import env as bench_env
from .images import ImageSet

if TYPE_CHECKING:
    from ..pipeline import Pipeline

__all__ = ["BenchConfig", "run", "thread_count", "DEFINITIONS", "STAGES", "SCHEMA_VERSION",
           "ROW_FORMS"]

SCHEMA_VERSION = 1

#: ``Processor(row_form=...)`` values ("compact": one copy of each Qwen image row, no temporal
#: repeat)
ROW_FORMS = pack_row_forms

#: stage keys of ``stages_ms``, in pipeline order
STAGES = ("probe_ms", "decode_ms", "resize_ms", "normalize_patchify_pack_ms", "transfer_ms")

#: What each reported quantity is (written into the JSON as ``definitions``).
DEFINITIONS = {
    "images_per_s": "images / sum of timed call latencies (end to end, warm-up excluded)",
    "p50_images_per_s": "batch size / median call latency: throughput robust to outliers "
                        "(other work on a shared machine)",
    "megapixels_per_s": "source (decoded) megapixels / sum of timed call latencies",
    "visual_tokens_per_s": "LLM placeholder tokens (plan.num_tokens) / sum of timed latencies",
    "batch_p50_ms": "median latency of one call on --batch-size images (p99: 99th percentile)",
    "per_image_p50_ms": "batch latency / batch size, median (with --batch-size 1: the latency "
                        "of one image from encoded bytes to packed pixel_values)",
    "cpu_cores_used": "process CPU time / wall time over the timed calls",
    "peak_rss_mib": "peak resident memory over this measurement (peak_rss_scope 'span'), or of "
                    "the whole process so far ('process')",
    "stages_ms": "p50 per image of each stage run separately through the backend's lowerings: "
                 "probe (header + plan), decode, resize (sizing op), normalize + patchify + pack "
                 "(into a preallocated output, then pack.build), transfer (host-to-device copy "
                 "of the decoded image; 0 on the CPU)",
    "stage_sum_ms": "sum of stages_ms; compare with per_image_p50_ms (end to end)",
    "decode_floor_ms": "p50 per image of the fastest decoder, decode only, one thread",
    "ratio_vs_decode_floor": "per_image_p50_ms / decode_floor_ms",
    "row_form": "Processor(row_form=...): 'full' (transformers' rows) or 'compact' (one copy of "
                "each Qwen image row: C*P*P values instead of C*T*P*P)",
    "write_floor_ms": "p50 per image of streamed (non-temporal) stores of exactly the image's "
                      "output bytes (pixel_values of this dtype and row form) into reused "
                      "buffers taken as the Processor takes them (kernels.empty, previous one "
                      "held), one thread: kernels.stream_store",
    "write_floor_bytes": "output bytes per image the write floor stores (mean over the images)",
    "write_floor_GB_per_s": "write_floor_bytes / write_floor_ms",
    "resize_floor_ms": "p50 per image of the plan's canvases built from the decoded image by the "
                       "compiled Pillow-exact resize alone (kernels.resize; crops as views), one "
                       "thread",
    "lower_bound_ms": "decode_floor_ms + write_floor_ms + resize_floor_ms: what one thread needs "
                      "at least when the three do not overlap",
    "ratio_vs_lower_bound": "per_image_p50_ms / lower_bound_ms",
    "per_image_min_ms": "the fastest per-image time of the series (batch latency / batch size)",
    "min_based": "the same ratios from minimum times (per_image_min_ms over the sum of each "
                 "floor's minimum; decode: the fastest decoder's minimum): steadier than p50 "
                 "when other work shares the machine",
    "speedup_vs_hf_pil": "transformers PIL-backend per_image_p50_ms / vlmprep per_image_p50_ms "
                         "(same images, batches, threads; PIL decode inside the timed call)",
    "speedup_vs_hf_torchvision": "the same against the torchvision-backend processor",
}


@dataclass
class BenchConfig:
    """What to measure.

    Fields:
        preset: ``--preset`` as given (a name, or a checkpoint folder / json file).
        pipeline: its resolved Pipeline.
        image_sets: the encoded inputs, one result row group per set.
        backends, dtypes: every combination is measured.
        device: ``"cpu"`` | ``"cuda"`` | ``"cuda:N"``.
        batch_size: images per call.
        threads: thread counts to run at (None: leave the libraries' defaults).
        compare_hf: also run the transformers processors.
        repeat: timed passes over each set's batches (and stage / decoder runs per image).
        warmup: untimed calls before each timed series.
        stages, decode_floor: measure those too.
        row_forms: ``Processor(row_form=...)`` values measured ("full", "compact"); every
            backend x dtype x row form is a result row.
        floors: measure the write and resize floors for the lower bound (only with
            decode_floor, on the CPU).
    """

    preset: str
    pipeline: "Pipeline"
    image_sets: list[ImageSet]
    backends: list[str]
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    device: str = "cpu"
    batch_size: int = 1
    threads: list[int | None] = field(default_factory=lambda: [None])
    compare_hf: bool = False
    repeat: int = 3
    warmup: int = 2
    stages: bool = True
    decode_floor: bool = True
    row_forms: list[str] = field(default_factory=lambda: ["full"])
    floors: bool = True


# -- threads, timing, statistics ------------------------------------------------------------------
@contextlib.contextmanager
def thread_count(n: int | None) -> Iterator[dict]:
    """Run the block with ``n`` threads for vlmprep's own work, torch and OpenCV (restored after).

    Yields the effective counts, ``{"vlmprep_threads", "torch_threads"}``.
    """
    import torch

    from ..kernels import threads as vt
    old_v = getattr(vt, "_threads", None)
    old_t = torch.get_num_threads()
    cv2 = _cv2()
    old_c = cv2.getNumThreads() if cv2 is not None else None
    try:
        if n is not None:
            vt.set_num_threads(n)
            torch.set_num_threads(n)
            if cv2 is not None:
                cv2.setNumThreads(n)
        yield {"vlmprep_threads": vt.get_num_threads(), "torch_threads": torch.get_num_threads()}
    finally:
        vt.set_num_threads(old_v)
        torch.set_num_threads(old_t)
        if cv2 is not None and old_c is not None:
            cv2.setNumThreads(old_c)


def _cv2():
    try:
        import cv2
        return cv2
    except ImportError:
        return None


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch
        torch.cuda.synchronize(device)


def _pct(xs: Sequence[float], q: float) -> float:
    import numpy as np
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q))


def _ms(x: float) -> float:
    return round(x * 1000, 3)


def _batches(n: int, batch_size: int) -> list[list[int]]:
    """Item indices per call: every item at least once, cycling to fill the last batch."""
    calls = max(1, -(-n // batch_size))
    return [[(k * batch_size + j) % n for j in range(batch_size)] for k in range(calls)]


@dataclass
class _Timing:
    latencies: list[float]   # seconds per call
    cpu_s: float
    wall_s: float
    last: Any                # the last call's output


def _time_calls(call: Callable[[list], Any], batches: list[list], repeat: int, warmup: int,
                device: str) -> _Timing:
    # Each call runs while the previous output is still referenced, in warm-up as in the timed
    # loop (and as in a user's loop): an allocator that reuses freed buffers then has the same
    # buffers ready when timing starts (two warm-up calls fault in both).
    out = None
    for i in range(warmup):
        out = call(batches[i % len(batches)])
        _sync(device)
    gc.collect()
    lat: list[float] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(repeat):
        for b in batches:
            t0 = time.perf_counter()
            out = call(b)
            _sync(device)
            lat.append(time.perf_counter() - t0)
    return _Timing(lat, time.process_time() - cpu0, time.perf_counter() - wall0, out)


def _rates(t: _Timing, batch_size: int, mp: list[float], tokens: list[int],
           batches: list[list[int]]) -> dict:
    """Throughput and latency keys from a timing series (``mp``/``tokens`` per item)."""
    total = sum(t.latencies)
    per_pass_mp = sum(mp[i] for b in batches for i in b)
    per_pass_tok = sum(tokens[i] for b in batches for i in b)
    passes = len(t.latencies) / len(batches)
    images = len(t.latencies) * batch_size
    per_img = [x / batch_size for x in t.latencies]
    return {
        "images": images,
        "images_per_s": round(images / total, 3),
        "p50_images_per_s": round(batch_size / _pct(t.latencies, 50), 3),
        "megapixels_per_s": round(per_pass_mp * passes / total, 3),
        "visual_tokens_per_s": round(per_pass_tok * passes / total, 1),
        "batch_p50_ms": _ms(_pct(t.latencies, 50)),
        "batch_p99_ms": _ms(_pct(t.latencies, 99)),
        "batch_mean_ms": _ms(total / len(t.latencies)),
        "per_image_p50_ms": _ms(_pct(per_img, 50)),
        "per_image_p99_ms": _ms(_pct(per_img, 99)),
        "per_image_min_ms": _ms(min(per_img)),
        "per_image_mean_ms": _ms(sum(per_img) / len(per_img)),
        "cpu_cores_used": round(t.cpu_s / t.wall_s, 2) if t.wall_s > 0 else None,
    }


def _shape(x: Any) -> Any:
    """A JSON-able description of ``pixel_values``' shape (tensor, array or nested lists)."""
    if hasattr(x, "shape"):
        return list(x.shape)
    if isinstance(x, (list, tuple)):
        return [len(x), _shape(x[0])] if x else [0]
    return type(x).__name__


# -- the measurements -----------------------------------------------------------------------------
def _item_facts(pipe: "Pipeline", s: ImageSet) -> tuple[list[float], list[int]]:
    """Source megapixels and visual tokens per item (header only); an unplannable item raises."""
    from ..io.probe import probe
    from ..plan import plan_images
    hws = [probe(b).size_hw for b in s.items]
    plans = plan_images(pipe, hws)
    for p in plans:
        if p.error is not None:
            raise ValueError(f"{s.names[p.index]}: {p.error}")
    return [h * w / 1e6 for h, w in hws], [p.num_tokens for p in plans]


def _decode_floor(s: ImageSet, repeat: int, device: str = "cpu") -> dict:
    from ..io.probe import probe
    from . import decoders as bench_decoders
    hws = [probe(b).size_hw for b in s.items]
    with thread_count(1):
        calls, unavailable = bench_decoders.prepare(list(s.items), hws, device)
        decoders = {}
        for name, fns in calls.items():
            p50, least = _floor_times(fns, repeat)
            decoders[name] = {"per_image_p50_ms": _ms(p50), "per_image_min_ms": _ms(least)}
    out: dict = {"size": s.label, "threads": 1, "decoders": decoders, "unavailable": unavailable}
    if decoders:
        best = min(decoders, key=lambda k: decoders[k]["per_image_p50_ms"])
        out.update(fastest=best, decode_floor_ms=decoders[best]["per_image_p50_ms"],
                   decode_floor_min_ms=min(d["per_image_min_ms"] for d in decoders.values()))
    else:
        out.update(fastest=None, decode_floor_ms=None, decode_floor_min_ms=None)
    return out


def _floor_times(calls: Sequence[Callable[[], Any]], repeat: int) -> tuple[float, float]:
    """(p50, min) seconds of the calls, each run ``repeat`` times after two warm passes (which
    fault in both buffers a loop alternates between, as the Processor's warm-up does)."""
    for f in [*calls, *calls]:
        f()
    lat = []
    for _ in range(repeat):
        for f in calls:
            t0 = time.perf_counter()
            f()
            lat.append(time.perf_counter() - t0)
    return _pct(lat, 50), min(lat)


def _resize_floor(pipe: "Pipeline", s: ImageSet, repeat: int) -> dict:
    """The plan's canvases from each decoded image by the compiled exact resize alone, one thread
    (``base.build_canvases`` with the torch backend's CPU ``resize`` and ``cut``: the kernels'
    Pillow-exact resize into a reused buffer; crops inside the image are views)."""
    import numpy as np
    import torch

    from .. import kernels
    from ..backends.base import build_canvases
    from ..backends.torch import ops as torch_ops
    from ..io import decode as io_decode
    from ..io.inputs import resolve
    from ..plan import plan_images
    interp = pipe.sizing.interpolation  # type: ignore[attr-defined]
    calls = []
    for item in s.items:
        src = resolve(item)
        (plan,) = plan_images(pipe, [src.hw])
        img = torch.from_numpy(np.require(io_decode.decode(src, fast=True), requirements="W"))
        chw = img.permute(2, 0, 1)
        calls.append(lambda chw=chw, plan=plan: build_canvases(chw, plan, interp, torch_ops.resize,
                                                               torch_ops.cut))
    compiled = kernels.available() and all(
        (c.interpolation or interp) in kernels.RESIZE_INTERPOLATIONS
        for item in s.items[:1] for c in plan_images(pipe, [resolve(item).hw])[0].canvases)
    with thread_count(1):
        p50, low = _floor_times(calls, repeat)
    return {"size": s.label, "threads": 1, "resize_floor_ms": _ms(p50), "resize_floor_min_ms": _ms(low),
            "resize": "kernels.resize" if compiled else "resize_like_pil (no compiled resize)"}


def _write_floor(proc: Any, s: ImageSet, repeat: int) -> dict:
    """Streamed stores of exactly each image's output bytes (its ``pixel_values`` from ``proc``)
    into buffers taken as the Processor takes them, one thread (``kernels.stream_store``)."""
    from .. import kernels
    shapes = []
    for item in s.items:
        pv = proc([item]).pixel_values
        shapes.append((tuple(pv.shape), pv.dtype, pv.numel() * pv.element_size()))
    nbytes = sum(b for _, _, b in shapes) / len(shapes)
    out: dict[str, Any] = {"size": s.label, "dtype": proc.dtype,
                           "row_form": getattr(proc, "row_form", "full"), "threads": 1,
                           "write_floor_bytes": round(nbytes)}
    if not kernels.available() or proc.device != "cpu":
        out.update(write_floor_ms=None, write_floor_min_ms=None, write_floor_GB_per_s=None,
                   why=("CPU outputs only" if kernels.available()
                        else f"no compiled kernels: {kernels.why_unavailable()}"))
        return out
    held: list = [None]

    def store(shape: tuple, dtype: Any) -> None:
        buf = kernels.empty(shape, dtype)  # as Processor.__call__ takes its output
        kernels.stream_store(buf)
        held[0] = buf  # the previous output stays alive through the next call, as in a loop

    def call(shape: tuple, dtype: Any) -> Callable[[], None]:
        return lambda: store(shape, dtype)

    with thread_count(1):
        p50, low = _floor_times([call(sh, dt) for sh, dt, _ in shapes], repeat)
    out.update(write_floor_ms=_ms(p50), write_floor_min_ms=_ms(low),
               write_floor_GB_per_s=round(nbytes / p50 / 1e9, 2) if p50 > 0 else None)
    return out


def _processor(cfg: BenchConfig, backend: str, dtype: str, row_form: str) -> Any:
    """The Processor measured."""
    from ..processor import Processor
    return Processor(cfg.pipeline, backend=backend, device=cfg.device, dtype=dtype,
                     row_form=row_form)


def _stages(pipe: "Pipeline", backend: str, device: str, dtype: str, s: ImageSet,
            repeat: int, row_form: str = "full") -> dict:
    """p50 per image of each stage, run separately through the backend's stages (``decode``,
    ``size``, ``write``); compact rows through the pipeline the backend executes for them
    (``pack.execution_pipeline``), planned by the real one."""
    import torch

    from .. import backends, kernels, pack
    from ..backends import fusion
    from ..backends.context import Context
    from ..io.inputs import resolve
    from ..plan import plan_images
    from ..plan.grid import row_length

    plan_pipe, pipe = pipe, pack.execution_pipeline(pipe, row_form)
    be = backends.get(backend)(pipe, device, dtype)
    if not be.ops or be.ops[0].name != "decode":
        raise ValueError("expected the pipeline to start with decode")
    order = pipe.patchify.order
    tdtype = getattr(torch, dtype)
    on_gpu = device.startswith("cuda")

    def alloc(shape: tuple) -> "torch.Tensor":
        return kernels.empty(shape, tdtype, device)  # as Processor.__call__ allocates

    def one(item: bytes) -> dict[str, float]:
        t = {}
        t0 = time.perf_counter()
        src = resolve(item)
        (plan,) = plan_images(plan_pipe, [src.hw])
        if plan.error is not None:
            raise plan.error
        t1 = time.perf_counter()
        t["probe_ms"] = t1 - t0
        ctx = Context(src, plan, None, dtype, "cpu")  # type: ignore[arg-type]
        value = be.decode(ctx)
        t2 = time.perf_counter()
        t["decode_ms"] = t2 - t1
        if on_gpu and hasattr(value, "to"):
            value = value.to(device)
            _sync(device)
        ctx.device = device
        t3 = time.perf_counter()
        t["transfer_ms"] = t3 - t2 if on_gpu else 0.0
        value = be.size(value, ctx)
        _sync(device)
        t4 = time.perf_counter()
        t["resize_ms"] = t4 - t3
        rows = plan.rows(order)
        shape = ((rows, 3, *(pipe.tile_hw or ())) if order == "tiles"
                 else (rows, row_length(pipe.patchify)))
        out = alloc(shape)
        ctx.dest = out
        # The executor end to end would pick, but the resize is timed on its own above: a plan
        # the backend resizes inside the rows kernel (fusion.RESIZE_ROWS) is timed as ROWS.
        be.write(value, ctx, fusion.choose(be.fusion, ctx, most=fusion.ROWS))
        pack.build(out, [plan], {}, plan_pipe, row_form)
        _sync(device)
        t["normalize_patchify_pack_ms"] = time.perf_counter() - t4
        return t

    one(s.items[0])  # warm
    samples: dict[str, list[float]] = {k: [] for k in STAGES}
    for _ in range(repeat):
        for item in s.items:
            for key, v in one(item).items():
                samples[key].append(v)
    stages = {key: _ms(_pct(v, 50)) for key, v in samples.items()}
    return {"stages_ms": stages, "stage_sum_ms": round(sum(stages.values()), 3)}


def _vlmprep(cfg: BenchConfig, s: ImageSet, proc: Any,
             facts: tuple[list[float], list[int]], rss: bench_env.PeakRss) -> dict:
    idx = _batches(len(s.items), cfg.batch_size)
    batches = [[s.items[i] for i in b] for b in idx]
    rss.start()
    t = _time_calls(proc, batches, cfg.repeat, cfg.warmup, cfg.device)
    out = _rates(t, cfg.batch_size, *facts, idx)
    out["peak_rss_mib"] = rss.peak_mib()
    out["peak_rss_scope"] = rss.scope
    out["output_shape"] = list(t.last.pixel_values.shape)
    out["_last"] = t.last
    return out


def _hf(cfg: BenchConfig, s: ImageSet, hf_cfg: dict, backend: str,
        facts: tuple[list[float], list[int]], rss: bench_env.PeakRss) -> dict:
    from . import hf as bench_hf
    proc = bench_hf.build(hf_cfg, cfg.pipeline, backend)
    device = cfg.device if backend == "torchvision" else "cpu"
    idx = _batches(len(s.items), cfg.batch_size)
    batches = [[s.items[i] for i in b] for b in idx]
    rss.start()
    t = _time_calls(lambda b: bench_hf.call(proc, b, device), batches, cfg.repeat, cfg.warmup,
                    device)
    out: dict[str, Any] = {"processor": backend, "class": type(proc).__name__, "device": device}
    out.update(_rates(t, cfg.batch_size, *facts, idx))
    out["peak_rss_mib"] = rss.peak_mib()
    out["peak_rss_scope"] = rss.scope
    out["output_shape"] = _shape(t.last.get("pixel_values"))
    return out


def run(cfg: BenchConfig, log: Callable[[str], None] | None = None) -> dict:
    """Measure everything ``cfg`` asks for -> the result dict (see DEFINITIONS; JSON-able)."""
    import torch  # noqa: F401  (loaded first, so machine() sees CUDA devices)

    from .. import kernels
    from . import hf as bench_hf
    log = log or (lambda msg: None)
    hf_cfg = bench_hf.config_for(cfg.preset, cfg.pipeline) if cfg.compare_hf else {}
    if cfg.compare_hf:
        bench_hf.build(hf_cfg, cfg.pipeline, "pil")  # fail now (no transformers) rather than late
    rss = bench_env.PeakRss()
    # The CPU's write and resize floors, for the lower bound (which needs the decode floor too;
    # a GPU's floors are bench/gpu_check's).
    floors = cfg.floors and cfg.decode_floor and cfg.device == "cpu"
    forms = len(cfg.dtypes) * len(cfg.row_forms)
    steps = len(cfg.image_sets) * (
        int(cfg.decode_floor) + (1 + forms if floors else 0)
        + len(cfg.threads) * (len(cfg.backends) * forms
                              + (len(bench_hf.BACKENDS) if cfg.compare_hf else 0)))
    step = 0

    def progress(what: str) -> None:
        nonlocal step
        step += 1
        log(f"[{step}/{steps}] {what}")

    result: dict = {
        "schema_version": SCHEMA_VERSION,
        "tool": "vlmprep bench",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": bench_env.machine(),
        "versions": bench_env.versions(),
        "kernels": kernels.summary(),
        "preset": {"name": cfg.pipeline.name, "source": cfg.preset,
                   "pipeline": cfg.pipeline.to_dict()},
        "config": {"backends": list(cfg.backends), "dtypes": list(cfg.dtypes),
                   "device": cfg.device, "batch_size": cfg.batch_size,
                   "threads": [t if t is not None else "default" for t in cfg.threads],
                   "repeat": cfg.repeat, "warmup": cfg.warmup,
                   "compare": ["hf"] if cfg.compare_hf else [],
                   "row_forms": list(cfg.row_forms)},
        "inputs": [],
        "decode_floor": [],
        "resize_floor": [],
        "write_floor": [],
        "results": [],
        "hf": [],
        "definitions": DEFINITIONS,
    }
    for s in cfg.image_sets:
        facts = _item_facts(cfg.pipeline, s)
        result["inputs"].append(s.describe())
        floor = None
        if cfg.decode_floor:
            floor = _decode_floor(s, cfg.repeat, cfg.device)
            result["decode_floor"].append(floor)
            progress(f"{s.label} decode floor: {floor['decode_floor_ms']} ms ({floor['fastest']})")
        rfloor = None
        wfloors: dict[tuple[str, str], dict] = {}
        if floors:
            rfloor = _resize_floor(cfg.pipeline, s, cfg.repeat)
            result["resize_floor"].append(rfloor)
            progress(f"{s.label} exact-resize floor: {rfloor['resize_floor_ms']} ms")
            for dtype in cfg.dtypes:
                for form in cfg.row_forms:
                    w = _write_floor(_processor(cfg, cfg.backends[0], dtype, form), s, cfg.repeat)
                    wfloors[dtype, form] = w
                    result["write_floor"].append(w)
                    progress(f"{s.label} {dtype} {form} write floor: {w['write_floor_ms']} ms "
                             f"({w['write_floor_bytes'] / 1e6:.1f} MB)")
        for n in cfg.threads:
            with thread_count(n) as eff:
                rows = []
                for backend in cfg.backends:
                    for dtype in cfg.dtypes:
                        for form in cfg.row_forms:
                            r = {"size": s.label, "backend": backend, "dtype": dtype,
                                 "row_form": form, "device": cfg.device,
                                 "threads": n if n is not None else "default", **eff,
                                 "batch_size": cfg.batch_size}
                            proc = _processor(cfg, backend, dtype, form)
                            r.update(_vlmprep(cfg, s, proc, facts, rss))
                            if cfg.stages:
                                try:
                                    r.update(_stages(cfg.pipeline, backend, cfg.device, dtype, s,
                                                     cfg.repeat, form))
                                    r["stages_error"] = None
                                except Exception as e:  # a backend that does not run op by op
                                    r.update(stages_ms=None, stage_sum_ms=None,
                                             stages_error=f"{type(e).__name__}: {e}")
                            rows.append(r)
                            progress(f"{s.label} {backend} {dtype} {form} threads={r['threads']}: "
                                     f"{r['images_per_s']:.2f} images/s, "
                                     f"{r['per_image_p50_ms']:.1f} ms/image")
                hf_rows = {}
                if cfg.compare_hf:
                    for hb in bench_hf.BACKENDS:
                        h = {"size": s.label, "threads": n if n is not None else "default", **eff,
                             "batch_size": cfg.batch_size}
                        h.update(_hf(cfg, s, hf_cfg, hb, facts, rss))
                        hf_rows[hb] = h
                        result["hf"].append(h)
                        progress(f"{s.label} transformers {hb} threads={h['threads']}: "
                                 f"{h['images_per_s']:.2f} images/s, "
                                 f"{h['per_image_p50_ms']:.1f} ms/image")
            for r in rows:
                last = r.pop("_last")
                if floor is not None and floor["decode_floor_ms"]:
                    r["decode_floor_ms"] = floor["decode_floor_ms"]
                    r["decode_floor_decoder"] = floor["fastest"]
                    r["ratio_vs_decode_floor"] = round(r["per_image_p50_ms"]
                                                       / floor["decode_floor_ms"], 3)
                wf = wfloors.get((r["dtype"], r["row_form"]))
                if rfloor is not None and wf is not None and wf["write_floor_ms"] is not None:
                    r["write_floor_ms"] = wf["write_floor_ms"]
                    r["resize_floor_ms"] = rfloor["resize_floor_ms"]
                    if floor is not None and "decode_floor_ms" in r:
                        bound = (r["decode_floor_ms"] + wf["write_floor_ms"]
                                 + rfloor["resize_floor_ms"])
                        r["lower_bound_ms"] = round(bound, 3)
                        r["ratio_vs_lower_bound"] = round(r["per_image_p50_ms"] / bound, 3)
                        low = (floor["decode_floor_min_ms"] + wf["write_floor_min_ms"]
                               + rfloor["resize_floor_min_ms"])
                        r["min_based"] = {
                            "per_image_min_ms": r["per_image_min_ms"],
                            "lower_bound_min_ms": round(low, 3),
                            "ratio_vs_decode_floor": round(r["per_image_min_ms"]
                                                           / floor["decode_floor_min_ms"], 3),
                            "ratio_vs_lower_bound": round(r["per_image_min_ms"] / low, 3)}
                mine = None
                if hf_rows:
                    try:  # the same batch as the transformers processors' last call
                        mine = _shape(last.to_hf().get("pixel_values"))
                    except Exception:  # to_hf is the pack layer's business; never fail a bench
                        mine = None
                for hb, h in hf_rows.items():
                    # Like for like only: the processors return normalized float32.
                    if r["dtype"] == "float32" and r["row_form"] == "full":
                        r[f"speedup_vs_hf_{hb}"] = round(h["per_image_p50_ms"]
                                                         / r["per_image_p50_ms"], 3)
                    if mine is not None:
                        same = mine == h["output_shape"]
                        h["same_output_shape_as_vlmprep"] = (
                            h.get("same_output_shape_as_vlmprep", True) and same)
                        if not same:
                            log(f"warning: {s.label}: transformers {hb} pixel_values shape "
                                f"{h['output_shape']} != vlmprep {r['backend']} {r['dtype']} "
                                f"to_hf() {mine}")
                result["results"].append(r)
    return result
