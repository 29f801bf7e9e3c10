"""The hostile-input corpus, generated (nothing large is committed): every case of issue 13 and
the classes around it, as named cases in groups.

A case is made fresh in the process that runs it (``make(ctx)``), so buffers placed against an
unmapped page, FIFOs, released memoryviews and 2 GB sparse files exist only there.

    Case(name, make, expect, oracle=None, decoded_px=0)
      expect: "bad"    -> must be an ImageError for that item (the contract: truncated or
                          corrupt data, wrong types, over-limit headers, special files)
              "good"   -> must be processed, equal to ``oracle()`` (an HWC uint8 array made by
                          Pillow / numpy) given as an array in the same position
              "either" -> a valid-but-hostile file (EXIF bombs, huge logical screens): either
                          result is fine, as long as it is clean and bounded
      decoded_px: pixels a decode of this item may legitimately hold (the header's claim when
                  the plan accepts it); the peak-memory bound is computed from it (worker).

Photos come from scikit-image / matplotlib package data (tests/_support/imgdata.py), encoded with
Pillow / OpenCV; headers are patched by hand where no encoder writes the hostile form.
``full=True`` (VLMPREP_HOSTILE_FULL=1) makes the sweeps denser and the bombs issue-sized.
"""
from __future__ import annotations

import functools
import io
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from _support.imgdata import crop, encode, png16, tiled
from PIL import Image, ImageOps

__all__ = ["Case", "Group", "groups", "oracle_rgb", "GROUP_NAMES", "GROUP_MODES", "ALL_MODES"]


@dataclass
class Case:
    name: str
    make: Callable[["Ctx"], Any]
    expect: str
    oracle: Callable[[], np.ndarray] | None = None
    decoded_px: int = 0
    note: str = ""          # which issue-13 item this case reproduces, if any
    msg_not: str | None = None  # a regex the error message must NOT match (a known wrong message)


ALL_MODES = ("proc", "batcher", "loader")
#: Modes each group runs in (known without building the group): "memory" is about one decode's
#: peak, which only the direct call measures cleanly.
GROUP_MODES = {"memory": ("proc",)}


@dataclass
class Group:
    name: str
    cases: list[Case]
    preset: str = "qwen2-vl"
    overrides: dict = field(default_factory=dict)

    @property
    def modes(self) -> tuple[str, ...]:
        return GROUP_MODES.get(self.name, ALL_MODES)


class Ctx:
    """What ``make`` gets: a private temporary directory (one per worker process)."""

    def __init__(self, tmp: str):
        self.tmp = tmp
        self._n = 0

    def path(self, name: str) -> str:
        self._n += 1
        d = os.path.join(self.tmp, f"c{self._n}")
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, name)

    def file(self, name: str, data: bytes) -> str:
        p = self.path(name)
        with open(p, "wb") as f:
            f.write(data)
        return p


# -- oracles -------------------------------------------------------------------------------------
def oracle_rgb(data: bytes) -> np.ndarray:
    """Pillow's reading of an 8-bit encoded file as API.md settles it: first frame, EXIF
    orientation applied, transparency composited on white, converted as Pillow converts."""
    img = Image.open(io.BytesIO(data))
    img.load()
    img = ImageOps.exif_transpose(img)
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        rgba = img.convert("RGBA")
        img = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return np.ascontiguousarray(np.asarray(img.convert("RGB")))


def _oracle16(a16: np.ndarray) -> np.ndarray:
    """16-bit samples -> round(v / 257) (API.md), then the 8-bit rules (alpha on white)."""
    a8 = ((a16.astype(np.uint32) + 128) // 257).astype(np.uint8)
    if a8.ndim == 2:
        return np.repeat(a8[..., None], 3, axis=2)
    if a8.shape[2] == 3:
        return np.ascontiguousarray(a8)
    rgba = Image.fromarray(np.ascontiguousarray(a8), "RGBA")
    out = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
    return np.ascontiguousarray(np.asarray(out.convert("RGB")))


# -- base images -----------------------------------------------------------------------------------
PHOTO = ("astronaut", 96, 128)  # small enough to be fast, large enough for many cut points


@functools.lru_cache(maxsize=None)
def base_rgb() -> np.ndarray:
    return crop(*PHOTO, top=40, left=150)


def _apng(rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    frames = [Image.fromarray(rgb), Image.fromarray(np.ascontiguousarray(rgb[::-1]))]
    frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:], duration=100)
    return buf.getvalue()


