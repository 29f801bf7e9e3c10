"""``vlmprep run``: a batch job, image and video inputs -> packed shards + manifest.json
(vlmprep.batch.run).

Examples::

    vlmprep run --preset qwen2-vl --input photos/ --output out/ --workers 2
    vlmprep run --preset qwen2-vl --input clips/ --output out/ --fps 2   # one row per video
    vlmprep run --preset qwen2-vl --input papers/ --output out/ --dpi 150 --pages 0-9  # row per page
    vlmprep run --preset qwen2-vl --input shards/000.tar shards/001.tar --output out/ --resume
    vlmprep run --checkpoint ./Qwen2-VL-7B --input data.parquet --column image --id-column key \\
        --output out/ --format safetensors --json

Exit status: 0 the job completed (bad images are error rows with their reason, counted in the
summary; they never stop the job); 1 the job stopped early for another cause (a worker died, a
shard could not be written): the manifest lists the shards done, ``--resume`` continues; 2 a
usage error (a flag, an input, an output folder that is not ours, a changed config on resume);
3 the job ran to its end but could not read part of an input (a cut or damaged tar, a damaged
parquet page: error rows name each place; the manifest says ``complete: false``);
130 interrupted (Ctrl-C: no half shard is left, ``--resume`` continues).
"""
from __future__ import annotations

import argparse
import os
import sys

