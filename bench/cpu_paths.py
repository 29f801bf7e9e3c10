"""The CPU kernels on every instruction-set path this host can run (issue 28), one thread, best of
N: the Pillow-exact resize on the families' 1080p sizes and filters, the torchvision-exact
resize, normalize + patchify + pack (float32, bfloat16, uint8; Qwen2-VL's merge_grouped rows)
against the output-write floor (``kernels.stream_store`` of the same bytes) and against their
work beside the stores (a 28x952 crop's rows into a buffer that stays in cache, less a call's
own cost, scaled to the image), and the fused resize-while-writing op; beside them Pillow's own
resize and, when a side environment holds it, Pillow-SIMD's (built with ``CC="cc -mavx2" pip
install pillow-simd`` into ``build/simd-venv``: ``make simd-venv``), with how far Pillow-SIMD's
pixels are from Pillow's.

The path is chosen with VLMPREP_CPU_ISA (read by the kernels at every call): "native" (the best
this CPU has), "avx2" (no AVX-512), "scalar"; ``kernels.cpu_paths()`` names what each ran.
Prints a table, writes JSON.

    .venv/bin/python bench/cpu_paths.py [--json bench/results/cpu_paths_<machine>.json] [--repeat 15]
    .venv/bin/python bench/cpu_paths.py --show bench/results/cpu_paths_xeon2.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vlmprep import kernels, presets
from vlmprep.backends.normalize_lut import normalize_lut

ROOT = Path(__file__).resolve().parents[1]
SIMD_PY = ROOT / "build" / "simd-venv" / "bin" / "python"
#: (name, output (h, w), filter): the families' resizes of a 1080x1920 photo
RESIZES = [("qwen2-vl 1092x1932 bicubic", (1092, 1932), "bicubic"),
           ("internvl 448x448 bicubic", (448, 448), "bicubic"),
           ("siglip 384x384 bilinear", (384, 384), "bilinear"),
           ("idefics3 819x1456 lanczos", (819, 1456), "lanczos")]
PIL_FILTER = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
ISAS = ("native", "avx2", "scalar")

# Runs in the Pillow-SIMD environment (numpy and PIL only): times each resize, saves the outputs.
_SIMD_SCRIPT = """
import json, sys, time, numpy as np
from PIL import Image
img = Image.fromarray(np.load(sys.argv[1])); cases = json.loads(sys.argv[2]); n = int(sys.argv[3])
F = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
out = {"version": Image.__version__}
for i, (name, hw, f) in enumerate(cases):
    img.resize((hw[1], hw[0]), F[f]); ts = []
    for _ in range(n):
        t = time.perf_counter(); r = img.resize((hw[1], hw[0]), F[f]); ts.append(time.perf_counter() - t)
    out[name] = 1000 * min(ts); np.save(f"{sys.argv[1]}.{i}.npy", np.asarray(r))
print(json.dumps(out))
"""


def best_ms(fn, n: int) -> float:
    fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return round(1000 * min(ts), 3)


def photo() -> np.ndarray:
    """(1080, 1920, 3) uint8: skimage's astronaut resized by Pillow (a photo: speed barely
    depends on content, Pillow-SIMD's differences do a little)."""
    import skimage.data
    return np.array(Image.fromarray(skimage.data.astronaut()).resize((1920, 1080), Image.BICUBIC))


