"""`make demo`: build sample images from package photos, plan them, process them with every
available backend, and print a table of images/s and tokens."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from samples import write_samples  # noqa: E402

import vlmprep  # noqa: E402


def main() -> int:
    out = Path(__file__).resolve().parent / "out" / "samples"
    paths = write_samples(out)
    print(f"{len(paths)} sample images in {out}")
    for preset in vlmprep.presets.names():
        proc = vlmprep.Processor(preset, backend="reference")
        plan = proc.plan(paths)
        print(f"\n== {preset}: plan from headers ({plan.total_tokens} tokens in all)")
        print(f"{'image':28s} {'source HxW':>11s} {'resized HxW':>12s} {'tiles':>5s} "
              f"{'grid_thw':>15s} {'tokens':>7s}")
        for p, path in zip(plan.images, paths):
            print(f"{path.name:28s} {'%dx%d' % p.source_hw:>11s} {'%dx%d' % p.resized_hw:>12s} "
                  f"{len(p.tiles):>5d} {str(p.grid_thw[0]):>15s} {p.num_tokens:>7d}")
        print(f"\n{'backend':10s} {'dtype':9s} {'images/s':>9s} {'ms/image':>9s} {'tokens':>8s} "
              f"{'pixel_values':>22s}")
        for backend in vlmprep.backends.available():
            for dtype in ("float32", "uint8"):
                proc = vlmprep.Processor(preset, backend=backend, dtype=dtype)
                proc(paths[:1])  # warm-up
                t0 = time.perf_counter()
                batch = proc(paths)
                dt = time.perf_counter() - t0
                assert batch.num_tokens == plan.num_tokens, "plan and execution disagree"
                shape = "x".join(map(str, batch.pixel_values.shape))
                print(f"{backend:10s} {dtype:9s} {len(paths) / dt:9.2f} {1000 * dt / len(paths):9.1f} "
                      f"{sum(batch.num_tokens):8d} {shape:>22s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
