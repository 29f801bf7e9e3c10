"""Every figure issue 20 asks for, in one command: the floors, the ratios and the targets.

    .venv/bin/python bench/issue20.py [--repeat N] [--out-dir bench/results] [--tag cpu2]

Two `vlmprep bench` runs through the same harness (so each ratio is from one run):

1. qwen2-vl, checkpoint config, 1080p mosaics as JPEG, PNG and WebP, one image per call, threads
   1 and 2, float32 and uint8, full and compact rows -> <out-dir>/issue20_qwen2-vl_<tag>.json
2. internvl, 1080p JPEG, threads 1 and 2, float32 and uint8 -> <out-dir>/issue20_internvl_<tag>.json

then prints the targets of items 4 and 5 as met or not, from p50 times (the issue's measure) and
from minimum times (steadier on a shared machine), with the 1-minute load average before and
after each run. Nothing is asserted: it measures and reports.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from vlmprep.bench.command import BenchOptions  # noqa: E402
from vlmprep.bench.command import measure as bench_measure  # noqa: E402
from vlmprep.bench.report import print_report, print_table  # noqa: E402

RUNS = {
    "qwen2-vl": ["--preset", "qwen2-vl", "--synthetic", "1080p", "--format", "jpeg,png,webp",
                 "--threads", "1,2", "--dtype", "float32,uint8", "--row-form", "full,compact"],
    "internvl": ["--preset", "internvl", "--synthetic", "1080p", "--threads", "1,2",
                 "--dtype", "float32,uint8"],
}
#: the BenchOptions of each run's flags above
OPTIONS = {
    "qwen2-vl": dict(preset="qwen2-vl", synthetic=["1080p"], format=["jpeg", "png", "webp"],
                     threads=[1, 2], dtype=["float32", "uint8"], row_form=["full", "compact"]),
    "internvl": dict(preset="internvl", synthetic=["1080p"], threads=[1, 2],
                     dtype=["float32", "uint8"]),
}


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def measure(name: str, repeat: int, path: Path) -> dict:
    opts = BenchOptions(**OPTIONS[name], repeat=repeat, json=str(path), no_progress=True)
    before = _load()
    result = bench_measure(opts)
    result["load_average_1min"] = {"before": before, "after": _load()}
    result["command"] = " ".join(["vlmprep", "bench", *RUNS[name], "--repeat", str(repeat)])
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def _row(d: dict, size: str, dtype: str, form: str, threads: int) -> dict | None:
    for r in d["results"]:
        if (r["size"], r["dtype"], r.get("row_form", "full"), r["threads"]) == (size, dtype, form,
                                                                                threads):
            return r
    return None


def _ratio(r: dict | None, key: str, minimum: bool) -> float | None:
    if r is None:
        return None
    src = r.get("min_based", {}) if minimum else r
    return src.get(key)


def _speedup(one: dict | None, two: dict | None, minimum: bool) -> float | None:
    if one is None or two is None:
        return None
    k = "per_image_min_ms" if minimum else "per_image_p50_ms"
    return round(one[k] / two[k], 3)


def targets(q: dict, ivl: dict) -> list[dict]:
    """The issue's targets: (what, limit, value p50, value min, met on p50)."""
    out = []
    for size in ("1080p", "1080p-png", "1080p-webp"):
        fmt = size.split("-")[1].upper() if "-" in size else "JPEG"
        f1 = _row(q, size, "float32", "full", 1)
        u1 = _row(q, size, "uint8", "compact", 1)
        f2 = _row(q, size, "float32", "full", 2)
        out += [
            {"target": f"qwen2-vl {fmt} float32 full rows, 1 thread: at most 1.15x the lower bound",
             "limit": 1.15, "le": True, "p50": _ratio(f1, "ratio_vs_lower_bound", False),
             "min": _ratio(f1, "ratio_vs_lower_bound", True)},
            {"target": f"qwen2-vl {fmt} uint8 compact rows, 1 thread: at most 1.15x the decode "
                       f"floor", "limit": 1.15, "le": True,
             "p50": _ratio(u1, "ratio_vs_decode_floor", False),
             "min": _ratio(u1, "ratio_vs_decode_floor", True)},
            {"target": f"qwen2-vl {fmt} float32 full rows, batch 1: 2 threads at least 1.8x one",
             "limit": 1.8, "le": False, "p50": _speedup(f1, f2, False),
             "min": _speedup(f1, f2, True)},
        ]
    i1 = _row(ivl, "1080p", "float32", "full", 1)
    out.append({"target": "internvl JPEG float32, 1 thread: at most 1.5x the lower bound",
                "limit": 1.5, "le": True, "p50": _ratio(i1, "ratio_vs_lower_bound", False),
                "min": _ratio(i1, "ratio_vs_lower_bound", True)})
    for t in out:
        v = t["p50"]
        t["met"] = None if v is None else (v <= t["limit"] if t["le"] else v >= t["limit"])
    return out


def report(q: dict, ivl: dict, path: Path) -> None:
    """Print the targets table and write it (with where each run's figures are) to ``path``."""
    rows = targets(q, ivl)
    print("issue 20 targets (p50: the issue's measure; min: from minimum times)")
    print_table([{"target": t["target"], "limit": f"{t['limit']}x",
                  "p50": "-" if t["p50"] is None else f"{t['p50']:.2f}x",
                  "min": "-" if t["min"] is None else f"{t['min']:.2f}x",
                  "met (p50)": {True: "yes", False: "no", None: "-"}[t["met"]]} for t in rows],
                ["target", "limit", "p50", "min", "met (p50)"])
    runs = {k: {"created": v["created"], "load_average_1min": v.get("load_average_1min")}
            for k, v in (("qwen2-vl", q), ("internvl", ivl))}
    path.write_text(json.dumps({"targets": rows, "runs": runs}, indent=2) + "\n", encoding="utf-8")
    print(f"json: {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--tag", default=None, help="file name tag (default: cpu<N>)")
    a = ap.parse_args()
    tag = a.tag or f"cpu{os.cpu_count()}"
    out = Path(a.out_dir)
    res = {}
    for name in RUNS:
        res[name] = measure(name, a.repeat, out / f"issue20_{name}_{tag}.json")
        print_report(res[name])
        print(f"load average (1 min): {res[name]['load_average_1min']}\n")
    report(res["qwen2-vl"], res["internvl"], out / f"issue20_targets_{tag}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
