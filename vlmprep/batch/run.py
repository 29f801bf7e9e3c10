"""``run``: a batch job, inputs -> packed shards + manifest, locally or on Ray (``vlmprep run``).

The job in one place::

    units  = sources.discover(inputs)                    # input shards: folders, tars, parquet, lists
    items  = [(unit, part) for part in range(ceil(unit.count() / shard_size))]   # minus done ones
    each item -> work.process_item(): samples [part*shard_size, (part+1)*shard_size) of the unit
                 -> rows.process_samples -> shards.write_shard(shard_name(unit.name, part, fmt))
    after each shard the parent records it in manifest.json (atomic replace)

``run`` in named steps: ``_check_args``, ``discover``, ``_plan_job`` (counts, the output folder,
the first manifest), ``_engine_stream`` (the engine's results), ``_collect`` (each shard into the
manifest), ``_finish`` (the summary).

Engines (``vlmprep.batch.engines``): ``"local"`` runs the items in ``workers`` processes (spawn;
each builds its Processor once from the JobConfig and uses ``usable_cpus // workers`` threads and
1/workers of this process's memory budget, ``vlmprep.budget``; ``workers=1`` runs in this
process); ``"ray"`` hands the same items to ``engines.ray.run_ray`` (public as
``vlmprep.integrations.ray.run_ray``), whose actors call the same ``work.process_item``, so both
engines write byte-identical shards.

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

import math
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, cast

from .. import __version__
from .. import progress as progress_mod
from ..processor import Processor
from .config import JobConfig
from .engines.local import in_process, local_pool
from .shards import MANIFEST, job_units, read_manifest, remove_job_shards, shard_name, write_manifest
from .sources import Unit, discover
from .work import JobFailed, WorkItem, process_item, shard_meta, worker_threads

if TYPE_CHECKING:
    from ..ops import decode

# process_item, shard_meta, worker_threads and JobFailed live in .work (every engine's step);
# they stay importable from here, as before
__all__ = ["run", "process_item", "shard_meta", "worker_threads", "JobFailed", "ENGINES"]

ENGINES = ("local", "ray")
_TMP = ".tmp"
_RECORD_EVERY_S = 1.0  # the manifest is rewritten at most this often while shards complete


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
    if os.path.exists(output) and not os.path.isdir(output):
        raise ValueError(f"output: expected a folder (new or a vlmprep output), got the file "
                         f"{output!r}; pick another --output")
    os.makedirs(output, exist_ok=True)
    entries = [e for e in os.listdir(output) if not e.startswith(".")]
    if overwrite and os.path.lexists(os.path.join(output, MANIFEST)):
        # the old job's shards, listed or renamed but not yet listed when it died: the files
        # named as the writer names a shard of a unit the old manifest names. One listing of
        # the folder; nothing else of a (possibly damaged) manifest is trusted.
        if os.path.isdir(os.path.join(output, MANIFEST)):
            raise ValueError(f"output: expected {MANIFEST} in {output!r} to be a file, got "
                             f"a folder; remove it, or pick another --output")
        remove_job_shards(output, job_units(output))
        _remove_tmp(output)
        os.remove(os.path.join(output, MANIFEST))
        return None
    manifest = read_manifest(output)  # checked (shards.check_manifest) before any use
    if manifest is None:
        if entries and not overwrite:
            shown = ", ".join(sorted(entries)[:3]) + (", ..." if len(entries) > 3 else "")
            raise ValueError(f"output: expected a new or empty folder, or a vlmprep output (with "
                             f"{MANIFEST}), got {output!r} holding {len(entries)} other "
                             f"entries ({shown}); pick an empty --output, or pass --overwrite "
                             f"to write shards into it (files of other names are kept)")
        return None
    done = len(manifest.get("shards", {}))
    state = "complete" if manifest.get("complete") else "incomplete"
    if not resume:
        raise ValueError(f"output: expected a new or empty folder, got {output!r} holding a "
                         f"vlmprep output ({state}, {done} shards); pass --resume to finish it, "
                         f"--overwrite to redo it, or pick another --output")
    _check_resume(manifest, output, config, units_now)
    _remove_tmp(output)
    return manifest


def _check_resume(manifest: dict, output: str, config: JobConfig,
                  units_now: dict[str, dict]) -> None:
    """--resume: the manifest's job must have this config and these inputs (unit counts)."""
    try:
        old = JobConfig.from_json(manifest["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"--resume: expected {MANIFEST} of a vlmprep run in {output!r}, got one "
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
        "images": images, "videos": sum(i.get("videos", 0) for i in infos),
        "processed": sum(i["ok"] for i in infos),
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
    parquet page) and damaged_inputs ({input path: those rows}), images (samples: images and
    videos), videos (the video samples among them), processed (ok rows),
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
    t_start = time.perf_counter()
    _check_args(inputs, config, workers, engine, gpus_per_worker, resume, overwrite)
    output = os.fspath(output)
    # the parent's Processor: fails early (backend, checkpoint), records the pipeline, and its
    # read cap bounds every sample the readers return
    proc = config.processor()
    videos = proc.video_options is not None
    if not videos and (config.fps is not None or config.num_frames is not None):
        raise ValueError(f"config: expected a family with a video rule for fps / num_frames, got "
                         f"{proc.pipeline.name!r}, which processes images only; drop --fps / "
                         f"--num-frames, or pick a video family (vlmprep.presets.video_families())")
    # a family without a video rule reads exactly the images it always read (no video files)
    units = discover([os.fspath(i) for i in inputs], glob=glob, column=column,
                     id_column=id_column, input_root=config.input_root, videos=videos,
                     max_bytes=cast("decode", proc.pipeline["decode"]).max_source_bytes)
    job = _plan_job(units, inputs, output, config, proc, resume, overwrite)
    tally = _Tally(job.todo(), progress, t_start)
    stream = _engine_stream(engine, job, proc, workers, gpus_per_worker, tally.on_images)
    try:
        _collect(stream, job, tally, engine)
    finally:
        tally.bar.close()
    return _finish(job, tally)


def _check_args(inputs: Sequence[str], config: JobConfig, workers: int, engine: str,
                gpus_per_worker: float | None, resume: bool, overwrite: bool) -> None:
    """run()'s arguments, checked before anything is read or written."""
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


@dataclass
class _Job:
    """A job's plan and the manifest the run keeps on disk."""
    output: str
    config: JobConfig
    counts: dict[str, int]               # unit name -> samples (what discover counted)
    paths: dict[str, str]                # unit name -> input path
    manifest: dict[str, Any]
    items: list[WorkItem]                # the shards still to write: (unit, part)
    order: dict[str, tuple[int, int]]    # shard name -> (unit index, part): the job order

    def expected(self, unit_name: str, part: int) -> int:
        """The rows of a part: ``shard_size``, fewer in a unit's last part."""
        size = self.config.shard_size
        return min(size, self.counts[unit_name] - part * size)

    def todo(self) -> int:
        """The samples of the shards still to write."""
        return sum(self.expected(u.name, p) for u, p in self.items)

    def record(self) -> None:
        """The manifest on disk := the shards done, in job order (unit, part)."""
        self.manifest["shards"] = dict(sorted(self.manifest["shards"].items(),
                                              key=lambda kv: self.order.get(kv[0], (len(self.order), 0))))
        write_manifest(self.output, self.manifest)


def _plan_job(units: list[Unit], inputs: Sequence[str], output: str, config: JobConfig,
              proc: Processor, resume: bool, overwrite: bool) -> _Job:
    """Count the units, check the output folder against the flags (``_prepare_output``), keep
    the shards a resumed job has done, and write the job's first manifest."""
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
             if shard_name(u.name, p, config.format) not in kept]
    order = {shard_name(u.name, p, config.format): (i, p)
             for i, u in enumerate(units) for p in range(units_now[u.name]["parts"])}
    write_manifest(output, manifest)
    return _Job(output, config, counts, paths, manifest, items, order)