def _webp_animated(rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    frames = [Image.fromarray(rgb), Image.fromarray(np.ascontiguousarray(rgb[::-1]))]
    frames[0].save(buf, "WEBP", save_all=True, append_images=frames[1:], duration=100, quality=80)
    return buf.getvalue()


def _pil(rgb: np.ndarray, mode: str, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img = Image.fromarray(rgb)
    if mode == "P":
        img = img.convert("P", palette=Image.Palette.ADAPTIVE, colors=kw.pop("colors", 256))
    elif mode != "RGB":
        img = img.convert(mode)
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def _ycck_jpeg(rgb: np.ndarray) -> bytes:
    """A CMYK JPEG whose Adobe APP14 transform flag says YCCK (2): libjpeg then converts the
    components YCCK -> CMYK, as for a YCCK file from Photoshop (no Python encoder writes one)."""
    data = bytearray(encode(rgb, "jpeg_cmyk"))
    i = data.find(b"\xff\xeeAdobe") if b"\xff\xeeAdobe" in data else data.find(b"\xff\xee")
    if i < 0:  # Pillow did not write APP14: add one after SOI
        app14 = b"\xff\xee\x00\x0eAdobe\x00\x64\x00\x00\x00\x00\x02"
        return bytes(data[:2] + app14 + data[2:])
    data[i + 15] = 2  # FFEE len(2) 'Adobe'(5) version(2) flags0(2) flags1(2) transform(1)
    return bytes(data)


def _16bit(kind: str, h: int = 64, w: int = 80) -> np.ndarray:
    """A 16-bit image made from a photo: v * 257 + a low byte pattern, so that round(v / 257)
    and truncation (v >> 8) differ and a decoder that drops the low byte is caught."""
    rgb = crop("coffee", h, w).astype(np.uint16)
    low = (np.arange(h * w, dtype=np.uint16).reshape(h, w) * 37 % 256)[..., None]
    a = np.clip(rgb * 257 + low - 128, 0, 65535).astype(np.uint16)
    if kind == "gray":
        return np.ascontiguousarray(a[..., 1])
    if kind == "rgb":
        return np.ascontiguousarray(a)
    alpha = np.tile(np.linspace(0, 65535, w).astype(np.uint16), (h, 1))[..., None]
    return np.ascontiguousarray(np.concatenate([a, alpha], axis=2))


def _cv2_16(a: np.ndarray, ext: str) -> bytes:
    import cv2
    b = a if a.ndim == 2 else (a[..., ::-1] if a.shape[2] == 3 else a[..., [2, 1, 0, 3]])
    ok, buf = cv2.imencode(ext, np.ascontiguousarray(b))
    assert ok
    return buf.tobytes()


@functools.lru_cache(maxsize=None)
def format_files() -> dict[str, bytes]:
    """Every format and colour layout the decoder takes, from one photo (8-bit unless named)."""
    rgb = base_rgb()
    files = {f: encode(rgb, f) for f in (
        "jpeg", "jpeg_progressive", "jpeg_gray", "jpeg_cmyk", "png", "png_rgba", "png_gray",
        "png_la", "png_palette", "png_palette_trns", "webp", "webp_lossless", "webp_alpha", "bmp",
        "gif", "gif_animated", "tiff", "tiff_lzw")}
    files["jpeg_ycck"] = _ycck_jpeg(rgb)
    files["png_1bit"] = _pil(rgb, "1", "PNG")
    files["png_palette_4bit"] = _pil(rgb, "P", "PNG", colors=16, bits=4)
    files["png_palette_2bit"] = _pil(rgb, "P", "PNG", colors=4, bits=2)
    files["png_16_gray"] = png16(_16bit("gray"))
    files["png_16_rgb"] = _cv2_16(_16bit("rgb"), ".png")
    files["png_16_rgba"] = _cv2_16(_16bit("rgba"), ".png")
    files["tiff_16_rgb"] = _cv2_16(_16bit("rgb"), ".tiff")
    files["apng"] = _apng(rgb)
    files["webp_animated"] = _webp_animated(rgb)
    files["bmp_8bit"] = _pil(rgb, "P", "BMP")
    files["bmp_1bit"] = _pil(rgb, "1", "BMP")
    files["gif_gray"] = _pil(rgb, "L", "GIF")
    files["tiff_cmyk"] = _pil(rgb, "CMYK", "TIFF")
    return files


_ORACLE16 = {"png_16_gray": "gray", "png_16_rgb": "rgb", "png_16_rgba": "rgba", "tiff_16_rgb": "rgb"}


def format_oracle(name: str) -> np.ndarray:
    if name in _ORACLE16:
        return _oracle16(_16bit(_ORACLE16[name]))
    return oracle_rgb(format_files()[name])


# -- byte-level builders -----------------------------------------------------------------------------
def png_chunk(ctype: bytes, data: bytes, crc: int | None = None) -> bytes:
    c = zlib.crc32(ctype + data) if crc is None else crc
    return struct.pack(">I", len(data)) + ctype + data + struct.pack(">I", c & 0xFFFFFFFF)


def png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    out, pos = [], 8
    while pos + 8 <= len(data):
        n, t = struct.unpack(">I4s", data[pos:pos + 8])
        out.append((t, data[pos + 8:pos + 8 + n]))
        pos += 12 + n
    return out


def png_build(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + b"".join(png_chunk(t, d) for t, d in chunks)


def png_header(w: int, h: int, depth: int = 8, ctype: int = 2) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0))


def png_with_size(data: bytes, w: int, h: int) -> bytes:
    ch = png_chunks(data)
    ihdr = struct.pack(">II", w, h) + ch[0][1][8:]
    return png_build([(b"IHDR", ihdr)] + ch[1:])


def jpeg_sof(data: bytes) -> int:
    """Offset of the frame header marker (SOF0..SOF2)."""
    pos = 2
    while pos + 4 <= len(data):
        assert data[pos] == 0xFF, pos
        m = data[pos + 1]
        if m in (0xC0, 0xC1, 0xC2):
            return pos
        pos += 2 + struct.unpack(">H", data[pos + 2:pos + 4])[0]
    raise ValueError("no SOF")


def jpeg_sos_end(data: bytes) -> int:
    """Offset of the first entropy-coded byte (just past the SOS header)."""
    pos = 2
    while True:
        m = data[pos + 1]
        n = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        if m == 0xDA:
            return pos + 2 + n
        pos += 2 + n


def jpeg_with_size(data: bytes, w: int, h: int) -> bytes:
    b = bytearray(data)
    i = jpeg_sof(data)
    b[i + 5:i + 9] = struct.pack(">HH", h, w)
    return bytes(b)


def jpeg_insert(data: bytes, segments: bytes) -> bytes:
    return data[:2] + segments + data[2:]


def tiff_ifd(order: str, entries: list[tuple[int, int, int, int]], next_ifd: int = 0) -> bytes:
    """One IFD: entries (tag, type, count, value-or-offset as 4 bytes)."""
    e = "<" if order == "II" else ">"
    out = struct.pack(e + "H", len(entries))
    for tag, typ, count, value in entries:
        if typ == 3 and count == 1:
            out += struct.pack(e + "HHIHH", tag, typ, count, value, 0)
        else:
            out += struct.pack(e + "HHII", tag, typ, count, value)
    return out + struct.pack(e + "I", next_ifd)


def exif_payload(kind: str) -> bytes:
    """A little-endian TIFF structure (what follows ``Exif\\0\\0``) built to attack an EXIF
    reader: loops, deep chains, huge counts, more entries than bytes."""
    hdr = b"II*\x00" + struct.pack("<I", 8)
    orient = (0x0112, 3, 1, 6)
    if kind == "ifd_loop":          # IFD0's next-IFD offset points at IFD0
        return hdr + tiff_ifd("II", [orient], next_ifd=8)
    if kind == "subifd_loop":       # Exif and GPS sub-IFD pointers point at IFD0
        return hdr + tiff_ifd("II", [orient, (0x8769, 4, 1, 8), (0x8825, 4, 1, 8)])
    if kind == "deep_chain":        # 3000 IFDs, each pointing at the next
        out, off = bytearray(hdr), 8
        for i in range(3000):
            nxt = off + 18 if i < 2999 else 0
            out += tiff_ifd("II", [orient], next_ifd=nxt)
            off += 18
        return bytes(out)
    if kind == "huge_count":        # a tag whose count claims 4 G values
        return hdr + tiff_ifd("II", [(0x010F, 2, 0xFFFFFFFF, 8), (0x0112, 3, 0xFFFFFFFF, 8), orient])
    if kind == "many_entries":      # IFD0 declares 65535 entries; the block holds 2
        return hdr + struct.pack("<H", 0xFFFF) + tiff_ifd("II", [orient, orient])[2:]
    if kind == "bad_type":          # orientation with an unknown type and a wild offset
        return hdr + tiff_ifd("II", [(0x0112, 99, 1, 0xFFFFFFF0)])
    if kind == "offset_outside":    # IFD0 beyond the block
        return b"II*\x00" + struct.pack("<I", 0x7FFFFFF0)
    raise ValueError(kind)


EXIF_KINDS = ("ifd_loop", "subifd_loop", "deep_chain", "huge_count", "many_entries", "bad_type",
              "offset_outside")


def jpeg_with_exif(payload: bytes) -> bytes:
    body = b"Exif\x00\x00" + payload
    body = body[:65533 - 2]
    return jpeg_insert(format_files()["jpeg"], b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body)


def png_with_exif(payload: bytes) -> bytes:
    ch = png_chunks(format_files()["png"])
    return png_build(ch[:1] + [(b"eXIf", payload)] + ch[1:])


def webp_with_exif(payload: bytes) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(base_rgb()).save(buf, "WEBP", quality=80, exif=b"Exif\x00\x00" + payload)
    return buf.getvalue()


def png_text_bomb(n: int, inflated: int, itxt: bool = False) -> bytes:
    """A small PNG with ``n`` compressed text chunks, each inflating to ``inflated`` bytes."""
    ch = png_chunks(format_files()["png"])
    comp = zlib.compress(b"\x00" * inflated, 9)
    texts = []
    for i in range(n):
        key = b"k%d" % i
        if itxt:
            texts.append((b"iTXt", key + b"\x00\x01\x00\x00\x00" + comp))
        else:
            texts.append((b"zTXt", key + b"\x00\x00" + comp))
    return png_build(ch[:1] + texts + ch[1:])


def gif_screen(w: int, h: int, frame_w: int = 1, frame_h: int = 1) -> bytes:
    """A GIF with a ``w`` x ``h`` logical screen and one tiny frame (a ~43-byte size bomb)."""
    hdr = b"GIF89a" + struct.pack("<HHBBB", w, h, 0, 0, 0)
    desc = b"," + struct.pack("<HHHHB", 0, 0, frame_w, frame_h, 0x80)  # local table, 2 colours
    return hdr + desc + b"\x00\x00\x00\xff\xff\xff" + b"\x02\x02\x44\x01\x00" + b";"


def bmp_with_size(data: bytes, w: int, h: int) -> bytes:
    b = bytearray(data)
    b[18:26] = struct.pack("<ii", w, h)
    return bytes(b)


def webp_vp8x(w: int, h: int) -> bytes:
    """A VP8X WebP header declaring a ``w`` x ``h`` canvas and nothing else."""
    vp8x = b"VP8X" + struct.pack("<I", 10) + b"\x00\x00\x00\x00" + \
        struct.pack("<I", w - 1)[:3] + struct.pack("<I", h - 1)[:3]
    return b"RIFF" + struct.pack("<I", 4 + len(vp8x)) + b"WEBP" + vp8x


def tiff_with_size(data: bytes, w: int, h: int) -> bytes:
    """Pillow's little-endian TIFF with ImageWidth / ImageLength replaced."""
    b = bytearray(data)
    ifd = struct.unpack("<I", b[4:8])[0]
    n = struct.unpack("<H", b[ifd:ifd + 2])[0]
    for k in range(n):
        e = ifd + 2 + 12 * k
        tag, typ = struct.unpack("<HH", b[e:e + 4])
        if tag in (256, 257):
            v = w if tag == 256 else h
            b[e + 8:e + 12] = struct.pack("<HH", v & 0xFFFF, 0) if typ == 3 else struct.pack("<I", v)
    return bytes(b)


def tiff_ifd_loop(data: bytes) -> bytes:
    b = bytearray(data)
    ifd = struct.unpack("<I", b[4:8])[0]
    n = struct.unpack("<H", b[ifd:ifd + 2])[0]
    b[ifd + 2 + 12 * n:ifd + 6 + 12 * n] = struct.pack("<I", ifd)
    return bytes(b)


def cut_points(n: int, full: bool) -> list[int]:
    """Cut positions strictly inside the data: header bytes, then fractions of the file up to
    85% (past that, some formats legitimately hold every pixel already: a PNG cut in its
    IEND, a JPEG without its EOI marker)."""
    head = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 100, 150, 200, 300] if full else [5, 40]
    fr = [k / 40 for k in range(1, 35)] if full else [0.25, 0.55, 0.85]
    pts = {p for p in head if p < n * 0.85} | {int(n * f) for f in fr}
    return sorted(p for p in pts if 0 < p < min(n * 0.86, n - 32))


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _const(x):
    return lambda ctx: x