def kernel_rows(img: np.ndarray, n: int) -> dict:
    """The kernels' figures on the path VLMPREP_CPU_ISA allows now."""
    src = torch.from_numpy(img)
    r: dict = {"paths": kernels.cpu_paths()}
    for name, hw, f in RESIZES:
        r[f"resize {name}"] = best_ms(lambda hw=hw, f=f: kernels.resize(src, hw, f), n)
    r["resize torchvision-match qwen2-vl 1092x1932 bicubic"] = best_ms(
        lambda: kernels.resize(src, (1092, 1932), "bicubic", match="torchvision"), n)
    resized = kernels.resize(src, (1092, 1932), "bicubic")
    rows, width = (1092 // 14) * (1932 // 14), 1176
    lut = torch.from_numpy(normalize_lut(presets.get("qwen2-vl").normalize))
    for dtype in ("float32", "bfloat16", "uint8"):
        outs = [torch.zeros((rows, width), dtype=getattr(torch, dtype)) for _ in range(3)]
        turn = [0]

        def rotating(outs=outs, turn=turn) -> torch.Tensor:  # as a Processor's outputs rotate
            turn[0] = (turn[0] + 1) % len(outs)
            return outs[turn[0]].view(-1)
        use_lut = lut.to(getattr(torch, dtype)) if dtype != "uint8" else None
        r[f"write floor {dtype}"] = best_ms(lambda rotating=rotating: kernels.stream_store(rotating()), n)
        r[f"normalize_patchify {dtype}"] = best_ms(
            lambda rotating=rotating, use_lut=use_lut: kernels.normalize_patchify(
                [resized], use_lut, rotating(), [0], "merge_grouped", 14, 2, 2), n)
        r[f"normalize_patchify {dtype} / write floor"] = round(
            r[f"normalize_patchify {dtype}"] / r[f"write floor {dtype}"], 2)
        # The work beside the stores: a 28x952 crop's rows into one buffer that stays in cache,
        # less a 28x28 crop's (the call's own cost), scaled to the whole image's rows: what the
        # rows cost if writing them out were free.
        def in_cache(w: int, dtype=dtype, use_lut=use_lut) -> float:
            small = torch.zeros(((28 // 14) * (w // 14), width), dtype=getattr(torch, dtype)).view(-1)
            crop = resized[:28, :w]
            return best_ms(lambda: kernels.normalize_patchify([crop], use_lut, small, [0], "merge_grouped",
                                                              14, 2, 2), 20 * n)
        r[f"normalize_patchify {dtype} in cache (scaled)"] = round(
            (in_cache(952) - in_cache(28)) * rows / ((28 // 14) * (952 // 14) - 2 * 2), 3)
        r[f"fused resize_normalize_patchify {dtype}"] = best_ms(
            lambda rotating=rotating, use_lut=use_lut: kernels.resize_normalize_patchify(
                src, (1092, 1932), "bicubic", use_lut, rotating(), 0, "merge_grouped", 14, 2, 2), n)
    return r


def pillow_simd(img: np.ndarray, n: int, want: dict) -> dict | None:
    """Pillow-SIMD's times and its pixels' distance from Pillow's (None: no side environment)."""
    if not SIMD_PY.exists():
        return None
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "img.npy")
        np.save(path, img)
        cases = [[name, list(hw), f] for name, hw, f in RESIZES]
        proc = subprocess.run([str(SIMD_PY), "-c", _SIMD_SCRIPT, path, json.dumps(cases), str(n)],
                              capture_output=True, text=True, check=True)
        out = json.loads(proc.stdout)
        for i, (name, _hw, _f) in enumerate(RESIZES):
            got = np.load(f"{path}.{i}.npy").astype(np.int16)
            diff = np.abs(got - want[name].astype(np.int16))
            out[f"{name} vs Pillow"] = {"max_levels": int(diff.max()),
                                        "differing_fraction": round(float((diff > 0).mean()), 4)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--show", default=None, help="print the table of a JSON this script wrote, and exit")
    args = ap.parse_args()
    if args.show:
        _print(json.loads(Path(args.show).read_text()))
        return 0
    if kernels.why_unavailable():
        print("kernels not built:", kernels.why_unavailable())
        return 2
    torch.set_num_threads(1)
    kernels.set_num_threads(1)
    img = photo()
    pil = Image.fromarray(img)
    want = {name: np.asarray(pil.resize((hw[1], hw[0]), PIL_FILTER[f])) for name, hw, f in RESIZES}
    for name, hw, f in RESIZES:  # the figures below are of exact resizes
        assert np.array_equal(kernels.resize(torch.from_numpy(img), hw, f).numpy(), want[name]), name
    res: dict = {"machine": platform.node(), "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(),
                 "torch": torch.__version__, "repeat": args.repeat, "note": "one thread, best of N",
                 "paths": {}}
    seen = set()
    saved = os.environ.get("VLMPREP_CPU_ISA")
    try:
        for isa in ISAS:
            if isa == "native":
                os.environ.pop("VLMPREP_CPU_ISA", None)
            else:
                os.environ["VLMPREP_CPU_ISA"] = isa
            key = kernels.cpu_paths()["resize"]
            if key in seen:
                continue
            seen.add(key)
            res["paths"][key] = kernel_rows(img, args.repeat)
    finally:
        os.environ.pop("VLMPREP_CPU_ISA", None)
        if saved is not None:
            os.environ["VLMPREP_CPU_ISA"] = saved
    res["pillow"] = {"version": Image.__version__, **{
        name: best_ms(lambda hw=hw, f=f: pil.resize((hw[1], hw[0]), PIL_FILTER[f]), args.repeat)
        for name, hw, f in RESIZES}}
    res["pillow_simd"] = pillow_simd(img, args.repeat, want)
    _print(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _ms(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _print(res: dict) -> None:
    paths = list(res["paths"])
    print(f"{res['cpu_model']}, {res['cpu_count']} CPUs; one thread, best of {res['repeat']} (ms)")
    print(f"{'':54s}" + "".join(f"{p:>13s}" for p in paths) + f"{'Pillow':>10s}{'Pillow-SIMD':>13s}")
    simd = res["pillow_simd"] or {}
    for k in res["paths"][paths[0]]:
        if k == "paths":
            continue
        name = k.removeprefix("resize ")
        extra = (f"{_ms(res['pillow'].get(name)):>10}{_ms(simd.get(name)):>13}" if k.startswith("resize ") else "")
        print(f"{k:54s}" + "".join(f"{_ms(res['paths'][p][k]):>13}" for p in paths) + extra)
    if simd:
        print(f"Pillow-SIMD {simd['version']} vs Pillow {res['pillow']['version']}: " + "; ".join(
            f"{name}: max {simd[name + ' vs Pillow']['max_levels']} levels, "
            f"{100 * simd[name + ' vs Pillow']['differing_fraction']:.1f}% differ" for name, _, _ in RESIZES))
        for p in paths:
            print(f"{p}: Pillow-SIMD time / exact resize time: " + ", ".join(
                f"{name.split()[0]} {simd[name] / res['paths'][p]['resize ' + name]:.2f}x" for name, _, _ in RESIZES))


if __name__ == "__main__":
    raise SystemExit(main())
