"""A/B of the two-decoder JPEG decode (csrc/kernels/decode_units.h) on 2 threads, one process.

    .venv/bin/python bench/jpeg_split.py [--rounds 60] [--out bench/results/jpeg_split.json]

For each case (``decode_jpeg`` alone; Processor calls of qwen2-vl float32/uint8 x full/compact
rows, internvl, llava-1.5, siglip; the torch backend, 1080p mosaic JPEGs), the rounds alternate
the split on and off (``VLMPREP_JPEG_SPLIT``, read per call), so both sides see the same machine
noise; one thread is timed after for the 2-thread speedup. Prints p50 and min per side, with the
split row the kernel chose. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

CASES = [("qwen2-vl", "float32", "full"), ("qwen2-vl", "float32", "compact"), ("qwen2-vl", "uint8", "full"),
         ("qwen2-vl", "uint8", "compact"), ("internvl", "float32", "full"), ("llava-1.5", "float32", "full"),
         ("siglip", "float32", "full")]


def _ms(v: list[float]) -> dict:
    return {"p50_ms": round(statistics.median(v) * 1e3, 2), "min_ms": round(min(v) * 1e3, 2)}


def _ab(fn, rounds: int) -> dict:
    from vlmprep import kernels
    sides: dict[str, list[float]] = {"split": [], "one_decoder": []}
    with kernels.local_threads(2):
        for _ in range(3):
            fn()
        for _ in range(rounds):
            for side, env in (("split", "1"), ("one_decoder", "0")):
                os.environ["VLMPREP_JPEG_SPLIT"] = env
                t = time.perf_counter()
                fn()
                sides[side].append(time.perf_counter() - t)
    os.environ.pop("VLMPREP_JPEG_SPLIT", None)
    one: list[float] = []
    with kernels.local_threads(1):
        for _ in range(max(5, rounds // 3)):
            t = time.perf_counter()
            fn()
            one.append(time.perf_counter() - t)
    out = {"threads_2": {k: _ms(v) for k, v in sides.items()}, "threads_1": _ms(one)}
    out["speedup_2_over_1"] = {k: round(out["threads_1"]["p50_ms"] / v["p50_ms"], 2)
                               for k, v in out["threads_2"].items()}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--out", type=Path, default=HERE / "results" / "jpeg_split.json")
    a = p.parse_args()
    from vlmprep import Processor, kernels
    from vlmprep.bench.images import encode, mosaic
    from vlmprep.io.probe import probe
    if not kernels.jpeg_available():
        sys.exit("the kernels were built without libjpeg-turbo: nothing to compare")
    data = encode(mosaic((1080, 1920), seed=1), "JPEG", quality=90)
    hdr = probe(data)
    load = os.getloadavg()[0]
    rows = []
    r = _ab(lambda: kernels.decode_jpeg(data, (hdr.height, hdr.width)), a.rounds)
    rows.append({"case": "decode_jpeg", "split_row": kernels.jpeg_split_row(data), **r})
    for preset, dtype, form in CASES:
        proc = Processor(preset, backend="torch", dtype=dtype, row_form=form)
        r = _ab(lambda proc=proc: proc([data]), a.rounds)
        rows.append({"case": f"{preset} {dtype} {form}", **r})
    result = {"tool": "bench/jpeg_split.py", "input": "1080p mosaic JPEG q90 4:2:0 (bench.images)",
              "rounds": a.rounds, "load_average_1min": {"before": round(load, 2),
                                                        "after": round(os.getloadavg()[0], 2)},
              "results": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"{'case':32} {'1 thread':>9} {'2 split':>9} {'2 one dec':>9} {'x split':>8} {'x one':>6}   (p50 ms; min)")
    for row in rows:
        t2 = row["threads_2"]
        print(f"{row['case']:32} {row['threads_1']['p50_ms']:9.2f} {t2['split']['p50_ms']:9.2f} "
              f"{t2['one_decoder']['p50_ms']:9.2f} {row['speedup_2_over_1']['split']:7.2f}x "
              f"{row['speedup_2_over_1']['one_decoder']:5.2f}x   ({row['threads_1']['min_ms']:.2f}; "
              f"{t2['split']['min_ms']:.2f}; {t2['one_decoder']['min_ms']:.2f})")
    print(f"load average {result['load_average_1min']}; json: {a.out}")


if __name__ == "__main__":
    main()