from ..processor import DTYPES
from ._common import UsageError, load_pipeline, parse_value, print_json


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def _page_list(s: str) -> tuple[int, ...]:
    """``--pages``: ``"0-3,8"`` -> (0, 1, 2, 3, 8) (0-based, ends included, order kept)."""
    out: list[int] = []
    try:
        for part in s.split(","):
            a, dash, b = part.strip().partition("-")
            lo, hi = int(a), int(b) if dash else int(a)
            if lo < 0 or hi < lo or hi - lo > 100_000:
                raise ValueError
            out.extend(range(lo, hi + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 0-based pages like '0-9' or '0,2,5', got "
                                         f"{s!r}") from None
    return tuple(out)


def _positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        v = 0.0
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {s!r}")
    return v


def add_parser(sub) -> None:
    # deferred: the batch modules load only for `vlmprep run`, not for every command
    from ..batch.config import FORMATS, JobConfig
    default_size = JobConfig.__dataclass_fields__["shard_size"].default
    p = sub.add_parser(
        "run", help="batch job: folders, WebDataset tars, parquet, path lists -> packed shards",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    model = p.add_mutually_exclusive_group()
    model.add_argument("--preset", default=None,
                       help="preset name, or a checkpoint folder / preprocessor_config.json")
    model.add_argument("--checkpoint", default=None, metavar="PATH",
                       help="a checkpoint folder, its preprocessor_config.json, or a hub repo id "
                            "(as Processor.from_pretrained takes it)")
    p.add_argument("--input", nargs="+", action="extend", required=True, metavar="SRC",
                   help="folders (recursive), WebDataset .tar files, parquet files, or text files "
                        "of paths (one per line); repeatable")
    p.add_argument("--output", required=True, metavar="DIR",
                   help="output folder: shards and manifest.json (new, empty, or a vlmprep output "
                        "with --resume / --overwrite)")
    p.add_argument("--backend", default="auto",
                   help="auto or a name from vlmprep.backends.names() (default: auto)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    p.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="output dtype (default: float32)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a pipeline field, repeatable: e.g. --set max_pixels=1003520, "
                        "--set mean=0.5,0.5,0.5 (a list); a wrong name lists the valid ones")
    p.add_argument("--format", default="parquet", choices=FORMATS,
                   help="shard format (default: parquet)")
    p.add_argument("--shard-size", type=_positive_int, default=default_size, metavar="N",
                   help=f"samples (images or videos) per shard (default: {default_size}); a "
                        f"worker holds one shard's output in memory until it is written")
    sampling = p.add_mutually_exclusive_group()
    sampling.add_argument("--fps", type=_positive_float, default=None, metavar="F",
                          help="video inputs: frames per second sampled from each video, as "
                               "vlmprep.Video(src, fps=F) (default: the checkpoint's video options)")
    sampling.add_argument("--num-frames", type=_positive_int, default=None, metavar="N",
                          help="video inputs: frames sampled from each video, as "
                               "vlmprep.Video(src, num_frames=N) (default: the checkpoint's)")
    pdf = p.add_argument_group("PDF samples (each is vlmprep.Document(data, ...); docs/how-to/documents.md)")
    pdf.add_argument("--dpi", type=_positive_float, default=None, metavar="D",
                     help="render resolution of every PDF page (default: 144)")
    pdf.add_argument("--pages", type=_page_list, default=None, metavar="LIST",
                     help="0-based pages of every PDF, in order: '0-9' or '0,2,5' or '0-3,8' "
                          "(default: every page)")
    pdf.add_argument("--max-pages", type=_positive_int, default=None, metavar="N",
                     help="most pages one PDF may select; more is an error row (default: 1000)")
    pdf.add_argument("--max-tokens", type=_positive_int, default=None, metavar="N",
                     help="visual-token budget per PDF: the dpi is lowered (to 72), then the "
                          "leading pages that fit are kept (default: none)")
    p.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                   help="worker processes (--engine local) or Ray actors (--engine ray); each "
                        "gets cores/N threads (default: 1)")
    p.add_argument("--engine", default="local", choices=("local", "ray"),
                   help="local processes, or Ray Data (pip install vlmprep[ray]; a fresh local "
                        "Ray unless RAY_ADDRESS names a cluster, RAY_ADDRESS=auto: this "
                        "machine's `ray start` one) (default: local)")
    p.add_argument("--gpus-per-worker", type=float, default=None, metavar="F",
                   help="--engine ray: GPUs per actor, fractional allowed (0.25: four actors "
                        "per GPU) (default: 1 with --device cuda, else 0)")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="finish the job recorded in --output (same config and inputs; a "
                            "difference is refused and named)")
    again.add_argument("--overwrite", action="store_true",
                       help="redo the job: deletes the old job's shards and manifest (other "
                            "files are kept)")
    p.add_argument("--glob", default=None, metavar="G",
                   help="folder inputs: file pattern, e.g. '*.jpg' or 'train/**/*.png' "
                        "(default: the image extensions, and the video ones (mp4, mkv, webm, avi, "
                        "mov) for a family with a video rule)")
    p.add_argument("--column", default=None, metavar="C",
                   help="parquet inputs: the image or video column (default: auto-detected)")
    p.add_argument("--id-column", default=None, metavar="C",
                   help="parquet inputs: the id column (default: row-N ids)")
    p.add_argument("--input-root", default=None, metavar="DIR",
                   help="list and parquet inputs: paths inside the data (list lines, the path of "
                        "a struct<bytes, path> value) are read only when they resolve (symlinks "
                        "followed) under DIR; others, and anything under /proc, /dev or /sys, are "
                        "error rows (default: each input's own folder)")
    p.add_argument("--json", action="store_true",
                   help="print the summary as JSON on stdout instead of a table")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (it is drawn only when stderr is a terminal with tqdm "
                        "installed; VLMPREP_PROGRESS=0 also turns it off)")
    p.set_defaults(run=run)


