"""The one prepared check of every GPU path, for the GPU test machine as it is (bench/README.md).

That machine has its own Python 3.12 + torch (no venv, no package registry, no DALI unless
bench/dali_transfer.sh sent it), one H200, and gives one command at most 10 minutes. So this
driver runs fixed steps in a fixed order, each in its own process under its own time box (a crash
or a hang costs that step, never the others or the JSON), inside one overall budget:

  env       what is here: Python, torch, CUDA device, nvcc, compute-sanitizer, Pillow, DALI;
            which pass order this Pillow uses (resample_order.pass_order_rule: the reference is
            this machine's Pillow, and every backend follows the same rule), probed: one-shot
            Image.resize must equal the two-pass composition in the order the rule names
  build     csrc/ compiled in place for this torch (setup.py build_ext --inplace; sm_90 by default)
  kernels   the CUDA normalize_patchify against its CPU twin, bit-exact, every order and dtype,
            plus its bandwidth next to a device-to-device copy of the same bytes
  memcheck  compute-sanitizer memcheck over a small ragged batch of every order and dtype
  parity    the torch backend on the device against the reference backend on the CPU, every
            preset and dtype, in uint8 levels, and batch invariance (each image alone = in a batch);
            its resize alone against PIL.Image.resize, every filter, bit-exact
  timing    qwen2-vl at 720p / 1080p / 4K, JPEG bytes to packed tensors on the device, two ways:
            the Processor on the bytes, and torchvision.io.decode_jpeg on the device (nvJPEG) then
            the Processor on the decoded tensors; the decode floor; transformers' torchvision
            processor on the device on the same images
  engine    vlmprep inside an engine's process on the device (VLMPREP_VLLM_DEVICE, issue 32): the
            plugins' hook on transformers' Qwen2-VL image processor as vLLM calls it, per request:
            its tensors against transformers' PIL processor (float32 and uint8), the JPEG bytes
            vLLM's loader leaves undecoded (decoded on the device, within the parity bound), and
            ms per 1080p request: hook on the device, hook on the CPU, Pillow decode +
            transformers' torchvision processor
  video     DALI's video decoders (issue 29): NVDEC (video_decoder="dali:cuda") on a GPU, DALI's
            CPU decoder on a dry run, on an MPEG-4 Part 2 and a Motion JPEG clip through the
            Processor, against OpenCV's decode of the same clip (levels, geometry) and clips/s of
            both; a codec the decoder does not take is a SKIP row; DALI absent: SKIP
  dali      the dali backend on the device against the reference, when DALI is importable
            ("skipped: DALI absent" otherwise), path by path with the bounds of
            vlmprep.backends.dali.parity.BOUNDS: decode (nvJPEG vs libjpeg-turbo/Pillow on the
            JPEGs), resize (the canvas graph vs Pillow on the very pixels the device decoded),
            rounding (exact ties through the device: DALI's own conversion vs the graphs'
            to_levels, which must move none), end to end (the issue's mean and 99.9th
            percentile); the plugin op on the device against its CPU op

Each step prints PASS / FAIL / SKIP with its figures. The run writes
``<out>/gpu_check_<tag>.json`` (every step, row and figure), ``.md`` (a short table) and ``.log``
(every step's output), copies them to ``$OUT`` when that is set (the device tool's return
folder), and exits 1 if any step failed. The GPU goals (2,000 1080p images/s, 10x transformers'
torchvision processor, 70% of a copy's bandwidth, at most 1 level) are reported as met or not;
correctness decides the exit status.

``--device cpu`` runs the same code on the CPU (a dry run: bench/README.md, ``make
gpu-check-dry``); ``VLMPREP_GPU_CHECK_INJECT=<step>`` corrupts one compared value in that step,
to show the check fails when a result is wrong (``pass_order``, ``dali_decode``, ``dali_resize``,
``dali_rounding``, ``torch_resize``: one check of the env, dali or parity step alone).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
INPUTS = HERE / ".gpu_inputs"  # ignored; made here (needs scikit-image), carried to the machine

#: (step, time box in seconds on the GPU machine). The boxes sum to 540 s: one 10-minute call
#: with a minute to spare; ``--budget`` scales them for slower dry runs.
STEPS: list[tuple[str, int]] = [("env", 20), ("build", 125), ("kernels", 50), ("memcheck", 65),
                                ("parity", 80), ("timing", 85), ("engine", 35), ("video", 30),
                                ("dali", 50)]
GOALS = {"images_per_s_1080p": 2000.0, "speedup_vs_hf_torchvision": 10.0,
         "kernel_fraction_of_copy": 0.70, "max_levels": 1.0}
#: Parity bound (uint8 levels) a step fails beyond; the goal above is tighter. The torch backend's
#: resize on CUDA is Pillow's arithmetic (pil_resample, 0 levels); what is left on the device is
#: nvJPEG's decode of the JPEG inputs and the float normalize.
MAX_LEVELS, MEAN_LEVELS = 3.0, 0.5
#: Pass-order probes (src_hw, dst_hw): each rule of resample_order orders some of them apart.
PASS_ORDER_PROBES = [((100, 100), (50, 80)), ((100, 100), (60, 80)), ((1010, 10), (50, 7)),
                     ((40, 30), (80, 20))]
QUICK_PRESETS = ("qwen2-vl", "internvl", "siglip2-naflex")


# --------------------------------------------------------------------------------- helpers
def _inject(step: str) -> bool:
    return os.environ.get("VLMPREP_GPU_CHECK_INJECT") == step


def corrupt(step: str, t: Any) -> Any:
    """``t`` with one element changed when this step (or check) is the injected one, else ``t``."""
    if not _inject(step):
        return t
    t = t.clone()
    flat = t.view(-1)
    i = flat.numel() // 2
    # Far outside every bound: 7 units of a float output (hundreds of levels after the
    # normalize), half the range of an integer one (128 levels of a uint8 pixel).
    flat[i] = flat[i] + 7 if t.is_floating_point() else flat[i] ^ 0x80
    return t


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch
        torch.cuda.synchronize()


def _best_time(fn: Callable[[], Any], device: str, repeats: int) -> float:
    """Median seconds of ``repeats`` timed calls after one warm-up (device work included)."""
    fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def _levels(got: Any, want: Any, scale: float) -> tuple[float, float, float]:
    """max, mean and 99.9th percentile of |got - want| in uint8 levels (``scale`` per unit)."""
    import torch
    d = (got.detach().cpu().double() - want.detach().cpu().double()).abs().flatten() * scale
    if not d.numel():
        return 0.0, 0.0, 0.0
    q = float(torch.quantile(d[:: max(1, d.numel() // 1_000_000)], 0.999))
    return float(d.max()), float(d.mean()), q


def _inputs(quick: bool) -> dict[str, bytes]:
    """The encoded test images: real-photo mosaics (JPEG at 720p/1080p/4K, odd sizes, a PNG)."""
    names = {"720p": "720p.jpg", "1080p": "1080p.jpg", "4k": "4k.jpg", "odd_333x777": "odd_333x777.jpg",
             "odd_1010x1390": "odd_1010x1390.png"}
    if not all((INPUTS / f).exists() for f in names.values()):
        prepare_inputs()
    return {k: (INPUTS / f).read_bytes() for k, f in names.items() if not (quick and k == "4k")}


def prepare_inputs() -> None:
    """Write the inputs to bench/.gpu_inputs/ (here: needs scikit-image and matplotlib, which
    the GPU machine does not have; the folder is carried there)."""
    sys.path.insert(0, str(ROOT))
    try:
        from vlmprep.bench.images import SIZES, encode, mosaic
        imgs = {f"{k}.jpg": encode(mosaic(hw, seed=i), "JPEG", quality=90)
                for i, (k, hw) in enumerate(SIZES.items())}
        imgs["odd_333x777.jpg"] = encode(mosaic((333, 777), 7), "JPEG", quality=90)
        imgs["odd_1010x1390.png"] = encode(mosaic((1010, 1390), 8), "PNG")
    except (ImportError, ValueError) as e:
        raise SystemExit(f"gpu_check: expected the test images in {INPUTS}, got none and cannot make "
                         f"them here ({e}); fix: run `python bench/gpu_check.py --prepare-inputs` on "
                         f"the development machine and carry bench/.gpu_inputs") from None
    INPUTS.mkdir(exist_ok=True)
    for name, data in imgs.items():
        (INPUTS / name).write_bytes(data)
    _write_clips()


#: the video step's clips: name -> (fourcc, frames, fps, (width, height)); MPEG-4 Part 2 (NVDEC
#: decodes it; DALI's CPU decoder does not) and Motion JPEG (DALI's CPU decoder; not NVDEC)
CLIPS = {"pan_mp4v_640x360.mp4": ("mp4v", 32, 30.0, (640, 360)),
         "pan_mjpg_640x360.avi": ("MJPG", 32, 30.0, (640, 360))}


def _write_clips() -> None:
    """The clips: a 640x360 window panning across a photo mosaic, written by OpenCV."""
    import cv2
    import numpy as np

    from vlmprep.bench.images import mosaic
    big = mosaic((480, 1280), seed=11)
    for name, (fourcc, n, fps, (w, h)) in CLIPS.items():
        wr = cv2.VideoWriter(str(INPUTS / name), cv2.VideoWriter_fourcc(*fourcc), fps, (w, h))
        if not wr.isOpened():
            raise SystemExit(f"gpu_check: expected OpenCV to write {fourcc} into {name}, got a writer "
                             f"that did not open; fix: an opencv-python-headless with FFmpeg")
        for i in range(n):
            y, x = (i * 3) % (480 - h), (i * 19) % (1280 - w)
            wr.write(np.ascontiguousarray(big[y:y + h, x:x + w, ::-1]))
        wr.release()


def _clips() -> dict[str, Path]:
    if not all((INPUTS / n).exists() for n in CLIPS):
        INPUTS.mkdir(exist_ok=True)
        _write_clips()
    return {n: INPUTS / n for n in CLIPS}


def _result(status: str, summary: str, **extra: Any) -> dict:
    return {"status": status, "summary": summary, **extra}


# ----------------------------------------------------------------------------------- steps
def step_env(a: argparse.Namespace) -> dict:
    import PIL
    import torch
    info: dict[str, Any] = {
        "python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "pillow": PIL.__version__, "cpus": os.cpu_count(), "nvcc": shutil.which("nvcc"),
        "compute_sanitizer": _sanitizer(),
        "dali": importlib.util.find_spec("nvidia") is not None
        and importlib.util.find_spec("nvidia.dali") is not None,
        "transformers": importlib.util.find_spec("transformers") is not None,
    }
    if a.device.startswith("cuda"):
        if not torch.cuda.is_available():
            return _result("FAIL", "expected a CUDA device, got torch.cuda.is_available() False; "
                           "fix: run on the GPU machine, or pass --device cpu for a dry run", env=info)
        info["device"] = torch.cuda.get_device_name(0)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    else:
        info["device"] = "cpu"
    missing = [k for k in ("transformers",) if not info[k]]
    if _inject("env"):
        missing.append("injected")
    order = pass_order_check()
    info.update(pass_order_rule=order["rule"], pass_order=order["describe"])
    text = (f"Python {info['python']}, torch {info['torch']} (CUDA {info['torch_cuda']}), "
            f"{info['device']}, Pillow {info['pillow']} (pass order {order['rule']}: "
            f"{order['agree']}/{len(order['rows'])} probes as the rule says), "
            f"nvcc {'yes' if info['nvcc'] else 'no'}, "
            f"compute-sanitizer {'yes' if info['compute_sanitizer'] else 'no'}, "
            f"DALI {'yes' if info['dali'] else 'no'}")
    if not order["ok"]:
        bad = next(r for r in order["rows"] if not r["ok"])
        return _result("FAIL", f"{text}; expected Pillow {info['pillow']} to resize {bad['src']} -> "
                       f"{bad['dst']} in the order {bad['expected']} ({order['rule']}), got "
                       f"{bad['got']}; fix: teach vlmprep/backends/resample_order.py this "
                       f"Pillow's rule (the reference and every backend must use one order)",
                       env=info, pass_order=order["rows"])
    if missing:
        return _result("FAIL", f"{text}; missing: {', '.join(missing)}", env=info)
    return _result("PASS", text, env=info, pass_order=order["rows"])


def pass_order_check() -> dict:
    """Which pass order this machine's Pillow really runs, against the one resample_order names
    for its version: for each probe, one-shot ``Image.resize`` (bicubic, noise) compared with
    the two one-axis resizes in each order (on noise the two orders give different bits)."""
    import numpy as np
    from PIL import Image

    sys.path.insert(0, str(ROOT))
    from vlmprep.backends.resample_order import describe_rule, pass_order_rule, pil_pass_order
    rng = np.random.default_rng(3)
    rows = []
    for (h1, w1), (h2, w2) in PASS_ORDER_PROBES:
        img = Image.fromarray(rng.integers(0, 256, (h1, w1, 3), dtype=np.uint8))
        one = np.asarray(img.resize((w2, h2), Image.BICUBIC))
        h_first = np.asarray(img.resize((w2, h1), Image.BICUBIC).resize((w2, h2), Image.BICUBIC))
        v_first = np.asarray(img.resize((w1, h2), Image.BICUBIC).resize((w2, h2), Image.BICUBIC))
        got = ("h", "v") if np.array_equal(one, h_first) else ("v", "h") if np.array_equal(one, v_first) else ()
        expected = pil_pass_order((h1, w1), (h2, w2), "bicubic")
        if _inject("pass_order"):
            expected = tuple(reversed(expected))
        rows.append({"src": [h1, w1], "dst": [h2, w2], "expected": list(expected), "got": list(got),
                     "ok": got == expected})
    return {"rule": pass_order_rule(), "describe": describe_rule(), "rows": rows,
            "agree": sum(r["ok"] for r in rows), "ok": all(r["ok"] for r in rows)}


def _sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "bin", "compute-sanitizer")):
            return os.path.join(home, "bin", "compute-sanitizer")
    return None


def step_build(a: argparse.Namespace) -> dict:
    if a.skip_build:
        return _result("SKIP", "--skip-build: using the kernels already built in vlmprep/kernels/")
    env = dict(os.environ, MAX_JOBS=str(os.cpu_count() or 4), VLMPREP_REQUIRE_KERNELS="1")
    env.setdefault("VLMPREP_CUDA_ARCHS", "90")  # the H200 (sm_90); more arches cost build time
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    took = time.perf_counter() - t0
    sys.stdout.write(p.stdout[-4000:] + p.stderr[-4000:])
    if p.returncode != 0 or _inject("build"):
        return _result("FAIL", f"setup.py build_ext --inplace exited {p.returncode} after {took:.0f} s "
                       f"(its last lines are in the log)", seconds=round(took, 1))
    # A fresh process sees what was built (this one may have loaded nothing yet, but be sure).
    probe = subprocess.run([sys.executable, "-c", "import json, vlmprep.kernels as k; "
                            "print(json.dumps(k.summary()))"], cwd=ROOT, capture_output=True, text=True)
    if probe.returncode != 0:
        return _result("FAIL", f"the built kernels do not import: {probe.stderr[-500:]}")
    summary = json.loads(probe.stdout.strip().splitlines()[-1])
    ext = summary.get("torch_ext", {})
    want_cuda = a.device.startswith("cuda")
    if not summary.get("built") or (want_cuda and not ext.get("cuda")):
        return _result("FAIL", f"expected the torch ops built{' with CUDA' if want_cuda else ''}, got "
                       f"built={summary.get('built')} cuda={ext.get('cuda')} ({summary.get('reason')})",
                       kernels=summary)
    return _result("PASS", f"built in {took:.0f} s: CUDA {ext.get('cuda_archs') or 'no'}, libjpeg "
                   f"{'yes' if ext.get('libjpeg') else 'no'}, DALI plugin "
                   f"{'yes' if summary.get('dali_plugin', {}).get('built') else 'no'}",
                   seconds=round(took, 1), kernels=summary)


def step_kernels(a: argparse.Namespace) -> dict:
    sys.path.insert(0, str(HERE))
    import gpu_check_kernels
    rows, ok = gpu_check_kernels.check(a.device, corrupt=lambda t: corrupt("kernels", t))
    bw = next((r for r in rows if "fraction_of_copy" in r), {})
    bad = [r["check"] for r in rows if r.get("result") not in ("bit-exact", None) and "fraction_of_copy" not in r]
    text = (f"{sum(r.get('result') == 'bit-exact' for r in rows)} cases bit-exact"
            + (f", {len(bad)} not: {', '.join(bad[:4])}" if bad else "")
            + (f"; bandwidth {bw.get('kernel_GB_per_s')} GB/s = {bw.get('fraction_of_copy')} of a copy"
               if bw else ""))
    # On the GPU the bandwidth goal is part of pass/fail (a slow kernel is a regression to see);
    # on the CPU dry run both sides are CPU code and the ratio says nothing.
    frac = bw.get("fraction_of_copy")
    if a.device.startswith("cuda") and frac is not None and frac < GOALS["kernel_fraction_of_copy"]:
        ok = False
        text += f"; below the {GOALS['kernel_fraction_of_copy']:.0%} of a copy the kernel must reach"
    return _result("PASS" if ok else "FAIL", text, rows=rows,
                   figures={"kernel_fraction_of_copy": bw.get("fraction_of_copy"),
                            "kernel_GB_per_s": bw.get("kernel_GB_per_s"),
                            "copy_GB_per_s": bw.get("copy_GB_per_s")})


def step_memcheck(a: argparse.Namespace) -> dict:
    if not a.device.startswith("cuda"):
        return _result("SKIP", "no CUDA device (dry run): compute-sanitizer checks device code only")
    tool = _sanitizer()
    if tool is None:
        return _result("FAIL", "expected compute-sanitizer (CUDA toolkit), got none on PATH or in "
                       "CUDA_HOME/bin; fix: install the CUDA toolkit's sanitizer")
    # Only our kernel is instrumented (torch's own kernels under memcheck would eat the time box).
    cmd = [tool, "--tool", "memcheck", "--leak-check", "no", "--error-exitcode", "9",
           "--kernel-name", "kns=normalize_patchify",
           sys.executable, str(Path(__file__).resolve()), "--small-kernels", "--device", a.device]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    out = p.stdout + p.stderr
    sys.stdout.write(out[-3000:])
    summary = next((ln.strip() for ln in out.splitlines() if "ERROR SUMMARY" in ln), "no ERROR SUMMARY line")
    ok = p.returncode == 0 and "ERROR SUMMARY: 0 errors" in out and not _inject("memcheck")
    return _result("PASS" if ok else "FAIL", f"{summary} (exit {p.returncode})")


def small_kernels(device: str) -> int:
    """A small ragged batch of every order and dtype through the kernel (under memcheck)."""
    sys.path.insert(0, str(HERE))
    import gpu_check_kernels
    ok = gpu_check_kernels.small_cases(device)
    print("small kernel cases:", "bit-exact" if ok else "MISMATCH")
    return 0 if ok else 1


def _parity_row(step: str, preset: str, backend: str, device: str, dtype: str, images: list,
                invariance: bool, bound: dict | None = None, ref_images: list | None = None) -> dict:
    """``backend`` on ``device`` against the reference backend on the CPU, one preset and dtype:
    levels (float outputs in uint8 levels of the channel that hides least) within ``bound``
    (max / mean / p999; default MAX_LEVELS and MEAN_LEVELS), the same geometry, and
    (``invariance``) each image alone giving the rows it has in the batch. ``ref_images``: what
    the reference is fed instead of ``images`` (e.g. the pixels the device decoded). Never
    raises: an exception (e.g. an op with no CUDA kernel) is this row's error, so it hides no
    other row."""
    import torch

    import vlmprep
    row: dict[str, Any] = {"preset": preset, "backend": backend, "device": device, "dtype": dtype}
    try:
        proc = vlmprep.Processor(preset, backend=backend, device=device, dtype=dtype)
        ref = vlmprep.Processor(preset, backend="reference", dtype="uint8" if dtype == "uint8" else "float32")
        got, want = proc(images), ref(images if ref_images is None else ref_images)
        scale = 1.0 if dtype == "uint8" else 255 * max(proc.pipeline.normalize.std)
        mx, mean, p999 = _levels(corrupt(step, got.pixel_values).float(), want.pixel_values.float(), scale)
        same_geometry = got.num_tokens == want.num_tokens and torch.equal(got.grid_thw.cpu(), want.grid_thw.cpu())
        row.update(max_levels=round(mx, 3), mean_levels=round(mean, 4), p999_levels=round(p999, 3),
                   same_geometry=same_geometry)
        b = {"max": MAX_LEVELS, "mean": MEAN_LEVELS, "p999": float("inf"), **(bound or {})}
        ok = mx <= b["max"] and mean <= b["mean"] and p999 <= b["p999"] and same_geometry
        if invariance:
            alone = torch.cat([proc([x]).pixel_values for x in images])
            row["batch_invariant"] = bool(torch.equal(alone, got.pixel_values))
            ok = ok and row["batch_invariant"]
        row["ok"] = ok
    except Exception as e:  # noqa: BLE001 (reported per row; the step fails)
        row.update(ok=False, error=f"{type(e).__name__}: {str(e)[:300]}")
    return row


def step_parity(a: argparse.Namespace) -> dict:
    import vlmprep
    images = _inputs(a.quick)
    parity_in = [images["720p"], images["1080p"], images["odd_333x777"], images["odd_1010x1390"]]
    presets = QUICK_PRESETS if a.quick else tuple(vlmprep.presets.names())
    rows, ok = [], True
    for preset in presets:
        for dtype in ("uint8", "float32", "bfloat16"):
            row = _parity_row("parity", preset, "torch", a.device, dtype, parity_in, invariance=True)
            ok &= bool(row["ok"])
            rows.append(row)
            print(json.dumps(row))
    worst = max((r.get("max_levels", 0.0) for r in rows), default=0.0)
    resize_rows = _torch_resize_rows(a.device, images["1080p"])
    ok &= all(r["ok"] for r in resize_rows)
    bad = [f"{r['preset']}/{r['dtype']}" for r in rows if not r["ok"]]
    bad += [r["check"] for r in resize_rows if not r["ok"]]
    text = (f"{len(rows) - sum(not r['ok'] for r in rows)}/{len(rows)} rows within {MAX_LEVELS:g} levels "
            f"(mean {MEAN_LEVELS:g}), batch invariant, same geometry; worst max {worst:g} levels; "
            f"resize alone {sum(r['ok'] for r in resize_rows)}/{len(resize_rows)} bit-exact with Pillow"
            + (f"; failed: {', '.join(bad[:6])}{' ...' if len(bad) > 6 else ''}" if bad else ""))
    return _result("PASS" if ok else "FAIL", text, rows=rows, resize_rows=resize_rows,
                   figures={"max_levels": worst})


def _torch_resize_rows(device: str, jpeg_1080p: bytes) -> list[dict]:
    """The torch backend's resize alone against ``PIL.Image.resize``, every filter: the 1080p
    photo to Qwen2-VL's 1092x1932, and a 100x20000 panorama to 224x224 (a one-axis downscale
    that ran torch's antialiased CUDA kernels out of shared memory). On a GPU this is Pillow's
    integer arithmetic in float64 (pil_resample): 0 levels; the dry run runs the same
    device-generic path on the CPU (resize.EXACT_ON_CPU). Both follow the installed Pillow's
    pass order, as Pillow itself does. Injection: ``torch_resize``."""
    import numpy as np
    import torch
    from PIL import Image

    from vlmprep.backends.torch import resize as R
    R.EXACT_ON_CPU = True  # this step's process only: the CPU runs the device path
    photo = _pil_decode(jpeg_1080p)
    pano = np.random.default_rng(4).integers(0, 256, (100, 20000, 3), dtype=np.uint8)
    filters = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
    rows = []
    for case, img, hw in (("1080p -> 1092x1932", photo, (1092, 1932)), ("100x20000 -> 224x224", pano, (224, 224))):
        x = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous().to(device)
        for name, pil_filter in filters.items():
            check = f"torch resize vs Pillow {name} {case}"
            try:
                got = corrupt("torch_resize", R.resize_like_pil(x, hw, name).permute(1, 2, 0).cpu())
                want = torch.from_numpy(np.asarray(Image.fromarray(img).resize((hw[1], hw[0]), pil_filter)))
                mx = float((got.int() - want.int()).abs().max())
                rows.append({"check": check, "max_levels": mx, "ok": mx == 0})
            except Exception as e:  # noqa: BLE001 (reported per row; the step fails)
                rows.append({"check": check, "ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            print(json.dumps(rows[-1]))
    return rows


def step_timing(a: argparse.Namespace) -> dict:
    import torch
    import torchvision
    from torchvision.io import decode_jpeg

    import vlmprep
    from vlmprep.bench import hf as bench_hf
    images = _inputs(a.quick)
    batch = 32 if a.device.startswith("cuda") else 4
    repeats = 2 if a.quick else 5
    proc = vlmprep.Processor("qwen2-vl", backend="torch", device=a.device, dtype="float32")
    hf_proc = bench_hf.build(bench_hf.config_for("qwen2-vl", proc.pipeline), proc.pipeline, "torchvision")
    rows, ok = [], True
    for size in ("720p", "1080p", "4k"):
        if size not in images:
            continue
        items = [images[size]] * batch
        # The output is checked, not only timed: the batch equals one image's rows repeated.
        out = proc(items)
        one = proc(items[:1]).pixel_values
        n = one.shape[0]
        same = bool(torch.equal(corrupt("timing", out.pixel_values[:n]), one)) and \
            out.pixel_values.shape[0] == n * batch
        ok &= same
        t_ours = _best_time(lambda items=items: proc(items), a.device, repeats)
        data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in items]
        dev = a.device if a.device.startswith("cuda") else "cpu"
        t_dec = _best_time(lambda data=data, dev=dev: decode_jpeg(data, device=dev), a.device, repeats)
        # The same bytes decoded by torchvision on the device (nvJPEG on cuda) and handed to
        # the Processor as CHW uint8 tensors: JPEG bytes to packed tensors without a CPU decode.
        nv = proc(decode_jpeg(data, device=dev))
        nv_levels = _levels(nv.pixel_values.float(), out.pixel_values.float(),
                            255 * max(proc.pipeline.normalize.std))[0]
        t_nv = _best_time(lambda data=data, dev=dev: proc(decode_jpeg(data, device=dev)), a.device, repeats)
        t_hf = _best_time(lambda items=items: bench_hf.call(hf_proc, items, a.device), a.device,
                          max(1, repeats // 2))
        t_best = min(t_ours, t_nv)
        row = {"size": size, "batch": batch, "output_ok": same,
               "images_per_s": round(batch / t_ours, 1),
               "nvjpeg_path_images_per_s": round(batch / t_nv, 1),
               "nvjpeg_path_max_levels": round(nv_levels, 3),
               "decode_floor_images_per_s": round(batch / t_dec, 1),
               "hf_torchvision_images_per_s": round(batch / t_hf, 1),
               "best_images_per_s": round(batch / t_best, 1),
               "speedup_vs_hf_torchvision": round(t_hf / t_best, 2)}
        rows.append(row)
        print(json.dumps(row))
    r1080 = next((r for r in rows if r["size"] == "1080p"), {})
    text = "; ".join(f"{r['size']} {r['images_per_s']} img/s, via decode_jpeg {r['nvjpeg_path_images_per_s']} "
                     f"(decode floor {r['decode_floor_images_per_s']}, best {r['speedup_vs_hf_torchvision']}x hf)"
                     for r in rows)
    return _result("PASS" if ok else "FAIL", text + ("" if ok else "; a batch's rows differ from one image's"),
                   rows=rows, torchvision=torchvision.__version__,
                   figures={"images_per_s_1080p": r1080.get("best_images_per_s"),
                            "speedup_vs_hf_torchvision": r1080.get("speedup_vs_hf_torchvision")})


def _engine_pair(device: str) -> tuple[Any, Any, Any]:
    """(transformers' Qwen2-VL torchvision image processor as vLLM builds it, with the engines'
    hook on ``device``; the same without it; the hook's oracle: the PIL processor on a GPU, where
    the hook gives Pillow-exact pixels, the torchvision one itself on the CPU, a dry run)."""
    import copy

    from vlmprep import presets
    from vlmprep.bench import hf as bench_hf
    from vlmprep.integrations import hf_image_processor as hook
    pipe = presets.get("qwen2-vl")
    cfg = bench_hf.config_for("qwen2-vl", pipe)
    tv, pil = bench_hf.build(cfg, pipe, "torchvision"), bench_hf.build(cfg, pipe, "pil")
    hooked = copy.deepcopy(tv)
    os.environ[hook.DEVICE_ENV] = device
    if not hook.install(hooked, lambda: True):
        raise RuntimeError(f"the hook does not take {type(tv).__name__}")
    return hooked, tv, (tv if device == "cpu" else pil)


def step_engine(a: argparse.Namespace) -> dict:
    """vlmprep inside an engine's process on the device (issue 32, ``VLMPREP_VLLM_DEVICE``): the
    plugins' hook on transformers' Qwen2-VL image processor, as vLLM calls it per request."""
    import io

    import torch
    from PIL import Image

    from vlmprep.integrations import hf_image_processor as hook
    images = _inputs(a.quick)
    repeats = 3 if a.quick else 7
    try:
        hooked, tv, oracle = _engine_pair(a.device)
    except (ImportError, ValueError) as e:  # transformers absent, or without the Qwen2-VL classes
        return _result("SKIP", f"no transformers Qwen2-VL image processors here: {str(e)[:300]}")
    rows, ok = [], True
    for mode, raw in (("float32", {}), ("uint8", {"do_rescale": False, "do_normalize": False})):
        for size in ("720p", "1080p", "odd_333x777"):
            data = images[size]
            im = Image.open(io.BytesIO(data)).convert("RGB")
            before = dict(hook.STATS)
            got = hooked([im], return_tensors="pt", **raw)
            want = dict(oracle([im], return_tensors="pt", **raw))
            took = hook.STATS["vlmprep"] - before["vlmprep"]
            g, w = corrupt("engine", got["pixel_values"]), want["pixel_values"]
            # the PIL processor gives uint8 levels as float32; the hook the torchvision one's uint8
            d = (g.double() - w.double()).abs().max().item() if g.shape == w.shape else float("inf")
            exact = g.device.type == "cpu" and torch.equal(got["image_grid_thw"], want["image_grid_thw"]) \
                and (d == 0 if raw else d <= 1e-6) and took == 1
            # the JPEG bytes vLLM's loader leaves undecoded with the plugin on: the device decodes
            by = hooked([_lazy(data)], return_tensors="pt", **raw)["pixel_values"]
            scale = 1.0 if raw else 255 * 0.26862954  # qwen2-vl's largest std: levels per unit
            mx = _levels(by.float(), w.float(), scale)[0] if by.shape == w.shape else float("inf")
            row = {"mode": mode, "size": size, "images_exact": exact, "max_abs_diff": d,
                   "jpeg_bytes_max_levels": round(mx, 3), "jpeg_bytes_ok": mx <= MAX_LEVELS}
            if size == "1080p":  # per request, one image, as vLLM's renderer calls it
                row.update(_engine_times(hooked, tv, data, raw, a.device, repeats))
            ok &= exact and row["jpeg_bytes_ok"]
            rows.append(row)
            print(json.dumps(row))
    r = next(r for r in rows if r["mode"] == "uint8" and r["size"] == "1080p")
    speed = (r["ms_pillow_decode"] + r["ms_transformers_torchvision_cpu"]) / r["ms_hook_device_from_bytes"]
    oracle_name = "torchvision" if a.device == "cpu" else "PIL"
    text = (f"{sum(x['images_exact'] for x in rows)}/{len(rows)} exact vs the {oracle_name} processor, JPEG bytes "
            f"<= {max(x['jpeg_bytes_max_levels'] for x in rows)} levels; 1080p uint8 per request: hook on "
            f"{a.device} {r['ms_hook_device_from_bytes']} ms from bytes, {r['ms_hook_device']} ms from the "
            f"decoded image, hook on cpu {r['ms_hook_cpu']} ms, Pillow decode + transformers "
            f"torchvision {r['ms_pillow_decode']} + {r['ms_transformers_torchvision_cpu']} ms ({speed:.2f}x)")
    return _result("PASS" if ok else "FAIL", text, rows=rows,
                   figures={"engine_speedup_per_request_1080p": round(speed, 2)})


def _engine_times(hooked: Any, tv: Any, data: bytes, raw: dict, device: str, repeats: int) -> dict:
    """ms per request (one image) of the hook on ``device`` from the JPEG bytes and from the
    decoded image, the hook on the CPU, transformers' torchvision processor and Pillow's decode."""
    import io

    from PIL import Image

    from vlmprep.integrations import hf_image_processor as hook
    im = Image.open(io.BytesIO(data)).convert("RGB")
    out = {"ms_hook_device": _best_time(lambda: hooked([im], return_tensors="pt", **raw), device, repeats),
           "ms_hook_device_from_bytes": _best_time(
               lambda: hooked([_lazy(data)], return_tensors="pt", **raw), device, repeats)}
    os.environ[hook.DEVICE_ENV] = "cpu"
    try:
        out["ms_hook_cpu"] = _best_time(lambda: hooked([im], return_tensors="pt", **raw), "cpu", repeats)
    finally:
        os.environ[hook.DEVICE_ENV] = device
    out["ms_transformers_torchvision_cpu"] = _best_time(
        lambda: tv([im], return_tensors="pt", **raw), "cpu", max(1, repeats // 2))
    out["ms_pillow_decode"] = _best_time(lambda: Image.open(io.BytesIO(data)).convert("RGB"), "cpu", repeats)
    return {k: round(1e3 * v, 2) for k, v in out.items()}


def _lazy(data: bytes) -> Any:
    """A JPEG as vLLM's loader leaves it with the plugin on (vllm_media): opened, undecoded."""
    import io

    from PIL import Image

    from vlmprep.integrations.vllm_media import _ATTR
    im = Image.open(io.BytesIO(data))
    setattr(im, _ATTR, data)
    return im


