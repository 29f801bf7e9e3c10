"""What ``vlmprep bench`` does with its flag values: check them, build the inputs, measure (the
``harness``, or ``video`` for ``--video``), write ``--json`` / ``--plot`` and print the report.

``BenchOptions`` holds the values of the command's flags (same names and defaults as the
``vlmprep bench`` flags, ``vlmprep.cli.bench``); scripts build one directly::

    from vlmprep.bench.command import BenchOptions, measure
    result = measure(BenchOptions(preset="internvl", synthetic=["1080p"], threads=[1, 2]))

Progress goes to stderr, tables (or ``--json`` without a file) to stdout.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .. import backends, presets, progress
from ..pack import execution_pipeline
from ..processor import DEVICE_RE
from . import documents as bench_documents
from . import harness
from . import images as bench_images
from . import plot as bench_plot
from . import video as bench_video
from .documents import DocumentBenchConfig
from .harness import BenchConfig
from .report import print_documents_report, print_report, print_video_report
from .video import FOURCC_DEFAULT, VideoBenchConfig

if TYPE_CHECKING:
    from ..pipeline import Pipeline

__all__ = ["BenchOptions", "config", "video_config", "documents_config", "measure", "run"]


@dataclass
class BenchOptions:
    """The ``vlmprep bench`` flags' values (``--no-stages`` is ``no_stages``, ...), defaults as
    the command line's. Lists are the parsed comma-separated values (``threads=[1, 2]``)."""

    preset: str = "qwen2-vl"
    images: str | None = None
    synthetic: list[str] | None = None
    format: list[str] | None = None
    num_images: int | None = None
    backend: str = "auto"
    device: str = "cpu"
    dtype: list[str] = field(default_factory=lambda: ["float32"])
    row_form: list[str] = field(default_factory=lambda: ["full"])
    batch_size: int = 1
    threads: list[int] | None = None
    compare: str | None = None
    repeat: int | None = None
    warmup: int = 2
    no_stages: bool = False
    no_decode_floor: bool = False
    no_lower_bound: bool = False
    json: str | None = None
    plot: str | None = None
    video: bool = False
    video_size: str = "720p"
    video_seconds: float = 10.0
    video_source_fps: float = 30.0
    video_fps: float = 2.0
    video_decoder: str = "auto"
    fourcc: str | None = None
    documents: bool = False
    pages: int = 100
    dpi: float = 150.0
    baseline_renderer: str = "auto"
    no_scaling: bool = False
    seed: int = 0
    rounds: int = 1
    quiet: bool = False
    no_progress: bool = False

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> "BenchOptions":
        """The options of parsed ``vlmprep bench`` flags (other attributes ignored)."""
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


def _load_preset(preset: str) -> "Pipeline":
    """``--preset`` as a script gives it: a preset name, or a checkpoint folder /
    preprocessor_config.json (the command line passes its own loader, with its hints)."""
    if os.path.exists(preset):
        return presets.from_config(presets.load_config(preset))
    return presets.get(preset)


