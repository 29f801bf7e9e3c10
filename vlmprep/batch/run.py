"""``run``: a batch job, inputs -> packed shards + manifest, locally or on Ray (``vlmprep run``).

The job in one place::

    units  = sources.discover(inputs)                    # input shards: folders, tars, parquet, lists
    items  = [(unit, part) for part in range(ceil(unit.count() / shard_size))]   # minus done ones
    each item -> process_item(): samples [part*shard_size, (part+1)*shard_size) of the unit
                 -> rows.process_samples -> shards.write_shard(shard_name(unit.name, part, fmt))
    after each shard the parent records it in manifest.json (atomic replace)

Engines: ``"local"`` runs the items in ``workers`` processes (spawn; each builds its Processor once
from the JobConfig and uses ``usable_cpus // workers`` threads and 1/workers of this process's memory
budget, ``vlmprep.budget``; ``workers=1`` runs in this process);
``"ray"`` hands the same items to ``vlmprep.integrations.ray.run_ray``, whose actors call the same
``process_item``, so both engines write byte-identical shards.

Safety: a shard is written to ``NAME.tmp`` and renamed (a kill leaves no half shard); the
manifest lists only renamed shards (rewritten atomically at most once a second while they
complete, and on the way out of an exception or Ctrl-C). ``resume=True`` keeps the shards the
manifest lists whose file exists with the recorded size, removes stray ``*.tmp`` and does the
rest (deterministic names and bytes: a shard done but not yet listed is written again, the
same), so a kill at any point and a resume give every sample exactly once. A different config
(``JobConfig.hash``) or different inputs on resume are refused, naming the differences. A
non-empty folder that is not a vlmprep output (no manifest.json) is never written into without
``overwrite=True``; ``overwrite`` deletes only the old job's shards (the files named as the writer
names a shard of a unit the old manifest names: one listing of the folder, so a damaged manifest
cannot make it loop or aim elsewhere) and manifest. Every manifest read is checked first
(``shards.check_manifest``: types, counts, sizes, names).
Ctrl-C stops the workers, removes ``*.tmp`` and re-raises KeyboardInterrupt with the manifest
consistent.
"""
from __future__ import annotations

import json
import math
import os
import queue
import re
import signal
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, cast

from ..budget import process_budget, set_process_budget
from .config import JobConfig

if TYPE_CHECKING:
    from ..ops import decode
    from ..processor import Processor
    from .sources import Unit

__all__ = ["run", "process_item", "shard_meta", "worker_threads", "JobFailed", "ENGINES"]

ENGINES = ("local", "ray")
_TMP = ".tmp"
_RECORD_EVERY_S = 1.0  # the manifest is rewritten at most this often while shards complete

WorkItem = tuple["Unit", int]


# -- the per-item step (local workers and Ray actors) -------------------------------------------
def shard_meta(config: JobConfig, proc: Processor, unit_name: str, part: int) -> dict[str, str]:
    """The shard's key-value metadata (str -> str): the same bytes for the same job and item
    (no time, host or path inside), so a rerun and every engine write identical shards."""
    from .. import __version__
    return {"vlmprep_version": __version__, "config_hash": config.hash(),
            "config": json.dumps(config.to_json(), sort_keys=True),
            "pipeline": json.dumps(proc.pipeline.to_dict(), sort_keys=True),
            "unit": unit_name, "part": str(part)}