#: the video step's bound (uint8 levels) between a DALI decoder's frames and OpenCV's (FFmpeg's
#: swscale): DALI converts YUV to RGB its own way (tests/video/test_video_dali.py measured its CPU
#: decoder at mean 1.4-1.9, max 15-40 on VP8 / VP9 / MJPEG, and bounds it at mean 2.5, max 48)
VIDEO_MAX_LEVELS, VIDEO_MEAN_LEVELS = 48.0, 2.5


def step_video(a: argparse.Namespace) -> dict:
    """DALI's video decoders (issue 29 item 4): NVDEC (``video_decoder="dali:cuda"``) on a GPU,
    DALI's CPU decoder on a dry run, each clip through the Processor (qwen2-vl, uint8 rows)
    against the same clip decoded by OpenCV: levels, and clips/s of both."""
    import torch

    import vlmprep
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return _result("SKIP", "DALI absent (bench/dali_transfer.sh sends it to the GPU machine)")
    gpu = a.device.startswith("cuda")
    dec = "dali:cuda" if gpu else "dali:cpu"
    ref = vlmprep.Processor("qwen2-vl", dtype="uint8", video_decoder="opencv")
    proc = vlmprep.Processor("qwen2-vl", dtype="uint8", video_decoder=dec)
    rows, ok, ran = [], True, 0
    for name, path in _clips().items():
        want = ref(videos=[str(path)])
        row: dict[str, Any] = {"clip": name, "decoder": dec}
        try:
            got = proc(videos=[str(path)])
        except vlmprep.ImageError as e:  # a codec this decoder does not take: named, not failed
            row.update(status="SKIP", why=str(e)[:200])
            rows.append(row)
            print(json.dumps(row))
            continue
        g = corrupt("video", got.videos.pixel_values.cpu())
        w = want.videos.pixel_values
        same_geometry = g.shape == w.shape and torch.equal(got.videos.grid_thw.cpu(), want.videos.grid_thw)
        mx, mean, p999 = _levels(g.float(), w.float(), 1.0) if g.shape == w.shape else (float("inf"),) * 3
        good = same_geometry and mx <= VIDEO_MAX_LEVELS and mean <= VIDEO_MEAN_LEVELS
        row.update(status="PASS" if good else "FAIL", same_geometry=same_geometry,
                   max_levels=mx, mean_levels=round(mean, 4), p999_levels=p999,
                   clips_per_s=round(1 / _best_time(lambda p=str(path): proc(videos=[p]), a.device, 3), 2),
                   opencv_clips_per_s=round(1 / _best_time(lambda p=str(path): ref(videos=[p]), "cpu", 3), 2))
        ok &= good
        ran += 1
        rows.append(row)
        print(json.dumps(row))
    if not ran:
        return _result("SKIP", f"{dec} took none of the clips: " + "; ".join(r.get("why", "") for r in rows),
                       rows=rows)
    text = "; ".join(f"{r['clip']} {r['status']}" + (f" {r['max_levels']:.0f} levels max, {r['clips_per_s']} "
                     f"clips/s vs OpenCV {r['opencv_clips_per_s']}" if "max_levels" in r else "")
                     for r in rows)
    return _result("PASS" if ok else "FAIL", f"{dec} vs OpenCV: {text}", rows=rows)


