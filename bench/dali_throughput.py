"""Throughput of backend "dali" next to "reference" and "torch" on the same encoded images.

    .venv/bin/python bench/dali_throughput.py [--device cpu|cuda] [--repeat 3] [--json FILE]

The images are the demo's sample set (bench/samples.py: photo mosaics at 720p and 1080p in
JPEG, PNG and WebP, plus odd sizes), held in memory as encoded bytes, so every backend pays the
same probe + decode + resize + normalize + patchify + pack and no file reads. One Processor call
per pass over the set (a batch of all of them); the first call is a warm-up (DALI builds its
graphs there). Reported: the median pass, images/s, ms per image, and the dali backend's pixel
error against the reference on these images (uint8 levels: max / mean / 99.9th percentile).

Threads: every backend gets ``vlmprep.kernels.get_num_threads()`` (``VLMPREP_NUM_THREADS``;
the usable cores by default); the machine's load average is recorded, since a shared box
moves wall-clock figures by tens of percent between runs. The compiled kernels (csrc/: the
Pillow-exact CPU resize the reference and torch backends use, the fused normalize + patchify the
dali backend uses as a DALI plugin) are used when built; ``VLMPREP_DISABLE_KERNELS=1`` measures
the pure paths.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from samples import write_samples  # noqa: E402

import vlmprep  # noqa: E402
import vlmprep.kernels  # noqa: E402
from vlmprep.kernels import get_num_threads  # noqa: E402

PRESETS = ("qwen2-vl", "internvl")
BACKENDS = ("reference", "torch", "dali")


def _levels(a: torch.Tensor, b: torch.Tensor) -> dict:
    d = (a.double() - b.double()).abs().flatten()
    k = max(1, int(0.999 * d.numel() + 0.999))
    return {"max": float(d.max()), "mean": float(d.mean()),
            "p99_9": float(torch.kthvalue(d, k).values)}


def _time(proc: vlmprep.Processor, images: list[bytes], repeat: int) -> tuple[list[float], object]:
    batch = proc(images)  # warm-up (graph build, caches)
    if proc.device.startswith("cuda"):
        torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        batch = proc(images)
        if proc.device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times, batch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json", default=None, help="output file (default: bench/results/"
                    "dali_throughput_<device><cores>.json)")
    args = ap.parse_args(argv)

    here = Path(__file__).resolve().parent
    paths = write_samples(here / "out" / "samples")
    images = [p.read_bytes() for p in paths]
    threads = get_num_threads()
    load0 = os.getloadavg()
    rows = []
    print(f"{len(images)} images ({', '.join(p.name for p in paths)}), device {args.device}, "
          f"{threads} threads, dtype {args.dtype}, median of {args.repeat}")
    print(f"{'preset':10s} {'backend':10s} {'images/s':>9s} {'ms/image':>9s} {'vs reference':>28s}")
    for preset in PRESETS:
        ref_u8 = vlmprep.Processor(preset, backend="reference", dtype="uint8")(images).pixel_values
        for backend in BACKENDS:
            if backend == "reference" and args.device != "cpu":
                continue
            proc = vlmprep.Processor(preset, backend=backend, device=args.device, dtype=args.dtype)
            times, batch = _time(proc, images, args.repeat)
            t = statistics.median(times)
            u8 = vlmprep.Processor(preset, backend=backend, device=args.device,
                                   dtype="uint8")(images).pixel_values.cpu()
            lv = _levels(u8, ref_u8)
            row = {"preset": preset, "backend": backend, "device": args.device,
                   "dtype": args.dtype, "images": len(images), "batch": len(images),
                   "seconds": times, "median_s": t, "images_per_s": len(images) / t,
                   "ms_per_image": 1000 * t / len(images), "tokens": sum(batch.num_tokens),
                   "levels_vs_reference": lv}
            rows.append(row)
            print(f"{preset:10s} {backend:10s} {row['images_per_s']:9.2f} "
                  f"{row['ms_per_image']:9.1f}   max {lv['max']:.0f} mean {lv['mean']:.4f} "
                  f"p99.9 {lv['p99_9']:.0f}")
    out = {
        "what": "images/s of Processor(preset, backend)(batch) on the same encoded images",
        "machine": {"platform": platform.platform(), "cpu": platform.processor(),
                    "cores_usable": len(os.sched_getaffinity(0)), "threads": threads,
                    "loadavg_before": load0, "loadavg_after": os.getloadavg(),
                    "note": "a shared machine: other processes ran at the same time"},
        "kernels": {"torch_ops": vlmprep.kernels.why_unavailable() or "loaded",
                    "dali_plugin": "loaded" if vlmprep.kernels.dali_plugin() else "not loaded"},
        "versions": {"vlmprep": getattr(vlmprep, "__version__", "dev"), "torch": torch.__version__,
                     "dali": _dali_version(), "pillow": _pil_version()},
        "images": [{"name": p.name, "bytes": len(b)} for p, b in zip(paths, images)],
        "rows": rows,
    }
    dest = Path(args.json) if args.json else (
        here / "results" / f"dali_throughput_{args.device.split(':')[0]}{len(os.sched_getaffinity(0))}.json")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {dest}")
    return 0


def _dali_version() -> str:
    try:
        import nvidia.dali
        return nvidia.dali.__version__
    except ImportError:
        return "not installed"


def _pil_version() -> str:
    import PIL
    return PIL.__version__


if __name__ == "__main__":
    sys.exit(main())
