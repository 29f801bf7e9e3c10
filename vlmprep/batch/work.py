"""The one per-item step of a batch job, shared by every engine: ``process_item(proc, unit,
part, ...)`` reads samples ``[part*shard_size, (part+1)*shard_size)`` of a unit, makes their rows
(``rows.process_samples``) and writes their shard (``shards.write_shard``). The local engine's
worker processes (``engines.local``) and the Ray actors (``engines.ray``) both call it, so
both write byte-identical shards.

Also here: ``worker_threads`` (a worker's share of the cores), ``shard_meta`` (a shard's
metadata) and ``JobFailed`` (a work item failed for a cause that is not an image's).
"""
from __future__ import annotations

import json
import re
import time
from typing import Any, Callable

from .. import __version__, kernels
from ..kernels.threads import get_num_threads, usable_cpus
from ..processor import Processor
from .config import JobConfig
from .rows import process_samples
from .shards import shard_name, write_shard
from .sources import Unit

__all__ = ["WorkItem", "process_item", "shard_meta", "worker_threads", "JobFailed"]

WorkItem = tuple[Unit, int]


class JobFailed(RuntimeError):
    """A worker failed for a cause that is not an image's (the job stops; --resume continues)."""


def shard_meta(config: JobConfig, proc: Processor, unit_name: str, part: int) -> dict[str, str]:
    """The shard's key-value metadata (str -> str): the same bytes for the same job and item
    (no time, host or path inside), so a rerun and every engine write identical shards."""
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

    Video samples are sampled with ``config.fps`` / ``config.num_frames`` (None: the
    Processor's video options); PDF samples are read with ``config.document_options()``.
    Returns write_shard's info plus ``unit``, ``part``, ``samples`` (samples read: ``count``
    is rows, one per page of a PDF sample),
    ``reasons`` ({short reason: count} of the error rows), ``damaged`` (error rows for parts
    of the input that could not be read: ``Sample.damaged``; a job with any is not complete)
    and ``timing`` ({"process_s", "write_s"}, not stored in the manifest).
    ``on_images(images, tokens)`` is called after each small group of images (progress)."""
    start = part * config.shard_size
    group = max(1, get_num_threads())  # images per Processor call: keeps the threads busy
    t0 = time.perf_counter()
    rows: list[dict] = []
    pending: list[Any] = []
    damaged = 0

    def flush() -> None:
        new = process_samples(proc, pending, fps=config.fps, num_frames=config.num_frames,
                              document=config.document_options())
        rows.extend(new)
        if on_images is not None:
            on_images(len(new), sum(r["num_tokens"] for r in new))
        pending.clear()

    read = 0
    for s in unit.samples(start, start + config.shard_size):
        read += 1
        damaged += bool(getattr(s, "damaged", False))
        pending.append(s)
        if len(pending) >= group:
            flush()
    if pending:
        flush()
    t1 = time.perf_counter()
    name = shard_name(unit.name, part, config.format)
    info = dict(write_shard(output, name, config.format, rows,
                            shard_meta(config, proc, unit.name, part)))
    t2 = time.perf_counter()
    reasons: dict[str, int] = {}
    for r in rows:
        if r["status"] != "ok":
            key = _reason_key(r["error"])
            reasons[key] = reasons.get(key, 0) + 1
    # samples: what discover counted (a PDF sample is one row per page: count is the rows)
    info.update(unit=unit.name, part=part, samples=read, reasons=reasons, damaged=damaged,
                timing={"process_s": t1 - t0, "write_s": t2 - t1})
    return info


def worker_threads(workers: int) -> int:
    """Give this process ``max(1, usable_cpus // workers)`` threads for vlmprep's kernels, torch
    and OpenCV (so ``workers`` processes side by side do not oversubscribe the cores); returns
    the count. For a worker process or a Ray actor, not the caller's process."""
    n = max(1, usable_cpus() // max(1, workers))
    kernels.set_num_threads(n)
    try:
        import torch  # deferred: heavy, and set only in a worker process (not the caller's)
        torch.set_num_threads(n)
    except ImportError:
        pass
    try:
        import cv2  # deferred: an optional backend's library, heavy
        cv2.setNumThreads(n)
    except ImportError:
        pass
    return n
