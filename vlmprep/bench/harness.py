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

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

from .. import backends, kernels, pack
from ..backends import fusion
from ..backends.context import Context
from ..io.inputs import resolve
from ..io.probe import probe
from ..pack import ROW_FORMS as pack_row_forms
from ..plan import plan_images
from ..plan.grid import row_length
from ..processor import Processor
from . import env as bench_env
from . import hf as bench_hf
from . import timing
from .floors import decode_floor, resize_floor, write_floor
from .images import ImageSet
from .timing import ms, pct, sync, thread_count

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
    hws = [probe(b).size_hw for b in s.items]
    plans = plan_images(pipe, hws)
    for p in plans:
        if p.error is not None:
            raise ValueError(f"{s.names[p.index]}: {p.error}")
    return [h * w / 1e6 for h, w in hws], [p.num_tokens for p in plans]


def _processor(cfg: BenchConfig, backend: str, dtype: str, row_form: str) -> Any:
    """The Processor measured."""
    return Processor(cfg.pipeline, backend=backend, device=cfg.device, dtype=dtype,
                     row_form=row_form)


class _Stages:
    """Each stage of one image run separately through the backend's stages (``decode``, ``size``,
    ``write``); compact rows through the pipeline the backend executes for them
    (``pack.execution_pipeline``), planned by the real one."""

    def __init__(self, pipe: "Pipeline", backend: str, device: str, dtype: str,
                 row_form: str) -> None:
        import torch  # deferred: heavy

        self.plan_pipe, self.pipe = pipe, pack.execution_pipeline(pipe, row_form)
        self.be = backends.get(backend)(self.pipe, device, dtype)
        if not self.be.ops or self.be.ops[0].name != "decode":
            raise ValueError("expected the pipeline to start with decode")
        self.order = self.pipe.patchify.order
        self.tdtype = getattr(torch, dtype)
        self.device, self.dtype, self.row_form = device, dtype, row_form
        self.on_gpu = device.startswith("cuda")

    def alloc(self, shape: tuple) -> Any:
        return kernels.empty(shape, self.tdtype, self.device)  # as Processor.__call__ allocates

    def one(self, item: bytes) -> dict[str, float]:
        """Seconds per stage (``STAGES``) of ``item``."""
        be, device = self.be, self.device
        t = {}
        t0 = time.perf_counter()
        src = resolve(item)
        (plan,) = plan_images(self.plan_pipe, [src.hw])
        if plan.error is not None:
            raise plan.error
        t1 = time.perf_counter()
        t["probe_ms"] = t1 - t0
        ctx = Context(src, plan, None, self.dtype, "cpu")  # type: ignore[arg-type]
        value = be.decode(ctx)
        t2 = time.perf_counter()
        t["decode_ms"] = t2 - t1
        if self.on_gpu and hasattr(value, "to"):
            value = value.to(device)
            sync(device)
        ctx.device = device
        t3 = time.perf_counter()
        t["transfer_ms"] = t3 - t2 if self.on_gpu else 0.0
        value = be.size(value, ctx)
        sync(device)
        t4 = time.perf_counter()
        t["resize_ms"] = t4 - t3
        rows = plan.rows(self.order)
        shape = ((rows, 3, *(self.pipe.tile_hw or ())) if self.order == "tiles"
                 else (rows, row_length(self.pipe.patchify)))
        out = self.alloc(shape)
        ctx.dest = out
        # The executor end to end would pick, but the resize is timed on its own above: a plan
        # the backend resizes inside the rows kernel (fusion.RESIZE_ROWS) is timed as ROWS.
        be.write(value, ctx, fusion.choose(be.fusion, ctx, most=fusion.ROWS))
        pack.build(out, [plan], {}, self.plan_pipe, self.row_form)
        sync(device)
        t["normalize_patchify_pack_ms"] = time.perf_counter() - t4
        return t


