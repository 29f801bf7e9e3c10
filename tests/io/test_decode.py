"""Decoding semantics (API.md): EXIF, transparency on white, 16-bit, animations, limits."""
from __future__ import annotations

import io

import numpy as np
import pytest
from _support.imgdata import crop, encode, png16, with_alpha, with_exif_orientation
from PIL import Image, ImageOps

import vlmprep
from vlmprep.io.decode import decode
from vlmprep.io.inputs import resolve


def _rgb(data) -> np.ndarray:
    return decode(resolve(data))


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_exif_orientation_applied_to_encoded_inputs(orientation, fmt):
    rgb = crop("chelsea", 121, 203)
    data = with_exif_orientation(rgb, orientation, fmt)
    want = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    got = _rgb(data)
    assert got.shape == want.shape and np.array_equal(got, want)
    assert got.shape[:2] == ((203, 121) if orientation >= 5 else (121, 203))
    # The plan, from the header alone, agrees with the decoded size.
    plan = vlmprep.Processor("qwen2-vl", backend="reference").plan([data])
    assert plan.images[0].source_hw == got.shape[:2]


def test_pil_inputs_are_taken_as_they_are():
    # transformers does not transpose a PIL image it is given; neither do we.
    data = with_exif_orientation(crop("chelsea", 121, 203), 6)
    img = Image.open(io.BytesIO(data))
    assert _rgb(img).shape[:2] == (121, 203)


@pytest.mark.hf
@pytest.mark.parametrize("fmt", ["png_rgba", "png_la", "png_palette_trns", "webp_alpha"])
def test_transparency_composited_on_white_like_transformers(fmt):
    from transformers.image_transforms import convert_to_rgb
    data = encode(crop("coffee", 99, 131), fmt)
    want = convert_to_rgb(Image.open(io.BytesIO(data)), return_numpy=True)
    assert np.array_equal(_rgb(data), want)


def test_transparency_numeric_oracle():
    # Independent float oracle: out = rgb * a + 255 * (1 - a); Pillow's integer blend is within 1.
    rgba = with_alpha(crop("astronaut", 64, 80))
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, "PNG")
    a = rgba[..., 3:].astype(np.float64) / 255
    want = rgba[..., :3] * a + 255 * (1 - a)
    got = _rgb(buf.getvalue()).astype(np.float64)
    assert np.abs(got - want).max() <= 1.0
    assert got[0, 0].tolist() == [255, 255, 255]  # fully transparent -> white


@pytest.mark.parametrize("gray", [True, False])
def test_16bit_scaled_by_257(seed, gray):
    rng = np.random.default_rng(seed)
    shape = (37, 53) if gray else (37, 53, 3)
    v = rng.integers(0, 65536, shape, dtype=np.uint16)
    v.flat[:4] = [0, 128, 129, 65535]  # rounding edges of round(v / 257)
    got = _rgb(png16(v))
    want8 = np.round(v.astype(np.float64) / 257).astype(np.uint8)
    want = np.repeat(want8[..., None], 3, axis=2) if gray else want8
    assert np.array_equal(got, want)


def test_animation_first_frame():
    rgb = crop("rocket", 90, 120)
    data = encode(rgb, "gif_animated")
    first = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    got = _rgb(data)
    assert np.array_equal(got, first)


@pytest.mark.parametrize("fmt", ["jpeg", "png", "webp", "gif", "tiff"])
def test_truncated_data_is_an_error(fmt):
    data = encode(crop("astronaut", 200, 300), fmt)
    cut = data[: len(data) * 2 // 3]
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc([crop("chelsea", 50, 60), cut])
    assert list(b.errors) == [1], fmt
    assert "truncated or corrupt" in str(b.errors[1]) and b.errors[1].index == 1
    with pytest.raises(vlmprep.ImageError, match="image 1"):
        vlmprep.Processor("qwen2-vl", backend="reference")([crop("chelsea", 50, 60), cut])


def test_source_pixel_limit_checked_from_header():
    import struct
    import zlib

    def png_header(w, h):  # a PNG that is only a header: decoding it would fail
        ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
        chunk = b"IHDR" + ihdr
        return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk
                + struct.pack(">I", zlib.crc32(chunk)))

    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc([png_header(20000, 20000)])
    assert "178,956,970" in str(b.errors[0]) and "before decoding" in str(b.errors[0])
    small = encode(crop("chelsea", 100, 100), "png")
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip",
                             max_source_pixels=5000)
    assert list(proc([small]).errors) == [0]
    assert proc.plan([small]).images[0].error is not None
