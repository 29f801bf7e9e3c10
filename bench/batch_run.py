"""``vlmprep run`` throughput: local engine with 1 and 2 workers against the Ray engine with 2
actors, on the same folder of 1080p JPEGs, and the shard writer's cost against the processing.

The images are 1920x1080 JPEG mosaics of real package photos (scikit-image, matplotlib), each
photo resized (mostly upscaled) into its cell: ``vlmprep.bench.images.synthetic_set``, quality
90. Every configuration runs the real command (``python -m vlmprep run ... --json``) in a fresh
process into a fresh folder, so the figures include what a user waits for: imports, the
Processor, worker or Ray start-up. Reported per configuration:

- ``images_per_s``: images / the command's wall time (the summary's ``wall_s``, in-process),
- ``steady_images_per_s``: images after the first one / (wall_s - startup_s): start-up left out
  (``startup_s`` = until the first image was done; the Ray engine reports per shard, so there
  it also holds the first shard's processing),
- ``write_fraction``: time in ``shards.write_shard`` / time reading and processing the images,
  summed over the shards (the target is under 10%),
- ``process_wall_s``: the subprocess's wall time, interpreter start included,
- in-process, per dtype (float32, bfloat16, uint8) and format: ms per image to read + process
  (one thread) and to write the shard, their ratio (``*_write_fraction``), and the floors that
  bound any writer here (sha256 and plain file-write MB/s),
- ``cpu_s``, ``images_per_cpu_s``: CPU seconds of the command and its worker processes (for Ray:
  what its raylet reaped), a figure other work on a shared machine moves less than the wall
  time.

Usage::

    python bench/batch_run.py [--images 32] [--shard-size 4] [--dtype bfloat16]
        [--formats parquet,safetensors] [--no-ray] [--json bench/results/batch_run.json]

Output shards are deleted after each run (a 1080p qwen2-vl image is ~25 MB in bfloat16).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from vlmprep.bench import env  # noqa: E402
from vlmprep.bench.images import synthetic_set  # noqa: E402


def _images(folder: Path, n: int) -> int:
    """``n`` 1080p JPEG mosaics in ``folder``; returns their total bytes."""
    s = synthetic_set("1080p", n)
    folder.mkdir(parents=True)
    for name, data in zip(s.names, s.items):
        (folder / name).write_bytes(data)
    return sum(len(d) for d in s.items)


def _children_cpu_s() -> float:
    """User + system CPU seconds of the finished child processes (their workers included)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(src: Path, out: Path, engine: str, workers: int, fmt: str, dtype: str,
         shard_size: int, timeout: float) -> dict:
    """One ``vlmprep run`` in a fresh process -> its figures (or ``error``)."""
    cmd = [sys.executable, "-m", "vlmprep", "run", "--preset", "qwen2-vl", "--input", str(src),
           "--output", str(out), "--engine", engine, "--workers", str(workers), "--format", fmt,
           "--dtype", dtype, "--shard-size", str(shard_size), "--json", "--no-progress"]
    # RAY_ADDRESS=local: a fresh local Ray, never a cluster someone else left running here
    envv = dict(os.environ, VLMPREP_PROGRESS="0", RAY_AUTH_MODE="disabled", RAY_ADDRESS="local")
    row: dict = {"engine": engine, "workers": workers, "format": fmt,
                 "command": " ".join(["vlmprep", *cmd[3:]])}
    t = time.perf_counter()
    cpu0 = _children_cpu_s()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=envv, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**row, "error": f"timed out after {timeout} s"}
    wall = time.perf_counter() - t
    cpu = _children_cpu_s() - cpu0
    if r.returncode != 0:
        return {**row, "error": f"exit {r.returncode}: {r.stderr.strip()[-500:]}"}
    s = json.loads(r.stdout)
    steady = (s["run_images"] - 1) / (s["wall_s"] - s["startup_s"]) \
        if s["startup_s"] is not None and s["wall_s"] > s["startup_s"] else None
    return {**row, "images": s["run_images"],
            "shards": s["run_shards"], "bytes": s["bytes"], "tokens": s["tokens"],
            "wall_s": s["wall_s"], "startup_s": s["startup_s"],
            "images_per_s": s["images_per_s"],
            "steady_images_per_s": None if steady is None else round(steady, 2),
            "write_fraction": s["write_fraction"], "process_wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "images_per_cpu_s": round(s["run_images"] / cpu, 2)}


def _floors(folder: Path, mb: int = 64) -> dict:
    """What bounds any shard writer here: sha256 and a plain file write, in MB/s (best of 3)."""
    import hashlib
    data = os.urandom(mb << 20)
    best_h = best_w = float("inf")
    path = folder / "floor.bin"
    for _ in range(3):
        t = time.perf_counter()
        hashlib.sha256(data).digest()
        best_h = min(best_h, time.perf_counter() - t)
        t = time.perf_counter()
        with open(path, "wb") as f:
            f.write(data)
        best_w = min(best_w, time.perf_counter() - t)
        path.unlink()
    return {"sha256_mb_per_s": round(mb * 1.048576 / best_h), "write_mb_per_s": round(mb * 1.048576 / best_w)}


def _writer_fractions(src: Path, folder: Path, n: int, dtypes: list[str]) -> list[dict]:
    """In this process, one thread (as each of 2 workers on 2 cores): per dtype, read and
    process ``n`` images as a worker does (``rows.process_samples``), then write them as one
    shard in each format (``shards.write_shard``); after one untimed warm-up of each step."""
    from vlmprep.batch import rows as rows_mod
    from vlmprep.batch import shards
    from vlmprep.batch.config import JobConfig
    from vlmprep.batch.run import worker_threads
    from vlmprep.batch.sources import discover
    worker_threads(2)
    (unit,) = discover([str(src)])
    out = []
    for dtype in dtypes:
        proc = JobConfig(preset="qwen2-vl", dtype=dtype).processor()
        samples = list(unit.samples(0, n))
        warm = rows_mod.process_samples(proc, samples[:1])
        t = time.perf_counter()
        rows = []
        for s in samples:  # one image per call, as a 1-thread worker does
            rows += rows_mod.process_samples(proc, [s])
        process_s = time.perf_counter() - t
        row = {"dtype": dtype, "images": n, "mb_per_image": round(
            sum(len(r["pixel_values"]) for r in rows) / n / 1e6, 1),
            "process_ms_per_image": round(process_s / n * 1e3, 1)}
        for fmt in shards.FORMATS:
            shards.write_shard(folder, f"warm-00000.{fmt}", fmt, warm, {})
            t = time.perf_counter()
            shards.write_shard(folder, f"w-00000.{fmt}", fmt, rows, {})
            write_s = time.perf_counter() - t
            row[f"{fmt}_write_ms_per_image"] = round(write_s / n * 1e3, 1)
            row[f"{fmt}_write_fraction"] = round(write_s / process_s, 3)
            for name in (f"warm-00000.{fmt}", f"w-00000.{fmt}"):
                (folder / name).unlink()
        out.append(row)
        del rows
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=32, help="1080p JPEGs (default: 32)")
    ap.add_argument("--shard-size", type=int, default=4, help="images per shard (default: 4)")
    ap.add_argument("--dtype", default="bfloat16", help="output dtype (default: bfloat16)")
    ap.add_argument("--formats", default="parquet,safetensors",
                    help="shard formats of the local 2-worker run (default: both)")
    ap.add_argument("--no-ray", action="store_true", help="leave out the Ray engine")
    ap.add_argument("--writer-images", type=int, default=6,
                    help="images of the in-process writer measurement (default: 6; 0: skip)")
    ap.add_argument("--writer-dtypes", default="float32,bfloat16,uint8",
                    help="dtypes of the writer measurement (default: all three)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run (default: 300)")
    ap.add_argument("--json", default=None, metavar="FILE", help="write the results here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vlmprep-batch-bench-"))
    try:
        src = work / "jpegs"
        jpeg_bytes = _images(src, args.images)
        fmts = [f.strip() for f in args.formats.split(",") if f.strip()]
        plan = [("local", 1, fmts[0]), ("local", 2, fmts[0])]
        plan += [("local", 2, f) for f in fmts[1:]]
        if not args.no_ray:
            plan.append(("ray", 2, fmts[0]))
        rows = []
        for k, (engine, workers, fmt) in enumerate(plan):
            out = work / f"out{k}"
            print(f"{engine} x{workers} {fmt} ...", file=sys.stderr, flush=True)
            rows.append(_run(src, out, engine, workers, fmt, args.dtype, args.shard_size,
                             args.timeout))
            shutil.rmtree(out, ignore_errors=True)
        writer, floors = [], {}
        if args.writer_images:
            print("writer fractions ...", file=sys.stderr, flush=True)
            (work / "w").mkdir()
            writer = _writer_fractions(src, work / "w", min(args.writer_images, args.images),
                                       [d for d in args.writer_dtypes.split(",") if d])
            floors = _floors(work / "w")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cols = ["engine", "workers", "format", "images", "wall_s", "startup_s", "images_per_s",
            "steady_images_per_s", "write_fraction", "images_per_cpu_s"]
    print("  ".join(f"{c:>12}" for c in cols))
    for r in rows:
        print("  ".join(f"{r.get(c) if r.get(c) is not None else '-':>12}" for c in cols)
              + (f"  error: {r['error'][:200]}" if "error" in r else ""))
    if writer:
        wcols = ["dtype", "mb_per_image", "process_ms_per_image", "parquet_write_ms_per_image",
                 "parquet_write_fraction", "safetensors_write_ms_per_image",
                 "safetensors_write_fraction"]
        print()
        print("  ".join(f"{c:>14.14}" for c in wcols))
        for r in writer:
            print("  ".join(f"{r.get(c, '-'):>14}" for c in wcols))
        print(f"floors: sha256 {floors['sha256_mb_per_s']} MB/s, file write "
              f"{floors['write_mb_per_s']} MB/s")
    result = {"preset": "qwen2-vl", "dtype": args.dtype, "images": args.images,
              "image_size_wh": [1920, 1080], "jpeg_bytes": jpeg_bytes,
              "shard_size": args.shard_size, "machine": env.machine(),
              "versions": env.versions(), "load_average_after": list(os.getloadavg()),
              "runs": rows, "writer": writer, "floors": floors}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
