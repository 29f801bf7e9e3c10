"""vlmprep.io.probe against Pillow on real photos, and on broken input.

Every good case is a crop of a real photo (skimage / matplotlib sample data) at
an odd size, encoded in-test, and checked three ways against Pillow: stored
size, EXIF orientation, and size after ``ImageOps.exif_transpose``.
"""
from __future__ import annotations

import io
import math
import os
import random
import struct
import warnings
import zlib
from dataclasses import FrozenInstanceError
from functools import lru_cache

import numpy as np
import pytest
import skimage.data
from matplotlib import cbook
from PIL import Image, ImageOps, PngImagePlugin

import vlmprep
from vlmprep.errors import ImageError
from vlmprep.io.probe import ProbeResult, probe
from vlmprep.io.probe import reader as probe_reader
from vlmprep.ops import DEFAULT_MAX_SOURCE_PIXELS

FORMATS = {"jpeg", "png", "webp", "bmp", "gif", "tiff"}


# --------------------------------------------------------------------------
# Real photos, cropped to odd sizes


@lru_cache(maxsize=None)
def _photo(name: str) -> Image.Image:
    if name == "grace_hopper":
        with cbook.get_sample_data("grace_hopper.jpg") as f:
            return Image.open(f).convert("RGB")
    return Image.fromarray(getattr(skimage.data, name)())


def crop(name: str, width: int, height: int) -> Image.Image:
    """A centred ``width x height`` window of a photo (upscaled first when it is smaller)."""
    img = _photo(name)
    scale = max(width / img.width, height / img.height)
    if scale > 1:
        img = img.resize((math.ceil(img.width * scale), math.ceil(img.height * scale)), Image.LANCZOS)
    left, top = (img.width - width) // 2, (img.height - height) // 2
    return img.crop((left, top, left + width, top + height))


