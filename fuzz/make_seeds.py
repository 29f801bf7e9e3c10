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
    png = encode(crop("astronaut", 4, 6, top=40, left=150), "png")
    for name, data in _tar_seeds(png).items():
        _write("tar", f"{name}.bin", data)
    for name, data in _parquet_seeds(png).items():
        _write("parquet", f"{name}.bin", data)
    for name, data in _data_uri_seeds(png).items():
        _write("data_uri", f"{name}.bin", data)
    for name, data in _animated_seeds().items():
        _write("animated", f"{name}.bin", b"\x00" + data)  # the first byte picks the frames
    for name, data in _document_seeds().items():
        _write("document", f"{name}.pdf", data)
    print("seeds:", {h: len(os.listdir(os.path.join(HERE, "seeds", h)))
                     for h in ("probe", "pipeline", "kernels", "tar", "parquet", "data_uri", "animated",
                               "document")})


def _tar(members: list[tuple[str, bytes]], fmt: int, end: bool = True) -> bytes:
    """A tar of ``members`` without the writer's padding to a 10 KiB record (smaller seeds);
    ``end``: with the two zero blocks that end an archive."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
        used = tf.offset
    return buf.getvalue()[:used + (1024 if end else 0)]


def _tar_seeds(png: bytes) -> dict[str, bytes]:
    """WebDataset shards: ustar (an image + caption group, and one cut inside the caption, as
    the issue-33 data loss), pax with a long name, a gzip GNU tar of three groups (one without an
    image, one with a long name)."""
    import gzip
    import tarfile
    pair = _tar([("000000.png", png), ("000000.txt", b"a caption")], tarfile.USTAR_FORMAT)
    gnu = _tar([("000000.png", png), ("000001.txt", b"no image"), ("d" * 120 + "/000002.png", png),
                ("000002.json", b"{}")], tarfile.GNU_FORMAT)
    return {
        "ustar_pair": pair,
        "ustar_cut_in_caption": pair[:512 + 512 + 512 + 4],
        "pax_long_name": _tar([("p" * 110 + "/000000.png", png)], tarfile.PAX_FORMAT),
        "gnu_gz_groups": gzip.compress(gnu, mtime=0),
    }


def _parquet_seeds(png: bytes) -> dict[str, bytes]:
    """Small pyarrow files: binary and struct<bytes, path> image columns, snappy and zstd pages,
    v1 and v2 data pages, dictionary pages, nulls, a value over the harness's 256-byte cap,
    several row groups."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    big = png + bytes(300)

    def write(table, **kw) -> bytes:
        buf = io.BytesIO()
        pq.write_table(table, buf, store_schema=False, **kw)
        return buf.getvalue()

    binary = pa.table({"id": ["a", "b", None, "d", "e"], "image": [png, None, png[:20], big, b"x"]})
    struct_t = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    hf = pa.table({"image": pa.array([{"bytes": png, "path": "a.png"}, {"bytes": None, "path": "missing.png"},
                                      {"bytes": None, "path": None}, None], struct_t)})
    dictionary = pa.table({"id": pa.array([7, 8, 9, 10], pa.int64()),
                           "jpg": pa.array([png, png, b"y", png], pa.large_binary())})
    return {
        "binary_snappy_v1": write(binary, compression="snappy", row_group_size=2, use_dictionary=False),
        "struct_zstd_v2": write(hf, compression="zstd", data_page_version="2.0", use_dictionary=False),
        "large_binary_zstd_dict": write(dictionary, compression="zstd", row_group_size=3, use_dictionary=True),
    }