def step_dali(a: argparse.Namespace) -> dict:
    if importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.dali") is None:
        return _result("SKIP", "skipped: DALI absent (bench/dali_transfer.sh sends it to the GPU machine)")
    from vlmprep import kernels
    from vlmprep.backends.dali.parity import BOUNDS, decode_only
    images = _inputs(a.quick)
    jpegs = {k: images[k] for k in ("720p", "1080p", "odd_333x777") if k in images}
    dev = "gpu" if a.device.startswith("cuda") else "cpu"
    rows, ok = [], True
    # Path 1, decode: the decoder the device graphs use against Pillow's (libjpeg-turbo).
    decoded = dict(zip(jpegs, decode_only(list(jpegs.values()), dev)))
    for name, arr in decoded.items():
        row = _levels_row("decode", f"decode {name} ({'nvJPEG' if dev == 'gpu' else 'libjpeg-turbo'} "
                          "vs Pillow)", arr, _pil_decode(jpegs[name]), BOUNDS["decode"])
        ok &= row["ok"]
        rows.append(row)
        print(json.dumps(row))
    # Path 2, resize: the canvas graph on the device against Pillow on the same decoded pixels.
    same_px = [decoded["720p"], decoded["odd_333x777"]]
    for preset in ("qwen2-vl", "internvl", "siglip"):
        row = _parity_row("dali_resize", preset, "dali", a.device, "uint8", same_px, invariance=False,
                          bound=BOUNDS["resize"])
        row["path"] = "resize (same decoded pixels)"
        ok &= bool(row["ok"])
        rows.append(row)
        print(json.dumps(row))
    # Path 3, rounding: exact ties through the device's own conversion and through to_levels.
    rnd = _rounding_row(dev)
    ok &= rnd["ok"]
    rows.append(rnd)
    print(json.dumps(rnd))
    # End to end: encoded files in, the mean and 99.9th percentile (the max is bounded
    # path by path above).
    parity_in = [images["720p"], images["odd_333x777"], images["odd_1010x1390"]]
    for preset in ("qwen2-vl", "internvl", "siglip"):
        for dtype in ("uint8", "float32"):
            row = _parity_row("dali", preset, "dali", a.device, dtype, parity_in, invariance=False,
                              bound={"max": float("inf") if dev == "gpu" else MAX_LEVELS,
                                     "mean": 1.0, "p999": 6.0})
            row["path"] = "end to end"
            ok &= bool(row["ok"])
            rows.append(row)
            print(json.dumps(row))
    plugin = kernels.available() and kernels.dali_plugin_loaded(a.device)
    if plugin:  # the plugin op itself: on the device against its CPU op (the CPU op on a dry run
        # against the compiled twin), every order, bit-exact
        for order, P, m, T in (("merge_grouped", 14, 2, 2), ("raster", 16, 1, 1), ("naflex", 16, 1, 1),
                               ("tiles", 14, 1, 1)):
            same = _plugin_vs_reference(a.device, order, P, m, T)
            ok &= same
            rows.append({"check": f"plugin {a.device} vs {'cpu op' if a.device != 'cpu' else 'twin'} {order}",
                         "ok": same})
    bad = [r.get("check") or f"{r['preset']}/{r['dtype']} {r.get('path', '')}".strip() for r in rows
           if not r["ok"]]
    worst = {p: max((r.get("max_levels", float("inf")) for r in rows if r.get("path_key") == p), default=None)
             for p in ("decode", "rounding")}
    resize_max = max((r.get("max_levels", 0.0) for r in rows if r.get("path", "").startswith("resize")),
                     default=None)
    plug = [r for r in rows if r.get("check", "").startswith("plugin")]
    e2e = [r for r in rows if r.get("path") == "end to end"]
    text = (f"decode max {worst['decode']} levels (bound {BOUNDS['decode']['max']:g}); resize max "
            f"{resize_max} (bound {BOUNDS['resize']['max']:g}); rounding: {rnd['summary']}; "
            f"{sum(r['ok'] for r in e2e)}/{len(e2e)} end-to-end rows within mean 1 / p99.9 6; "
            + (f"plugin {sum(r['ok'] for r in plug)}/{len(plug)} orders bit-exact against "
               f"{'its CPU op' if a.device != 'cpu' else 'the twin'}" if plugin else "plugin not loaded")
            + (f"; failed: {', '.join(bad)}" if bad else ""))
    return _result("PASS" if ok else "FAIL", text, rows=rows,
                   figures={"dali_decode_max_levels": worst["decode"], "dali_resize_max_levels": resize_max,
                            "dali_device_cast_ties_moved": rnd["device_cast_ties_moved"]})


