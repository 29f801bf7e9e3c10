"""The compiled resize against Pillow 13 (the oracle it reproduces): bit-exact for bilinear,
bicubic and lanczos, up and down, both pass orders, narrow images, threads 1 and 2, and on
every instruction-set path (AVX-512, AVX2, plain C++: ``VLMPREP_CPU_ISA`` caps the one used;
a path this CPU lacks falls back, so that case repeats another)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.imgdata import tiled
from _support.seed import SEED
from PIL import Image

PIL_FILTER = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}


def _pil(img: np.ndarray, hw, f) -> np.ndarray:
    return np.asarray(Image.fromarray(img).resize((hw[1], hw[0]), PIL_FILTER[f]))





@pytest.mark.parametrize("f", list(PIL_FILTER))
def test_random_sizes_match_pillow(kernels, isa, f):
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    for k in range(150):
        H, W = (int(v) for v in rng.integers(1, 90, 2))
        h, w = (int(v) for v in rng.integers(1, 90, 2))
        img = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
        kernels.set_num_threads(1 + k % 2)
        got = kernels.resize(torch.from_numpy(img), (h, w), f).numpy()
        kernels.set_num_threads(None)
        assert np.array_equal(got, _pil(img, (h, w), f)), f"seed {SEED}: {H}x{W} -> {h}x{w} {f} {isa}"


@pytest.mark.parametrize("f", list(PIL_FILTER))
def test_wide_rows_match_pillow(kernels, isa, f):
    """Rows long enough for the vector passes' main loops and their right borders (the random
    sizes above are mostly narrower than one 64-byte group), scales from 1/4 to 3x."""
    rng = np.random.default_rng(SEED + 1)
    for _ in range(24):
        H, W = int(rng.integers(2, 40)), int(rng.integers(100, 700))
        h = int(rng.integers(1, 60))
        w = max(1, int(W * rng.choice([0.25, 0.34, 0.5, 0.77, 0.99, 1.0, 1.01, 1.6, 3.0])))
        img = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
        got = kernels.resize(torch.from_numpy(img), (h, w), f).numpy()
        assert np.array_equal(got, _pil(img, (h, w), f)), f"seed {SEED}: {H}x{W} -> {h}x{w} {f} {isa}"


@pytest.mark.parametrize("f", list(PIL_FILTER))
def test_vertical_pass_extremes_match_pillow(kernels, isa, f):
    """The vertical pass alone (width kept) where its sums are extreme: stripes of 0 and 255
    (the filters' negative lobes overshoot, so both clips are hit), upscales (weights near 2^22,
    the split's largest high halves), downscales to a few rows (hundreds of taps: odd and even
    counts), and row lengths of every remainder modulo the vector width (3 * W bytes)."""
    rng = np.random.default_rng(SEED + 2)
    for W in (1, 5, 10, 11, 21, 32, 43, 107):
        for H, h in ((2, 9), (3, 1000), (5, 2), (40, 41), (600, 7), (2001, 3), (257, 1), (9, 8)):
            img = np.zeros((H, W, 3), np.uint8)
            img[::2] = 255  # row stripes
            img[:, ::3, 1] = rng.integers(0, 256, (H, len(range(0, W, 3))), dtype=np.uint8)
            got = kernels.resize(torch.from_numpy(img), (h, W), f).numpy()
            assert np.array_equal(got, _pil(img, (h, W), f)), f"{H}x{W} -> {h}x{W} {f} {isa}"


@pytest.mark.parametrize("columns", ["on", "off"])
@pytest.mark.parametrize("f", list(PIL_FILTER))
def test_horizontal_pass_extremes_match_pillow(kernels, isa, f, columns, monkeypatch):
    """The horizontal pass alone (height kept) on the AVX2 path's two forms, 32-row blocks
    through a transpose (VLMPREP_RESIZE_COLUMNS on) and per row (off): column stripes of 0 and
    255 (both clips), heights around the 32-row block and the 8-row cut below which a last block
    goes per row, row lengths of every remainder modulo 16 bytes, upscales and downscales (3 to
    dozens of taps, odd and even), and a width over the transposed form's 8192 pixels."""
    monkeypatch.setenv("VLMPREP_RESIZE_COLUMNS", "1" if columns == "on" else "0")
    rng = np.random.default_rng(SEED + 3)
    for W, w in ((6, 16), (16, 7), (21, 22), (37, 100), (58, 13), (101, 99), (250, 1000), (333, 111)):
        for H in (1, 7, 8, 31, 32, 33, 39, 40, 64, 95):
            img = np.zeros((H, W, 3), np.uint8)
            img[:, ::2] = 255  # column stripes
            img[::3, :, 1] = rng.integers(0, 256, (len(range(0, H, 3)), W), dtype=np.uint8)
            kernels.set_num_threads(1 + H % 2)
            got = kernels.resize(torch.from_numpy(img), (H, w), f).numpy()
            kernels.set_num_threads(None)
            assert np.array_equal(got, _pil(img, (H, w), f)), f"{H}x{W} -> {H}x{w} {f} {isa} {columns}"
    img = rng.integers(0, 256, (3, 8200, 3), dtype=np.uint8)
    for w in (8193, 4100):
        assert np.array_equal(kernels.resize(torch.from_numpy(img), (5, w), f).numpy(), _pil(img, (5, w), f))


