"""Cost of ``vlmprep.io.probe`` against a full Pillow decode of a 1080p JPEG.

The test image is a 1920x1080 mosaic of six different real photos (skimage and
matplotlib sample data), each resized to cover its 640x540 tile, encoded as a
quality-90 4:2:0 JPEG, so the decoder sees realistic photographic content.

Usage::

    python bench/probe_vs_decode.py [--repeat 5] [--json figures.json]

Prints microseconds per call (best of ``--repeat`` timing runs, each long
enough for ``timeit.autorange``) and the decode/probe ratio, for bytes input
and for path input.  ``--json`` writes the same figures: ``*_us`` and
``*_ratio`` keys.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import timeit
from pathlib import Path

import skimage.data
from matplotlib import cbook
from PIL import Image, ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from vlmprep.io.probe import probe  # noqa: E402

WIDTH, HEIGHT = 1920, 1080
TILE = (640, 540)  # 3 x 2 tiles


def mosaic_1080p() -> Image.Image:
    """1920x1080 RGB mosaic of six different photos, each cropped to fill its tile."""
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        hopper = Image.open(f).convert("RGB")
    photos = [Image.fromarray(getattr(skimage.data, name)()).convert("RGB")
              for name in ("astronaut", "chelsea", "coffee", "camera", "rocket")] + [hopper]
    canvas = Image.new("RGB", (WIDTH, HEIGHT))
    for i, photo in enumerate(photos):
        tile = ImageOps.fit(photo, TILE, Image.LANCZOS)  # resize to cover, centre-crop
        canvas.paste(tile, ((i % 3) * TILE[0], (i // 3) * TILE[1]))
    return canvas


def per_call_us(fn, repeat: int) -> float:
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


def decode_path(path: Path) -> Image.Image:
    with Image.open(path) as img:
        return img.convert("RGB")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timing runs per figure (best is kept)")
    parser.add_argument("--json", type=Path, help="write the figures to this JSON file")
    args = parser.parse_args(argv)

    buf = io.BytesIO()
    mosaic_1080p().save(buf, "JPEG", quality=90)
    data = buf.getvalue()
    result = probe(data)
    assert (result.width, result.height) == (WIDTH, HEIGHT), result

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mosaic_1080p.jpg"
        path.write_bytes(data)
        figures = {
            "probe_bytes_us": per_call_us(lambda: probe(data), args.repeat),
            "decode_bytes_us": per_call_us(lambda: Image.open(io.BytesIO(data)).convert("RGB"), args.repeat),
            "probe_path_us": per_call_us(lambda: probe(path), args.repeat),
            "decode_path_us": per_call_us(lambda: decode_path(path), args.repeat),
        }
    figures["bytes_ratio"] = figures["decode_bytes_us"] / figures["probe_bytes_us"]
    figures["path_ratio"] = figures["decode_path_us"] / figures["probe_path_us"]

    print(f"{WIDTH}x{HEIGHT} JPEG mosaic, {len(data) / 1024:.0f} KiB, best of {args.repeat}")
    print(f"{'input':<8}{'probe_us':>12}{'decode_us':>14}{'ratio':>10}")
    for kind in ("bytes", "path"):
        print(f"{kind:<8}{figures[f'probe_{kind}_us']:>12.1f}{figures[f'decode_{kind}_us']:>14.1f}"
              f"{figures[f'{kind}_ratio']:>9.0f}x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()