def job_config(args: argparse.Namespace):
    """The flags -> ``vlmprep.batch.config.JobConfig`` (UsageError / ValueError when wrong)."""
    from ..batch.config import JobConfig  # deferred: as above (only `vlmprep run` loads batch)
    preset, checkpoint = args.preset, args.checkpoint
    if preset is None and checkpoint is None:
        raise UsageError("expected --preset NAME or --checkpoint PATH, got neither")
    if preset is not None and os.path.exists(preset):  # --preset takes a checkpoint as plan does
        preset, checkpoint = None, preset
    if checkpoint is not None and os.path.exists(checkpoint):
        checkpoint = os.path.abspath(checkpoint)  # the same job from any working folder
    if preset is not None or checkpoint is not None and os.path.exists(checkpoint):
        load_pipeline(preset or checkpoint, args.set)  # names a wrong field or syntax
    overrides = {}
    for s in args.set:
        k, sep, v = s.partition("=")
        if not sep or not k.strip():  # a hub checkpoint: load_pipeline did not see the flags
            raise UsageError(f"--set: expected FIELD=VALUE, got {s!r}")
        overrides[k.strip()] = parse_value(v)
    try:
        return JobConfig(preset=preset, checkpoint=checkpoint, backend=args.backend,
                         device=args.device, dtype=args.dtype, overrides=tuple(overrides.items()),
                         format=args.format, shard_size=args.shard_size,
                         input_root=args.input_root, fps=args.fps, num_frames=args.num_frames,
                         dpi=args.dpi, pages=args.pages, max_pages=args.max_pages,
                         max_tokens=args.max_tokens)
    except ValueError as e:
        raise UsageError(str(e).removeprefix("JobConfig: ")) from None


def _print_summary(s: dict) -> None:
    """The summary as aligned ``name  value`` lines under a title (then the reasons)."""
    lines = [
        ("output", s["output"]),
        ("complete", "yes" if s["complete"] else "no" + (
            f" ({s['damaged']} parts of inputs could not be read: "
            f"{', '.join(s['damaged_inputs'])})" if s.get("damaged") else "")),
        ("images", s["images"]),
        *([("videos (of those)", s["videos"])] if s.get("videos") else []),
        ("processed", s["processed"]),
        ("skipped", s["skipped"]),
        ("visual tokens", f"{s['tokens']:,}"),
        ("shard bytes", f"{s['bytes']:,} in {s['shards']} shards"),
        ("this run", f"{s['run_images']} images, {s['run_shards']} shards"),
        ("wall time (s)", f"{s['wall_s']:.2f}" + (
            f" (first image after {s['startup_s']:.2f})" if s["startup_s"] is not None else "")),
        ("images/s", f"{s['images_per_s']:.2f}"),
        ("visual tokens/s", f"{s['tokens_per_s']:,.0f}"),
    ]
    width = max(len(k) for k, _ in lines) + 2
    print("=" * 20 + " vlmprep run " + "=" * 20)
    for k, v in lines:
        print(f"{k:<{width}}{v}")
    if s["skipped_by_reason"]:
        print("-" * 20 + " skipped, by reason " + "-" * 13)
        for reason, n in s["skipped_by_reason"].items():
            print(f"{n:>6}  {reason}")


def run(args: argparse.Namespace) -> int:
    from ..batch import run as batch_run  # deferred: as above (only `vlmprep run` loads batch)
    config = job_config(args)
    try:
        summary = batch_run.run(args.input, args.output, config, workers=args.workers,
                                resume=args.resume, overwrite=args.overwrite, engine=args.engine,
                                glob=args.glob, column=args.column, id_column=args.id_column,
                                gpus_per_worker=args.gpus_per_worker,
                                progress=False if args.no_progress else None)
    except batch_run.JobFailed as e:
        print(f"vlmprep run: the job stopped: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"vlmprep run: stopped; no half shard left in {args.output}; the manifest lists "
              f"the shards done: run again with --resume to finish", file=sys.stderr)
        raise
    if args.json:
        print_json(summary)
    else:
        _print_summary(summary)
    if summary.get("damaged"):
        print(f"vlmprep run: the job is not complete: {summary['damaged']} parts of inputs could "
              f"not be read ({', '.join(summary['damaged_inputs'])}); their error rows name each "
              f"place; fix or replace those inputs and run again with --overwrite", file=sys.stderr)
        return 3
    return 0
