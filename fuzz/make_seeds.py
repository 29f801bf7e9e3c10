"""Writes the seed corpora (fuzz/seeds/<harness>/): small files of every format and colour
layout, made from package photos (scikit-image, matplotlib) as the tests make them, plus the
shapes the hostile corpus found interesting (EXIF, text chunks, big headers). A few KB each.

    .venv/bin/python fuzz/make_seeds.py          # idempotent; the output is committed
"""
from __future__ import annotations

import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "hostile")]

MAX_SEED = 6 * 1024


def _write(harness: str, name: str, data: bytes) -> None:
    d = os.path.join(HERE, "seeds", harness)
    os.makedirs(d, exist_ok=True)
    if len(data) > MAX_SEED:
        return
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main() -> None:
    import hostile_corpus as hc
    import numpy as np
    from _support.imgdata import FORMATS, crop, encode, png16
    rgb = crop("astronaut", 24, 32, top=40, left=150)
    files = {f: encode(rgb, f) for f in FORMATS}
    files["png16"] = png16(np.full((8, 12), 40000, np.uint16))
    files["gif_screen"] = hc.gif_screen(300, 200)
    files["jpeg_exif_loop"] = hc.jpeg_insert(encode(rgb, "jpeg"), b"\xff\xe1" + (
        len(b"Exif\x00\x00" + hc.exif_payload("ifd_loop")) + 2).to_bytes(2, "big")
        + b"Exif\x00\x00" + hc.exif_payload("ifd_loop"))
    files["png_ztxt"] = hc.png_build(hc.png_chunks(encode(rgb, "png"))[:1] + [
        (b"zTXt", b"k\x00\x00" + __import__("zlib").compress(b"\x00" * 4096))] + hc.png_chunks(encode(rgb, "png"))[1:])
    files["webp_vp8x"] = hc.webp_vp8x(640, 480)
    files["tiff_loop"] = hc.tiff_ifd_loop(encode(rgb, "tiff"))
    for name, data in files.items():
        _write("probe", f"{name}.bin", data)
        _write("pipeline", f"{name}.bin", b"\x00" + data)  # the first byte is reserved
    # kernels: the FuzzedDataProvider reads op and parameters from the front; a few spread
    # starting points (the fuzzer finds the rest from the harness's instrumented branches)
    for op in range(6):
        for k in range(3):
            seed = bytes([op]) + hashlib.sha256(b"%d-%d" % (op, k)).digest() * (4 + 8 * k)
            _write("kernels", f"op{op}-{k}.bin", seed)
    print("seeds:", {h: len(os.listdir(os.path.join(HERE, "seeds", h))) for h in ("probe", "pipeline", "kernels")})


if __name__ == "__main__":
    main()