def _data_uri_seeds(png: bytes) -> dict[str, bytes]:
    """First byte even: the rest is the URI's text after "data:"; odd: the harness builds a URI of
    the rest (the second byte picks header, encoding and cap); bits 4-6 of the first byte: the
    decoder's chunk size (see fuzz_data_uri.py)."""
    import base64
    import urllib.parse
    b64 = base64.b64encode(png).decode()
    return {
        "raw_base64": b"\x00image/png;base64," + b64.encode(),
        "raw_percent": b"\x02image/png," + urllib.parse.quote_from_bytes(png).encode(),
        "raw_urlsafe_unpadded": b"\x04;base64," + base64.urlsafe_b64encode(png).rstrip(b"=") + b"\n",
        "raw_lines": b"\x00image/png;base64," + "\r\n".join(b64[i:i + 16] for i in range(0, len(b64), 16)).encode(),
        "raw_small_cap_percent": b"\x00," + urllib.parse.quote_from_bytes(png[:24]).encode(),
        "raw_not_image": b"\x00text/plain;base64,aGVsbG8=",
        "raw_percent_chunk3": b"\x62image/png," + urllib.parse.quote_from_bytes(png).encode(),
        "raw_lines_chunk1": b"\x40;base64," + "\n".join(b64[i:i + 9] for i in range(0, len(b64), 9)).encode(),
        "built_base64": b"\x01\x00" + png,
        "built_unpadded_chunk4": b"\x71\x90" + png[:31],
        "built_urlsafe_small_cap": b"\x01\x48" + png,
        "built_percent_all": b"\x01\xfd" + png[:40],
    }


def _animated_seeds() -> dict[str, bytes]:
    """Tiny animations: GIFs with every disposal, transparency, local palettes, sub-rectangle
    frames and a zero delay; WebPs lossless and lossy with alpha."""
    import io

    import numpy as np
    from _support.imgdata import crop
    from PIL import Image
    a, b, c = (crop(n, 6, 8, top=60, left=160) for n in ("astronaut", "coffee", "chelsea"))
    patched = a.copy()
    patched[2:4, 3:6] = b[2:4, 3:6]  # a frame that differs in a sub-rectangle only

    def save(frames: list[np.ndarray], fmt: str, **kw) -> bytes:
        buf = io.BytesIO()
        ims = [Image.fromarray(f) for f in frames]
        if fmt == "GIF":
            ims = [im.quantize(16) for im in ims]
        ims[0].save(buf, fmt, save_all=True, append_images=ims[1:], **kw)
        return buf.getvalue()

    rgba = np.dstack([a, np.full(a.shape[:2], 255, np.uint8)])
    rgba[:3, :4, 3] = 0
    return {
        "gif_disposals": save([a, b, c, a], "GIF", duration=[40, 0, 70, 20], disposal=[0, 1, 2, 3], loop=0),
        "gif_subrect_transparent": save([a, patched, a], "GIF", duration=50, transparency=0, optimize=False),
        "webp_lossless": save([a, patched, c], "WEBP", duration=[30, 60, 90], lossless=True),
        "webp_lossy_alpha": save([rgba, rgba[::-1].copy()], "WEBP", duration=40, quality=50),
    }


def _document_seeds() -> dict[str, bytes]:
    """Small hand-written PDFs (tests/_support/pdfs.py; pypdfium2's own with an image are over
    MAX_SEED): shared content, annotations and JavaScript, RC4 encryption, a wrong
    xref, a page tree loop, a form bomb and a slow shading (both cut small: a seed must be fast),
    an image declaring 60000^2 pixels."""
    from _support import pdfs
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] >>"]
    return {
        "shared_content": pdfs.pages_pdf(3),
        "javascript_annotations": pdfs.javascript_annotations_pdf(),
        "encrypted_rc4": pdfs.encrypted_pdf(b""),
        "xref_shifted": pdfs.build_pdf(objs, xref_shift=7),
        "page_tree_loop": pdfs.page_tree_loop_pdf(),
        "form_bomb_small": pdfs.form_bomb_pdf(6),
        "slow_shading_small": pdfs.slow_shading_pdf(ops=20, side_pt=50),
        "huge_image": pdfs.huge_image_pdf(),
    }


if __name__ == "__main__":
    main()