def _stages(pipe: "Pipeline", backend: str, device: str, dtype: str, s: ImageSet,
            repeat: int, row_form: str = "full") -> dict:
    """p50 per image of each stage, run separately through the backend's stages (``_Stages``)."""
    stages_of = _Stages(pipe, backend, device, dtype, row_form)
    stages_of.one(s.items[0])  # warm
    samples: dict[str, list[float]] = {k: [] for k in STAGES}
    for _ in range(repeat):
        for item in s.items:
            for key, v in stages_of.one(item).items():
                samples[key].append(v)
    stages = {key: ms(pct(v, 50)) for key, v in samples.items()}
    return {"stages_ms": stages, "stage_sum_ms": round(sum(stages.values()), 3)}


def _stages_or_error(cfg: BenchConfig, backend: str, dtype: str, s: ImageSet, form: str) -> dict:
    """``_stages``' keys and ``stages_error`` (None, or why a backend does not run op by op)."""
    try:
        out = _stages(cfg.pipeline, backend, cfg.device, dtype, s, cfg.repeat, form)
        out["stages_error"] = None
        return out
    except Exception as e:  # a backend that does not run op by op
        return {"stages_ms": None, "stage_sum_ms": None,
                "stages_error": f"{type(e).__name__}: {e}"}


def _vlmprep(cfg: BenchConfig, s: ImageSet, proc: Any,
             facts: tuple[list[float], list[int]], rss: bench_env.PeakRss) -> dict:
    idx = timing.batches(len(s.items), cfg.batch_size)
    batches = [[s.items[i] for i in b] for b in idx]
    rss.start()
    t = timing.time_calls(proc, batches, cfg.repeat, cfg.warmup, cfg.device)
    out = timing.rates(t, cfg.batch_size, *facts, idx)
    out["peak_rss_mib"] = rss.peak_mib()
    out["peak_rss_scope"] = rss.scope
    out["output_shape"] = list(t.last.pixel_values.shape)
    out["_last"] = t.last
    return out


def _hf(cfg: BenchConfig, s: ImageSet, hf_cfg: dict, backend: str,
        facts: tuple[list[float], list[int]], rss: bench_env.PeakRss) -> dict:
    proc = bench_hf.build(hf_cfg, cfg.pipeline, backend)
    device = cfg.device if backend == "torchvision" else "cpu"
    idx = timing.batches(len(s.items), cfg.batch_size)
    batches = [[s.items[i] for i in b] for b in idx]
    rss.start()
    t = timing.time_calls(lambda b: bench_hf.call(proc, b, device), batches, cfg.repeat,
                          cfg.warmup, device)
    out: dict[str, Any] = {"processor": backend, "class": type(proc).__name__, "device": device}
    out.update(timing.rates(t, cfg.batch_size, *facts, idx))
    out["peak_rss_mib"] = rss.peak_mib()
    out["peak_rss_scope"] = rss.scope
    out["output_shape"] = _shape(t.last.get("pixel_values"))
    return out


# -- the run: one input set at a time -------------------------------------------------------------
def _cpu_floors(cfg: BenchConfig) -> bool:
    """Whether the CPU's write and resize floors are measured, for the lower bound (which needs
    the decode floor too; a GPU's floors are bench/gpu_check's)."""
    return cfg.floors and cfg.decode_floor and cfg.device == "cpu"


def _progress(cfg: BenchConfig, log: Callable[[str], None], hf_backends: int) -> Callable[[str], None]:
    """``log`` with a "[k/n] " prefix: n the steps ``run`` takes for ``cfg``, k this one."""
    forms = len(cfg.dtypes) * len(cfg.row_forms)
    steps = len(cfg.image_sets) * (
        int(cfg.decode_floor) + (1 + forms if _cpu_floors(cfg) else 0)
        + len(cfg.threads) * (len(cfg.backends) * forms
                              + hf_backends))
    step = 0

    def progress(what: str) -> None:
        nonlocal step
        step += 1
        log(f"[{step}/{steps}] {what}")
    return progress