class _Tally:
    """This run's images, tokens, shards and timings, and the progress bar they move."""

    def __init__(self, total: int, progress: bool | None, t_start: float) -> None:
        self.bar = progress_mod.bar(total=total, desc="vlmprep run", unit="img", enabled=progress)
        self.t_start = t_start
        self.images = self.tokens = self.written = 0
        self.write_s = self.process_s = 0.0
        self.first: float | None = None  # seconds from the start to the first image done
        self.t0 = time.perf_counter()

    def on_images(self, n: int, tokens: int) -> None:
        if self.first is None:
            self.first = time.perf_counter() - self.t_start
        self.images += n
        self.tokens += tokens
        self.bar.update(n)
        dt = time.perf_counter() - self.t0
        if dt > 0:
            self.bar.set_postfix_str(f"{self.tokens / dt:,.0f} tok/s", refresh=False)


def _engine_stream(engine: str, job: _Job, proc: Processor, workers: int,
                   gpus_per_worker: float | None,
                   on_images: Callable[[int, int], None]) -> Iterator[dict]:
    """Each written shard's info, in completion order, from the engine doing ``job.items``."""
    if not job.items:
        return iter(())
    if engine == "ray":
        from .engines.ray import run_ray  # deferred: ray is an optional extra, and heavy
        return run_ray(job.items, job.output, job.config, workers=workers,
                       num_gpus=gpus_per_worker)
    if workers == 1:
        return in_process(job.items, job.output, job.config, proc, on_images)
    return local_pool(job.items, job.output, job.config, workers, on_images)