def _pil_decode(data: bytes) -> Any:
    import io

    import numpy as np
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _levels_row(key: str, check: str, got: Any, want: Any, bound: dict) -> dict:
    """One path's comparison in uint8 levels against its bound (``key``: the injection name is
    ``dali_<key>``)."""
    import numpy as np
    import torch
    g = corrupt(f"dali_{key}", torch.from_numpy(np.ascontiguousarray(got)))
    w = torch.from_numpy(np.ascontiguousarray(want))
    if g.shape != w.shape:
        return {"check": check, "path_key": key, "ok": False, "error": f"shape {tuple(g.shape)} vs {tuple(w.shape)}"}
    mx, mean, p999 = _levels(g.float(), w.float(), 1.0)
    ok = mx <= bound["max"] and mean <= bound["mean"] and p999 <= bound["p999"]
    return {"check": check, "path_key": key, "max_levels": round(mx, 3), "mean_levels": round(mean, 4),
            "p999_levels": round(p999, 3), "bound": bound, "ok": bool(ok)}


def _rounding_row(dev: str) -> dict:
    """Exact ties k + 0.5 (k = 0..255) through the device: DALI's own float -> uint8 conversion
    (fn.cast; on the GPU half to even, so it moves the 128 even ties one level down; on the host
    none) and the graphs' ``to_levels`` (rounds in the graph: must move none, on either)."""
    import numpy as np
    import torch
    from nvidia.dali import fn, pipeline_def, types

    from vlmprep.backends.dali.lowerings import to_levels
    x = np.arange(256, dtype=np.float32) + 0.5
    pillow = np.clip(np.floor(x.astype(np.float64) + 0.5), 0, 255).astype(np.uint8)

    @pipeline_def(batch_size=1, num_threads=1, device_id=0 if dev == "gpu" else None)
    def pipe():
        v = fn.external_source(source=lambda: [x], batch=True, device=dev)
        return fn.cast(v, dtype=types.UINT8), to_levels(v, explicit=True)
    p = pipe()
    p.build()
    outs = p.run()
    own, ours = (np.array((o.as_cpu() if dev == "gpu" else o)[0]) for o in outs)
    ours = corrupt("dali_rounding", torch.from_numpy(ours.copy())).numpy()
    moved_own, moved_ours = int((own != pillow).sum()), int((ours != pillow).sum())
    summary = (f"{moved_own}/256 exact ties moved by DALI's own {dev} conversion, "
               f"{moved_ours} by to_levels")
    return {"check": f"rounding of exact ties on the {dev}", "path_key": "rounding",
            "max_levels": float(np.abs(ours.astype(int) - pillow).max()),
            "device_cast_ties_moved": moved_own, "to_levels_ties_moved": moved_ours,
            "summary": summary, "ok": moved_ours == 0}