@pytest.mark.parametrize("src_hw,dst_hw", [
    ((1080, 1920), (1092, 1932)),   # qwen2-vl 1080p: horizontal first, slight upscale
    ((900, 600), (448, 448)),       # vertical first (height loses > 2x the width's pixels)
    ((300, 451), (1000, 37)),       # strong horizontal downscale, vertical upscale
    ((17, 900), (336, 336)),
])
@pytest.mark.parametrize("f", list(PIL_FILTER))
def test_photos_match_pillow(kernels, isa, src_hw, dst_hw, f):
    img = np.ascontiguousarray(tiled("coffee", *src_hw))
    for threads in (1, 2):
        kernels.set_num_threads(threads)
        got = kernels.resize(torch.from_numpy(img), dst_hw, f).numpy()
        kernels.set_num_threads(None)
        assert np.array_equal(got, _pil(img, dst_hw, f))


def test_strided_source_and_errors(kernels):
    canvas = np.random.default_rng(SEED).integers(0, 256, (50, 70, 3), dtype=np.uint8)
    crop = torch.from_numpy(canvas)[5:45, 3:60]  # row stride 210 bytes
    want = _pil(np.ascontiguousarray(canvas[5:45, 3:60]), (33, 21), "bicubic")
    assert np.array_equal(kernels.resize(crop, (33, 21), "bicubic").numpy(), want)
    with pytest.raises(RuntimeError, match="interpolation: expected bilinear, bicubic or lanczos"):
        kernels.resize(crop, (3, 3), "nearest")
    with pytest.raises(RuntimeError, match="expected a CPU \\(h, w, 3\\) uint8"):
        kernels.resize(crop.permute(2, 0, 1), (3, 3), "bicubic")


def test_empty_host_reuses_buffers(kernels):
    """A freed large buffer is handed out again (no fresh page faults), small ones are plain."""
    a = kernels.empty((1000, 1176 * 8), torch.float32)
    assert a.shape == (1000, 9408) and a.dtype == torch.float32 and a.is_contiguous()
    a.fill_(1.5)
    del a
    b = kernels.empty((1000, 1176 * 8), torch.float32)  # a cached block (a's or another's)
    ptr = b.data_ptr()
    del b
    again = kernels.empty((1000, 1176 * 8), torch.float32)  # best fit: the same block again
    assert again.data_ptr() == ptr
    c = kernels.empty((3, 4), torch.bfloat16)
    assert c.shape == (3, 4) and c.dtype == torch.bfloat16