# -- groups ---------------------------------------------------------------------------------------------
def _formats(full: bool) -> Group:
    cases = []
    for name, data in format_files().items():
        cases.append(Case(f"full/{name}", _const(data), "good",
                          oracle=functools.partial(format_oracle, name)))
    # 1x1, 1xN, Nx1 in each format family (Qwen accepts aspect ratios up to 200)
    for h, w in ((1, 1), (1, 7), (7, 1), (1, 200), (200, 1), (2, 199)):
        rgb = tiled("chelsea", h, w)
        for fmt in ("jpeg", "png", "webp", "gif", "bmp", "tiff"):
            data = encode(rgb, fmt)
            cases.append(Case(f"{h}x{w}/{fmt}", _const(data), "good",
                              oracle=functools.partial(oracle_rgb, data)))
    for fmt in ("jpeg", "png"):  # 1 x 201: the family's aspect-ratio rule rejects it
        cases.append(Case(f"1x201/{fmt}", _const(encode(tiled("chelsea", 1, 201), fmt)), "bad"))
    # EXIF orientation 1..8 (the probe's size must equal the decoded one)
    from _support.imgdata import with_exif_orientation
    for o in range(1, 9):
        data = with_exif_orientation(crop("rocket", 40, 70), o)
        cases.append(Case(f"exif_orient_{o}/jpeg", _const(data), "good",
                          oracle=functools.partial(oracle_rgb, data)))
    # a JPEG with > 1024 segments before the frame header is valid (Pillow opens it)
    many = jpeg_insert(format_files()["jpeg"], b"\xff\xfe\x00\x04ab" * 1100)
    cases.append(Case("jpeg_1100_segments", _const(many), "good",
                      oracle=functools.partial(oracle_rgb, many), note="issue 13 #9"))
    for fmt, tail in (("jpeg", b"garbage" * 100), ("png", _rng(64).bytes(64)), ("gif", b"\x00" * 50)):
        data = format_files()[fmt] + tail
        cases.append(Case(f"trailing_bytes/{fmt}", _const(data), "good",
                          oracle=functools.partial(oracle_rgb, data)))
    return Group("formats", cases)