def _plugin_vs_reference(device: str, order: str, P: int, m: int, T: int) -> bool:
    """fn.vlmprep_normalize_patchify on ``device`` == the same op on the CPU (on the CPU itself:
    == the compiled twin, kernels.normalize_patchify), float32 rows of a ragged batch."""
    import numpy as np
    import torch
    from nvidia.dali import fn, pipeline_def, types

    from vlmprep import kernels
    sys.path.insert(0, str(HERE))
    import gpu_check_kernels
    rng = np.random.default_rng(2)
    q = P * (m if order == "merge_grouped" else 1)
    imgs = [rng.integers(0, 256, ((k % 2 + 1) * q, (k % 3 + 1) * q, 3), dtype=np.uint8) for k in range(4)]
    lut = rng.standard_normal((3, 256)).astype(np.float32)

    def run(on_gpu: bool) -> list:
        @pipeline_def(batch_size=len(imgs), num_threads=2, device_id=0 if on_gpu else None)
        def pipe():
            x = fn.external_source(source=lambda: imgs, batch=True, layout="HWC")
            return fn.vlmprep_normalize_patchify(x.gpu() if on_gpu else x, order=order, patch_size=P,
                                                 merge_size=m, temporal_patch_size=T,
                                                 lut=lut.reshape(-1).tolist(), dtype=types.FLOAT)
        p = pipe()
        p.build()
        (out,) = p.run()
        out = out.as_cpu() if on_gpu else out
        return [np.asarray(out[k]).reshape(-1) for k in range(len(imgs))]

    got = run(device.startswith("cuda"))
    if device.startswith("cuda"):
        want = run(False)
    else:
        want = []
        for img in imgs:
            o = torch.empty(gpu_check_kernels.elems(img.shape[0], img.shape[1], order, P, T))
            kernels.normalize_patchify([torch.from_numpy(img)], torch.from_numpy(lut), o, [0], order, P, m, T)
            want.append(o.numpy())
    got = [corrupt("dali", torch.from_numpy(g.copy())).numpy() for g in got]
    return all(g.shape == w.shape and np.array_equal(g.view(np.uint8), w.view(np.uint8))
               for g, w in zip(got, want))


