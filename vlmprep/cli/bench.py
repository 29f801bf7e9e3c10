"""``vlmprep bench``: throughput, latency, per-stage time and ratios (decode floor, transformers).

Examples::

    vlmprep bench --preset qwen2-vl --synthetic 1080p --compare hf
    vlmprep bench --preset qwen2-vl --synthetic 720p,1080p,4k --threads 1,2 --dtype float32,uint8 \\
        --json out.json --plot out.png
    vlmprep bench --preset internvl --images photos/ --backend all --batch-size 8
    vlmprep bench --video --compare hf --threads 1,2 --json bench/results/video_qwen2-vl.json
    vlmprep bench --documents --threads 1,2 --json bench/results/documents_cpu2.json
    vlmprep bench --preset qwen2-vl --synthetic 1080p --format jpeg,png,webp --threads 1,2 \
        --dtype float32,uint8 --row-form full,compact        # issue 20's floors and ratios

Besides the decode floor, every run on the CPU measures the output-write floor (streamed stores
of exactly the output bytes) and the exact-resize floor (the compiled Pillow-exact resize
alone); "x lower bound" is the end-to-end time over their sum (vlmprep.bench.harness).

``--video`` measures one sampled clip instead of images (``vlmprep.bench.video``): clips/s and
frames/s end to end, the decode alone, the rest alone, and the transformers video processor on
the same decoded frames.

``--documents`` measures one PDF made here (``vlmprep.bench.documents``): pages/s and peak RSS of
``Processor.stream`` against a PDF renderer (PyMuPDF) plus the transformers image processor,
with pypdfium2's render alone as the floor, at ``--pages`` and twice as many pages.

This module is the argparse definition only: ``main`` hands the parsed flags to
``vlmprep.bench.command`` (checks, measuring by ``vlmprep.bench.harness`` / ``video``, the
``--json`` / ``--plot`` files, the report of ``vlmprep.bench.report``). Progress goes to stderr,
tables (or ``--json`` without a file) to stdout.
"""
from __future__ import annotations

import argparse
import math

from ..processor import DTYPES
from ._common import load_pipeline


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
    from ..bench.images import parse_size  # deferred: vlmprep.bench only when bench runs
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
    from ..bench.harness import ROW_FORMS  # deferred: vlmprep.bench only when bench runs
    out = [p.strip() for p in s.split(",")]
    if not all(out) or any(p not in ROW_FORMS for p in out):
        raise argparse.ArgumentTypeError(f"expected row forms from {', '.join(ROW_FORMS)}, "
                                         f"comma-separated, got {s!r}")
    return out


def _formats(s: str) -> list[str]:
    from ..bench.images import FORMATS  # deferred: vlmprep.bench only when bench runs
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
    _add_input_flags(p)
    _add_measuring_flags(p)
    _add_output_flags(p)
    _add_video_flags(p)
    _add_document_flags(p)
    _add_progress_flags(p)
    p.set_defaults(run=main)


def _add_input_flags(p: argparse.ArgumentParser) -> None:
    """--preset and what is measured: --images or --synthetic (--format, --num-images)."""
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


def _add_measuring_flags(p: argparse.ArgumentParser) -> None:
    """How it runs (backends, device, dtypes, row forms, batches, threads) and what it adds."""
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


def _add_output_flags(p: argparse.ArgumentParser) -> None:
    """--json and --plot."""
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="write the results as JSON to FILE; without FILE print JSON on stdout "
                        "instead of the tables")
    p.add_argument("--plot", metavar="FILE.png", help="write a bar chart of images/s per backend "
                   "and image size")


def _add_video_flags(p: argparse.ArgumentParser) -> None:
    """--video and its clip's flags (their own help group)."""
    vid = p.add_argument_group("video (--video)")
    vid.add_argument("--video", action="store_true",
                     help="benchmark one video clip instead of images: a clip written here from "
                          "package photos (H.264 through PyAV; --fourcc for OpenCV's codecs), "
                          "sampled with Video(clip, fps=--video-fps); clips/s and frames/s end to "
                          "end, decode alone and the rest alone; --compare hf adds the "
                          "transformers video processor on the same decoded frames and from the "
                          "file. --preset a video family: qwen2-vl, qwen2.5-vl, qwen3-vl, glm4v, "
                          "internvl, llava-onevision or smolvlm, both sides built from its "
                          "checkpoint's configs (default threads 1,2; --repeat default 5)")
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


def _add_document_flags(p: argparse.ArgumentParser) -> None:
    """--documents and its PDF's flags (their own help group)."""
    doc = p.add_argument_group("documents (--documents)")
    doc.add_argument("--documents", action="store_true",
                     help="benchmark one PDF made here instead of images (US Letter pages of "
                          "text and figures): pages/s and peak RSS of Processor.stream against "
                          "a PDF renderer + the transformers image processors (pil and "
                          "torchvision) on the same pages, pypdfium2's render alone as the "
                          "floor, each in its own subprocess, at --pages and twice as many "
                          "(default threads 1,2; --batch-size is the pages per call)")
    doc.add_argument("--pages", type=_positive_int, default=100, metavar="N",
                     help="pages of the PDF (default: 100; also measured at 2N)")
    doc.add_argument("--dpi", type=_positive_float, default=150.0, metavar="DPI",
                     help="render resolution of every side (default: 150)")
    doc.add_argument("--baseline-renderer", default="auto", metavar="NAME",
                     help="the baseline's PDF renderer: auto (pymupdf, else pdf2image with "
                          "poppler, else pypdfium2), pymupdf, pdf2image, pypdfium2 "
                          "(default: auto)")
    doc.add_argument("--no-scaling", action="store_true",
                     help="skip the 2x-pages run (peak RSS against page count)")
    doc.add_argument("--rounds", type=_positive_int, default=1, metavar="N",
                     help="measurements of each side per page count and thread count, "
                          "round-robin; the median is reported (default: 1)")
    doc.add_argument("--seed", type=_count, default=0, metavar="N",
                     help="the PDF's text and figures (default: 0)")


def _add_progress_flags(p: argparse.ArgumentParser) -> None:
    """--quiet and --no-progress."""
    p.add_argument("--quiet", action="store_true", help="no progress on stderr (skipped files "
                   "are still reported)")
    p.add_argument("--no-progress", action="store_true",
                   help="step lines instead of a progress bar (a bar is drawn only on a terminal "
                        "with tqdm installed; VLMPREP_PROGRESS=0 also turns it off)")


def main(args: argparse.Namespace) -> int:
    """``vlmprep bench``: the parsed flags -> ``vlmprep.bench.command.run``, with ``--preset``
    resolved as every command resolves it."""
    from ..bench import command  # deferred: vlmprep.bench only when bench runs
    return command.run(command.BenchOptions.from_namespace(args), load_pipeline=load_pipeline)