def _reason_key(text: str | None) -> str:
    """A short reason for the summary's "skipped by reason": the first two clauses of the first
    line (expected ...; got ...), numbers as N and quoted values as '...', so that images failing
    the same way count together."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else "unknown"
    key = "; ".join(line.split("; ")[:2])
    key = re.sub(r"\bb?'[^']*'", "'...'", key)
    key = re.sub(r"\d[\d,]*", "N", key)
    return key if len(key) <= 120 else key[:117] + "..."


def process_item(proc: Processor, unit: Unit, part: int, output: str, config: JobConfig,
                 on_images: Callable[[int, int], None] | None = None) -> dict:
    """Process samples ``[part*shard_size, (part+1)*shard_size)`` of ``unit`` and write their
    shard (``shards.shard_name(unit.name, part, config.format)``, tmp + rename) into ``output``.

    Returns write_shard's info plus ``unit``, ``part``, ``reasons`` ({short reason: count} of the
    error rows), ``damaged`` (error rows for parts of the input that could not be read:
    ``Sample.damaged``; a job with any is not complete) and ``timing`` ({"process_s",
    "write_s"}, not stored in the manifest).
    ``on_images(images, tokens)`` is called after each small group of images (progress)."""
    from ..kernels.threads import get_num_threads
    from . import rows as rows_mod
    from . import shards
    start = part * config.shard_size
    group = max(1, get_num_threads())  # images per Processor call: keeps the threads busy
    t0 = time.perf_counter()
    rows: list[dict] = []
    pending: list[Any] = []
    damaged = 0

    def flush() -> None:
        new = rows_mod.process_samples(proc, pending)
        rows.extend(new)
        if on_images is not None:
            on_images(len(new), sum(r["num_tokens"] for r in new))
        pending.clear()

    for s in unit.samples(start, start + config.shard_size):
        damaged += bool(getattr(s, "damaged", False))
        pending.append(s)
        if len(pending) >= group:
            flush()
    if pending:
        flush()
    t1 = time.perf_counter()
    name = shards.shard_name(unit.name, part, config.format)
    info = dict(shards.write_shard(output, name, config.format, rows,
                                   shard_meta(config, proc, unit.name, part)))
    t2 = time.perf_counter()
    reasons: dict[str, int] = {}
    for r in rows:
        if r["status"] != "ok":
            key = _reason_key(r["error"])
            reasons[key] = reasons.get(key, 0) + 1
    info.update(unit=unit.name, part=part, reasons=reasons, damaged=damaged,
                timing={"process_s": t1 - t0, "write_s": t2 - t1})
    return info


def worker_threads(workers: int) -> int:
    """Give this process ``max(1, usable_cpus // workers)`` threads for vlmprep's kernels, torch
    and OpenCV (so ``workers`` processes side by side do not oversubscribe the cores); returns
    the count. For a worker process or a Ray actor, not the caller's process."""
    from .. import kernels
    from ..kernels.threads import usable_cpus
    n = max(1, usable_cpus() // max(1, workers))
    kernels.set_num_threads(n)
    try:
        import torch
        torch.set_num_threads(n)
    except ImportError:
        pass
    try:
        import cv2
        cv2.setNumThreads(n)
    except ImportError:
        pass
    return n


# -- local worker processes ---------------------------------------------------------------------
def _die_with_parent() -> None:
    """Linux: this worker gets SIGKILL when the parent dies (a killed job must not leave workers
    writing shards that a --resume run writes too)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _worker(config: JobConfig, output: str, workers: int, tasks: Any, results: Any,
            parent: int, memory: int | None) -> None:
    """A local worker: build the Processor once, then process items until the None sentinel.
    ``memory``: this worker's memory budget (its share of the parent's). Messages: ("images",
    n, tokens), ("done", info), ("failed", item name, traceback text)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _die_with_parent()
    if os.getppid() != parent:  # the parent died before prctl took effect
        return
    try:
        worker_threads(workers)
        set_process_budget(memory)
        proc = config.processor()
    except BaseException:  # noqa: BLE001 (reported to the parent, which stops the job)
        results.put(("failed", "worker start", traceback.format_exc()))
        return
    while True:
        item = tasks.get()
        if item is None:
            return
        unit, part = item
        try:
            info = process_item(proc, unit, part, output, config,
                                on_images=lambda n, t: results.put(("images", n, t)))
        except BaseException:  # noqa: BLE001 (reported to the parent, which stops the job)
            results.put(("failed", f"{unit.name} part {part}", traceback.format_exc()))
            return
        results.put(("done", info))
        if _TEST_PAUSE_S:
            time.sleep(_TEST_PAUSE_S)


# Tests only: seconds a worker waits after each shard, so a test that interrupts a job (Ctrl-C,
# SIGKILL) reliably catches it mid-run instead of racing a fast machine to the end.
try:
    _TEST_PAUSE_S = min(max(float(os.environ.get("VLMPREP_RUN_TEST_PAUSE_S", "0")), 0.0), 10.0)
except ValueError:
    _TEST_PAUSE_S = 0.0


class JobFailed(RuntimeError):
    """A worker failed for a cause that is not an image's (the job stops; --resume continues)."""


def _local_pool(items: Sequence[WorkItem], output: str, config: JobConfig, workers: int,
                on_images: Callable[[int, int], None]) -> Iterator[dict]:
    """Run ``items`` in ``workers`` spawned processes; yield each shard's info as it completes.
    Closing the generator (an exception or Ctrl-C in the caller) terminates the workers."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    for it in items:
        tasks.put(it)
    n = min(workers, len(items))
    for _ in range(n):
        tasks.put(None)
    # the n workers share this host's one memory budget (VLMPREP_MEMORY_BUDGET or half the
    # host): each holds 1/n of it, so n bombs at once still fit the whole
    total = process_budget().total
    share = None if total is None else max(1, total // n)
    procs = [ctx.Process(target=_worker, args=(config, output, n, tasks, results,
                                               os.getpid(), share),
                         daemon=True, name=f"vlmprep-run-{i}")
             for i in range(n)]
    for p in procs:
        p.start()
    left = len(items)
    try:
        while left:
            try:
                msg = results.get(timeout=0.5)
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead or all(p.exitcode is not None for p in procs):
                    codes = ", ".join(f"{p.name}: exit {p.exitcode}" for p in procs)
                    raise JobFailed(f"a worker process ended unexpectedly ({codes}); the "
                                     f"manifest lists the shards done: run again with --resume") \
                        from None
                continue
            if msg[0] == "images":
                on_images(msg[1], msg[2])
            elif msg[0] == "done":
                left -= 1
                yield msg[1]
            else:
                raise JobFailed(f"{msg[1]} failed (not an image's fault; the manifest lists "
                                 f"the shards done: fix the cause and run again with "
                                 f"--resume):\n{msg[2]}")
        for p in procs:
            p.join()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=10)
        tasks.close()
        results.close()
        tasks.cancel_join_thread()
        results.cancel_join_thread()


def _in_process(items: Sequence[WorkItem], output: str, config: JobConfig, proc: Processor,
                on_images: Callable[[int, int], None]) -> Iterator[dict]:
    for unit, part in items:
        try:
            info = process_item(proc, unit, part, output, config, on_images=on_images)
        except Exception as e:  # not an image's fault (process_samples never raises for one)
            raise JobFailed(f"{unit.name} part {part} failed (not an image's fault; the manifest "
                            f"lists the shards done: fix the cause and run again with --resume): "
                            f"{type(e).__name__}: {e}") from e
        yield info


# -- the output folder --------------------------------------------------------------------------
def _remove_tmp(output: str) -> int:
    n = 0
    for name in os.listdir(output):
        if name.endswith(_TMP):
            try:
                os.remove(os.path.join(output, name))
                n += 1
            except FileNotFoundError:
                pass
    return n


def _prepare_output(output: str, config: JobConfig, resume: bool, overwrite: bool,
                    units_now: dict[str, dict]) -> dict | None:
    """Check ``output`` against the flags; returns the manifest to resume from, or None for a
    fresh job (``overwrite`` has then removed the old job's shards: the files named as the writer
    names a shard of a unit its manifest names). A manifest is checked
    (``shards.check_manifest``) before it is acted on; ``overwrite`` trusts only its unit names."""
    from . import shards
    if os.path.exists(output) and not os.path.isdir(output):
        raise ValueError(f"output: expected a folder (new or a vlmprep output), got the file "
                         f"{output!r}; pick another --output")
    os.makedirs(output, exist_ok=True)
    entries = [e for e in os.listdir(output) if not e.startswith(".")]
    if overwrite and os.path.lexists(os.path.join(output, shards.MANIFEST)):
        # the old job's shards, listed or renamed but not yet listed when it died: the files
        # named as the writer names a shard of a unit the old manifest names. One listing of
        # the folder; nothing else of a (possibly damaged) manifest is trusted.
        if os.path.isdir(os.path.join(output, shards.MANIFEST)):
            raise ValueError(f"output: expected {shards.MANIFEST} in {output!r} to be a file, got "
                             f"a folder; remove it, or pick another --output")
        shards.remove_job_shards(output, shards.job_units(output))
        _remove_tmp(output)
        os.remove(os.path.join(output, shards.MANIFEST))
        return None
    manifest = shards.read_manifest(output)  # checked (shards.check_manifest) before any use
    if manifest is None:
        if entries and not overwrite:
            shown = ", ".join(sorted(entries)[:3]) + (", ..." if len(entries) > 3 else "")
            raise ValueError(f"output: expected a new or empty folder, or a vlmprep output (with "
                             f"{shards.MANIFEST}), got {output!r} holding {len(entries)} other "
                             f"entries ({shown}); pick an empty --output, or pass --overwrite "
                             f"to write shards into it (files of other names are kept)")
        return None
    done = len(manifest.get("shards", {}))
    state = "complete" if manifest.get("complete") else "incomplete"
    if not resume:
        raise ValueError(f"output: expected a new or empty folder, got {output!r} holding a "
                         f"vlmprep output ({state}, {done} shards); pass --resume to finish it, "
                         f"--overwrite to redo it, or pick another --output")
    try:
        old = JobConfig.from_json(manifest["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"--resume: expected {shards.MANIFEST} of a vlmprep run in {output!r}, got one "
                         f"without a readable config ({e}); use --overwrite to redo the job") \
            from None
    if old.hash() != config.hash() or manifest.get("config_hash") != config.hash():
        changes = "; ".join(old.diff(config)) or "the stored config_hash differs"
        raise ValueError(f"--resume: expected the config of the job in {output!r}, got a "
                         f"different one ({changes}); run with the job's settings, or "
                         f"--overwrite to redo it with the new ones")
    units_then = {k: dict(v) for k, v in manifest.get("units", {}).items()}
    if units_then != units_now:
        diffs = []
        for k in sorted(set(units_then) | set(units_now)):
            a, b = units_then.get(k), units_now.get(k)
            if a != b:
                diffs.append(f"{k}: {a.get('count', '?') if a else 'absent'} -> "
                             f"{b['count'] if b else 'absent'} samples"
                             + (f" in {a.get('parts', '?')} -> {b['parts']} parts"
                                if a and b and a.get("count") == b["count"] else ""))
        shown = "; ".join(diffs[:5]) + (f"; and {len(diffs) - 5} more" if len(diffs) > 5 else "")
        raise ValueError(f"--resume: expected the inputs of the job in {output!r}, got different "
                         f"ones ({shown}); pass the same --input, or --overwrite to redo it")
    _remove_tmp(output)
    return manifest


def _shard_done(output: str, name: str, info: dict) -> bool:
    try:
        return os.path.getsize(os.path.join(output, name)) == info.get("bytes")
    except OSError:
        return False


def _damaged(manifest: dict, paths: dict[str, str]) -> dict[str, int]:
    """{input path: error rows for parts of it that could not be read} over the job's shards
    (resumed ones included; a value that is not a count counts as one)."""
    out: dict[str, int] = {}
    for info in manifest["shards"].values():
        d = info.get("damaged", 0)
        if d:
            n = d if isinstance(d, int) and not isinstance(d, bool) and d > 0 else 1
            where = paths.get(info.get("unit"), str(info.get("unit")))
            out[where] = out.get(where, 0) + n
    return out


def _summary(manifest: dict, run_images: int, run_tokens: int, shards_written: int,
             wall_s: float, startup_s: float | None, write_s: float, process_s: float,
             damaged: dict[str, int]) -> dict:
    infos = manifest["shards"].values()
    reasons: dict[str, int] = {}
    for info in infos:
        for k, v in info.get("reasons", {}).items():
            reasons[k] = reasons.get(k, 0) + v
    images = sum(i["count"] for i in infos)
    return {
        "output": manifest["output"], "complete": manifest["complete"],
        "damaged": sum(damaged.values()), "damaged_inputs": damaged,
        "images": images, "processed": sum(i["ok"] for i in infos),
        "skipped": sum(i["errors"] for i in infos),
        "skipped_by_reason": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "tokens": sum(i["tokens"] for i in infos), "bytes": sum(i["bytes"] for i in infos),
        "shards": len(manifest["shards"]),
        "run_images": run_images, "run_tokens": run_tokens, "run_shards": shards_written,
        "wall_s": round(wall_s, 3),
        "startup_s": None if startup_s is None else round(startup_s, 3),
        "images_per_s": round(run_images / wall_s, 2) if wall_s > 0 else 0.0,
        "tokens_per_s": round(run_tokens / wall_s, 1) if wall_s > 0 else 0.0,
        "write_fraction": round(write_s / process_s, 4) if process_s > 0 else 0.0,
    }


# -- the job ------------------------------------------------------------------------------------
def run(inputs: Sequence[str], output: str, config: JobConfig, *, workers: int = 1,
        resume: bool = False, overwrite: bool = False, engine: str = "local",
        glob: str | None = None, column: str | None = None, id_column: str | None = None,
        gpus_per_worker: float | None = None, progress: bool | None = None) -> dict:
    """Process every image of ``inputs`` into shards in ``output``; returns the summary.

    Args:
        inputs: folders, WebDataset ``.tar`` files, parquet files, text lists of paths
            (``vlmprep.batch.sources.discover``; ``glob``, ``column``, ``id_column`` and
            ``config.input_root`` go there).
        output: the output folder (created; see the module docstring for what it may hold).
        config: the JobConfig (processing, shard format and size).
        workers: local worker processes (engine "local"), or Ray actors (engine "ray").
        resume: finish the job recorded in ``output``'s manifest (same config and inputs).
        overwrite: redo the job from scratch (deletes the shards an old manifest lists).
        engine: ``"local"`` or ``"ray"`` (``pip install vlmprep[ray]``).
        gpus_per_worker: engine "ray": GPUs per actor, fractional allowed (0.25: four actors
            share a GPU); None: 1 on a cuda device, else 0. The local engine's workers all use
            ``config.device``.
        progress: a tqdm bar on stderr (None: when stderr is a terminal; ``vlmprep.progress``).

    Summary keys: output, complete (every shard written and every input read whole), damaged
    (error rows for parts of inputs that could not be read: a cut or damaged tar, a damaged
    parquet page) and damaged_inputs ({input path: those rows}), images, processed (ok rows),
    skipped (error rows), skipped_by_reason, tokens, bytes, shards (the whole job, resumed shards
    included); run_images,
    run_tokens, run_shards, wall_s, startup_s (until the first image was done: discovery, the
    Processor, the workers; None if nothing was done; the Ray engine reports per shard, so its
    first shard's time is included), images_per_s, tokens_per_s (over wall_s), write_fraction
    (shard writing time / reading+processing time, summed over this run's shards) for this call.
    Bad images never stop the job: they are error rows with their reason. A damaged input does
    not stop it either (its readable samples are processed, the rest are error rows), but the
    job then ends with ``complete`` False (manifest and summary): it could not read all of its
    inputs. A reader that gives a part fewer or more rows than the unit's count is a JobFailed
    naming the input.
    """
    from .. import __version__
    from .. import progress as progress_mod
    from . import shards, sources
    t_start = time.perf_counter()
    if isinstance(inputs, (str, os.PathLike)) or not inputs:
        raise ValueError(f"inputs: expected a non-empty list of paths, got {inputs!r}")
    if not isinstance(config, JobConfig):
        raise ValueError(f"config: expected a vlmprep.batch.config.JobConfig, got "
                         f"{type(config).__name__}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers: expected a positive int, got {workers!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine: expected one of {list(ENGINES)}, got {engine!r}")
    if gpus_per_worker is not None and (engine != "ray" or isinstance(gpus_per_worker, bool)
                                        or not isinstance(gpus_per_worker, (int, float))
                                        or not gpus_per_worker >= 0):
        raise ValueError(f"gpus_per_worker: expected a number >= 0 with engine='ray', got "
                         f"{gpus_per_worker!r} with engine={engine!r}; local workers use --device")
    if resume and overwrite:
        raise ValueError("expected at most one of resume and overwrite, got both; --resume "
                         "finishes a job, --overwrite redoes it")
    output = os.fspath(output)
    # the parent's Processor: fails early (backend, checkpoint), records the pipeline, and its
    # read cap bounds every sample the readers return
    proc = config.processor()
    units = sources.discover([os.fspath(i) for i in inputs], glob=glob, column=column,
                             id_column=id_column, input_root=config.input_root,
                             max_bytes=cast("decode", proc.pipeline["decode"]).max_source_bytes)
    size = config.shard_size
    counts = {u.name: u.count() for u in units}
    paths = {u.name: u.path for u in units}
    units_now = {u.name: {"count": counts[u.name], "parts": math.ceil(counts[u.name] / size)}
                 for u in units}
    old = _prepare_output(output, config, resume, overwrite, units_now)
    kept = {k: v for k, v in (old or {}).get("shards", {}).items() if _shard_done(output, k, v)}
    manifest: dict[str, Any] = {
        "vlmprep_version": __version__, "format": config.format, "config": config.to_json(),
        "config_hash": config.hash(), "pipeline": proc.pipeline.to_dict(),
        "inputs": [os.path.abspath(os.fspath(i)) for i in inputs], "output": os.path.abspath(output),
        "shards": kept, "units": units_now, "complete": False, "summary": {}}
    items = [(u, p) for u in units for p in range(units_now[u.name]["parts"])
             if shards.shard_name(u.name, p, config.format) not in kept]
    order = {shards.shard_name(u.name, p, config.format): (i, p)
             for i, u in enumerate(units) for p in range(units_now[u.name]["parts"])}
    shards.write_manifest(output, manifest)
    todo = sum(min(size, counts[u.name] - p * size) for u, p in items)
    bar = progress_mod.bar(total=todo, desc="vlmprep run", unit="img", enabled=progress)
    run_images = run_tokens = written = 0
    write_s = process_s = 0.0
    first: float | None = None
    t0 = time.perf_counter()

    def on_images(n: int, tokens: int) -> None:
        nonlocal run_images, run_tokens, first
        if first is None:
            first = time.perf_counter() - t_start
        run_images += n
        run_tokens += tokens
        bar.update(n)
        dt = time.perf_counter() - t0
        if dt > 0:
            bar.set_postfix_str(f"{run_tokens / dt:,.0f} tok/s", refresh=False)

    stream: Iterator[dict]
    if not items:
        stream = iter(())
    elif engine == "ray":
        from ..integrations.ray import run_ray
        stream = run_ray(items, output, config, workers=workers, num_gpus=gpus_per_worker)
    elif workers == 1:
        stream = _in_process(items, output, config, proc, on_images)
    else:
        stream = _local_pool(items, output, config, workers, on_images)
    def record() -> None:
        """The manifest on disk := the shards done, in job order (unit, part)."""
        manifest["shards"] = dict(sorted(manifest["shards"].items(),
                                         key=lambda kv: order.get(kv[0], (len(order), 0))))
        shards.write_manifest(output, manifest)

    last = time.monotonic()
    try:
        for info in stream:
            timing = info.pop("timing", {})
            write_s += timing.get("write_s", 0.0)
            process_s += timing.get("process_s", 0.0)
            if engine == "ray":  # shard granularity: the actors report nothing in between
                on_images(info["count"], info["tokens"])
            name = info.pop("name")
            want = min(size, counts[info["unit"]] - info["part"] * size)
            if info["count"] != want:  # a reader must give every sample it counted
                raise JobFailed(f"{paths[info['unit']]}: expected {want} rows in part "
                                f"{info['part']} (what discover counted), got {info['count']} "
                                f"from its reader; the input changed or lost samples (shard "
                                f"{name} is not listed); fix the input and run again with "
                                f"--overwrite")
            manifest["shards"][name] = info
            written += 1
            # at most once per _RECORD_EVERY_S: a job of 10,000 shards must not rewrite its
            # manifest 10,000 times; a kill loses at most that much (redone on --resume)
            if time.monotonic() - last >= _RECORD_EVERY_S:
                record()
                last = time.monotonic()
    except BaseException:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # terminates local workers before the tmp files are removed
        _remove_tmp(output)
        try:
            record()  # every shard finished so far (Ctrl-C keeps them)
        except OSError:
            pass  # the first error is the one to report
        raise
    finally:
        bar.close()
    # complete: every shard written, and no part of an input that could not be read
    damaged = _damaged(manifest, paths)
    manifest["complete"] = not damaged
    manifest["summary"] = _summary(manifest, run_images, run_tokens, written,
                                   time.perf_counter() - t_start, first, write_s, process_s,
                                   damaged)
    record()
    return manifest["summary"]