def with_alpha(img: Image.Image) -> Image.Image:
    """RGBA with a diagonal alpha ramp, so encoders keep a real alpha channel."""
    w, h = img.size
    ramp = (np.add.outer(np.arange(h), np.arange(w)) * 255 // (w + h)).astype(np.uint8)
    out = img.convert("RGB").convert("RGBA")
    out.putalpha(Image.fromarray(ramp))
    return out


def encode(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


# --------------------------------------------------------------------------
# Hand-built files for what Pillow does not write


def exif_block(orientation: int, endian: str = "<", *, big_blob: int = 0) -> bytes:
    """``Exif\\0\\0`` + TIFF header + IFD0 with Orientation between out-of-line tags.

    ``big_blob`` adds an UNDEFINED MakerNote of that many bytes (a camera-sized
    EXIF block that probe must skip, not read).
    """
    e = endian
    tags = [(270, 2, b"vlmprep probe test\x00"), (271, 2, b"Canon\x00"), (274, 3, struct.pack(e + "H", orientation)),
            (282, 5, struct.pack(e + "LL", 72, 1))]
    if big_blob:
        tags.append((37500, 7, bytes(range(256)) * (big_blob // 256)))
    data_at = 8 + 2 + 12 * len(tags) + 4
    entries, data = b"", b""
    for tag, typ, payload in tags:
        count = len(payload) // {2: 1, 3: 2, 5: 8, 7: 1}[typ]
        if len(payload) <= 4:
            entries += struct.pack(e + "HHL", tag, typ, count) + payload.ljust(4, b"\x00")
        else:
            entries += struct.pack(e + "HHLL", tag, typ, count, data_at + len(data))
            data += payload + b"\x00" * (len(payload) & 1)
    head = (b"II*\x00" if e == "<" else b"MM\x00*") + struct.pack(e + "L", 8)
    return b"Exif\x00\x00" + head + struct.pack(e + "H", len(tags)) + entries + struct.pack(e + "L", 0) + data


def xmp_packet(orientation: int) -> bytes:
    return (
        b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
        b'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="%d"/>'
        b"</rdf:RDF></x:xmpmeta>" % orientation
    )


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">L", len(data)) + kind + data + struct.pack(">L", zlib.crc32(kind + data))


def png_raw(width: int, height: int, depth: int, colour: int, rows: list[bytes], extra: bytes = b"") -> bytes:
    """A PNG from already packed scanlines (filter type 0 is prepended)."""
    ihdr = struct.pack(">LLBBBBB", width, height, depth, colour, 0, 0, 0)
    idat = zlib.compress(b"".join(b"\x00" + r for r in rows))
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")


def png_rgb16(img: Image.Image) -> bytes:
    arr = np.asarray(img.convert("RGB")).astype(">u2") * 257
    return png_raw(img.width, img.height, 16, 2, [row.tobytes() for row in arr])


def png_gray2(img: Image.Image) -> bytes:
    arr = np.asarray(img.convert("L")) >> 6  # 2-bit samples
    pad = (-arr.shape[1]) % 4
    arr = np.pad(arr, ((0, 0), (0, pad)))
    packed = arr[:, 0::4] << 6 | arr[:, 1::4] << 4 | arr[:, 2::4] << 2 | arr[:, 3::4]
    return png_raw(img.width, img.height, 2, 0, [row.astype(np.uint8).tobytes() for row in packed])


def bmp_raw(img: Image.Image, header_size: int, bits: int, masks=None, top_down: bool = False) -> bytes:
    """A BMP with a chosen DIB header (12 = core, 40/108/124 = info/V4/V5) and depth 4, 24 or 32."""
    w, h = img.size
    palette = b""
    if bits == 4:
        q = img.convert("RGB").quantize(16)
        pal = q.getpalette()[:48]
        entry = 3 if header_size == 12 else 4
        palette = b"".join(bytes((pal[3 * i + 2], pal[3 * i + 1], pal[3 * i])) + b"\x00" * (entry - 3)
                           for i in range(16))
        idx = np.asarray(q)
        idx = np.pad(idx, ((0, 0), (0, w % 2)))
        rows = [(r[0::2] << 4 | r[1::2]).astype(np.uint8).tobytes() for r in idx]
    else:
        mode = "RGBA" if bits == 32 else "RGB"
        arr = np.asarray(img.convert(mode))[:, :, [2, 1, 0, 3] if bits == 32 else [2, 1, 0]]
        rows = [r.tobytes() for r in arr]
    stride = (w * bits + 31) // 32 * 4
    pixels = b"".join(r.ljust(stride, b"\x00") for r in (rows if top_down else rows[::-1]))
    compression = 3 if masks else 0
    if header_size == 12:
        dib = struct.pack("<LHHHH", 12, w, h, 1, bits)
    else:
        dib = struct.pack("<LllHHLLllLL", header_size, w, -h if top_down else h, 1, bits, compression,
                          len(pixels), 2835, 2835, 0, 0)
        dib += struct.pack("<4L", *masks) if masks else b""
        dib = dib.ljust(header_size, b"\x00")
    offset = 14 + len(dib) + len(palette)
    return b"BM" + struct.pack("<LHHL", offset + len(pixels), 0, 0, offset) + dib + palette + pixels


def tiff_raw(img: Image.Image, endian: str, orientation: int | None = None) -> bytes:
    """An uncompressed RGB TIFF in either byte order, optionally with Orientation."""
    e = endian
    w, h = img.size
    pixels = img.convert("RGB").tobytes()
    tags = {256: (4, [w]), 257: (4, [h]), 258: (3, [8, 8, 8]), 259: (3, [1]), 262: (3, [2]),
            273: (4, [0]), 277: (3, [3]), 278: (4, [h]), 279: (4, [len(pixels)])}
    if orientation is not None:
        tags[274] = (3, [orientation])
    ifd_size = 2 + 12 * len(tags) + 4
    bps_at = 8 + ifd_size
    tags[273] = (4, [bps_at + 6])
    entries = b""
    for tag in sorted(tags):
        typ, values = tags[tag]
        if tag == 258:
            entries += struct.pack(e + "HHLL", tag, typ, 3, bps_at)
        else:
            value = struct.pack(e + ("H" if typ == 3 else "L"), values[0]).ljust(4, b"\x00")
            entries += struct.pack(e + "HHL", tag, typ, 1) + value
    head = (b"II*\x00" if e == "<" else b"MM\x00*") + struct.pack(e + "L", 8)
    return (head + struct.pack(e + "H", len(tags)) + entries + struct.pack(e + "L", 0)
            + struct.pack(e + "3H", 8, 8, 8) + pixels)


def gif_anim(frames: list[Image.Image]) -> bytes:
    return encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)


# --------------------------------------------------------------------------
# The cases: id -> builder returning (bytes, expected probe fields)


def _jpeg_ycck():
    data = bytearray(encode(crop("coffee", 301, 453).convert("CMYK"), "JPEG"))
    at = data.index(b"Adobe") + 11  # APP14 transform byte: 2 = YCCK
    data[at] = 2
    return bytes(data), {"mode_hint": "YCCK", "channels": 4}


def _gif_frame_outside_screen():
    data = bytearray(encode(crop("chelsea", 301, 203).quantize(64), "GIF"))
    data[6:10] = struct.pack("<HH", 250, 150)  # Pillow grows the size to the first frame
    return bytes(data), {"width": 301, "height": 203}


def _png_text_exif(kind: str):
    img = crop("coffee", 203, 301)
    info = PngImagePlugin.PngInfo()
    if kind == "xmp":
        info.add_itxt("XML:com.adobe.xmp", xmp_packet(5).decode(), zip=True)
        return encode(img, "PNG", pnginfo=info), {"orientation": 5}
    if kind == "text":  # a tEXt "exif" keyword holding the raw block, which Pillow reads as EXIF
        info.add_text("exif", exif_block(7, ">"))
        return encode(img, "PNG", pnginfo=info), {"orientation": 7}
    raw = exif_block(6, ">")[6:]
    info.add_text("Raw profile type exif", f"\nexif\n{len(raw):8}\n{raw.hex()}\n", zip=True)  # ImageMagick
    return encode(img, "PNG", pnginfo=info), {"orientation": 6}


CASES = {
    # JPEG
    "jpeg-baseline": lambda: (encode(crop("astronaut", 301, 453), "JPEG", quality=90),
                              {"channels": 3, "progressive": False, "bit_depth": 8}),
    "jpeg-progressive": lambda: (encode(crop("chelsea", 449, 299), "JPEG", progressive=True), {"progressive": True}),
    "jpeg-gray": lambda: (encode(crop("camera", 301, 453), "JPEG"), {"channels": 1, "mode_hint": "L"}),
    "jpeg-cmyk": lambda: (encode(crop("coffee", 77, 1000).convert("CMYK"), "JPEG"),
                          {"channels": 4, "mode_hint": "CMYK"}),
    "jpeg-ycck": _jpeg_ycck,
    "jpeg-444-tall": lambda: (encode(crop("coffee", 77, 1000), "JPEG", quality=95, subsampling=0), {}),
    "jpeg-grace-hopper-original": lambda: (cbook.get_sample_data("grace_hopper.jpg").read(), {}),
    "jpeg-exif-camera-sized": lambda: (encode(crop("grace_hopper", 301, 453), "JPEG",
                                              exif=exif_block(6, big_blob=40000)),
                                       {"orientation": 6}),
    "jpeg-xmp-only": lambda: (encode(crop("astronaut", 123, 457), "JPEG", xmp=xmp_packet(8)), {"orientation": 8}),
    "jpeg-exif-beats-xmp": lambda: (encode(crop("astronaut", 123, 457), "JPEG", exif=exif_block(3), xmp=xmp_packet(6)),
                                    {"orientation": 3}),
    "jpeg-orientation-0": lambda: (encode(crop("chelsea", 99, 101), "JPEG", exif=exif_block(0)), {"orientation": 1}),
    "jpeg-orientation-9": lambda: (encode(crop("chelsea", 99, 101), "JPEG", exif=exif_block(9, ">")),
                                   {"orientation": 1}),
    # PNG
    "png-rgb": lambda: (encode(crop("astronaut", 301, 453), "PNG"), {"channels": 3, "has_alpha": False}),
    "png-rgba": lambda: (encode(with_alpha(crop("chelsea", 301, 203)), "PNG"), {"channels": 4, "has_alpha": True}),
    "png-L": lambda: (encode(crop("camera", 453, 301), "PNG"), {"channels": 1, "mode_hint": "L"}),
    "png-LA": lambda: (encode(with_alpha(crop("camera", 77, 1000)).convert("LA"), "PNG"),
                       {"channels": 2, "has_alpha": True}),
    "png-P": lambda: (encode(crop("coffee", 301, 453).quantize(200), "PNG"), {"channels": 3, "has_alpha": False}),
    "png-P-4bit": lambda: (encode(crop("coffee", 301, 453).quantize(16), "PNG", bits=4), {"bit_depth": 4}),
    "png-P-tRNS": lambda: (encode(crop("coffee", 301, 453).quantize(64), "PNG", transparency=0),
                           {"channels": 4, "has_alpha": True}),
    "png-L-tRNS": lambda: (encode(crop("camera", 301, 453), "PNG", transparency=17),
                           {"channels": 2, "has_alpha": True}),
    "png-RGB-tRNS": lambda: (encode(crop("astronaut", 301, 453), "PNG", transparency=(1, 2, 3)),
                             {"channels": 4, "has_alpha": True}),
    "png-1bit": lambda: (encode(crop("camera", 301, 453).convert("1"), "PNG"), {"bit_depth": 1, "mode_hint": "1"}),
    "png-2bit-gray": lambda: (png_gray2(crop("camera", 301, 453)), {"bit_depth": 2, "mode_hint": "L"}),
    "png-I16": lambda: (encode(Image.fromarray(np.asarray(crop("camera", 301, 453)).astype(np.uint16) * 257), "PNG"),
                        {"bit_depth": 16, "mode_hint": "I;16", "channels": 1}),
    "png-RGB16": lambda: (png_rgb16(crop("astronaut", 301, 453)), {"bit_depth": 16, "channels": 3}),
    "png-exif-6-II": lambda: (encode(crop("coffee", 301, 453), "PNG", exif=exif_block(6)), {"orientation": 6}),
    "png-exif-8-MM": lambda: (encode(crop("coffee", 301, 453), "PNG", exif=exif_block(8, ">")), {"orientation": 8}),
    "png-exif-3-MM": lambda: (encode(crop("coffee", 301, 453), "PNG", exif=exif_block(3, ">")), {"orientation": 3}),
    "png-xmp-itxt": lambda: _png_text_exif("xmp"),
    "png-raw-profile-exif": lambda: _png_text_exif("raw"),
    "png-tEXt-exif": lambda: _png_text_exif("text"),
    "png-apng": lambda: (encode(crop("astronaut", 99, 77), "PNG", save_all=True,
                                append_images=[crop("chelsea", 99, 77)]), {"animated": True}),
    "png-apng-default-image": lambda: (encode(crop("astronaut", 99, 77), "PNG", save_all=True, default_image=True,
                                              append_images=[crop("chelsea", 99, 77)]), {"animated": True}),
    # WebP
    "webp-lossy": lambda: (encode(crop("coffee", 301, 453), "WEBP", quality=80), {"channels": 3, "has_alpha": False}),
    "webp-lossless": lambda: (encode(crop("astronaut", 77, 1000), "WEBP", lossless=True), {"channels": 3}),
    "webp-lossy-alpha": lambda: (encode(with_alpha(crop("chelsea", 301, 203)), "WEBP"),
                                 {"channels": 4, "has_alpha": True}),
    "webp-lossless-alpha": lambda: (encode(with_alpha(crop("chelsea", 301, 203)), "WEBP", lossless=True),
                                    {"channels": 4, "has_alpha": True}),
    "webp-exif-6-II": lambda: (encode(crop("coffee", 301, 453), "WEBP", exif=exif_block(6)), {"orientation": 6}),
    "webp-exif-7-MM": lambda: (encode(crop("coffee", 301, 453), "WEBP", exif=exif_block(7, ">")), {"orientation": 7}),
    "webp-exif-alpha-lossless": lambda: (encode(with_alpha(crop("astronaut", 203, 301)), "WEBP", lossless=True,
                                                exif=exif_block(5, ">")), {"orientation": 5, "has_alpha": True}),
    "webp-xmp": lambda: (encode(crop("coffee", 301, 453), "WEBP", xmp=xmp_packet(2)), {"orientation": 2}),
    "webp-animated": lambda: (encode(crop("astronaut", 99, 77), "WEBP", save_all=True, duration=40,
                                     append_images=[crop("chelsea", 99, 77)]), {"animated": True}),
    # BMP
    "bmp-rgb": lambda: (encode(crop("astronaut", 301, 453), "BMP"), {"channels": 3, "bit_depth": 8}),
    "bmp-L": lambda: (encode(crop("camera", 301, 453), "BMP"), {"channels": 1, "mode_hint": "L"}),
    "bmp-P": lambda: (encode(crop("coffee", 301, 453).quantize(100), "BMP"), {"channels": 3, "mode_hint": "P"}),
    "bmp-1bit": lambda: (encode(crop("camera", 301, 453).convert("1"), "BMP"), {"bit_depth": 1}),
    "bmp-rgba-as-rgbx": lambda: (encode(with_alpha(crop("chelsea", 301, 203)), "BMP"), {"has_alpha": False}),
    "bmp-core-header": lambda: (bmp_raw(crop("chelsea", 301, 203), 12, 24), {"channels": 3}),
    "bmp-core-4bit": lambda: (bmp_raw(crop("chelsea", 301, 203), 12, 4), {"bit_depth": 4, "mode_hint": "P"}),
    "bmp-info-4bit-top-down": lambda: (bmp_raw(crop("coffee", 77, 1000), 40, 4, top_down=True), {"bit_depth": 4}),
    "bmp-top-down": lambda: (bmp_raw(crop("coffee", 301, 453), 40, 24, top_down=True), {"height": 453}),
    "bmp-v4-alpha": lambda: (bmp_raw(with_alpha(crop("astronaut", 301, 453)), 108, 32,
                                     masks=(0xFF0000, 0xFF00, 0xFF, 0xFF000000)), {"has_alpha": True, "channels": 4}),
    "bmp-v5-no-alpha": lambda: (bmp_raw(crop("astronaut", 301, 453), 124, 32, masks=(0xFF0000, 0xFF00, 0xFF, 0)),
                                {"has_alpha": False}),
    # GIF
    "gif-static": lambda: (encode(crop("chelsea", 301, 203).quantize(128), "GIF"), {"mode_hint": "P", "channels": 3}),
    "gif-transparent": lambda: (encode(crop("chelsea", 301, 203).quantize(128), "GIF", transparency=3),
                                {"has_alpha": True, "channels": 4}),
    "gif-gray": lambda: (encode(crop("camera", 301, 453), "GIF"), {"mode_hint": "L"}),
    "gif-animated": lambda: (gif_anim([crop("astronaut", 99, 77).quantize(64), crop("coffee", 99, 77).quantize(64)]),
                             {"animated": False}),  # documented: GIF frame counts are not probed
    "gif-frame-outside-screen": _gif_frame_outside_screen,
    # TIFF
    "tiff-rgb": lambda: (encode(crop("astronaut", 301, 453), "TIFF"), {"channels": 3}),
    "tiff-lzw": lambda: (encode(crop("coffee", 77, 1000), "TIFF", compression="tiff_lzw"), {}),
    "tiff-L": lambda: (encode(crop("camera", 301, 453), "TIFF"), {"channels": 1}),
    "tiff-I16": lambda: (encode(Image.fromarray(np.asarray(crop("camera", 301, 453)).astype(np.uint16) * 257), "TIFF"),
                         {"bit_depth": 16, "mode_hint": "I;16"}),
    "tiff-rgba": lambda: (encode(with_alpha(crop("chelsea", 301, 203)), "TIFF"), {"has_alpha": True, "channels": 4}),
    "tiff-cmyk": lambda: (encode(crop("coffee", 301, 453).convert("CMYK"), "TIFF"), {"channels": 4}),
    "tiff-multipage": lambda: (encode(crop("astronaut", 99, 77), "TIFF", save_all=True,
                                      append_images=[crop("chelsea", 99, 77)]), {"animated": True}),
    "tiff-bigtiff": lambda: (encode(crop("astronaut", 301, 453), "TIFF", big_tiff=True), {}),
    "tiff-MM-raw": lambda: (tiff_raw(crop("chelsea", 301, 203), ">"), {}),
    "tiff-xmp-orientation": lambda: (encode(crop("coffee", 301, 453), "TIFF", tiffinfo={700: xmp_packet(6)}),
                                     {"orientation": 6}),
}
for _o in range(1, 9):
    for _e, _name in (("<", "II"), (">", "MM")):
        CASES[f"jpeg-exif-{_o}-{_name}"] = (
            lambda o=_o, e=_e: (encode(crop("grace_hopper", 301, 453), "JPEG", exif=exif_block(o, e)),
                                {"orientation": o})
        )
    CASES[f"tiff-orientation-{_o}"] = (
        lambda o=_o: (encode(crop("coffee", 301, 453), "TIFF", exif=exif_block(o)), {"orientation": o})
    )
for _o in (3, 6, 8):
    CASES[f"tiff-MM-orientation-{_o}"] = lambda o=_o: (tiff_raw(crop("chelsea", 301, 203), ">", o), {"orientation": o})
    CASES[f"webp-lossless-exif-{_o}"] = (
        lambda o=_o: (encode(crop("astronaut", 203, 301), "WEBP", lossless=True, exif=exif_block(o)),
                      {"orientation": o})
    )


def pillow_view(data: bytes) -> dict:
    """What Pillow reports for an encoded file, normalised to probe's conventions."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow warns on odd EXIF; the values are what matter
        with Image.open(io.BytesIO(data)) as img:
            orientation = img.getexif().get(0x0112, 1)
            orientation = orientation if isinstance(orientation, int) and 1 <= orientation <= 8 else 1
            size = img.size
            if img.format == "TIFF" and img.tag_v2.get(0x0112) in (5, 6, 7, 8):
                size = size[::-1]  # Pillow pre-rotates TIFF sizes by the tag; probe reports the stored size
            view = {
                "format": img.format.lower(),
                "size": size,
                "orientation": orientation,
                "mode": img.mode,
                "animated": getattr(img, "is_animated", False),
            }
            view["oriented_size"] = ImageOps.exif_transpose(img).size
    return view


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_pillow(case, tmp_path):
    data, expected = CASES[case]()
    r = probe(data)
    pil = pillow_view(data)
    assert r.format == pil["format"]
    assert (r.width, r.height) == pil["size"]
    assert r.orientation == pil["orientation"]
    assert r.size_hw == pil["oriented_size"][::-1]
    assert r.pixels == r.width * r.height
    assert r.mode_hint == ("YCCK" if r.mode_hint == "YCCK" and pil["mode"] == "CMYK" else pil["mode"])
    if r.format != "gif":  # GIF frame counts are not probed (documented)
        assert r.animated == pil["animated"]
    for field, value in expected.items():
        assert getattr(r, field) == value, field
    assert 1 <= r.channels <= 4 and r.bit_depth in (1, 2, 4, 8, 16, 32)
    assert r.format == "jpeg" or not r.progressive
    # every input kind sees the same header
    path = tmp_path / f"{case}.img"
    path.write_bytes(data)
    assert probe(path) == probe(str(path)) == r
    assert probe(bytearray(data)) == probe(memoryview(data)) == probe(io.BytesIO(data)) == r
    with open(path, "rb") as f:
        assert probe(f) == r


def test_cases_cover_every_orientation_and_format():
    jpeg_exif = [c for c in CASES if "exif-" in c and c.startswith("jpeg")]
    orientations = {e.get("orientation") for _, e in (CASES[c]() for c in jpeg_exif)}
    assert orientations >= set(range(1, 9))
    assert {c.split("-")[0] for c in CASES} == FORMATS


# --------------------------------------------------------------------------
# Result object and input handling


def test_result_is_frozen_and_orients():
    r = ProbeResult("jpeg", 640, 480, 6, 3, 8, "RGB", False, False, False)
    assert r.size_hw == (640, 480) and r.pixels == 640 * 480
    assert ProbeResult("jpeg", 640, 480, 3, 3, 8, "RGB", False, False, False).size_hw == (480, 640)
    with pytest.raises(FrozenInstanceError):
        r.width = 1


def test_file_object_position_is_used_and_restored():
    data = encode(crop("coffee", 301, 453), "PNG")
    f = io.BytesIO(b"junk-prefix" + data)
    f.seek(11)
    assert (probe(f).width, probe(f).height) == (301, 453)
    assert f.tell() == 11


def test_text_mode_file_is_an_image_error(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(encode(crop("coffee", 31, 45), "PNG"))
    with open(path, encoding="latin-1") as f, pytest.raises(ImageError, match="binary"):
        probe(f)


@pytest.mark.parametrize("bad", [42, None, np.zeros((4, 4, 3), np.uint8), ["a.png"]])
def test_unsupported_input_types(bad):
    with pytest.raises(ImageError, match="expected bytes, a path or a binary file object"):
        probe(bad)


def test_missing_path(tmp_path):
    missing = tmp_path / "nope.jpg"
    with pytest.raises(ImageError, match="found nothing") as info:
        probe(missing)
    assert info.value.source == str(missing)
    with pytest.raises(ImageError):
        probe(str(missing))


def test_special_files_are_refused_without_being_opened(tmp_path):
    """probe(path) of a FIFO or a device blocked forever in open() or read() (issue 13, #3);
    run in a child process so the old behaviour fails by timeout instead of hanging pytest."""
    import subprocess
    import sys
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    code = ("import sys, vlmprep\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        vlmprep.probe(p)\n"
            "    except vlmprep.ImageError as e:\n"
            "        print(e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(fifo), "/dev/zero"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2
    assert "found a FIFO" in lines[0] and "found a character device" in lines[1]


def test_directory_path(tmp_path):
    with pytest.raises(ImageError, match="directory") as info:
        probe(tmp_path)
    assert info.value.source == str(tmp_path)


# --------------------------------------------------------------------------
# Broken input


def test_empty_input(tmp_path):
    for empty in (b"", bytearray(), memoryview(b""), io.BytesIO()):
        with pytest.raises(ImageError, match="0 bytes"):
            probe(empty)
    (tmp_path / "empty.jpg").write_bytes(b"")
    with pytest.raises(ImageError, match="0 bytes"):
        probe(tmp_path / "empty.jpg")


def test_random_bytes(seed):
    rng = random.Random(seed)
    starts = (b"\xff\xd8", b"\x89P", b"GI", b"BM", b"II", b"MM", b"RI")
    for _ in range(200):
        data = rng.randbytes(rng.randrange(16, 5000))  # shorter data may be a truncated signature
        if data.startswith(starts):
            continue
        with pytest.raises(ImageError, match="match none of them; pass an encoded image file") as info:
            probe(data)
        assert info.value.source == f"bytes[{len(data)}]", f"seed={seed}"


def _header_end(data: bytes, fmt: str) -> int:
    """Length of the shortest prefix that holds the size: end of the JPEG SOF / PNG IHDR data."""
    if fmt == "png":
        return 8 + 8 + 13
    pos = 2
    while True:
        marker, length = data[pos + 1], struct.unpack_from(">H", data, pos + 2)[0]
        if marker in (0xC0, 0xC1, 0xC2):
            return pos + 2 + length
        pos += 2 + length


@pytest.mark.parametrize("fmt,kw", [("jpeg", {}), ("jpeg", {"progressive": True}), ("png", {})])
def test_every_truncation_before_the_size_raises(fmt, kw):
    kw = dict(kw, exif=exif_block(6)) if fmt == "jpeg" else kw
    data = encode(crop("grace_hopper", 301, 453), fmt.upper(), **kw)
    end = _header_end(data, fmt)
    for n in range(end):
        with pytest.raises(ImageError):
            probe(data[:n])
    for n in range(end, min(end + 600, len(data))):  # size known: truncation is decode's problem
        r = probe(data[:n])
        assert (r.width, r.height) == (301, 453)


@pytest.mark.parametrize("case", ["webp-lossy", "webp-lossless", "webp-exif-6-II", "gif-static", "bmp-rgb",
                                  "bmp-core-header", "tiff-rgb", "tiff-MM-raw"])
def test_truncation_is_error_until_size_then_stable(case):
    data, _ = CASES[case]()
    full = probe(data)
    seen_ok = False
    for n in range(min(len(data), 400)):
        try:
            r = probe(data[:n])
        except ImageError:
            assert not seen_ok, f"prefix {n} fails after a shorter one succeeded"
            continue
        seen_ok = True
        assert (r.format, r.width, r.height) == (full.format, full.width, full.height)
    assert seen_ok


def test_zero_sizes():
    jpeg = bytearray(encode(crop("chelsea", 31, 45), "JPEG"))
    sof = jpeg.index(b"\xff\xc0")
    jpeg[sof + 5:sof + 7] = b"\x00\x00"  # height 0 (DNL-defined heights are not supported)
    png = bytearray(encode(crop("chelsea", 31, 45), "PNG"))
    png[16:20] = b"\x00\x00\x00\x00"
    gif = bytearray(encode(crop("chelsea", 31, 45).quantize(8), "GIF"))
    gif[6:10] = b"\x00\x00\x00\x00"
    gif_frame = gif.index(b",", 13)
    gif[gif_frame + 5:gif_frame + 9] = b"\x00\x00\x00\x00"
    bmp = bytearray(encode(crop("chelsea", 31, 45), "BMP"))
    bmp[18:22] = struct.pack("<l", 0)
    tiff = tiff_raw(crop("chelsea", 31, 45), "<").replace(struct.pack("<HHLL", 256, 4, 1, 31),
                                                          struct.pack("<HHLL", 256, 4, 1, 0))
    webp = bytearray(encode(crop("chelsea", 31, 45), "WEBP"))
    webp[26:28] = b"\x00\x00"
    for data in (jpeg, png, gif, bmp, tiff, webp):
        with pytest.raises(ImageError, match="expected a positive image size"):
            probe(bytes(data))


def test_negative_bmp_width():
    bmp = bytearray(encode(crop("chelsea", 31, 45), "BMP"))
    bmp[18:22] = struct.pack("<l", -31)
    with pytest.raises(ImageError, match="-31x45"):
        probe(bytes(bmp))


def test_segment_length_past_the_end():
    data = bytearray(encode(crop("chelsea", 31, 45), "JPEG"))
    app0 = data.index(b"\xff\xe0")
    data[app0 + 2:app0 + 4] = b"\xff\xf0"  # claims 65520 bytes in a small file
    with pytest.raises(ImageError, match="declares 65520 bytes but .* remain"):
        probe(bytes(data))
    data[app0 + 2:app0 + 4] = b"\x00\x01"  # shorter than its own length field: libjpeg resyncs
    assert (probe(bytes(data)).width, probe(bytes(data)).height) == Image.open(io.BytesIO(data)).size == (31, 45)
    sof = data.index(b"\xff\xc0")
    data[sof + 2:sof + 4] = b"\x00\x01"  # a frame header cannot be skipped
    with pytest.raises(ImageError, match="frame header of 8 bytes or more .* length field says 1"):
        probe(bytes(data))


@pytest.mark.parametrize("length", [0, 1, 2, 5, 7])
def test_short_frame_header_after_the_frame_is_refused_as_pillow_refuses(length):
    """Oracle: Pillow. A second frame header (SOF) shorter than 8 bytes, after a good one: Pillow
    reads every SOF and cannot read this one (what the CI mutation run met at seed 2205593598:
    an SOS marker turned into SOF9 with length 1); the probe refuses it too."""
    data = encode(crop("chelsea", 31, 45), "JPEG")
    sos = data.index(b"\xff\xda")
    body = bytes([8, 0, 45, 0, 31])[:max(length - 2, 0)]  # what fits of precision, height, width
    bad = data[:sos] + b"\xff\xc9" + struct.pack(">H", length) + body + data[sos:]
    with pytest.raises(Image.UnidentifiedImageError):
        Image.open(io.BytesIO(bad))
    with pytest.raises(ImageError, match=f"frame header of 8 bytes or more .* length field says {length};"):
        probe(bad)


def test_scan_before_frame_header():
    data = encode(crop("chelsea", 31, 45), "JPEG")
    sof = data.index(b"\xff\xc0")
    sos = data.index(b"\xff\xda")
    broken = data[:sof] + data[sos:]
    with pytest.raises(ImageError, match=r"found scan data \(SOS\)"):
        probe(broken)


def test_jpeg_junk_between_segments_is_skipped_like_pillow():
    data = encode(crop("chelsea", 31, 45), "JPEG")
    sof = data.index(b"\xff\xc0")
    padded = data[:sof] + b"\x00junk\xff\x00\xff\xff" + data[sof:]
    assert (probe(padded).width, probe(padded).height) == Image.open(io.BytesIO(padded)).size == (31, 45)


def _exif_ifd_offset_patch(exif: bytes, offset: int) -> bytes:
    return exif[:10] + struct.pack("<L", offset) + exif[14:]


def test_exif_ifd_offset_out_of_range_means_orientation_1():
    """Decision: broken EXIF never fails a probe; orientation 1 (Pillow also sees no tags)."""
    for offset in (0xFFFFFFF0, 5000, 30):
        exif = _exif_ifd_offset_patch(exif_block(6), offset)
        data = encode(crop("grace_hopper", 301, 453), "JPEG", exif=exif)
        r = probe(data)
        assert r.orientation == 1 and (r.width, r.height) == (301, 453)
        assert pillow_view(data)["orientation"] == 1


def test_broken_exif_values_mean_orientation_1():
    good = exif_block(6)
    cases = {
        "bad-tiff-magic": good[:6] + b"XX*\x00" + good[10:],
        "cut-ifd": good[:6 + 8 + 2 + 12],  # IFD declares 4 entries, holds 1
        "value-out-of-range": good.replace(struct.pack("<HHL", 274, 3, 1), struct.pack("<HHL", 274, 3, 9999)),
        "wrong-type": good.replace(struct.pack("<HHL", 274, 3, 1), struct.pack("<HHL", 274, 1, 1)),
        "empty": b"Exif\x00\x00",
    }
    for name, exif in cases.items():
        data = encode(crop("grace_hopper", 61, 93), "JPEG", exif=exif)
        assert probe(data).orientation == 1, name
        assert pillow_view(data)["orientation"] == 1, name


def test_tiff_ifd_offset_out_of_range_is_an_error():
    data = bytearray(encode(crop("coffee", 31, 45), "TIFF"))
    data[4:8] = struct.pack("<L", len(data) + 100)
    with pytest.raises(ImageError, match="expected the first IFD inside"):
        probe(bytes(data))


def test_tiff_without_size_tags():
    data = tiff_raw(crop("chelsea", 31, 45), ">")
    data = data.replace(struct.pack(">HHL", 256, 4, 1), struct.pack(">HHL", 999, 4, 1))
    with pytest.raises(ImageError, match="ImageWidth"):
        probe(data)


def test_huge_claimed_size_is_reported_not_rejected():
    ihdr = struct.pack(">LLBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\x00" * 64))
    r = probe(png)
    assert (r.width, r.height, r.pixels) == (100_000, 100_000, 10**10)
    jpeg = bytearray(encode(crop("chelsea", 31, 45), "JPEG"))
    sof = jpeg.index(b"\xff\xc0")
    jpeg[sof + 5:sof + 9] = b"\xff\xff\xff\xff"
    assert probe(bytes(jpeg)).size_hw == (65535, 65535)


def test_invalid_png_header():
    ihdr = struct.pack(">LLBBBBB", 10, 10, 3, 2, 0, 0, 0)  # 3-bit RGB does not exist
    with pytest.raises(ImageError, match="depth 3 with colour type 2"):
        probe(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr))
    with pytest.raises(ImageError, match="IHDR chunk"):
        probe(b"\x89PNG\r\n\x1a\n" + png_chunk(b"tEXt", b"a\x00b" * 10))


def test_truncated_signature_names_the_format():
    for data, name in ((b"\x89PNG\r", "PNG"), (b"\xff\xd8", "JPEG"), (b"GIF8", "GIF"), (b"RIFF\x10\x00", "WebP")):
        with pytest.raises(ImageError, match=f"complete {name} file"):
            probe(data)


def test_error_messages_say_what_to_do():
    with pytest.raises(ImageError) as info:
        probe(b"\x00\x01\x02\x03garbage")
    msg = str(info.value)
    assert msg.startswith("bytes[11]: expected a JPEG/PNG/WebP/BMP/GIF/TIFF file")
    # what the data looks like, never its bytes (a batch error row must not carry a file's content)
    assert "got binary data of no known image format" in msg and "pass an encoded image file" in msg
    assert "garb" not in msg and "\\x00" not in msg
    for data, what in ((b"root:x:0:0:root:/root:/bin/bash\n", "got text,"),
                       (b"  <!DOCTYPE html><html>", "starts like HTML"), (b'{"error": "no"}', "like JSON"),
                       (b"PK\x03\x04secret-in-zip", "a ZIP archive"), (b"\x1f\x8b\x08secret", "gzip"),
                       (b"\x00\x00\x00\x18ftypisom-secret", "MP4/MOV video")):
        with pytest.raises(ImageError, match=what) as info:
            probe(data)
        assert "root" not in str(info.value) and "secret" not in str(info.value), info.value


# --------------------------------------------------------------------------
# Fuzz: mutated headers give a valid result or an ImageError, nothing else


def _fuzz_corpus() -> list[bytes]:
    names = ["jpeg-exif-6-MM", "jpeg-progressive", "png-P-tRNS", "png-apng", "png-raw-profile-exif", "webp-exif-7-MM",
             "webp-lossless-alpha", "webp-animated", "bmp-v4-alpha", "bmp-core-4bit", "gif-transparent",
             "tiff-orientation-6", "tiff-MM-orientation-8", "tiff-bigtiff"]
    # the headers plus a little image data keep every mutation close to the parsed fields
    return [CASES[n]()[0][:3000] for n in names]


def test_fuzz_mutated_headers(seed, monkeypatch):
    """Each probe does work proportional to its input: at most 2 reads per byte (+64), counted
    on the reader, which also stops a runaway loop at its first read past the bound."""
    rng = random.Random(seed)
    corpus = _fuzz_corpus()
    reads = {"n": 0, "bound": 0}
    real_at = probe_reader.Bytes.at

    def counted_at(self, off, n):
        reads["n"] += 1
        assert reads["n"] <= reads["bound"], f"over {reads['bound']} reads for {self.size} bytes"
        return real_at(self, off, n)

    monkeypatch.setattr(probe_reader.Bytes, "at", counted_at)
    outcomes = {"ok": 0, "error": 0}
    for i in range(2000):
        data = bytearray(rng.choice(corpus))
        for _ in range(rng.randint(1, 6)):
            at = min(int(rng.expovariate(1 / 80)), len(data) - 1)  # mostly within the first ~200 bytes
            data[at] = rng.choice((0, 0xFF, 1, rng.randrange(256)))
        if rng.random() < 0.2:
            data = data[:rng.randrange(len(data))]
        reads.update(n=0, bound=2 * len(data) + 64)
        try:
            r = probe(bytes(data))
        except ImageError:
            outcomes["error"] += 1
            continue
        except Exception as exc:  # noqa: BLE001 - the point of the test
            pytest.fail(f"seed={seed} iteration={i}: {type(exc).__name__}: {exc}")
        outcomes["ok"] += 1
        assert r.format in FORMATS and r.width > 0 and r.height > 0, f"seed={seed} iteration={i}"
        assert 1 <= r.orientation <= 8 and r.channels >= 1, f"seed={seed} iteration={i}"
    assert outcomes["ok"] > 100, outcomes  # mutations must not all hit the signature


def _jpeg_with(segment: bytes, after_sof: bool = False) -> bytes:
    data = encode(crop("chelsea", 31, 45), "JPEG")
    at = data.index(b"\xff\xc4") if after_sof else 2  # a DHT follows the frame header
    return data[:at] + segment + data[at:]


def _pillow_opens(data: bytes) -> bool:
    try:
        Image.open(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - whatever Pillow raises, transformers cannot read it
        return False
    return True


@pytest.mark.parametrize("segment, after_sof, match", [
    (b"\xff\xee\x00\x07Adobe", False, "at least 7 bytes in the Adobe APP14"),    # fuzz found
    (b"\xff\xe0\x00\x08JFIF\x00\x01", False, "at least 7 bytes in the JFIF APP0"),
    (b"\xff\xe2\x00\x0eICC_PROFILE\x00", False, "at least 14 bytes in the ICC_PROFILE APP2"),
    (b"\xff\xdb\x00\x05\x00abc", False, "whole quantization tables"),
    (b"\xff\x01", True, "invalid marker 0xFF01"),  # libjpeg skips TEM; Pillow refuses it
])
def test_jpeg_headers_pillow_refuses_are_refused(segment, after_sof, match):
    """Header segments Pillow's parser refuses (so transformers cannot read the file) but libjpeg
    reads: refused by the probe, so that every backend and build refuses them alike (the pipeline
    fuzzer found the Adobe one: the compiled decoder accepted it, Pillow did not)."""
    data = _jpeg_with(segment, after_sof)
    assert not _pillow_opens(data)
    with pytest.raises(ImageError, match=match):
        probe(data)


def test_jpeg_12_bit_is_refused_by_name():
    data = bytearray(encode(crop("chelsea", 31, 45), "JPEG"))
    data[data.index(b"\xff\xc0") + 4] = 12
    assert not _pillow_opens(bytes(data))
    with pytest.raises(ImageError, match="expected 8-bit JPEG samples.*declares 12-bit"):
        probe(bytes(data))


def test_jpeg_segments_pillow_reads_are_accepted():
    """The same segments, long enough (or an ICC one after the frame header, which Pillow does
    not index), open in Pillow and probe to the same size."""
    for segment, after_sof in ((b"\xff\xee\x00\x09Adobe\x00\x64", False),
                               (b"\xff\xe0\x00\x09JFIF\x00\x01\x01", False),
                               (b"\xff\xe2\x00\x0eICC_PROFILE\x00", True)):
        data = _jpeg_with(segment, after_sof)
        assert _pillow_opens(data), segment
        assert (probe(data).width, probe(data).height) == Image.open(io.BytesIO(data)).size


def _assert_bomb_size_agrees(data: bytes, where: str) -> None:
    """``data`` is one Pillow refuses as a decompression bomb: its probed size is above
    vlmprep's own source-pixel limit (Pillow's threshold) and equals the size Pillow reads
    with its limit off."""
    got = probe(data)
    assert got.width * got.height > DEFAULT_MAX_SOURCE_PIXELS, where
    saved = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            size = Image.open(io.BytesIO(data)).size
    finally:
        Image.MAX_IMAGE_PIXELS = saved
    assert (got.width, got.height) == size, where


def test_jpeg_bomb_size_is_probed_and_refused_by_the_plan():
    """A frame header declaring 40000x30000 (1.2 Gpx, what the CI mutation run met at seed
    1507428783): the probe reads the size, Pillow refuses it as a bomb, and the plan refuses it
    by max_source_pixels before any decode."""
    data = bytearray(encode(crop("chelsea", 40, 30), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", 30000, 40000)
    data = bytes(data)
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(data))
    _assert_bomb_size_agrees(data, "40000x30000")
    with pytest.raises(ImageError, match=r"expected at most 178,956,970 source pixels.*max_source_pixels"):
        vlmprep.Processor("siglip")(data)


def test_jpeg_header_mutations_probe_accepts_pillow_opens(seed):
    """Oracle: Pillow. Mutated JPEG headers (to just past the first scan's header) that the probe
    accepts open in Pillow, except a segment whose length runs past the end after the frame
    header (Pillow: 'Truncated File Read'), which the probe leaves to the decoder (the size is
    known; every decoder refuses it)."""
    rng = random.Random(seed)
    bases = [encode(crop("chelsea", 40, 30), "JPEG", quality=90),
             encode(crop("astronaut", 40, 30), "JPEG", quality=50, progressive=True,
                    icc_profile=b"x" * 40)]
    accepted = 0
    for i in range(3000):
        data = bytearray(rng.choice(bases))
        sos = data.index(b"\xff\xda")
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(2, sos + 4)] = rng.choice((0, 0xFF, 1, 2, rng.randrange(256)))
        try:
            probe(bytes(data))
        except ImageError:
            continue
        accepted += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                Image.open(io.BytesIO(bytes(data)))
        except Image.DecompressionBombError:
            # a size Pillow refuses: the probe reads it (headers only); the plan refuses it by the
            # same threshold (max_source_pixels), and the size itself must be Pillow's
            _assert_bomb_size_agrees(bytes(data), f"seed={seed} iteration={i}")
        except OSError as e:
            assert "Truncated File Read" in str(e), f"seed={seed} iteration={i}: {e!r}"
        except Exception as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"seed={seed} iteration={i}: the probe accepted what Pillow refuses: {e!r}")
    assert accepted > 500, accepted
