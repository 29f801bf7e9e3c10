"""The fast JPEG paths against Pillow's decode (the oracle): the kernels' libjpeg-turbo decoder
(every path, when built) and torchvision's (the torch backend without the kernels) give the
same pixels for every 8-bit JPEG kind and EXIF orientation, and bad data is the same ImageError
on both paths."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torchvision.io  # noqa: F401  (the torch backend loads it; the fast path uses it only then)
from _support.imgdata import crop, encode, with_exif_orientation
from PIL import Image

from vlmprep.errors import ImageError
from vlmprep.io import decode as D
from vlmprep.io.inputs import resolve


def _jpeg(rgb: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "JPEG", **kw)
    return buf.getvalue()


RGB = crop("coffee", 301, 517)
CASES = {
    "baseline_420": _jpeg(RGB, quality=90),
    "q60_444": _jpeg(RGB, quality=60, subsampling=0),
    "q95_422": _jpeg(RGB, quality=95, subsampling=1),
    "progressive": encode(RGB, "jpeg_progressive"),
    "gray": encode(RGB, "jpeg_gray"),
    "odd_size": _jpeg(crop("chelsea", 17, 3), quality=85),
    "cmyk": encode(RGB, "jpeg_cmyk"),  # not taken by the fast path: Pillow decodes it
}


@pytest.mark.parametrize("name", list(CASES))
def test_same_pixels_as_pillow(name):
    src = resolve(CASES[name])
    assert np.array_equal(D.decode(src, fast=True), D.decode(src, fast=False))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_as_pillow(orientation):
    src = resolve(with_exif_orientation(RGB, orientation))
    fast = D.decode(src, fast=True)
    assert fast.shape[:2] == src.hw
    assert np.array_equal(fast, D.decode(src, fast=False))


def test_fast_path_is_taken():
    """The speed claim needs the torchvision path to run, not fall back silently."""
    assert D._decode_jpeg_fast(CASES["baseline_420"]) is not None


def test_truncated_is_still_an_image_error():
    data = CASES["baseline_420"]
    src = resolve(data[: len(data) // 2])
    with pytest.raises(ImageError) as fast:
        D.decode(src, fast=True)
    with pytest.raises(ImageError) as slow:
        D.decode(src, fast=False)
    assert str(fast.value) == str(slow.value)


def _pillow(data: bytes) -> np.ndarray:
    from PIL import ImageOps
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(ImageOps.exif_transpose(im).convert("RGB"))


@pytest.mark.parametrize("name", list(CASES))
def test_every_path_gives_pillows_pixels(name):
    """decode() no longer runs Pillow for these when the kernels are built: Pillow is the oracle."""
    src = resolve(CASES[name])
    for fast in (False, True):
        assert np.array_equal(D.decode(src, fast=fast), _pillow(CASES[name])), fast


@pytest.mark.parametrize("orientation", range(1, 9))
def test_kernel_and_torchvision_orientation_as_pillow(orientation):
    data = with_exif_orientation(RGB, orientation)
    src = resolve(data)
    want = _pillow(data)
    assert np.array_equal(D.decode(src), want)
    tv = D._decode_jpeg_fast(data)
    assert tv is not None and np.array_equal(tv, want)


# -- opaque 8-bit PNGs by OpenCV's decoder (``_decode_png_fast``); WebP checked to stay Pillow's
def _webp(rgb: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "WEBP", **kw)
    return buf.getvalue()


STILLS = {
    "png": encode(RGB, "png"),
    "png_gray": encode(RGB, "png_gray"),
    "png_odd": encode(crop("chelsea", 17, 3), "png"),
    "png_interlaced": (lambda b: (Image.fromarray(RGB).save(b, "PNG", interlace=1), b.getvalue())[1])(
        io.BytesIO()),
    "webp_q80": _webp(RGB, quality=80),
    "webp_q20_odd": _webp(crop("chelsea", 97, 211), quality=20),
    "webp_lossless": _webp(RGB, lossless=True),
    # not taken by the fast path (Pillow composites / converts them): still Pillow's pixels
    "png_rgba": encode(RGB, "png_rgba"),
    "png_palette": encode(RGB, "png_palette"),
    "webp_alpha": encode(RGB, "webp_alpha"),
}
# WebP stays with Pillow (torchvision's libwebp decodes damaged files Pillow refuses)
TAKEN = {"png", "png_gray", "png_odd", "png_interlaced"}


@pytest.mark.parametrize("name", list(STILLS))
def test_stills_same_pixels_as_pillow(name):
    src = resolve(STILLS[name])
    assert D._fast_still(src.header) == (name in TAKEN)
    # the oracle: Pillow's plain RGB for opaque stills; transparency is composited on white
    # (API.md), which Pillow's path does, so there fast must equal it
    want = _pillow(STILLS[name]) if name in TAKEN else D.decode(src, fast=False)
    assert np.array_equal(D.decode(src, fast=True), want)
    assert np.array_equal(D.decode(src, fast=False), want)


@pytest.mark.parametrize("name", sorted(TAKEN))
def test_still_fast_path_is_taken(name):
    """The speed claim needs the fast decoders to decode these, not fall back silently."""
    assert D._decode_png_fast(STILLS[name]) is not None


@pytest.mark.parametrize("fmt", ["PNG", "WEBP"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_stills_exif_orientation_as_pillow(fmt, orientation):
    data = with_exif_orientation(RGB, orientation, fmt)
    src = resolve(data)
    fast = D.decode(src, fast=True)
    assert fast.shape[:2] == src.hw
    assert np.array_equal(fast, _pillow(data))


@pytest.mark.parametrize("name", ["png", "png_interlaced", "webp_q80", "webp_lossless"])  # WebP: Pillow
@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_truncated_still_is_the_same_image_error(name, keep):
    data = STILLS[name]
    src = resolve(data[: int(len(data) * keep)])
    with pytest.raises(ImageError) as fast:
        D.decode(src, fast=True)
    with pytest.raises(ImageError) as slow:
        D.decode(src, fast=False)
    assert str(fast.value) == str(slow.value)


def test_png_ancillary_crc_error_is_pillows_error():
    """libpng (OpenCV) only warns on a bad CRC in an ancillary chunk where Pillow refuses the
    file: the fast path leaves such a PNG to Pillow, so every backend gives the same error."""
    import struct
    buf = io.BytesIO()
    Image.fromarray(RGB).save(buf, "PNG", dpi=(72, 72))
    d = bytearray(buf.getvalue())
    i = d.find(b"pHYs")
    d[i + 4 + struct.unpack(">L", d[i - 4:i])[0]] ^= 0xFF  # the chunk's CRC
    assert D._decode_png_fast(bytes(d)) is None
    src = resolve(bytes(d))
    with pytest.raises(ImageError) as fast:
        D.decode(src, fast=True)
    with pytest.raises(ImageError) as slow:
        D.decode(src, fast=False)
    import re  # Pillow's message names its BytesIO object by address
    assert re.sub("0x[0-9a-f]+", "", str(fast.value)) == re.sub("0x[0-9a-f]+", "", str(slow.value))


def test_damaged_webp_is_refused_on_every_path():
    """make fuzz-short found it: a lossless WebP with a damaged VP8L stream that Pillow refuses
    and torchvision's libwebp decoded (why WebP stays with Pillow on the fast paths too)."""
    from pathlib import Path
    data = (Path(__file__).parents[1] / "data" / "webp_damaged_vp8l.webp").read_bytes()
    src = resolve(data)
    for fast in (True, False):
        with pytest.raises(ImageError, match="valid WEBP"):
            D.decode(src, fast=fast)