def _new_result(cfg: BenchConfig) -> dict:
    """The result dict before anything is measured: where, what, and empty result lists."""
    return {
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


def _add_floor_ratios(r: dict, floor: dict | None, rfloor: dict | None, wf: dict | None) -> None:
    """A result row's floors, lower bound and ratios to them (p50 and min-based), into ``r``."""
    if floor is not None and floor["decode_floor_ms"]:
        r["decode_floor_ms"] = floor["decode_floor_ms"]
        r["decode_floor_decoder"] = floor["fastest"]
        r["ratio_vs_decode_floor"] = round(r["per_image_p50_ms"] / floor["decode_floor_ms"], 3)
    if rfloor is None or wf is None or wf["write_floor_ms"] is None:
        return
    r["write_floor_ms"] = wf["write_floor_ms"]
    r["resize_floor_ms"] = rfloor["resize_floor_ms"]
    if floor is not None and "decode_floor_ms" in r:
        bound = r["decode_floor_ms"] + wf["write_floor_ms"] + rfloor["resize_floor_ms"]
        r["lower_bound_ms"] = round(bound, 3)
        r["ratio_vs_lower_bound"] = round(r["per_image_p50_ms"] / bound, 3)
        low = (floor["decode_floor_min_ms"] + wf["write_floor_min_ms"]
               + rfloor["resize_floor_min_ms"])
        r["min_based"] = {
            "per_image_min_ms": r["per_image_min_ms"],
            "lower_bound_min_ms": round(low, 3),
            "ratio_vs_decode_floor": round(r["per_image_min_ms"] / floor["decode_floor_min_ms"], 3),
            "ratio_vs_lower_bound": round(r["per_image_min_ms"] / low, 3)}


def _add_hf_comparison(r: dict, last: Any, hf_rows: dict[str, dict], label: str,
                       log: Callable[[str], None]) -> None:
    """Speedups over the transformers processors into ``r``; their output shapes checked against
    vlmprep's ``to_hf()`` of the same batch (``same_output_shape_as_vlmprep``, into each)."""
    mine = None
    if hf_rows:
        try:  # the same batch as the transformers processors' last call
            mine = _shape(last.to_hf().get("pixel_values"))
        except Exception:  # to_hf is the pack layer's business; never fail a bench
            mine = None
    for hb, h in hf_rows.items():
        # Like for like only: the processors return normalized float32.
        if r["dtype"] == "float32" and r["row_form"] == "full":
            r[f"speedup_vs_hf_{hb}"] = round(h["per_image_p50_ms"] / r["per_image_p50_ms"], 3)
        if mine is not None:
            same = mine == h["output_shape"]
            h["same_output_shape_as_vlmprep"] = h.get("same_output_shape_as_vlmprep", True) and same
            if not same:
                log(f"warning: {label}: transformers {hb} pixel_values shape "
                    f"{h['output_shape']} != vlmprep {r['backend']} {r['dtype']} "
                    f"to_hf() {mine}")


class _Run:
    """One ``run``: its config, the result being filled, progress and peak-RSS tracking."""

    def __init__(self, cfg: BenchConfig, log: Callable[[str], None]) -> None:
        self.cfg, self.log = cfg, log
        self.hf_cfg = bench_hf.config_for(cfg.preset, cfg.pipeline) if cfg.compare_hf else {}
        # the processors transformers has for this family, one built now (fail early, not late)
        self.hf_backends = bench_hf.available_backends(self.hf_cfg) if cfg.compare_hf else ()
        if self.hf_backends:
            bench_hf.build(self.hf_cfg, cfg.pipeline, self.hf_backends[0])
        self.rss = bench_env.PeakRss()
        self.progress = _progress(cfg, log, len(self.hf_backends))
        self.result = _new_result(cfg)

    def image_set(self, s: ImageSet) -> None:
        """Everything measured on ``s``: its floors, then per thread count vlmprep's rows and the
        transformers processors', then each row's ratios (appended to ``result["results"]``)."""
        facts = _item_facts(self.cfg.pipeline, s)
        self.result["inputs"].append(s.describe())
        floor, rfloor, wfloors = self.floors(s)
        for n in self.cfg.threads:
            with thread_count(n) as eff:
                rows = self.vlmprep_rows(s, n, eff, facts)
                hf_rows = self.hf_rows(s, n, eff, facts) if self.cfg.compare_hf else {}
            for r in rows:
                last = r.pop("_last")
                _add_floor_ratios(r, floor, rfloor, wfloors.get((r["dtype"], r["row_form"])))
                _add_hf_comparison(r, last, hf_rows, s.label, self.log)
                self.result["results"].append(r)

    def floors(self, s: ImageSet) -> tuple[dict | None, dict | None, dict[tuple[str, str], dict]]:
        """The decode floor, and on the CPU the resize floor and a write floor per dtype and row
        form: ``(decode, resize, {(dtype, row_form): write})``."""
        cfg, result, progress = self.cfg, self.result, self.progress
        floor = None
        if cfg.decode_floor:
            floor = decode_floor(s, cfg.repeat, cfg.device)
            result["decode_floor"].append(floor)
            progress(f"{s.label} decode floor: {floor['decode_floor_ms']} ms ({floor['fastest']})")
        rfloor = None
        wfloors: dict[tuple[str, str], dict] = {}
        if _cpu_floors(cfg):
            rfloor = resize_floor(cfg.pipeline, s, cfg.repeat)
            result["resize_floor"].append(rfloor)
            progress(f"{s.label} exact-resize floor: {rfloor['resize_floor_ms']} ms")
            for dtype in cfg.dtypes:
                for form in cfg.row_forms:
                    w = write_floor(_processor(cfg, cfg.backends[0], dtype, form), s, cfg.repeat)
                    wfloors[dtype, form] = w
                    result["write_floor"].append(w)
                    progress(f"{s.label} {dtype} {form} write floor: {w['write_floor_ms']} ms "
                             f"({w['write_floor_bytes'] / 1e6:.1f} MB)")
        return floor, rfloor, wfloors

    def vlmprep_rows(self, s: ImageSet, n: int | None, eff: dict,
                     facts: tuple[list[float], list[int]]) -> list[dict]:
        """One row per backend x dtype x row form at ``n`` threads: end to end, then stages."""
        cfg = self.cfg
        rows = []
        for backend in cfg.backends:
            for dtype in cfg.dtypes:
                for form in cfg.row_forms:
                    r = {"size": s.label, "backend": backend, "dtype": dtype,
                         "row_form": form, "device": cfg.device,
                         "threads": n if n is not None else "default", **eff,
                         "batch_size": cfg.batch_size}
                    proc = _processor(cfg, backend, dtype, form)
                    r.update(_vlmprep(cfg, s, proc, facts, self.rss))
                    if cfg.stages:
                        r.update(_stages_or_error(cfg, backend, dtype, s, form))
                    rows.append(r)
                    self.progress(f"{s.label} {backend} {dtype} {form} threads={r['threads']}: "
                                  f"{r['images_per_s']:.2f} images/s, "
                                  f"{r['per_image_p50_ms']:.1f} ms/image")
        return rows

    def hf_rows(self, s: ImageSet, n: int | None, eff: dict,
                facts: tuple[list[float], list[int]]) -> dict[str, dict]:
        """The transformers processors at ``n`` threads, by backend (also in ``result["hf"]``)."""
        out = {}
        for hb in self.hf_backends:
            h = {"size": s.label, "threads": n if n is not None else "default", **eff,
                 "batch_size": self.cfg.batch_size}
            h.update(_hf(self.cfg, s, self.hf_cfg, hb, facts, self.rss))
            out[hb] = h
            self.result["hf"].append(h)
            self.progress(f"{s.label} transformers {hb} threads={h['threads']}: "
                          f"{h['images_per_s']:.2f} images/s, {h['per_image_p50_ms']:.1f} ms/image")
        return out


def run(cfg: BenchConfig, log: Callable[[str], None] | None = None) -> dict:
    """Measure everything ``cfg`` asks for -> the result dict (see DEFINITIONS; JSON-able)."""
    import torch  # noqa: F401  # deferred: heavy; loaded first, so machine() sees CUDA devices
    measuring = _Run(cfg, log or (lambda msg: None))
    for s in cfg.image_sets:
        measuring.image_set(s)
    return measuring.result