STEP_FUNCS: dict[str, Callable[[argparse.Namespace], dict]] = {
    "env": step_env, "build": step_build, "kernels": step_kernels, "memcheck": step_memcheck,
    "parity": step_parity, "timing": step_timing, "engine": step_engine, "video": step_video,
    "dali": step_dali}


# ---------------------------------------------------------------------------------- driver
def _run_step(name: str, box: float, a: argparse.Namespace, tmp: Path, log) -> dict:
    """One step in its own process, killed after ``box`` seconds."""
    res_path = tmp / f"{name}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--step", name, "--device", a.device,
           "--result", str(res_path)] + (["--quick"] if a.quick else []) + (["--skip-build"] if a.skip_build else [])
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=box)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc = None
    took = time.perf_counter() - t0
    log.write(f"\n===== {name} ({took:.1f} s, exit {rc}) =====\n{out}\n")
    log.flush()
    if rc is None:
        res = _result("FAIL", f"did not finish within its {box:.0f} s time box")
    elif res_path.exists():
        res = json.loads(res_path.read_text())
        if rc != 0 and res["status"] != "FAIL":
            res = _result("FAIL", f"exited {rc} after reporting {res['status']}: {res['summary']}")
    else:
        tail = " | ".join(ln for ln in out.strip().splitlines()[-3:])
        res = _result("FAIL", f"exited {rc} without a result: {tail[-400:]}")
    res["seconds"] = round(took, 1)
    return res


