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
- ``process_wall_s``: the subprocess's wall time, interpreter start included.

Usage::

    python bench/batch_run.py [--images 48] [--shard-size 8] [--dtype bfloat16]
        [--formats parquet,safetensors] [--no-ray] [--json bench/results/batch_run.json]

Output shards are deleted after each run (a 1080p qwen2-vl image is ~25 MB in bfloat16).
"""
from __future__ import annotations

import argparse
import json
import os
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
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=envv, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**row, "error": f"timed out after {timeout} s"}
    wall = time.perf_counter() - t
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
            "write_fraction": s["write_fraction"], "process_wall_s": round(wall, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=48, help="1080p JPEGs (default: 48)")
    ap.add_argument("--shard-size", type=int, default=8, help="images per shard (default: 8)")
    ap.add_argument("--dtype", default="bfloat16", help="output dtype (default: bfloat16)")
    ap.add_argument("--formats", default="parquet,safetensors",
                    help="shard formats of the local 2-worker run (default: both)")
    ap.add_argument("--no-ray", action="store_true", help="leave out the Ray engine")
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
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cols = ["engine", "workers", "format", "images", "wall_s", "startup_s", "images_per_s",
            "steady_images_per_s", "write_fraction"]
    print("  ".join(f"{c:>19}" for c in cols))
    for r in rows:
        print("  ".join(f"{r.get(c) if r.get(c) is not None else '-':>19}" for c in cols)
              + (f"  error: {r['error'][:200]}" if "error" in r else ""))
    result = {"preset": "qwen2-vl", "dtype": args.dtype, "images": args.images,
              "image_size_wh": [1920, 1080], "jpeg_bytes": jpeg_bytes,
              "shard_size": args.shard_size, "machine": env.machine(),
              "versions": env.versions(), "load_average_after": list(os.getloadavg()),
              "runs": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
