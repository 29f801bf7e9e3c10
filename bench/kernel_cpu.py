"""normalize + patchify + pack of one 1080p Qwen2-VL image on the CPU: before (the backends'
pure paths) and after (the fused CPU twin: its band path, AVX-512 VBMI, and its row path,
``VLMPREP_CPU_ISA=avx2``), against the bytes-written floors (a memset of the output bytes, and
``kernels.stream_store``: the same bytes with streamed stores, ``vlmprep bench``'s write floor);
then the resize (1080x1920 -> 1092x1932, Pillow-exact) and the fused op that resizes while it
writes the rows (``resize_normalize_patchify``, what the torch backend runs end to end:
``fusion.RESIZE_ROWS``). Buffers rotate over three (as a Processor's outputs do: each call writes a
buffer that is not the one just written), all faulted in already; the "same buffer" rows keep
writing one buffer, which a large cache holds (480 MiB L3 here), so they flatter both sides.
Prints a table, writes JSON.

    .venv/bin/python bench/kernel_cpu.py [--json bench/results/kernel_cpu_<machine>.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
import torch

import vlmprep
from vlmprep import kernels
from vlmprep.backends.context import Context
from vlmprep.backends.normalize_lut import normalize_array, normalize_lut
from vlmprep.backends.reference import ops as R
from vlmprep.backends.torch import ops as T


def best_ms(fn, n: int = 12) -> float:
    fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1000 * min(ts)


def measure(dtype: str, op_n, op_p, img: np.ndarray, src: torch.Tensor, rows: int, D: int) -> dict:
    """One dtype's row of the table (see the module docstring)."""
    tdt = getattr(torch, dtype)
    outs = [torch.zeros((rows, D), dtype=tdt) for _ in range(3)]
    turn = [0]

    def rotating() -> torch.Tensor:
        turn[0] = (turn[0] + 1) % len(outs)
        return outs[turn[0]]
    out = outs[0]
    nbytes = out.numel() * out.element_size()

    def ctx() -> Context:  # the pure paths write the same rotating buffers as the twin
        return Context(None, None, rotating(), dtype, "cpu")
    torch.set_num_threads(1)
    kernels.set_num_threads(1)
    floor = best_ms(lambda: rotating().fill_(0))
    r = {"output_MB": round(nbytes / 1e6, 1), "memset_floor_ms": round(floor, 2),
         "memset_GB_per_s": round(nbytes / floor / 1e6, 1),
         "memset_same_buffer_ms": round(best_ms(lambda: out.fill_(0)), 2)}
    # vlmprep bench's output-write floor: streamed stores of the same bytes (no read for ownership)
    stream = best_ms(lambda: kernels.stream_store(rotating()))
    r.update(stream_store_ms=round(stream, 2), stream_store_GB_per_s=round(nbytes / stream / 1e6, 1))
    # "before": the backends' own numpy / torch code (the lowerings run op by op; the fused
    # executors are chosen by vlmprep.backends.fusion, never inside a lowering)
    if dtype == "float32":
        r["reference_pure_ms"] = round(best_ms(
            lambda: R.patchify(op_p, [normalize_array(op_n, img)], ctx()), 4), 2)
        timg = torch.from_numpy(img).permute(2, 0, 1)
        r["torch_pure_ms"] = round(best_ms(
            lambda: T.patchify(op_p, [T.normalize_tensor(op_n, timg)], ctx()), 4), 2)
    else:
        r["reference_pure_ms"] = round(best_ms(lambda: R.patchify(op_p, [img], ctx()), 4), 2)
    lut = torch.from_numpy(normalize_lut(op_n)) if dtype == "float32" else None
    timg_hwc = torch.from_numpy(img)
    for threads in (1, 2):
        kernels.set_num_threads(threads)
        r[f"twin_{threads}t_ms"] = round(best_ms(lambda: kernels.normalize_patchify(
            [timg_hwc], lut, rotating().view(-1), [0], "merge_grouped", 14, 2, 2)), 2)
    kernels.set_num_threads(1)
    r["twin_1t_same_buffer_ms"] = round(best_ms(lambda: kernels.normalize_patchify(
        [timg_hwc], lut, out.view(-1), [0], "merge_grouped", 14, 2, 2)), 2)

    def fresh():
        o = torch.empty((rows, D), dtype=tdt)
        kernels.normalize_patchify([timg_hwc], lut, o.view(-1), [0], "merge_grouped", 14, 2, 2)
    r["twin_1t_fresh_buffer_ms"] = round(best_ms(fresh, 6), 2)
    r["twin_1t_vs_floor"] = round(r["twin_1t_ms"] / floor, 2)
    os.environ["VLMPREP_CPU_ISA"] = "avx2"  # the row path (no AVX-512 band path)
    try:
        r["twin_row_path_1t_ms"] = round(best_ms(lambda: kernels.normalize_patchify(
            [timg_hwc], lut, rotating().view(-1), [0], "merge_grouped", 14, 2, 2)), 2)
        r["resize_avx2_ms"] = round(best_ms(lambda: kernels.resize(src, (1092, 1932), "bicubic")), 2)
    finally:
        del os.environ["VLMPREP_CPU_ISA"]
    r["resize_ms"] = round(best_ms(lambda: kernels.resize(src, (1092, 1932), "bicubic")), 2)
    r["resize_then_twin_ms"] = round(best_ms(lambda: kernels.normalize_patchify(
        [kernels.resize(src, (1092, 1932), "bicubic")], lut, rotating().view(-1), [0],
        "merge_grouped", 14, 2, 2)), 2)
    r["fused_resize_normalize_patchify_ms"] = round(best_ms(lambda: kernels.resize_normalize_patchify(
        src, (1092, 1932), "bicubic", lut, rotating().view(-1), 0, "merge_grouped", 14, 2, 2)), 2)
    kernels.set_num_threads(None)
    return r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if kernels.why_unavailable():
        print("kernels not built:", kernels.why_unavailable())
        return 2
    pipe = vlmprep.presets.get("qwen2-vl")
    op_n, op_p = pipe.normalize, pipe.patchify
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (1092, 1932, 3), dtype=np.uint8)  # resized 1080p
    src = torch.from_numpy(rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8))  # decoded 1080p
    rows, D = (1092 // 14) * (1932 // 14), 1176
    res = {dtype: measure(dtype, op_n, op_p, img, src, rows, D) for dtype in ("float32", "uint8")}
    print(f"{'':22s}" + "".join(f"{d:>12s}" for d in res))
    for k in res["float32"]:
        print(f"{k:22s}" + "".join(f"{str(res[d].get(k, '-')):>12s}" for d in res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": platform.node(), "cpu_count": __import__("os").cpu_count(),
                       "torch": torch.__version__, "note": "shared 2-core box; best of N",
                       "results": res}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