def _collect(stream: Iterator[dict], job: _Job, tally: _Tally, engine: str) -> None:
    """Record each shard the engine finishes in the manifest (on disk at most once per
    ``_RECORD_EVERY_S``). On any exception or Ctrl-C: stop the engine, remove ``*.tmp``, record
    the shards done so far, re-raise."""
    last = time.monotonic()
    try:
        for info in stream:
            _add_shard(info, job, tally, engine)
            # at most once per _RECORD_EVERY_S: a job of 10,000 shards must not rewrite its
            # manifest 10,000 times; a kill loses at most that much (redone on --resume)
            if time.monotonic() - last >= _RECORD_EVERY_S:
                job.record()
                last = time.monotonic()
    except BaseException:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # terminates local workers before the tmp files are removed
        _remove_tmp(job.output)
        try:
            job.record()  # every shard finished so far (Ctrl-C keeps them)
        except OSError:
            pass  # the first error is the one to report
        raise


def _add_shard(info: dict, job: _Job, tally: _Tally, engine: str) -> None:
    """One finished shard's info into the manifest (in memory) and the tally; a part with
    fewer or more rows than discover counted is a JobFailed (the shard is not listed)."""
    timing = info.pop("timing", {})
    tally.write_s += timing.get("write_s", 0.0)
    tally.process_s += timing.get("process_s", 0.0)
    if engine == "ray":  # shard granularity: the actors report nothing in between
        tally.on_images(info["count"], info["tokens"])
    name = info.pop("name")
    want = job.expected(info["unit"], info["part"])
    read = info.get("samples", info["count"])  # a PDF sample is several rows: count samples
    if read != want:  # a reader must give every sample it counted
        raise JobFailed(f"{job.paths[info['unit']]}: expected {want} samples in part "
                        f"{info['part']} (what discover counted), got {read} "
                        f"from its reader; the input changed or lost samples (shard "
                        f"{name} is not listed); fix the input and run again with "
                        f"--overwrite")
    job.manifest["shards"][name] = info
    tally.written += 1


def _finish(job: _Job, tally: _Tally) -> dict:
    """The job's end: complete when every shard is written and no part of an input could not be
    read; the summary into the manifest, recorded."""
    damaged = _damaged(job.manifest, job.paths)
    job.manifest["complete"] = not damaged
    job.manifest["summary"] = _summary(job.manifest, tally.images, tally.tokens, tally.written,
                                       time.perf_counter() - tally.t_start, tally.first,
                                       tally.write_s, tally.process_s, damaged)
    job.record()
    return job.manifest["summary"]