# -- checking the flags -------------------------------------------------------------------------
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
    """``--backend`` (auto, all, or names, comma-separated) -> the backends to measure."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    out: list[str] = []
    for n in names:
        if n == "auto":
            out.append(backends.resolve_auto(device))
        elif n == "all":
            out += [b for b in backends.available()
                    if not (device.startswith("cuda") and b == "reference")]
        else:
            _check_backend(n, device)
            out.append(n)
    if not out:
        raise ValueError(f"--backend: expected at least one backend, got {spec!r}")
    return list(dict.fromkeys(out))


def _check_backend(n: str, device: str) -> None:
    """A named backend must exist, run here, and run on ``device``."""
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


def _check_device(device: str) -> None:
    if not DEVICE_RE.match(device):
        raise ValueError(f"--device: expected cpu, cuda or cuda:N, got {device!r}")
    if device.startswith("cuda"):
        import torch  # deferred: heavy
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: expected a CUDA GPU, found none; use "
                             f"--device cpu")


def _check_row_forms(pipe, forms: list[str]) -> None:
    """Every row form must suit the pipeline: fail before measuring (pack's one check)."""
    for form in forms:
        try:
            execution_pipeline(pipe, form)
        except ValueError as e:
            raise ValueError(f"--row-form {form}: {e}") from None


def _image_sets(opts: BenchOptions, pipe: "Pipeline") -> list[bench_images.ImageSet]:
    """``--images`` (one set) or ``--synthetic`` (one set per size and format)."""
    if opts.images is not None:
        if opts.format:
            raise ValueError("--format: expected --synthetic (it encodes the mosaics), got "
                             "--images; drop --format (a folder's files are measured as they are)")
        return [bench_images.folder_set(opts.images, opts.num_images, pipe)]
    sizes = opts.synthetic or ["1080p"]
    n = opts.num_images or 4
    return [bench_images.synthetic_set(s, n, fmt=f) for s in dict.fromkeys(sizes)
            for f in dict.fromkeys(opts.format or ["jpeg"])]


def config(opts: BenchOptions, load_pipeline: Callable[[str], "Pipeline"] | None = None
           ) -> BenchConfig:
    """Validate the options -> ``harness.BenchConfig`` (inputs built, nothing measured).

    ``load_pipeline`` turns ``--preset`` into a Pipeline (default: a preset name, or a checkpoint
    folder / json file)."""
    pipe = (load_pipeline or _load_preset)(opts.preset)
    _check_device(opts.device)
    names = _backends(opts.backend, opts.device)
    if opts.json not in (None, "-"):
        _check_out(opts.json, "--json")
    if opts.plot:
        _check_out(opts.plot, "--plot")
        bench_plot.check_available()
    forms = list(dict.fromkeys(opts.row_form))
    if forms != ["full"]:
        _check_row_forms(pipe, forms)
    sets = _image_sets(opts, pipe)
    return BenchConfig(preset=opts.preset, pipeline=pipe, image_sets=sets, backends=names,
                       dtypes=list(dict.fromkeys(opts.dtype)), device=opts.device,
                       batch_size=opts.batch_size,
                       threads=list(dict.fromkeys(opts.threads)) if opts.threads else [None],
                       compare_hf=opts.compare == "hf", repeat=opts.repeat or 3, warmup=opts.warmup,
                       stages=not opts.no_stages, decode_floor=not opts.no_decode_floor,
                       row_forms=forms, floors=not opts.no_lower_bound)


def video_config(opts: BenchOptions) -> VideoBenchConfig:
    """Validate the ``--video`` options -> ``video.VideoBenchConfig``."""
    families = bench_video.video_families()
    if opts.preset not in families:
        raise ValueError(f"--video: expected --preset one of {families} (the video families whose "
                         f"checkpoint video config both sides read), got {opts.preset!r}")
    for flag, given in (("--images", opts.images), ("--synthetic", opts.synthetic),
                        ("--num-images", opts.num_images), ("--plot", opts.plot)):
        if given:
            raise ValueError(f"--video: expected no {flag} (it measures one clip), got {flag}; "
                             f"drop it, or drop --video to benchmark images")
    if opts.device != "cpu" or opts.backend != "auto" or opts.batch_size != 1 \
            or opts.dtype not in (["float32"], ["uint8"], ["bfloat16"]):
        raise ValueError("--video: expected --device cpu, --backend auto, --batch-size 1 and one "
                         "--dtype (videos run the torchvision path on the CPU); drop those flags")
    try:
        _, (h, w) = bench_images.parse_size(opts.video_size)
    except ValueError as e:
        raise ValueError(f"--video-size: {str(e).removeprefix('--synthetic: ')}") from None
    if opts.json not in (None, "-"):
        _check_out(opts.json, "--json")
    return VideoBenchConfig(preset=opts.preset, width=w, height=h,
                            source_fps=opts.video_source_fps, seconds=opts.video_seconds,
                            fps=opts.video_fps, fourcc=opts.fourcc or FOURCC_DEFAULT,
                            threads=list(dict.fromkeys(opts.threads)) if opts.threads else [1, 2],
                            repeat=opts.repeat or 5, warmup=opts.warmup,
                            compare_hf=opts.compare == "hf", dtype=opts.dtype[0],
                            decoder=_video_decoder(opts.video_decoder))


def documents_config(opts: BenchOptions) -> DocumentBenchConfig:
    """Validate the ``--documents`` options -> ``documents.DocumentBenchConfig``."""
    if opts.video:
        raise ValueError("--documents: expected no --video (one or the other); drop one")
    for flag, given in (("--images", opts.images), ("--synthetic", opts.synthetic),
                        ("--format", opts.format), ("--num-images", opts.num_images),
                        ("--plot", opts.plot), ("--repeat", opts.repeat)):
        if given:
            raise ValueError(f"--documents: expected no {flag} (it measures one pass over one "
                             f"PDF of --pages pages), got {flag}; drop it")
    if opts.device != "cpu" or opts.backend != "auto" or opts.row_form != ["full"] \
            or len(opts.dtype) != 1:
        raise ValueError("--documents: expected --device cpu, --backend auto, --row-form full "
                         "and one --dtype; drop those flags")
    if opts.preset not in presets.names():
        raise ValueError(f"--documents: expected --preset a preset name (each measuring "
                         f"subprocess loads it by name), got {opts.preset!r}; one of "
                         f"{presets.names()}")
    bench_documents.resolve_renderer(opts.baseline_renderer)  # a ValueError saying how to get it
    if opts.json not in (None, "-"):
        _check_out(opts.json, "--json")
    return DocumentBenchConfig(preset=opts.preset, pages=opts.pages, dpi=opts.dpi,
                               threads=list(dict.fromkeys(opts.threads)) if opts.threads
                               else [1, 2],
                               pages_per_batch=opts.batch_size, warmup=opts.warmup,
                               dtype=opts.dtype[0], renderer=opts.baseline_renderer,
                               scaling=not opts.no_scaling, seed=opts.seed,
                               rounds=opts.rounds)


def _video_decoder(name: str) -> str:
    """``--video-decoder`` checked as the Processor checks it (ValueError names the choices)."""
    from ..io.video.decode import resolve_decoder  # deferred: imports numpy
    try:
        resolve_decoder(name)
    except ValueError as e:
        raise ValueError(f"--video-decoder: {e}") from None
    return name


# -- measuring ----------------------------------------------------------------------------------
def _reporter(opts: BenchOptions) -> tuple[Callable[[str], None], Callable[[], None]]:
    """The harness's ``log``: a tqdm bar over its "[k/n] step" lines on a terminal, else the
    lines themselves on stderr (none with --quiet). Returns ``(log, close)``."""
    if opts.quiet:
        return (lambda m: None), (lambda: None)
    if not progress.shown(False if opts.no_progress else None):
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


def measure(opts: BenchOptions, load_pipeline: Callable[[str], "Pipeline"] | None = None) -> dict:
    """Options -> the result dict (what ``--json`` writes); files of ``--images`` that cannot be
    measured are named on stderr."""
    # one clip or one PDF instead of images: their own config, run and report
    single: list[tuple[bool, Callable[[BenchOptions], Any], Callable[..., dict]]] = [
        (opts.documents, documents_config, bench_documents.run_documents),
        (opts.video, video_config, bench_video.run_video)]
    for asked, make_config, run_one in single:
        if asked:
            one = make_config(opts)
            log, close = _reporter(opts)
            try:
                return run_one(one, log=log)
            finally:
                close()
    cfg = config(opts, load_pipeline)
    for s in cfg.image_sets:
        for name, reason in s.skipped:
            print(f"vlmprep bench: skipped {os.path.join(opts.images or '', name)}: {reason}",
                  file=sys.stderr, flush=True)
    log, close = _reporter(opts)
    try:
        return harness.run(cfg, log=log)
    finally:
        close()


def run(opts: BenchOptions, load_pipeline: Callable[[str], "Pipeline"] | None = None) -> int:
    """The whole command: measure, write ``--json`` / ``--plot``, print the report (or the JSON
    on stdout with ``--json`` alone). Returns the exit status."""
    result = measure(opts, load_pipeline)
    if opts.json not in (None, "-"):
        Path(opts.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if opts.plot:
        bench_plot.write_plot(result, opts.plot)
    if opts.json == "-":
        _print_json(result)
    elif result.get("tool") in ("vlmprep bench --video", "vlmprep bench --documents"):
        (print_video_report if result["tool"].endswith("--video")
         else print_documents_report)(result)
        if opts.json:
            print(f"json: {os.path.abspath(opts.json)}")
    else:
        print_report(result)
        for flag, path in (("json", opts.json), ("plot", opts.plot)):
            if path:
                print(f"{flag}: {os.path.abspath(path)}")
    return 0


def _print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")