def _markdown(report: dict) -> str:
    lines = [f"# GPU check {report['tag']}", "", f"{report['started']}; device {report['device']}; "
             f"exit {report['exit_status']}", "", "| step | status | seconds | summary |", "|---|---|---|---|"]
    for name, r in report["steps"].items():
        lines.append(f"| {name} | {r['status']} | {r.get('seconds', '')} | {r['summary'].replace('|', '/')} |")
    lines += ["", "| goal | wanted | got | met |", "|---|---|---|---|"]
    for k, g in report["goals"].items():
        lines.append(f"| {k} | {g['wanted']} | {g['got']} | {g['met']} |")
    return "\n".join(lines) + "\n"


def _goals(steps: dict) -> dict:
    fig: dict[str, Any] = {}
    for r in steps.values():
        fig.update({k: v for k, v in r.get("figures", {}).items() if v is not None})
    out = {}
    for k, want in GOALS.items():
        got = fig.get(k)
        met = None if got is None else (got <= want if k == "max_levels" else got >= want)
        out[k] = {"wanted": (f"<= {want}" if k == "max_levels" else f">= {want}"), "got": got, "met": met}
    return out


def drive(a: argparse.Namespace) -> int:
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = a.tag or f"{platform.node() or 'host'}_{a.device.split(':')[0]}_{datetime.date.today():%Y%m%d}"
    tmp = out_dir / f".gpu_check_{tag}"
    tmp.mkdir(exist_ok=True)
    scale = a.budget / sum(box for _, box in STEPS)
    boxes = dict(STEPS)
    for spec in a.box:
        name, _, secs = spec.partition("=")
        if name not in boxes or not secs.replace(".", "", 1).isdigit():
            raise SystemExit(f"gpu_check: --box: expected STEP=SECONDS with STEP one of {list(boxes)}, "
                             f"got {spec!r}")
        boxes[name] = float(secs) / scale  # an explicit box is not scaled
    deadline = time.monotonic() + a.budget
    steps: dict[str, dict] = {}
    only = set(a.only.split(",")) if a.only else None
    log_path = out_dir / f"gpu_check_{tag}.log"
    with open(log_path, "w") as log:
        for name, _ in STEPS:
            box = boxes[name]
            if only is not None and name not in only:
                continue
            left = deadline - time.monotonic()
            if left < 5:
                steps[name] = _result("FAIL", "not run: the time budget was spent by the steps before")
            else:
                steps[name] = _run_step(name, min(box * scale, left), a, tmp, log)
            r = steps[name]
            print(f"{r['status']:4s} {name:9s} {r.get('seconds', 0):6.1f} s  {r['summary']}", flush=True)
    failed = [n for n, r in steps.items() if r["status"] == "FAIL"]
    report = {"tag": tag, "started": datetime.datetime.now().isoformat(timespec="seconds"),
              "device": a.device, "quick": a.quick, "steps": steps, "goals": _goals(steps),
              "failed": failed, "exit_status": 1 if failed else 0}
    json_path, md_path = out_dir / f"gpu_check_{tag}.json", out_dir / f"gpu_check_{tag}.md"
    json_path.write_text(json.dumps(report, indent=2))
    md_path.write_text(_markdown(report))
    shutil.rmtree(tmp, ignore_errors=True)
    print(_markdown(report))
    dest = os.environ.get("OUT")
    if dest and os.path.isdir(dest):  # the device tool brings back what is under $OUT
        for p in (json_path, md_path, log_path):
            shutil.copy(p, dest)
    print(f"wrote {json_path}, {md_path}, {log_path}")
    if failed:
        print(f"gpu_check: FAILED {len(failed)} step(s): {', '.join(failed)}", file=sys.stderr)
        return 1
    print("gpu_check: all steps passed")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=os.environ.get("DEVICE", "cuda"), help="cuda (default) or cpu (dry run)")
    ap.add_argument("--out", default=str(HERE / "results"), help="where the JSON, table and log go")
    ap.add_argument("--tag", default=None, help="results file tag (default: host_device_date)")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for all steps (default 540)")
    ap.add_argument("--quick", action="store_true", help="3 presets, no 4K, fewer repeats (tests)")
    ap.add_argument("--skip-build", action="store_true", help="use the kernels already built")
    ap.add_argument("--only", default=None, help="comma-separated steps to run (default: all)")
    ap.add_argument("--box", action="append", default=[], metavar="STEP=SECONDS",
                    help="a step's own time box, unscaled (repeatable)")
    ap.add_argument("--prepare-inputs", action="store_true", help="write bench/.gpu_inputs and exit")
    ap.add_argument("--step", choices=list(STEP_FUNCS), help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--small-kernels", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.prepare_inputs:
        prepare_inputs()
        print(f"wrote {sorted(p.name for p in INPUTS.iterdir())} to {INPUTS}")
        return 0
    if a.small_kernels:
        return small_kernels(a.device)
    if a.step:
        res = STEP_FUNCS[a.step](a)
        Path(a.result).write_text(json.dumps(res))
        return 0
    return drive(a)


if __name__ == "__main__":
    sys.exit(main())
