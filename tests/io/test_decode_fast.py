"""The fast JPEG paths against Pillow's decode (the oracle): the kernels' libjpeg-turbo decoder
(every path, when built) and torchvision's (the torch backend without the kernels) give the
same pixels for every 8-bit JPEG kind and EXIF orientation, and bad data is the same ImageError
on both paths."""
from __future__ import annotations

import io

import numpy as np
import pytest
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


# -- opaque WebP stills: torchvision's libwebp (``_decode_still_fast``); PNGs checked to stay Pillow's
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
# PNGs stay with Pillow: torchvision's libpng crashes on a bad IDAT CRC (tests/hostile)
TAKEN = {"webp_q80", "webp_q20_odd", "webp_lossless"}


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
    """The speed claim needs torchvision to decode these, not fall back silently."""
    assert D._decode_still_fast(STILLS[name]) is not None


@pytest.mark.parametrize("fmt", ["PNG", "WEBP"])  # PNG: Pillow's path, kept as it was
@pytest.mark.parametrize("orientation", range(1, 9))
def test_stills_exif_orientation_as_pillow(fmt, orientation):
    data = with_exif_orientation(RGB, orientation, fmt)
    src = resolve(data)
    fast = D.decode(src, fast=True)
    assert fast.shape[:2] == src.hw
    assert np.array_equal(fast, _pillow(data))


@pytest.mark.parametrize("name", ["webp_q80", "webp_lossless"])
@pytest.mark.parametrize("keep", [0.5, 0.9])
def test_truncated_still_is_the_same_image_error(name, keep):
    data = STILLS[name]
    src = resolve(data[: int(len(data) * keep)])
    with pytest.raises(ImageError) as fast:
        D.decode(src, fast=True)
    with pytest.raises(ImageError) as slow:
        D.decode(src, fast=False)
    assert str(fast.value) == str(slow.value)
