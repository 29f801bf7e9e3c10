"""``vlmprep bench``: throughput, latency, per-stage time and ratios (decode floor, transformers).

Examples::

    vlmprep bench --preset qwen2-vl --synthetic 1080p --compare hf
    vlmprep bench --preset qwen2-vl --synthetic 720p,1080p,4k --threads 1,2 --dtype float32,uint8 \\
        --json out.json --plot out.png
    vlmprep bench --preset internvl --images photos/ --backend all --batch-size 8
    vlmprep bench --video --compare hf --threads 1,2 --json bench/results/video_qwen2-vl.json
    vlmprep bench --preset qwen2-vl --synthetic 1080p --format jpeg,png,webp --threads 1,2 \
        --dtype float32,uint8 --row-form full,compact        # issue 20's floors and ratios

Besides the decode floor, every run on the CPU measures the output-write floor (streamed stores
of exactly the output bytes) and the exact-resize floor (the compiled Pillow-exact resize
alone); "x lower bound" is the end-to-end time over their sum (vlmprep.bench.harness).

``--video`` measures one sampled clip instead of images (``vlmprep.bench.video``): clips/s and
frames/s end to end, the decode alone, the rest alone, and the transformers video processor on
the same decoded frames.

The measuring is ``vlmprep.bench`` (harness, images, decoders, hf, env, plot); this module only
parses flags and prints. Progress goes to stderr, tables (or ``--json`` without a file) to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..processor import DEVICE_RE, DTYPES


def _int_at_least(lo: int, what: str):
    """An argparse type: an int >= ``lo``, else "expected <what>, got '...'"."""
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            v = lo - 1
        if v < lo:
            raise argparse.ArgumentTypeError(f"expected {what}, got {s!r}")
        return v
    return parse


_positive_int = _int_at_least(1, "a positive integer")


def _positive_float(s: str) -> float:
    import math
    try:
        v = float(s)
    except ValueError:
        v = -1.0
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {s!r}")
    return v
_count = _int_at_least(0, "an integer >= 0")


def _threads(s: str) -> list[int]:
    out = []
    for part in s.split(","):
        try:
            out.append(_positive_int(part.strip()))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"expected positive thread counts, comma-separated (e.g. 1 or 1,2), got {s!r}"
            ) from None
    return out


def _sizes(s: str) -> list[str]:
    from ..bench.images import parse_size
    parts = [p for p in s.split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected sizes such as 720p,1080p,4k, got {s!r}")
    for p in parts:
        try:
            parse_size(p)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("--synthetic: ")) from None
    return parts


def _dtypes(s: str) -> list[str]:
    out = [p.strip() for p in s.split(",")]
    bad = [p for p in out if p not in DTYPES]
    if bad:
        raise argparse.ArgumentTypeError(f"expected dtypes from {', '.join(DTYPES)}, got {s!r}")
    return out


def _row_forms(s: str) -> list[str]:
    from ..bench.harness import ROW_FORMS
    out = [p.strip() for p in s.split(",")]
    if not all(out) or any(p not in ROW_FORMS for p in out):
        raise argparse.ArgumentTypeError(f"expected row forms from {', '.join(ROW_FORMS)}, "
                                         f"comma-separated, got {s!r}")
    return out


def _formats(s: str) -> list[str]:
    from ..bench.images import FORMATS
    out = [p.strip().lower() for p in s.split(",")]
    if not all(out) or any(p not in FORMATS for p in out):
        raise argparse.ArgumentTypeError(f"expected formats from {', '.join(FORMATS)}, "
                                         f"comma-separated, got {s!r}")
    return out


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench", help="images/s, latency, per-stage time; ratios vs the decode floor and "
                      "transformers",
        description="Benchmark a preset on encoded images: end-to-end images/s, megapixels/s, "
                    "visual tokens/s, p50/p99 latency per batch and per image, time per stage, "
                    "the decode-only floor, CPU cores used and peak RSS; --compare hf also runs "
                    "the transformers PIL and torchvision processors on the same bytes.",
    )
    p.add_argument("--preset", default="qwen2-vl",
                   help="preset name, or a checkpoint folder / preprocessor_config.json "
                        "(default: qwen2-vl)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--images", metavar="DIR", help="a folder of image files (all measured as "
                     "one set); a file that cannot be measured is skipped and reported")
    src.add_argument("--synthetic", type=_sizes, default=None, metavar="SIZES",
                     help="JPEG mosaics of real photos at these sizes: 720p, 1080p, 4k or "
                          "WIDTHxHEIGHT, comma-separated (default: 1080p)")
    p.add_argument("--format", type=_formats, default=None, metavar="FMT[,FMT...]",
                   help="encoding of the --synthetic mosaics: jpeg (quality 90), png, webp "
                        "(lossy, quality 90), comma-separated; one input set per size and format, "
                        "labelled 1080p, 1080p-png, 1080p-webp (default: jpeg)")
    p.add_argument("--num-images", type=_positive_int, default=None, metavar="N",
                   help="images per set (default: 4 synthetic mosaics; every file of --images)")
    p.add_argument("--backend", default="auto",
                   help="backend(s), comma-separated: auto, all (every usable one), or names "
                        "from vlmprep.backends.names() (default: auto)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    p.add_argument("--dtype", type=_dtypes, default=["float32"],
                   help="output dtype(s), comma-separated: float32, bfloat16, uint8 "
                        "(default: float32)")
    p.add_argument("--row-form", type=_row_forms, default=["full"], metavar="FORM[,FORM]",
                   help="Processor(row_form=...): full (transformers' rows) and/or compact (one "
                        "copy of each image row, Qwen presets), comma-separated (default: full)")
    p.add_argument("--batch-size", type=_positive_int, default=1, metavar="N",
                   help="images per call (default: 1, per-image latency)")
    p.add_argument("--threads", type=_threads, default=None, metavar="N[,N...]",
                   help="threads for vlmprep, torch and OpenCV, e.g. 1 or 1,2 (default: leave "
                        "the libraries' defaults)")
    p.add_argument("--compare", choices=["hf"], default=None,
                   help="also run the transformers PIL and torchvision image processors "
                        "(needs transformers) and print vlmprep's speedup over each")
    p.add_argument("--repeat", type=_positive_int, default=None, metavar="N",
                   help="timed passes over each set (stages and decoders: runs per image; "
                        "--video: timed calls per part; default: 3, --video 5)")
    p.add_argument("--warmup", type=_count, default=2, metavar="N",
                   help="untimed calls before each timed series (default: 2, which fault in the "
                        "output buffers a loop alternates between)")
    p.add_argument("--no-stages", action="store_true", help="skip the per-stage measurement")
    p.add_argument("--no-decode-floor", action="store_true",
                   help="skip the decode-only floor (and so the lower bound and its write and "
                        "resize floors)")
    p.add_argument("--no-lower-bound", action="store_true",
                   help="skip the output-write and exact-resize floors (and so the lower bound)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="write the results as JSON to FILE; without FILE print JSON on stdout "
                        "instead of the tables")
    p.add_argument("--plot", metavar="FILE.png", help="write a bar chart of images/s per backend "
                   "and image size")
    vid = p.add_argument_group("video (--video)")
    vid.add_argument("--video", action="store_true",
                     help="benchmark one video clip instead of images: a clip written here from "
                          "package photos with OpenCV (mp4v: this OpenCV has no H.264 encoder), "
                          "sampled with Video(clip, fps=--video-fps); clips/s and frames/s end to "
                          "end, decode alone and the rest alone; --compare hf adds the "
                          "transformers video processor on the same decoded frames (Qwen "
                          "presets; default threads 1,2; --repeat default 5)")
    vid.add_argument("--video-size", default="720p", metavar="SIZE",
                     help="clip size: 720p, 1080p, 4k or WIDTHxHEIGHT (default: 720p)")
    vid.add_argument("--video-seconds", type=_positive_float, default=10.0, metavar="S",
                     help="clip length in seconds (default: 10)")
    vid.add_argument("--video-source-fps", type=_positive_float, default=30.0, metavar="FPS",
                     help="the clip's frame rate (default: 30)")
    vid.add_argument("--video-fps", type=_positive_float, default=2.0, metavar="FPS",
                     help="sampling rate asked, Video(clip, fps=FPS) (default: 2: 20 frames of "
                          "a 10 s clip)")
    vid.add_argument("--video-decoder", default="auto", metavar="NAME",
                     help="vlmprep's video decoder, Processor(video_decoder=...): auto, "
                          "torchcodec, opencv, pyav, dali (default: auto)")
    vid.add_argument("--fourcc", default=None, metavar="CODE",
                     help="OpenCV VideoWriter codec of the clip (default: mp4v)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (skipped files "
                   "are still reported)")
    p.add_argument("--no-progress", action="store_true",
                   help="step lines instead of a progress bar (a bar is drawn only on a terminal "
                        "with tqdm installed; VLMPREP_PROGRESS=0 also turns it off)")
    p.set_defaults(run=run)


def _check_out(path: str, flag: str) -> None:
    """Fail before measuring, not after: the target must be a writable file path."""
    target = Path(path)
    parent = target.resolve().parent
    if target.is_dir():
        raise ValueError(f"{flag}: expected a file path, got the folder {path!r}; name a file "
                         f"in it, e.g. {os.path.join(path, 'bench.json')!r}")
    if not parent.is_dir():
        raise ValueError(f"{flag}: expected a file in an existing folder, got {path!r} "
                         f"({parent} does not exist)")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ValueError(f"{flag}: expected a writable file, got {path!r}; check permissions")


def _backends(spec: str, device: str) -> list[str]:
    from .. import backends
    names = [n.strip() for n in spec.split(",") if n.strip()]
    out: list[str] = []
    for n in names:
        if n == "auto":
            out.append(backends.resolve_auto(device))
        elif n == "all":
            out += [b for b in backends.available()
                    if not (device.startswith("cuda") and b == "reference")]
        else:
            if n not in backends.names():
                raise ValueError(f"--backend: unknown backend {n!r}; expected auto, all or one "
                                 f"of {backends.names()}")
            why = backends.why_unavailable(n)
            if why:
                raise ValueError(f"--backend: {n!r} cannot run here: {why}; usable here: "
                                 f"{backends.available()}")
            if n == "reference" and device.startswith("cuda"):
                raise ValueError("--backend: 'reference' runs on the CPU only; use torch or dali "
                                 "with --device cuda, or --device cpu")
            out.append(n)
    if not out:
        raise ValueError(f"--backend: expected at least one backend, got {spec!r}")
    return list(dict.fromkeys(out))


def config(args: argparse.Namespace):
    """Validate the flags -> ``vlmprep.bench.harness.BenchConfig`` (inputs built, nothing measured)."""
    from ..bench import images as bench_images
    from ..bench.harness import BenchConfig
    from ._common import load_pipeline
    pipe = load_pipeline(args.preset)
    if not DEVICE_RE.match(args.device):
        raise ValueError(f"--device: expected cpu, cuda or cuda:N, got {args.device!r}")
    if args.device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            raise ValueError(f"--device {args.device}: expected a CUDA GPU, found none; use "
                             f"--device cpu")
    backends = _backends(args.backend, args.device)
    if args.json not in (None, "-"):
        _check_out(args.json, "--json")
    if args.plot:
        _check_out(args.plot, "--plot")
        from ..bench.plot import check_available
        check_available()
    forms = list(dict.fromkeys(args.row_form))
    if forms != ["full"]:
        _check_row_forms(pipe, forms)
    if args.images is not None:
        if args.format:
            raise ValueError("--format: expected --synthetic (it encodes the mosaics), got "
                             "--images; drop --format (a folder's files are measured as they are)")
        sets = [bench_images.folder_set(args.images, args.num_images, pipe)]
    else:
        sizes = args.synthetic or ["1080p"]
        n = args.num_images or 4
        sets = [bench_images.synthetic_set(s, n, fmt=f) for s in dict.fromkeys(sizes)
                for f in dict.fromkeys(args.format or ["jpeg"])]
    return BenchConfig(preset=args.preset, pipeline=pipe, image_sets=sets, backends=backends,
                       dtypes=list(dict.fromkeys(args.dtype)), device=args.device,
                       batch_size=args.batch_size,
                       threads=list(dict.fromkeys(args.threads)) if args.threads else [None],
                       compare_hf=args.compare == "hf", repeat=args.repeat or 3, warmup=args.warmup,
                       stages=not args.no_stages, decode_floor=not args.no_decode_floor,
                       row_forms=forms, floors=not args.no_lower_bound)


def _check_row_forms(pipe, forms: list[str]) -> None:
    """Every row form must suit the pipeline: fail before measuring (pack's one check)."""
    from ..pack import execution_pipeline
    for form in forms:
        try:
            execution_pipeline(pipe, form)
        except ValueError as e:
            raise ValueError(f"--row-form {form}: {e}") from None


def _reporter(args: argparse.Namespace):
    """The harness's ``log``: a tqdm bar over its "[k/n] step" lines on a terminal, else the
    lines themselves on stderr (none with --quiet). Returns ``(log, close)``."""
    import re

    from .. import progress
    if args.quiet:
        return (lambda m: None), (lambda: None)
    if not progress.shown(False if args.no_progress else None):
        return (lambda m: print(f"vlmprep bench: {m}", file=sys.stderr, flush=True)), \
            (lambda: None)
    bar = progress.bar(None, "vlmprep bench", unit="step")

    def log(m: str) -> None:
        step = re.match(r"\[(\d+)/(\d+)\] (.*)", m)
        if step is None:
            bar.write(f"vlmprep bench: {m}")
            return
        bar.total = int(step.group(2))
        bar.update(int(step.group(1)) - bar.n)
        bar.set_postfix_str(step.group(3)[:60])

    return log, bar.close


def video_config(args: argparse.Namespace):
    """Validate the ``--video`` flags -> ``vlmprep.bench.video.VideoBenchConfig``."""
    from ..bench import images as bench_images
    from ..bench.video import FOURCC_DEFAULT, VideoBenchConfig
    from ..presets import qwen as preset_qwen
    qwen = sorted(preset_qwen.video_configs())
    if args.preset not in qwen:
        raise ValueError(f"--video: expected --preset one of {qwen} (the Qwen checkpoints whose "
                         f"video processor config the comparison uses), got {args.preset!r}")
    for flag, given in (("--images", args.images), ("--synthetic", args.synthetic),
                        ("--num-images", args.num_images), ("--plot", args.plot)):
        if given:
            raise ValueError(f"--video: expected no {flag} (it measures one clip), got {flag}; "
                             f"drop it, or drop --video to benchmark images")
    if args.device != "cpu" or args.backend != "auto" or args.batch_size != 1 \
            or args.dtype not in (["float32"], ["uint8"], ["bfloat16"]):
        raise ValueError("--video: expected --device cpu, --backend auto, --batch-size 1 and one "
                         "--dtype (videos run the torchvision path on the CPU); drop those flags")
    try:
        _, (h, w) = bench_images.parse_size(args.video_size)
    except ValueError as e:
        raise ValueError(f"--video-size: {str(e).removeprefix('--synthetic: ')}") from None
    if args.json not in (None, "-"):
        _check_out(args.json, "--json")
    return VideoBenchConfig(preset=args.preset, width=w, height=h,
                            source_fps=args.video_source_fps, seconds=args.video_seconds,
                            fps=args.video_fps, fourcc=args.fourcc or FOURCC_DEFAULT,
                            threads=list(dict.fromkeys(args.threads)) if args.threads else [1, 2],
                            repeat=args.repeat or 5, warmup=args.warmup,
                            compare_hf=args.compare == "hf", dtype=args.dtype[0],
                            decoder=_video_decoder(args.video_decoder))


def _video_decoder(name: str) -> str:
    """``--video-decoder`` checked as the Processor checks it (ValueError names the choices)."""
    from ..io.video.decode import resolve_decoder
    try:
        resolve_decoder(name)
    except ValueError as e:
        raise ValueError(f"--video-decoder: {e}") from None
    return name


def measure(args: argparse.Namespace) -> dict:
    """Parse-validated flags -> the result dict (what ``--json`` writes)."""
    from ..bench import harness as bench_harness
    if getattr(args, "video", False):
        from ..bench import video as bench_video
        vcfg = video_config(args)
        log, close = _reporter(args)
        try:
            return bench_video.run_video(vcfg, log=log)
        finally:
            close()
    cfg = config(args)
    for s in cfg.image_sets:
        for name, reason in s.skipped:
            print(f"vlmprep bench: skipped {os.path.join(args.images or '', name)}: {reason}",
                  file=sys.stderr, flush=True)
    log, close = _reporter(args)
    try:
        return bench_harness.run(cfg, log=log)
    finally:
        close()


def run(args: argparse.Namespace) -> int:
    from ._common import print_json
    result = measure(args)
    if args.json not in (None, "-"):
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.plot:
        from ..bench.plot import write_plot
        write_plot(result, args.plot)
    if args.json == "-":
        print_json(result)
    elif result.get("tool") == "vlmprep bench --video":
        print_video_report(result)
        if args.json:
            print(f"json: {os.path.abspath(args.json)}")
        return 0
    else:
        print_report(result)
        for flag, path in (("json", args.json), ("plot", args.plot)):
            if path:
                print(f"{flag}: {os.path.abspath(path)}")
    return 0


# -- the human report --------------------------------------------------------------------------
def _thr(r: dict) -> str:
    return str(r["threads"]) if r["threads"] != "default" else f"default ({r['vlmprep_threads']})"


def _form(r: dict) -> str:
    return r.get("row_form", "full")


def _f(x, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def print_report(result: dict) -> None:
    from ._common import print_table
    m, v, cfg = result["machine"], result["versions"], result["config"]
    print(f"vlmprep bench: preset {result['preset']['name']} on {m['name']} ({m['cpu_model']}, "
          f"{m['usable_cpus']} CPUs{', ' + ', '.join(m['gpus']) if m['gpus'] else ''}); device "
          f"{cfg['device']}, batch {cfg['batch_size']}, {cfg['repeat']} timed passes")
    print("versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val)
          + f"; compiled kernels: {'loaded' if result['kernels']['built'] else 'not loaded'}")
    for i in result["inputs"]:
        size = f"{i['width']}x{i['height']} (WxH)" if i["width"] else "mixed sizes"
        print(f"inputs {i['label']}: {i['count']} {'/'.join(i['formats']).upper()} "
              f"{'mosaics ' if i['synthetic'] else 'files, '}{size}, "
              f"{i['mean_megapixels']:.2f} MP and {i['mean_bytes'] / 1024:.0f} KiB each on average")
        for sk in i.get("skipped") or []:
            print(f"  skipped {sk['name']}: {sk['reason']}")

    rows = result["results"]
    print("\nend to end: Processor(...)(encoded bytes); ms/img = batch latency / batch size")
    print_table([{
        "inputs": r["size"], "backend": r["backend"], "dtype": r["dtype"], "rows": _form(r),
        "threads": _thr(r),
        "images/s": _f(r["images_per_s"], ".2f"), "MP/s": _f(r["megapixels_per_s"]),
        "tokens/s": _f(r["visual_tokens_per_s"], ".0f"),
        "ms/img p50": _f(r["per_image_p50_ms"]), "p99": _f(r["per_image_p99_ms"]),
        "min": _f(r.get("per_image_min_ms")),
        "batch p50": _f(r["batch_p50_ms"]), "batch p99": _f(r["batch_p99_ms"]),
        "cores": _f(r["cpu_cores_used"], ".2f"), "peak RSS MiB": _f(r["peak_rss_mib"], ".0f"),
    } for r in rows], ["inputs", "backend", "dtype", "rows", "threads", "images/s", "MP/s", "tokens/s",
                       "ms/img p50", "p99", "min", "batch p50", "batch p99", "cores",
                       "peak RSS MiB"])

    if any(r.get("stages_ms") or r.get("stages_error") for r in rows):
        print("\nstages, each run separately through the backend's lowerings (p50 ms per image)")
        table = []
        for r in rows:
            s = r.get("stages_ms") or {}
            table.append({"inputs": r["size"], "backend": r["backend"], "dtype": r["dtype"],
                          "rows": _form(r),
                          "threads": _thr(r), "probe": _f(s.get("probe_ms"), ".2f"),
                          "decode": _f(s.get("decode_ms")), "resize": _f(s.get("resize_ms")),
                          "normalize+patchify+pack": _f(s.get("normalize_patchify_pack_ms")),
                          "transfer": _f(s.get("transfer_ms")),
                          "sum": _f(r.get("stage_sum_ms")),
                          "end to end": _f(r["per_image_p50_ms"]),
                          "note": r.get("stages_error") or ""})
        print_table(table, ["inputs", "backend", "dtype", "rows", "threads", "probe", "decode",
                            "resize",
                            "normalize+patchify+pack", "transfer", "sum", "end to end", "note"])

    if result["decode_floor"]:
        print("\ndecode floor: decode only, one thread (p50 ms per image)")
        names = list(dict.fromkeys(n for f in result["decode_floor"] for n in f["decoders"]))
        table = []
        for f in result["decode_floor"]:
            row = {"inputs": f["size"]}
            row.update({n: _f(f["decoders"].get(n, {}).get("per_image_p50_ms")) for n in names})
            row["floor"] = f"{_f(f['decode_floor_ms'])} ({f['fastest']})"
            row["left out"] = "; ".join(f"{k}: {w}" for k, w in f["unavailable"].items())
            table.append(row)
        print_table(table, ["inputs", *names, "floor", "left out"])

    if result["hf"]:
        print("\ntransformers processors: PIL open + convert('RGB') inside each call, same batches")
        print_table([{
            "inputs": h["size"], "processor": h["class"], "threads": _thr(h),
            "images/s": _f(h["images_per_s"], ".2f"), "ms/img p50": _f(h["per_image_p50_ms"]),
            "p99": _f(h["per_image_p99_ms"]), "cores": _f(h["cpu_cores_used"], ".2f"),
            "same shape": {True: "yes", False: "NO"}.get(h.get("same_output_shape_as_vlmprep"), "-"),
        } for h in result["hf"]], ["inputs", "processor", "threads", "images/s", "ms/img p50", "p99",
                                   "cores", "same shape"])

    if result.get("write_floor") or result.get("resize_floor"):
        print("\nfloors, one thread (p50 ms per image): decode (fastest decoder) + output write "
              "(streamed stores of the output bytes) + exact resize (compiled, alone) = lower "
              "bound")
        decode = {f["size"]: f.get("decode_floor_ms") for f in result["decode_floor"]}
        mins = {f["size"]: f.get("decode_floor_min_ms") for f in result["decode_floor"]}
        resize = {f["size"]: f for f in result.get("resize_floor", [])}
        table = []
        for w in result.get("write_floor", []):
            rz = resize.get(w["size"], {}).get("resize_floor_ms")
            d = decode.get(w["size"])
            parts = (d, w["write_floor_ms"], rz)
            low = (mins.get(w["size"]), w.get("write_floor_min_ms"),
                   resize.get(w["size"], {}).get("resize_floor_min_ms"))
            table.append({
                "inputs": w["size"], "dtype": w["dtype"], "rows": w["row_form"],
                "decode": _f(d), "output MB": _f(w["write_floor_bytes"] / 1e6),
                "write": _f(w["write_floor_ms"], ".2f"),
                "GB/s": _f(w.get("write_floor_GB_per_s")),
                "resize": _f(rz, ".2f"),
                "lower bound": _f(sum(parts)) if None not in parts else "-",
                "min: lower bound": _f(sum(low)) if None not in low else "-",
                "note": w.get("why") or ""})
        print_table(table, ["inputs", "dtype", "rows", "decode", "output MB", "write", "GB/s",
                            "resize", "lower bound", "min: lower bound", "note"])

    if any("ratio_vs_decode_floor" in r or "speedup_vs_hf_pil" in r for r in rows):
        print("\nratios (per-image p50): vlmprep time / decode floor and / lower bound (one "
              "thread's floors); transformers time / vlmprep time")
        table = []
        for r in rows:
            table.append({
                "inputs": r["size"], "backend": r["backend"], "dtype": r["dtype"],
                "rows": _form(r), "threads": _thr(r),
                "x decode floor": (f"{r['ratio_vs_decode_floor']:.2f}x"
                                   if "ratio_vs_decode_floor" in r else "-"),
                "x lower bound": (f"{r['ratio_vs_lower_bound']:.2f}x"
                                  if "ratio_vs_lower_bound" in r else "-"),
                "min: x decode floor": (f"{r['min_based']['ratio_vs_decode_floor']:.2f}x"
                                        if "min_based" in r else "-"),
                "min: x lower bound": (f"{r['min_based']['ratio_vs_lower_bound']:.2f}x"
                                       if "min_based" in r else "-"),
                "speedup vs hf pil": (f"{r['speedup_vs_hf_pil']:.2f}x"
                                      if "speedup_vs_hf_pil" in r else "-"),
                "speedup vs hf torchvision": (f"{r['speedup_vs_hf_torchvision']:.2f}x"
                                              if "speedup_vs_hf_torchvision" in r else "-"),
            })
        print_table(table, ["inputs", "backend", "dtype", "rows", "threads", "x decode floor",
                            "x lower bound", "min: x decode floor", "min: x lower bound",
                            "speedup vs hf pil", "speedup vs hf torchvision"])


def print_video_report(result: dict) -> None:
    """The ``--video`` tables: per thread count, p50 ms and clips/s / frames/s of each part."""
    from ._common import print_table
    m, c, cfg = result["machine"], result["clip"], result["config"]
    print(f"vlmprep bench --video: preset {result['preset']['name']} on {m['name']} "
          f"({m['cpu_model']}, {m['usable_cpus']} CPUs); {cfg['repeat']} timed calls, dtype "
          f"{cfg['dtype']}, decoder {cfg['decoder']}")
    print(f"clip: {c['width']}x{c['height']} (WxH), {c['seconds']:g} s at {c['source_fps']:g} fps "
          f"({c['total_num_frames']} frames), {c['fourcc']} in {c['container']}, "
          f"{c['bytes'] / 1e6:.1f} MB; sampled at {c['sampling_fps']:g} fps -> "
          f"{c['sampled_frames']} frames, resized to {c['resized_hw'][1]}x{c['resized_hw'][0]}, "
          f"grid {c['grid_thw']}, {c['num_tokens']} tokens")
    parts = [("vlmprep", "vlmprep end to end"), ("decode", "decode (shared)"),
             ("vlmprep_rest", "vlmprep rest"), ("transformers", result.get("hf_class") or ""),
             ("transformers_file", f"{result.get('hf_class') or ''} from the file"),
             ("output_write_floor", "output write floor")]
    table = []
    for r in result["results"]:
        for key, label in parts:
            if key not in r:
                continue
            x = r[key]
            table.append({"threads": str(r["threads"]), "part": label,
                          "ms/clip p50": _f(x["p50_ms"]), "p99": _f(x["p99_ms"]),
                          "clips/s": _f(x["clips_per_s"], ".3f"),
                          "frames/s": _f(x["frames_per_s"]),
                          "cores": _f(x["cpu_cores_used"], ".2f")})
    print_table(table, ["threads", "part", "ms/clip p50", "p99", "clips/s", "frames/s", "cores"])
    if any("speedup_rest" in r for r in result["results"]):
        print("\nspeedup vs transformers (p50): rest = its processor / vlmprep rest; end to end ="
              " (decode + its processor) / vlmprep end to end")
        print_table([{"threads": str(r["threads"]), "rest": f"{r['speedup_rest']:.2f}x",
                      "end to end": f"{r['speedup_end_to_end']:.2f}x",
                      "from the file": (f"{r['speedup_file']:.2f}x" if "speedup_file" in r
                                        else "-"),
                      "decode share": f"{r['decode_share_of_vlmprep']:.0%}",
                      "same output": ("yes" if r.get("same_grid_thw") and
                                      r.get("max_abs_diff_vs_transformers") == 0.0 else
                                      f"max diff {r.get('max_abs_diff_vs_transformers')}")}
                     for r in result["results"]],
                    ["threads", "rest", "end to end", "from the file", "decode share",
                     "same output"])
