"""Check every GPU path against the CPU reference and time it; print a short table, write JSON.

Paths checked: the compiled normalize_patchify kernel against its CPU twin, with its bandwidth
next to a device copy (bench/gpu_check_kernels.py); the `torch` and `dali` backends on CUDA
(float32, bfloat16, uint8) for every preset (timed at 720p/1080p/4K for qwen2-vl, at 1080p for
the others) against the `reference` backend on CPU, on real-photo mosaics (bench/samples.py). Run by
bench/gpu_check.sh on the GPU machine; `--device cpu` dry-runs the same code here.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from samples import SIZES, encode, mosaic  # noqa: E402

import vlmprep  # noqa: E402


def _levels(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, float]:
    d = (a.cpu().double() - b.cpu().double()).abs().flatten()
    q = float(torch.quantile(d[:: max(1, d.numel() // 1_000_000)], 0.999)) if d.numel() else 0.0
    return float(d.max()), float(d.mean()), q


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default=None)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device; run with --device cpu for a dry run", file=sys.stderr)
        return 2
    images = {k: encode(mosaic(hw, seed=i), "JPEG", quality=90) for i, (k, hw) in
              enumerate(SIZES.items())}
    odd = [encode(mosaic((333, 777), 7), "JPEG", quality=90), encode(mosaic((1010, 1390), 8), "PNG")]
    rows = []
    backends = [b for b in ("torch", "dali") if b in vlmprep.backends.available()]
    # dali: every dtype for the required families, float32 for the rest (one 10-minute call).
    full = {"qwen2-vl", "qwen3-vl", "internvl"}
    for preset, backend, dtype in [(p, b, d) for p in vlmprep.presets.names() for b in backends
                                   for d in ("uint8", "float32", "bfloat16")
                                   if b == "torch" or p in full or d == "float32"]:
        ref_u8 = vlmprep.Processor(preset, backend="reference", dtype="uint8")
        ref_f = vlmprep.Processor(preset, backend="reference")
        proc = vlmprep.Processor(preset, backend=backend, device=args.device, dtype=dtype)
        parity_in = [images["720p"], images["1080p"], *odd]
        got = proc(parity_in)
        want = (ref_u8 if dtype == "uint8" else ref_f)(parity_in)
        mx, mean, p999 = _levels(got.pixel_values.float(), want.pixel_values.float())
        if dtype != "uint8":  # report in uint8 levels
            scale = 255 * max(proc.pipeline.normalize.std)  # the channel that hides least
            mx, mean, p999 = mx * scale, mean * scale, p999 * scale
        # batch invariance: each image alone gives the same rows
        alone = torch.cat([proc([x]).pixel_values for x in parity_in])
        invariant = bool(torch.equal(alone, got.pixel_values))
        # Every size for qwen2-vl (the headline scenario); 1080p for the other presets, so
        # the whole check stays within one 10-minute device call.
        for size in (SIZES if preset == "qwen2-vl" else ["1080p"]):
            batch = [images[size]] * 8
            proc(batch)
            times = []
            for _ in range(args.repeats):
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                proc(batch)
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            t = np.asarray(times)
            rows.append(dict(preset=preset, backend=backend, device=args.device, dtype=dtype,
                             size=size, max_levels=round(mx, 3), mean_levels=round(mean, 4),
                             p999_levels=round(p999, 3), batch_invariant=invariant,
                             images_per_s=round(len(batch) / float(np.median(t)), 2),
                             batch_p50_ms=round(1000 * float(np.median(t)), 2),
                             batch_p99_ms=round(1000 * float(np.percentile(t, 99)), 2)))
    import gpu_check_kernels
    krows, kernels_ok = gpu_check_kernels.check(args.device)
    for r in krows:
        print(f"{r['check']:44s} {r['result']}")
    cols = ["preset", "backend", "dtype", "size", "max_levels", "mean_levels", "p999_levels",
            "batch_invariant", "images_per_s", "batch_p50_ms", "batch_p99_ms"]
    print("  ".join(f"{c:>14s}" for c in cols))
    for r in rows:
        print("  ".join(f"{str(r[c]):>14s}" for c in cols))
    info = {"machine": platform.node(), "device": (torch.cuda.get_device_name(0)
                                                   if args.device.startswith("cuda") else "cpu"),
            "torch": torch.__version__, "vlmprep": vlmprep.__version__, "rows": rows,
            "kernels": krows}
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=2))
    ok = kernels_ok and all(r["max_levels"] <= 3 and r["mean_levels"] <= 0.5 and r["batch_invariant"]
                            for r in rows)
    print("gpu_check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
