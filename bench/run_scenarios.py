"""Run the benchmark scenarios (bench/scenarios/*.json) through `vlmprep bench`'s harness and save
the results per machine: bench/results/<machine>.json (machine: `cpu<N>` or the GPU's model).

Usage::

    .venv/bin/python bench/run_scenarios.py                        # every scenario
    .venv/bin/python bench/run_scenarios.py bench/scenarios/qwen2-vl.json --note "idle box"
    .venv/bin/python bench/run_scenarios.py --summarize bench/results/cpu2.json   # tables only
    .venv/bin/python bench/run_scenarios.py --device cuda --backends dali,torch     # a GPU machine

A scenario file holds `vlmprep bench` flags as JSON keys (see bench/README.md); each becomes the
`vlmprep.bench.command.BenchOptions` of those flags and runs through the same checks and harness,
so a scenario is exactly the command line it spells (`scenario_argv`, saved with the result;
tests/cli checks every scenario file against the command's parser). After measuring,
the script prints the Markdown tables that docs/benchmarks.md shows (per image on one thread,
thread scaling, cost against image size, stages).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from vlmprep.bench import env as bench_env  # noqa: E402
from vlmprep.bench.command import BenchOptions, measure  # noqa: E402


def _names(v) -> list[str]:
    return [str(x).strip() for x in v]


# scenario key -> (flag, how the value becomes flag text, how it becomes the BenchOptions value
# of that flag: the value its flag's parser gives)
_FLAGS = {
    "preset": ("--preset", str, str),
    "synthetic": ("--synthetic", lambda v: ",".join(v), _names),
    "images": ("--images", str, str),
    "backends": ("--backend", lambda v: ",".join(v), lambda v: ",".join(v)),
    "dtypes": ("--dtype", lambda v: ",".join(v), _names),
    "device": ("--device", str, str),
    "batch_size": ("--batch-size", str, int),
    "threads": ("--threads", lambda v: ",".join(map(str, v)), lambda v: [int(x) for x in v]),
    "num_images": ("--num-images", str, int),
    "repeat": ("--repeat", str, int),
    "warmup": ("--warmup", str, int),
    "row_forms": ("--row-form", lambda v: ",".join(v), _names),
    "formats": ("--format", lambda v: ",".join(v), lambda v: [x.lower() for x in _names(v)]),
}
# scenario switches (false turns the part off) -> BenchOptions field
_SWITCHES = {"stages": "no_stages", "decode_floor": "no_decode_floor",
             "lower_bound": "no_lower_bound"}
_SHARED = ("machine", "versions", "kernels", "definitions")


def _check_keys(sc: dict, where: str) -> None:
    known = set(_FLAGS) | {"description", "compare"} | set(_SWITCHES)
    unknown = sorted(set(sc) - known)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; expected keys from {sorted(known)}")


def scenario_options(sc: dict, where: str) -> BenchOptions:
    """A scenario dict -> the `vlmprep bench` options it spells (unknown keys are an error)."""
    _check_keys(sc, where)
    kw = {flag[2:].replace("-", "_"): value(sc[key])
          for key, (flag, _, value) in _FLAGS.items() if key in sc}
    if sc.get("compare"):
        kw["compare"] = sc["compare"][-1]  # --compare given once per entry: the last one counts
    kw.update({field: True for key, field in _SWITCHES.items() if sc.get(key) is False})
    return BenchOptions(**kw)


def scenario_argv(sc: dict, where: str) -> list[str]:
    """A scenario dict -> `vlmprep bench` arguments (unknown keys are an error)."""
    _check_keys(sc, where)
    argv = ["bench"]
    for key, (flag, fmt, _) in _FLAGS.items():
        if key in sc:
            argv += [flag, fmt(sc[key])]
    for c in sc.get("compare", []):
        argv += ["--compare", c]
    if sc.get("stages") is False:
        argv.append("--no-stages")
    if sc.get("decode_floor") is False:
        argv.append("--no-decode-floor")
    if sc.get("lower_bound") is False:
        argv.append("--no-lower-bound")
    return argv


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def run(files: list[Path], note: str, device: str | None, backends: str | None = None) -> dict:
    out: dict = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "note": note, "scenarios": {}}
    for f in files:
        sc = json.loads(f.read_text())
        if device:
            sc["device"] = device
        if backends:
            sc["backends"] = backends.split(",")
        argv = scenario_argv(sc, str(f))
        print(f"== {f.stem}: vlmprep {' '.join(argv)}", file=sys.stderr, flush=True)
        load0 = _loadavg()
        result = measure(scenario_options(sc, str(f)))
        for k in _SHARED:
            out[k] = result.pop(k)
        out["scenarios"][f.stem] = {"description": sc.get("description", ""),
                                    "command": "vlmprep " + " ".join(argv),
                                    # 1-minute load average before / after: other work on the box
                                    "loadavg_1min": [load0, _loadavg()], "result": result}
    return out


# -- the Markdown tables of docs/benchmarks.md -------------------------------------------------------
def _md(rows: list[list], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _n(v, fmt=".1f") -> str:
    return "-" if v is None else format(v, fmt)


def summarize(data: dict) -> str:
    sc = data["scenarios"]
    m = data.get("machine", {})
    loads = [x for s in sc.values() for x in s.get("loadavg_1min", []) if x is not None]
    head = (f"Machine `{m.get('name')}`: {m.get('cpu_model')}, {m.get('usable_cpus')} usable "
            f"cores, {m.get('memory_gib')} GiB; run {data.get('created')}"
            + (f"; 1-minute load average {min(loads):.1f} to {max(loads):.1f} during the run"
               if loads else "") + (f". {data['note']}" if data.get("note") else "") + ".")
    parts = [head]
    if "qwen2-vl" in sc:
        res = sc["qwen2-vl"]["result"]
        hf = {(h["size"], h["threads"], h["processor"]): h for h in res["hf"]}
        rows = []
        for r in res["results"]:
            if r["threads"] != 1:
                continue
            pil, tv = hf.get((r["size"], 1, "pil")), hf.get((r["size"], 1, "torchvision"))
            rows.append([r["size"], r["dtype"], _n(r["per_image_p50_ms"]),
                         f"{_n(r.get('decode_floor_ms'))} ({r.get('decode_floor_decoder')})",
                         _x(r.get("ratio_vs_decode_floor")),
                         _n(pil and pil["per_image_p50_ms"]), _n(tv and tv["per_image_p50_ms"]),
                         _x(r.get("speedup_vs_hf_pil")), _x(r.get("speedup_vs_hf_torchvision"))])
        parts.append("### qwen2-vl, checkpoint config, JPEG bytes to packed pixel_values, one "
                     "image per call, one thread (p50 ms per image)\n\n" + _md(
                         rows, ["size", "dtype", "vlmprep", "decode floor", "x floor",
                                "transformers PIL", "transformers torchvision",
                                "speedup vs PIL", "speedup vs torchvision"]))
        mp = {i["label"]: i["mean_megapixels"] for i in res["inputs"]}
        rows = []
        for r in res["results"]:
            if r["threads"] != 1:
                continue
            tok = r["visual_tokens_per_s"] / r["images_per_s"]
            rows.append([r["size"], r["dtype"], f"{mp[r['size']]:.2f}", f"{tok:.0f}",
                         _n(r["per_image_p50_ms"]), _n(r["per_image_p50_ms"] / mp[r["size"]], ".2f"),
                         _n(r["megapixels_per_s"]), _x(r.get("ratio_vs_decode_floor"))])
        parts.append("### Cost against image size (qwen2-vl, one thread, batch 1)\n\n" + _md(
            rows, ["size", "dtype", "megapixels", "tokens/image", "ms/image (p50)", "ms per MP",
                   "MP/s", "x decode floor"]))
    rows = []
    for name, s in sc.items():
        res = s["result"]
        by = {}
        for r in res["results"]:
            by.setdefault((r["size"], r["dtype"], r["batch_size"]), {})[r["threads"]] = r
        for (size, dtype, bs), t in by.items():
            if 1 in t and 2 in t:
                a, b = t[1]["p50_images_per_s"], t[2]["p50_images_per_s"]
                rows.append([name, size, dtype, bs, _n(a, ".2f"), _n(b, ".2f"), _x(b / a),
                             _n(t[2]["cpu_cores_used"], ".2f"),
                             f"{t[1]['images_per_s']:.2f} / {t[2]['images_per_s']:.2f}"])
    if rows:
        parts.append("### Threads: images/s with 1 and 2 threads (batch size / median call "
                     "latency; the mean-based images/s, which outliers from other work pull "
                     "down, in the last column)\n\n" + _md(
                         rows, ["scenario", "size", "dtype", "batch", "1 thread", "2 threads",
                                "2 / 1", "cores used (2 threads)", "mean-based 1 / 2 threads"]))
    rows = []
    for name, s in sc.items():
        for r in s["result"]["results"]:
            st = r.get("stages_ms")
            if not st or r["threads"] != 1 or r["batch_size"] != 1:
                continue
            rows.append([name, r["size"], r["dtype"], _n(st["probe_ms"], ".2f"),
                         _n(st["decode_ms"]), _n(st["resize_ms"]),
                         _n(st["normalize_patchify_pack_ms"]), _n(r["stage_sum_ms"]),
                         _n(r["per_image_p50_ms"])])
    if rows:
        parts.append("### Stages, one thread (p50 ms per image; run separately, so the sum is "
                     "not the end-to-end time exactly)\n\n" + _md(
                         rows, ["scenario", "size", "dtype", "probe", "decode", "resize",
                                "normalize+patchify+pack", "sum", "end to end"]))
    rows = []
    for name, s in sc.items():
        res = s["result"]
        if name == "qwen2-vl":
            continue
        hf = {(h["size"], h["threads"], h["processor"]): h for h in res["hf"]}
        for r in res["results"]:
            pil = hf.get((r["size"], r["threads"], "pil"))
            tv = hf.get((r["size"], r["threads"], "torchvision"))
            rows.append([name, r["size"], r["dtype"], r["threads"], r["batch_size"],
                         _n(r["per_image_p50_ms"]), _x(r.get("ratio_vs_decode_floor")),
                         _n(pil and pil["per_image_p50_ms"]), _n(tv and tv["per_image_p50_ms"]),
                         _x(r.get("speedup_vs_hf_pil")), _x(r.get("speedup_vs_hf_torchvision"))])
    if rows:
        parts.append("### Other scenarios (p50 ms per image)\n\n" + _md(
            rows, ["scenario", "size", "dtype", "threads", "batch", "vlmprep", "x decode floor",
                   "transformers PIL", "transformers torchvision", "speedup vs PIL",
                   "speedup vs torchvision"]))
    targets = _targets(sc)
    if targets:
        parts.append(targets)
    return "\n\n".join(parts) + "\n"


def _targets(sc: dict) -> str:
    """Issue 6's CPU targets against this run (qwen2-vl at 1080p, one thread)."""
    if "qwen2-vl" not in sc:
        return ""
    r = {(x["size"], x["dtype"], x["threads"]): x for x in sc["qwen2-vl"]["result"]["results"]}
    f32, u8 = r.get(("1080p", "float32", 1)), r.get(("1080p", "uint8", 1))
    f32_2 = r.get(("1080p", "float32", 2))
    if not (f32 and u8 and f32.get("decode_floor_ms") and "speedup_vs_hf_pil" in f32):
        return ""

    def met(ok: bool) -> str:
        return "yes" if ok else "no"
    rows = [
        ["float32 at most 1.6x the decode floor",
         f"{f32['ratio_vs_decode_floor']:.2f}x ({f32['per_image_p50_ms']:.1f} / "
         f"{f32['decode_floor_ms']:.1f} ms)", met(f32["ratio_vs_decode_floor"] <= 1.6)],
        ["uint8 at most 1.25x the decode floor",
         f"{u8['ratio_vs_decode_floor']:.2f}x ({u8['per_image_p50_ms']:.1f} / "
         f"{u8['decode_floor_ms']:.1f} ms)", met(u8["ratio_vs_decode_floor"] <= 1.25)],
        ["at least 5x faster than the transformers PIL processor (float32)",
         _x(f32["speedup_vs_hf_pil"]), met(f32["speedup_vs_hf_pil"] >= 5)],
        ["at least 5x faster than the transformers torchvision processor (float32)",
         _x(f32["speedup_vs_hf_torchvision"]), met(f32["speedup_vs_hf_torchvision"] >= 5)],
    ]
    if f32_2:
        k = f32_2["p50_images_per_s"] / f32["p50_images_per_s"]
        rows.append(["two threads at least 1.8x one thread (float32, batch 1)", _x(k), met(k >= 1.8)])
    if "qwen2-vl-batch" in sc:
        b = {(x["dtype"], x["threads"]): x for x in sc["qwen2-vl-batch"]["result"]["results"]}
        for dt in ("float32", "uint8"):
            if (dt, 1) in b and (dt, 2) in b:
                k = b[(dt, 2)]["p50_images_per_s"] / b[(dt, 1)]["p50_images_per_s"]
                rows.append([f"two threads at least 1.8x one thread ({dt}, batch 4)", _x(k),
                             met(k >= 1.8)])
    st = f32.get("stages_ms") or {}
    text = ("### Issue 6 CPU targets (1080p, qwen2-vl checkpoint config, one thread, JPEG bytes to "
            "packed pixel_values)\n\n" + _md(rows, ["target", "this run", "met"]))
    if st:
        text += (f"\n\nWhere the time goes at 1080p float32, one thread (stages): probe "
                 f"{st['probe_ms']:.2f} ms, decode {st['decode_ms']:.1f} ms (the floor is "
                 f"{f32['decode_floor_ms']:.1f} ms), resize {st['resize_ms']:.1f} ms, normalize + "
                 f"patchify + pack {st['normalize_patchify_pack_ms']:.1f} ms. At 1.6x the floor, "
                 f"everything after decode has about "
                 f"{1.6 * f32['decode_floor_ms'] - st['decode_ms'] - st['probe_ms']:.1f} ms.")
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scenarios", nargs="*", type=Path,
                   help="scenario files (default: every bench/scenarios/*.json)")
    p.add_argument("--out", type=Path, default=None,
                   help="results file (default: bench/results/<machine>.json)")
    p.add_argument("--note", default="", help="a sentence about the run, saved with it")
    p.add_argument("--device", default=None, help="run every scenario on this device instead")
    p.add_argument("--backends", default=None, metavar="B[,B...]",
                   help="run every scenario with these backends instead (e.g. dali,torch on a "
                        "GPU machine)")
    p.add_argument("--summarize", type=Path, metavar="RESULTS.json",
                   help="print the Markdown tables of an existing results file; measure nothing")
    args = p.parse_args(argv)
    if args.summarize:
        print(summarize(json.loads(args.summarize.read_text())))
        return 0
    files = args.scenarios or sorted((HERE / "scenarios").glob("*.json"))
    data = run(files, args.note, args.device, args.backends)
    out = args.out or HERE / "results" / f"{bench_env.machine_name()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    print(summarize(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
