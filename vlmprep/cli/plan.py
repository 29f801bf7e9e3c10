"""``vlmprep plan``: geometry and token counts from sizes or file headers (no decode)."""
from __future__ import annotations

import argparse
import re

from ..bench.report import print_table
from ..errors import ImageError
from ..io.probe import probe
from ..plan import plan_image
from ._common import UsageError, load_pipeline, print_json


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="resized size, patch grid and tokens per image (header only)",
                       description="Plan images from --size WxH values or from image files' "
                                   "headers; no pixel is decoded.")
    p.add_argument("files", nargs="*", help="image files (only their headers are read)")
    p.add_argument("--preset", default="qwen2-vl",
                   help="preset name, or a checkpoint folder / preprocessor_config.json")
    p.add_argument("--size", action="append", default=[], metavar="WxH",
                   help="an image size, width x height (e.g. 1920x1080); repeatable")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a pipeline field, repeatable: e.g. --set max_pixels=1003520, "
                        "--set mean=0.5,0.5,0.5 (a list); a wrong name lists the valid ones")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def _size(s: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX*]\s*(\d+)\s*", s)
    if not m:
        raise UsageError(f"--size: expected WIDTHxHEIGHT such as 1920x1080, got {s!r}")
    w, h = int(m.group(1)), int(m.group(2))
    return h, w


def run(args: argparse.Namespace) -> int:
    """Table: sizes as WxH (as typed with --size). JSON: sizes as [height, width] under ``*_hw``
    keys (Python's order), the error as null when the image plans."""
    if not args.files and not args.size:
        raise UsageError("expected --size WxH or image files, got neither")
    pipe = load_pipeline(args.preset, args.set)
    rows = []
    inputs: list[tuple[str, object]] = [(f"{w}x{h}", (h, w)) for h, w in map(_size, args.size)]
    inputs += [(f, f) for f in args.files]
    for i, (label, x) in enumerate(inputs):
        row: dict = {"input": label}
        try:
            if isinstance(x, tuple):
                hw = x
            else:
                hdr = probe(x)
                hw = hdr.size_hw
                row["format"] = hdr.format
            row["source_hw"] = list(hw)
            p = plan_image(pipe, hw, i)
            row.update(resized_hw=list(p.resized_hw), tiles=len(p.tiles),
                       grid_thw=[list(g) for g in p.grid_thw], patches=p.num_patches,
                       tokens=p.num_tokens, error=None)
        except ImageError as e:
            row.update(tokens=0, error=e.reason)
        rows.append(row)
    ok = all(r["error"] is None for r in rows)
    if args.json:
        print_json({"preset": pipe.name, "pipeline": pipe.to_dict(), "images": rows})
    else:
        print(f"preset {pipe.name}  (sizes are width x height; grid is (t, h, w) in patches, of "
              f"the first sequence)")
        table = []
        for r in rows:
            g = r.get("grid_thw")
            src, res = r.get("source_hw"), r.get("resized_hw")
            table.append({
                "input": r["input"],
                "source (WxH)": f"{src[1]}x{src[0]}" if src else "",
                "resized (WxH)": f"{res[1]}x{res[0]}" if res else "",
                "tiles": r.get("tiles", ""),
                "grid (t,h,w)": "" if not g else (f"{g[0]}" if len(g) == 1 else f"{g[0]} x{len(g)}"),
                "patches": r.get("patches", ""), "tokens": r["tokens"],
                "error": r["error"] or ""})
        print_table(table, ["input", "source (WxH)", "resized (WxH)", "tiles", "grid (t,h,w)",
                            "patches", "tokens", "error"])
    return 0 if ok else 1