_ANIMATED = ("gif_animated", "apng", "webp_animated")


def _truncated(full: bool) -> Group:
    cases = []
    for name, data in format_files().items():
        for cut in cut_points(len(data), full):
            # an animation cut after its first frame still holds a complete first frame
            expect = "either" if name in _ANIMATED and cut > 0.4 * len(data) else "bad"
            cases.append(Case(f"{name}@{cut}/{len(data)}", _const(data[:cut]), expect,
                              note="issue 13 #6" if name.startswith("jpeg") else ""))
    return Group("truncated", cases)


def _corrupt(full: bool) -> Group:
    f = format_files()
    c: list[Case] = []
    c.append(Case("empty", _const(b""), "bad"))
    for n in (1, 2, 16, 512, 65536):
        c.append(Case(f"random_{n}", _const(_rng(n).bytes(n)), "bad"))
    magics = {"jpeg": b"\xff\xd8\xff\xe0", "png": b"\x89PNG\r\n\x1a\n", "gif": b"GIF89a",
              "webp": b"RIFF\x00\x01\x00\x00WEBPVP8 ", "bmp": b"BM", "tiff_le": b"II*\x00",
              "tiff_be": b"MM\x00*", "bigtiff": b"II+\x00\x08\x00\x00\x00"}
    for fmt, m in magics.items():
        for n in ((16, 4096) if not full else (0, 7, 16, 100, 4096)):
            c.append(Case(f"magic_random/{fmt}+{n}", _const(m + _rng(n + 7).bytes(n)), "bad"))
    # PNG checksums: the header's CRC is checked by Pillow; IDAT's is not (the pixels are intact)
    ch = png_chunks(f["png"])
    ihdr_bad = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ch[0][1], crc=0xDEADBEEF) + \
        b"".join(png_chunk(t, d) for t, d in ch[1:])
    c.append(Case("png_bad_crc/IHDR", _const(ihdr_bad), "bad"))
    idat_bad = b"\x89PNG\r\n\x1a\n" + b"".join(
        png_chunk(t, d, crc=0x12345678 if t == b"IDAT" else None) for t, d in ch)
    c.append(Case("png_bad_crc/IDAT", _const(idat_bad), "either"))
    # zeroed entropy-coded / compressed data: the pixels are lost, it must not decode silently
    for name in ("jpeg", "jpeg_progressive", "jpeg_gray"):
        d = bytearray(f[name])
        s = jpeg_sos_end(d)
        d[s:len(d) - 2] = bytes(len(d) - 2 - s)
        c.append(Case(f"zeroed_scan/{name}", _const(bytes(d)), "bad", note="issue 13 #6"))
        d = bytearray(f[name])
        d[s + (len(d) - s) // 2:len(d) - 2] = bytes(len(d) - 2 - s - (len(d) - s) // 2)
        c.append(Case(f"zeroed_second_half/{name}", _const(bytes(d)), "bad", note="issue 13 #6"))
    z = [(t, bytes(len(d)) if t == b"IDAT" else d) for t, d in png_chunks(f["png"])]
    c.append(Case("zeroed_idat/png", _const(png_build(z)), "bad"))
    for name in ("webp", "webp_lossless", "gif", "tiff_lzw"):
        d = bytearray(f[name])
        a = len(d) // 3
        d[a:len(d) - 8] = bytes(len(d) - 8 - a)
        c.append(Case(f"zeroed_data/{name}", _const(bytes(d)), "either"))
    # 0x0 and huge headers per format (huge: above the 178,956,970-pixel limit)
    c += [Case("zero_size/png", _const(png_with_size(f["png"], 0, 0)), "bad"),
          Case("zero_size/jpeg", _const(jpeg_with_size(f["jpeg"], 0, 0)), "bad"),
          Case("zero_width/jpeg", _const(jpeg_with_size(f["jpeg"], 0, 96)), "bad"),
          Case("zero_size/gif", _const(gif_screen(0, 0, 0, 0)), "bad"),
          Case("zero_size/bmp", _const(bmp_with_size(f["bmp"], 0, 0)), "bad"),
          Case("zero_size/tiff", _const(tiff_with_size(f["tiff"], 0, 0)), "bad"),
          Case("huge/png_30000", _const(png_header(30000, 30000)), "bad"),
          Case("huge/png_2^31", _const(png_header(2**31 - 1, 2**31 - 1)), "bad"),
          Case("huge/png_2^32-1", _const(png_header(0xFFFFFFFF, 1)), "bad"),
          Case("huge/jpeg_65535", _const(jpeg_with_size(f["jpeg"], 65535, 65535)), "bad"),
          Case("huge/gif_65535", _const(gif_screen(65535, 65535)), "bad"),
          Case("huge/bmp_100000", _const(bmp_with_size(f["bmp"], 100000, 100000)), "bad"),
          Case("huge/bmp_-2^31", _const(bmp_with_size(f["bmp"], 64, -2**31)), "bad"),
          Case("huge/webp_vp8x_16384", _const(webp_vp8x(16384, 16384)), "bad"),
          Case("huge/tiff_65535", _const(tiff_with_size(f["tiff"], 65535, 65535)), "bad")]
    c.append(Case("bmp_top_down", _const(bmp_with_size(f["bmp"], 128, -96)), "good",
                  oracle=functools.partial(oracle_rgb, bmp_with_size(f["bmp"], 128, -96))))
    # small files claiming a large (under-limit) size: the data is not there -> truncated
    side = 13000 if full else 3000
    tiny = encode(tiled("chelsea", 8, 8), "jpeg")
    c.append(Case(f"jpeg_{len(tiny)}B_claims_{side}^2", _const(jpeg_with_size(tiny, side, side)), "bad",
                  decoded_px=side * side, note="issue 13 #6"))
    c.append(Case(f"png_claims_{side}^2", _const(png_with_size(f["png"], side, side)), "bad",
                  decoded_px=side * side))
    # EXIF bombs in each container that carries EXIF
    for kind in EXIF_KINDS:
        p = exif_payload(kind)
        c.append(Case(f"exif_bomb/{kind}/jpeg", _const(jpeg_with_exif(p)), "either"))
        c.append(Case(f"exif_bomb/{kind}/png", _const(png_with_exif(p)), "either"))
        c.append(Case(f"exif_bomb/{kind}/webp", _const(webp_with_exif(p)), "either"))
    c.append(Case("tiff_ifd_loop", _const(tiff_ifd_loop(f["tiff"])), "either"))
    # metadata inflation (issue 13 #5): 1,000 zTXt chunks of 1 MiB each (CI: fewer)
    n_txt = 1000 if full else 150
    c.append(Case(f"png_{n_txt}_zTXt_1MiB", _const(png_text_bomb(n_txt, 1 << 20)), "either",
                  note="issue 13 #5"))
    c.append(Case(f"png_{n_txt // 2}_iTXt_1MiB", _const(png_text_bomb(n_txt // 2, 1 << 20, itxt=True)),
                  "either", note="issue 13 #5"))
    # a JPEG header followed by zero padding (issue 13 #4; CI: a few MB)
    pad = (64 if full else 4) << 20
    head = f["jpeg"][:jpeg_sos_end(f["jpeg"])]
    c.append(Case(f"jpeg_header+{pad >> 20}MiB_zeros", lambda ctx: head + bytes(pad), "bad",
                  note="issue 13 #4"))
    return Group("corrupt", c)


def _arrays(full: bool) -> Group:
    import torch
    a = crop("chelsea", 60, 80)
    c: list[Case] = []

    def good(name, make, ora=None, **kw):
        c.append(Case(name, make, "good", oracle=ora or (lambda: a), **kw))

    for dt in ("float32", "float64", "int16", "uint16", "int8", "bool", "int64", "complex64"):
        c.append(Case(f"numpy_dtype/{dt}", lambda ctx, dt=dt: a.astype(dt), "bad"))
    c.append(Case("numpy_dtype/object", lambda ctx: a.astype(object), "bad"))
    c.append(Case("numpy_dtype/structured",
                  lambda ctx: np.zeros((60, 80, 3), dtype=[("x", "u1")]), "bad"))
    for shape in ((60, 80), (1, 60, 80, 3), (60, 80, 4), (60, 80, 1), (60, 80, 2), (3, 60, 80),
                  (0, 80, 3), (60, 0, 3), (0, 0, 3), (), (3,), (60, 80, 3, 1)):
        c.append(Case(f"numpy_shape/{shape}", lambda ctx, s=shape: np.zeros(s, np.uint8), "bad"))
    c.append(Case("numpy_1d_encoded_jpeg",
                  lambda ctx: np.frombuffer(format_files()["jpeg"], np.uint8), "bad"))
    good("numpy_1x1", lambda ctx: a[:1, :1].copy(), lambda: a[:1, :1].copy())
    good("numpy_strided_rows_cols", lambda ctx: a[::2, ::2], lambda: np.ascontiguousarray(a[::2, ::2]))
    good("numpy_bgr_view", lambda ctx: a[..., ::-1], lambda: np.ascontiguousarray(a[..., ::-1]))
    good("numpy_flipped", lambda ctx: a[::-1, ::-1], lambda: np.ascontiguousarray(a[::-1, ::-1]))
    good("numpy_fortran", lambda ctx: np.asfortranarray(a))
    good("numpy_readonly", lambda ctx: _readonly(a))
    good("numpy_broadcast_pixel", lambda ctx: np.broadcast_to(a[3, 4], (60, 80, 3)),
         lambda: np.ascontiguousarray(np.broadcast_to(a[3, 4], (60, 80, 3))))
    good("numpy_crop_of_canvas", lambda ctx: tiled("rocket", 300, 400)[100:160, 33:113],
         lambda: np.ascontiguousarray(tiled("rocket", 300, 400)[100:160, 33:113]))
    good("numpy_memmap", lambda ctx: _memmap(ctx, a), note="issue 13 #9")
    good("numpy_subclass", lambda ctx: a.view(_Sub))
    # a 400-megapixel broadcast view: over the pixel limit, rejected from the shape (no copy)
    c.append(Case("numpy_broadcast_20000^2", lambda ctx: np.broadcast_to(a[0, 0], (20000, 20000, 3)),
                  "bad"))
    t = torch.from_numpy(a.copy()).permute(2, 0, 1)
    for dt in ("float32", "float16", "int16", "int64", "bool", "bfloat16"):
        c.append(Case(f"torch_dtype/{dt}", lambda ctx, dt=dt: t.to(getattr(torch, dt)), "bad"))
    for shape in ((60, 80, 3), (1, 3, 60, 80), (60, 80), (4, 60, 80), (1, 60, 80), (3, 0, 80),
                  (3, 60, 0), (3,)):
        c.append(Case(f"torch_shape/{shape}", lambda ctx, s=shape: torch.zeros(s, dtype=torch.uint8),
                      "bad"))
    good("torch_chw_view_of_hwc", lambda ctx: torch.from_numpy(a.copy()).permute(2, 0, 1))
    good("torch_chw_contiguous", lambda ctx: torch.from_numpy(a.copy()).permute(2, 0, 1).contiguous())
    good("torch_strided", lambda ctx: torch.from_numpy(tiled("chelsea", 120, 160).copy())
         .permute(2, 0, 1)[:, ::2, ::2], lambda: np.ascontiguousarray(tiled("chelsea", 120, 160)[::2, ::2]))
    good("torch_parameter", lambda ctx: torch.nn.Parameter(torch.from_numpy(a.copy()).permute(2, 0, 1),
                                                           requires_grad=False))
    c.append(Case("torch_meta", lambda ctx: torch.empty((3, 60, 80), dtype=torch.uint8, device="meta"),
                  "bad", note="issue 13 #8"))
    c.append(Case("torch_sparse", lambda ctx: t.contiguous().to_sparse(), "bad", note="issue 13 #8"))
    c.append(Case("torch_float_grad", lambda ctx: t.float().requires_grad_(), "bad"))
    # bytes-like objects
    jpeg = format_files()["jpeg"]
    ora = functools.partial(oracle_rgb, jpeg)
    good("bytearray_jpeg", lambda ctx: bytearray(jpeg), ora)
    good("memoryview_jpeg", lambda ctx: memoryview(jpeg), ora)
    good("memoryview_slice_jpeg", lambda ctx: memoryview(b"xxxx" + jpeg + b"yy")[4:-2], ora)
    c.append(Case("memoryview_released", lambda ctx: _released(jpeg), "bad", note="issue 13 #8"))
    c.append(Case("memoryview_noncontiguous", lambda ctx: memoryview(bytes(2 * len(jpeg)))[::2],
                  "bad", note="issue 13 #8"))
    c.append(Case("memoryview_cast_int32", lambda ctx: memoryview(jpeg[:len(jpeg) // 4 * 4]).cast("i"),
                  "either"))
    c.append(Case("memoryview_2d", lambda ctx: memoryview(bytes(64)).cast("B", (8, 8)), "bad"))
    # PIL images (taken as they are)
    good("pil_rgb", lambda ctx: Image.fromarray(a))
    good("pil_palette", lambda ctx: Image.fromarray(a).convert("P"),
         lambda: np.asarray(Image.fromarray(a).convert("P").convert("RGB")))
    good("pil_cmyk", lambda ctx: Image.fromarray(a).convert("CMYK"),
         lambda: np.asarray(Image.fromarray(a).convert("CMYK").convert("RGB")))
    c.append(Case("pil_zero_size", lambda ctx: Image.new("RGB", (0, 0)), "bad"))
    c.append(Case("pil_closed", lambda ctx: _closed_pil(ctx), "bad"))
    c.append(Case("pil_I16", lambda ctx: Image.fromarray(_16bit("gray")), "either"))
    # things that are not images at all
    for name, v in (("none", None), ("int", 12345), ("float_nan", float("nan")), ("list", [[1, 2, 3]]),
                    ("dict", {"bytes": b""}), ("str_empty", ""), ("str_data_uri_bad", "data:image/png;base64,!!"),
                    ("str_http", "http://127.0.0.1:9/x.jpg"), ("bytes_path_like", b"/etc/passwd"),
                    ("object", object())):
        c.append(Case(f"not_an_image/{name}", _const(v), "bad"))
    return Group("arrays", c)


class _Sub(np.ndarray):
    pass


def _readonly(a):
    b = a.copy()
    b.setflags(write=False)
    return b


def _memmap(ctx: Ctx, a: np.ndarray) -> np.ndarray:
    p = ctx.path("img.u8")
    m = np.memmap(p, dtype=np.uint8, mode="w+", shape=a.shape)
    m[...] = a
    m.flush()
    return np.memmap(p, dtype=np.uint8, mode="r", shape=a.shape)


def _released(data: bytes) -> memoryview:
    m = memoryview(bytearray(data))
    m.release()
    return m


def _closed_pil(ctx: Ctx):
    p = ctx.file("x.png", format_files()["png"])
    img = Image.open(p)
    img.close()
    return img


PAGE_END_SHAPES = ((17, 9), (9, 17), (1, 1), (1, 2), (2, 1), (1, 3), (3, 1), (1, 200), (200, 1),
                   (3, 5), (5, 3), (7, 33), (16, 16), (17, 17), (28, 28), (29, 31), (31, 29),
                   (57, 91), (64, 64), (100, 33), (33, 100), (1, 64), (64, 1), (56, 56))
PAGE_END_DOWN = ((1000, 1000), (1200, 1600), (1600, 1200), (731, 1333), (450, 2000), (2000, 450),
                 (17, 2000), (2000, 17))


def _page_end(name: str, shapes, full: bool, overrides: dict) -> Group:
    from _support.guarded import guarded_copy, guarded_view
    c = []
    for h, w in shapes:
        img = functools.partial(tiled, "astronaut", h, w)
        c.append(Case(f"page_end/{h}x{w}", lambda ctx, img=img: guarded_copy(img()), "good",
                      oracle=img, note="issue 13 #1" if (h, w) == (17, 9) else ""))
        c.append(Case(f"page_start/{h}x{w}", lambda ctx, img=img: guarded_copy(img(), "start"), "good",
                      oracle=img))
        stride = (w * 3 + 13)
        c.append(Case(f"page_end_strided/{h}x{w}", lambda ctx, img=img, s=stride: guarded_view(img(), s),
                      "good", oracle=img))
    return Group(name, c, overrides=overrides)


def _special(full: bool) -> Group:
    c: list[Case] = []
    jpeg = format_files()["jpeg"]
    head = jpeg[:jpeg_sos_end(jpeg)]
    for dev in ("/dev/zero", "/dev/urandom", "/dev/null", "/dev/full"):
        if os.path.exists(dev):
            c.append(Case(f"device{dev}", _const(dev), "bad", note="issue 13 #3",
                          msg_not="found nothing"))
    c.append(Case("fifo", lambda ctx: _fifo(ctx), "bad", note="issue 13 #3", msg_not="found nothing"))
    c.append(Case("symlink_to_dev_zero", lambda ctx: _symlink(ctx, "/dev/zero"), "bad", note="issue 13 #3"))
    c.append(Case("directory", lambda ctx: os.path.dirname(ctx.path("x")), "bad"))
    c.append(Case("broken_symlink", lambda ctx: _symlink(ctx, "/nonexistent/target.jpg"), "bad"))
    c.append(Case("missing_file", lambda ctx: ctx.path("missing.jpg"), "bad"))
    c.append(Case("empty_file", lambda ctx: ctx.file("empty.jpg", b""), "bad"))
    c.append(Case("path_with_nul", lambda ctx: ctx.path("a") + "\x00b.jpg", "bad", note="issue 13 #8"))
    c.append(Case("component_256_chars", lambda ctx: os.path.join(os.path.dirname(ctx.path("x")), "a" * 256 + ".jpg"),
                  "bad", note="issue 13 #8"))
    c.append(Case("path_5000_chars", lambda ctx: "/" + "/".join(["d" * 200] * 25) + ".jpg", "bad"))
    c.append(Case("proc_self_status", _const("/proc/self/status"), "bad"))
    c.append(Case("proc_self_mem", _const("/proc/self/mem"), "bad"))
    c.append(Case("pathlib_good", lambda ctx: __import__("pathlib").Path(ctx.file("ok.jpg", jpeg)), "good",
                  oracle=functools.partial(oracle_rgb, jpeg)))
    c.append(Case("str_good", lambda ctx: ctx.file("ok.jpg", jpeg), "good",
                  oracle=functools.partial(oracle_rgb, jpeg)))
    c.append(Case("file_truncated", lambda ctx: ctx.file("t.jpg", jpeg[:len(jpeg) // 2]), "bad",
                  note="issue 13 #6"))
    pad = (64 if full else 8) << 20
    c.append(Case(f"file_jpeg_header+{pad >> 20}MiB_zeros", lambda ctx: ctx.file("z.jpg", head + bytes(pad)),
                  "bad", note="issue 13 #4"))
    c.append(Case("sparse_2GiB_jpeg", lambda ctx: _sparse(ctx, head, 2 << 30), "bad", note="issue 13 #4"))
    if os.getuid() != 0:  # root reads everything
        c.append(Case("unreadable_file", lambda ctx: _unreadable(ctx, jpeg), "bad"))
    return Group("special", c)


def _fifo(ctx: Ctx) -> str:
    p = ctx.path("pipe.jpg")
    os.mkfifo(p)
    return p


def _symlink(ctx: Ctx, target: str) -> str:
    p = ctx.path("link.jpg")
    os.symlink(target, p)
    return p


def _sparse(ctx: Ctx, head: bytes, size: int) -> str:
    p = ctx.file("sparse.jpg", head)
    os.truncate(p, size)  # a hole: no disk, reads as zeros
    return p


def _unreadable(ctx: Ctx, data: bytes) -> str:
    p = ctx.file("noperm.jpg", data)
    os.chmod(p, 0)
    return p


def _memory(full: bool) -> Group:
    """Files whose decode is large for their size (issue 13 #7): the peak-memory bound is the
    guarantee checked here (bounded by the header's pixels, not by the bytes the file holds)."""
    # 3072^2 (9.4 Mpx): large enough that 39 bytes per pixel (issue 13 #7: 368 MB) exceeds the
    # bound (24 bytes per pixel + 64 MiB: 290 MB) while 16 (the fix's prediction) does not
    side16 = 4096 if full else 3072
    screen = 13000 if full else 4000
    c = []

    @functools.lru_cache(maxsize=None)
    def png16_big(kind: int) -> bytes:
        """Rows repeat, so with PNG's Up filter every row after the first is zeros: a file of
        ~100 KB that decodes to 75 MB (what issue 13 #7 is about)."""
        a = _big16(side16, kind)
        first = b"\x00" + a[0].astype(">u2").tobytes()
        rest = (b"\x02" + bytes(a.shape[1] * kind * 2)) * (side16 - 1)
        ihdr = struct.pack(">IIBBBBB", side16, side16, 16, 6 if kind == 4 else 2, 0, 0, 0)
        return png_build([(b"IHDR", ihdr), (b"IDAT", zlib.compress(first + rest, 9)), (b"IEND", b"")])

    @functools.lru_cache(maxsize=None)
    def png8_rgba() -> bytes:
        return encode(tiled("astronaut", 2048, 2048), "png_rgba")

    # smallest first: each then needs fresh pages (RSS cannot see reused ones); the first is the
    # control: Pillow's 8-bit transparency path
    c.append(Case("png_8bit_rgba_2048^2", lambda ctx: png8_rgba(), "good", decoded_px=2048 * 2048,
                  oracle=lambda: oracle_rgb(png8_rgba())))
    c.append(Case(f"gif_{screen}^2_screen_1px_frame", _const(gif_screen(screen, screen)), "either",
                  decoded_px=screen * screen, note="issue 13 #7"))
    c.append(Case(f"png_16bit_rgb_{side16}^2", lambda ctx: png16_big(3), "good",
                  decoded_px=side16 * side16, oracle=lambda: _big16_oracle(side16, 3)))
    c.append(Case(f"png_16bit_rgba_{side16}^2", lambda ctx: png16_big(4), "good", decoded_px=side16 * side16,
                  note="issue 13 #7", oracle=lambda: _big16_oracle(side16, 4)))
    return Group("memory", c, overrides={"max_pixels": 1_003_520})


def _big16(side: int, kind: int) -> np.ndarray:
    """A 16-bit image that compresses to little (rows repeat: PNG's Up filter makes them zeros),
    so the file is small and the decode large; low bytes vary, so round(v / 257) is tested."""
    x = np.arange(side, dtype=np.uint32)
    row = np.stack([(x * 37) % 65536, (x * 16 + 5) % 65536, (65535 - x * 11) % 65536,
                    20000 + (x * 7) % 40000][:kind], axis=1).astype(np.uint16)
    return np.ascontiguousarray(np.broadcast_to(row, (side, side, kind)))


def _big16_oracle(side: int, kind: int) -> np.ndarray:
    return _oracle16(_big16(side, kind))


def _budget(full: bool) -> Group:
    """A serving budget (issue 13 #4, #7): max_source_bytes=1 MiB and max_decode_bytes=32 MiB;
    everything above them must be refused before it is read or decoded (decoded_px 0: the
    memory bound is the constant alone)."""
    jpeg = format_files()["jpeg"]
    head = jpeg[:jpeg_sos_end(jpeg)]
    c = [Case("gif_4000^2_screen", _const(gif_screen(4000, 4000)), "bad", note="issue 13 #7"),
         Case("jpeg_claims_4000^2", _const(jpeg_with_size(encode(tiled("chelsea", 8, 8), "jpeg"), 4000, 4000)),
              "bad"),
         Case("png_16bit_rgba_claims_3000^2", _const(png_with_size(format_files()["png_16_rgba"], 3000, 3000)),
              "bad", note="issue 13 #7"),
         Case("bytes_jpeg_header+4MiB_zeros", lambda ctx: head + bytes(4 << 20), "bad", note="issue 13 #4"),
         Case("file_jpeg_header+4MiB_zeros", lambda ctx: ctx.file("z.jpg", head + bytes(4 << 20)), "bad",
              note="issue 13 #4"),
         Case("small_jpeg_ok", _const(jpeg), "good", oracle=functools.partial(oracle_rgb, jpeg))]
    return Group("budget", c, overrides={"max_source_bytes": 1 << 20, "max_decode_bytes": 32 << 20})


def groups(full: bool = False) -> dict[str, Callable[[], Group]]:
    """Group name -> builder (built lazily: only the groups a run asks for are generated)."""
    return {
        "formats": lambda: _formats(full),
        "truncated": lambda: _truncated(full),
        "corrupt": lambda: _corrupt(full),
        "arrays": lambda: _arrays(full),
        "page_end": lambda: _page_end("page_end", PAGE_END_SHAPES, full, {}),
        # max_pixels 12,544 (112x112) forces >8x downscales: the AVX-512 pass declines and the
        # AVX2 one (issue 13 #1) runs
        "page_end_down": lambda: _page_end("page_end_down", PAGE_END_DOWN, full, {"max_pixels": 12544}),
        "special": lambda: _special(full),
        "memory": lambda: _memory(full),
        "budget": lambda: _budget(full),
    }


GROUP_NAMES = tuple(groups())
