"""The Ray engine of ``vlmprep run --engine ray`` (``pip install vlmprep[ray]``; public as
``vlmprep.integrations.ray.run_ray``): the job's work items over a Ray Data actor pool, each
actor calling ``work.process_item`` (the local engine's own step: same reader, rows and
writer), so the shards are byte-identical to the local engine's.
"""
from __future__ import annotations

import os
import pickle
from collections.abc import Iterator, Sequence
from typing import Any

try:
    import ray
    import ray.data
except ImportError as _e:  # the extra is optional; say how to get it
    raise ImportError(f"vlmprep.integrations.ray: expected the ray package (Ray Data), got "
                      f"ImportError: {_e}; fix: pip install vlmprep[ray]") from _e

import numpy as np

from ..config import JobConfig, job_config
from ..sources import Unit
from ..work import JobFailed, process_item, worker_threads
from .ray_stages import object_array

__all__ = ["run_ray"]


class _ShardWorker:
    """One Ray actor: builds the job's Processor once, then does work items (unit, part) with
    the local engine's own function (same reader, rows, writer: byte-identical shards)."""

    def __init__(self, config: dict, work_items: list, output: str, workers: int):
        worker_threads(workers)  # as the local engine's processes: actors share the cores
        self.config = job_config(config)
        self.items = work_items
        self.output = output
        self.proc = self.config.processor()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = []
        for k in batch["item"]:
            unit, part = self.items[int(k)]
            try:
                info = process_item(self.proc, unit, part, self.output, self.config)
            except Exception as e:  # not an image's (process_samples never raises for one)
                raise _ItemFailed(f"{unit.name} part {part}: {type(e).__name__}: {e}") from e
            results.append(pickle.dumps(info))  # our own actor's value, back to our driver
        return {"item": np.asarray(batch["item"]), "result": object_array(results)}


class _ItemFailed(RuntimeError):
    """A work item failed in an actor for a cause that is not an image's (names the item)."""


def _cause(e: BaseException) -> str:
    """Our actor's message out of Ray's wrapping. Ray Data re-raises a UDF's error as a
    UserCodeException that carries the remote traceback as text only, so the line our
    ``_ItemFailed`` printed is looked up there; else the first line of ``e``."""
    mark = f"{_ItemFailed.__module__}.{_ItemFailed.__qualname__}: "
    x: BaseException | None = e
    seen: set[int] = set()
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        for line in str(x).splitlines():
            if line.startswith(mark):
                return line[len(mark):]
        x = x.__cause__
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _check_resources(workers: int, num_gpus: float) -> None:
    """Refuse a pool the cluster cannot place (Ray would wait for it forever)."""
    have = ray.cluster_resources()
    need = {"CPU": float(workers), "GPU": workers * num_gpus}
    for name, n in need.items():
        if n > have.get(name, 0.0) + 1e-9:
            raise ValueError(f"run_ray: expected a Ray cluster with {n:g} {name} for {workers} "
                             f"actor(s) (1 CPU and {num_gpus:g} GPU each), got "
                             f"{have.get(name, 0.0):g}; fix: fewer --workers, a smaller "
                             f"--gpus-per-worker (num_gpus; --device cpu without GPUs), or more "
                             f"nodes (ray start --address=HEAD:6379)")


def run_ray(work_items: Sequence[tuple[Unit, int]], output: str | os.PathLike, config: Any, *,
            workers: int = 1, num_gpus: float | None = None) -> Iterator[Any]:
    """Do ``work_items`` ((unit, part) pairs) on a Ray actor pool; yield each item's result.

    Each actor (``workers`` of them, ``ray.data.ActorPoolStrategy(size=workers)``, 1 CPU and
    ``num_gpus`` GPU each; None: 1 on a cuda device, else 0) builds the job's Processor once and
    runs ``vlmprep.batch.work.process_item`` per item: the local engine's reader, rows and shard
    writer, so names and bytes are the local engine's. Results come in completion order; the
    caller (``vlmprep.batch.run.run``) keeps the manifest, resume included. When Ray is not
    initialised, this connects to ``RAY_ADDRESS`` (``"auto"``: the cluster ``ray start`` runs on
    this machine) or, without it, starts a fresh local Ray, and disconnects (or stops it) after.
    On several nodes ``output`` and the inputs must be on storage every node sees. A work item
    that fails for a cause not an image's raises ``vlmprep.batch.work.JobFailed``.
    """
    cfg = job_config(config)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"run_ray: workers: expected an int >= 1 (actors), got {workers!r}")
    gpus = (1.0 if cfg.device.startswith("cuda") else 0.0) if num_gpus is None else float(num_gpus)
    if not gpus >= 0:
        raise ValueError(f"run_ray: num_gpus: expected a number >= 0 (per actor), got {num_gpus!r}")
    items = list(work_items)
    return _run(items, os.fspath(output), cfg, min(workers, max(len(items), 1)), gpus)


def _run(items: list, output: str, cfg: JobConfig, workers: int, gpus: float) -> Iterator[Any]:
    if not items:
        return
    started = not ray.is_initialized()
    if started:
        # RAY_ADDRESS joins a cluster ("auto": the one `ray start` runs on this machine); else a
        # fresh local Ray of our own: a bare ray.init() may join a dead leftover and hang
        ray.init(address=os.environ.get("RAY_ADDRESS") or "local")
    ctx = ray.data.DataContext.get_current()
    bars = ctx.enable_progress_bars
    ctx.enable_progress_bars = False  # `vlmprep run` draws its own bar
    try:
        _check_resources(workers, gpus)
        # one block per item: each reaches an idle actor on its own
        todo = ray.data.from_items([{"item": i} for i in range(len(items))],
                                   override_num_blocks=len(items))
        ds = todo.map_batches(_ShardWorker, batch_size=1, batch_format="numpy",
                            fn_constructor_kwargs={"config": cfg.to_json(), "work_items": items,
                                                   "output": output, "workers": workers},
                            compute=ray.data.ActorPoolStrategy(size=workers),
                            num_cpus=1, num_gpus=gpus or None)
        rows = iter(ds.iter_rows())
        while True:
            try:
                row = next(rows)
            except StopIteration:
                break
            except Exception as e:  # a failed actor task: Ray wraps the cause in its own errors
                raise JobFailed(f"a Ray actor failed (not an image's fault; the manifest lists the "
                                f"shards done: fix the cause and run again with --resume): "
                                f"{_cause(e)}") from e
            yield pickle.loads(row["result"])
    finally:
        ctx.enable_progress_bars = bars
        if started:
            ray.shutdown()
