"""The fused CPU op against its definition: ``resize`` then ``normalize_patchify`` (each
checked against its own oracle in test_resize / test_normalize_patchify), byte for byte, for
the patch orders, every output dtype, every interpolation, up and down, both pass orders, 1 and 2
threads, written at an offset into a larger output."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.imgdata import tiled
from _support.seed import SEED

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "uint8": torch.uint8}
# order, patch, merge, temporal
ORDERS = [("merge_grouped", 14, 2, 2), ("merge_grouped", 16, 2, 1), ("raster", 16, 1, 1),
           ("naflex", 16, 1, 1)]


def _two_step(kernels, img, hw, f, lut, out_like, order, P, m, T):
    resized = kernels.resize(img, hw, f)
    want = torch.zeros_like(out_like)
    kernels.normalize_patchify([resized], lut, want, [0], order, P, m, T)
    return want


def _lut(dtype):
    if dtype == torch.uint8:
        return None
    return (torch.randn(3, 256, generator=torch.Generator().manual_seed(SEED))).to(dtype)


@pytest.mark.parametrize("order,P,m,T", ORDERS)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_equals_resize_then_normalize_patchify(kernels, order, P, m, T, dtype):
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    q = P * m
    dt = DTYPES[dtype]
    lut = _lut(dt)
    for k in range(12):
        H, W = (int(v) for v in rng.integers(1, 260, 2))
        h, w = (q * int(v) for v in rng.integers(1, 9, 2))
        f = ("bilinear", "bicubic", "lanczos")[k % 3]
        img = torch.from_numpy(rng.integers(0, 256, (H, W, 3), dtype=np.uint8))
        n = (h // P) * (w // P) * 3 * P * P * T
        kernels.set_num_threads(1 + k % 2)
        try:
            want = _two_step(kernels, img, (h, w), f, lut, torch.zeros(n, dtype=dt), order, P, m, T)
            out = torch.full((n + 50,), 7, dtype=dt)  # rows at offset 20, the rest untouched
            kernels.resize_normalize_patchify(img, (h, w), f, lut, out, 20, order, P, m, T)
        finally:
            kernels.set_num_threads(None)
        ctx = f"seed {SEED}: {H}x{W} -> {h}x{w} {f} {order} {dtype}"
        assert torch.equal(out[20:20 + n], want), ctx
        assert bool((out[:20] == 7).all()) and bool((out[20 + n:] == 7).all()), ctx


@pytest.mark.parametrize("src_hw,dst_hw", [
    ((1080, 1920), (1092, 1932)),   # qwen2-vl 1080p: horizontal first; output streamed (> 8 MiB)
    ((900, 600), (448, 448)),       # vertical first
    ((308, 336), (308, 336)),       # no resize at all
    ((1512, 700), (1512, 1400)),    # only horizontal
    ((700, 1400), (1512, 1400)),    # only vertical
])
@pytest.mark.parametrize("threads", [1, 2])
def test_photos_qwen_layout(kernels, src_hw, dst_hw, threads):
    img = torch.from_numpy(np.ascontiguousarray(tiled("astronaut", *src_hw)))
    lut = _lut(torch.float32)
    n = (dst_hw[0] // 14) * (dst_hw[1] // 14) * 1176
    want = _two_step(kernels, img, dst_hw, "bicubic", lut, torch.zeros(n), "merge_grouped", 14, 2, 2)
    out = torch.empty(n)
    kernels.set_num_threads(threads)
    try:
        kernels.resize_normalize_patchify(img, dst_hw, "bicubic", lut, out, 0, "merge_grouped", 14, 2, 2)
    finally:
        kernels.set_num_threads(None)
    assert torch.equal(out, want)


def test_strided_source(kernels):
    canvas = torch.from_numpy(np.random.default_rng(SEED).integers(0, 256, (90, 80, 3), dtype=np.uint8))
    crop = canvas[5:80, 3:70]  # row stride 240 bytes
    want = _two_step(kernels, crop.contiguous(), (56, 28), "bicubic", None,
                     torch.zeros(8 * 1176, dtype=torch.uint8), "merge_grouped", 14, 2, 2)
    out = torch.empty(8 * 1176, dtype=torch.uint8)
    kernels.resize_normalize_patchify(crop, (56, 28), "bicubic", None, out, 0, "merge_grouped", 14, 2, 2)
    assert torch.equal(out, want)


@pytest.mark.parametrize("call,match", [
    (lambda k, img, out: k.resize_normalize_patchify(img, (28, 28), "bicubic", None, out, 0, "tiles", 14),
     "expected merge_grouped, raster or naflex, got tiles"),
    (lambda k, img, out: k.resize_normalize_patchify(img, (30, 28), "bicubic", None, out, 0,
                                                     "merge_grouped", 14, 2, 2),
     "not multiples of patch_size \\* merge_size"),
    (lambda k, img, out: k.resize_normalize_patchify(img, (28, 28), "bicubic", None, out[:100], 0,
                                                     "merge_grouped", 14, 2, 2),
     "needs out elements \\[0, 4704\\), out has 100"),
    (lambda k, img, out: k.resize_normalize_patchify(img, (28, 28), "bicubic", None, out.float(), 0,
                                                     "merge_grouped", 14, 2, 2),
     "a float32/bfloat16 out needs lut"),
    (lambda k, img, out: k.resize_normalize_patchify(img, (28, 28), "nearest", None, out, 0,
                                                     "merge_grouped", 14, 2, 2),
     "interpolation: expected bilinear, bicubic or lanczos"),
    (lambda k, img, out: k.resize_normalize_patchify(img.permute(2, 0, 1), (28, 28), "bicubic", None,
                                                     out, 0, "merge_grouped", 14, 2, 2),
     "expected a CPU \\(h, w, 3\\) uint8 image"),
])
def test_bad_inputs_say_what_was_expected(kernels, call, match):
    img = torch.zeros(40, 40, 3, dtype=torch.uint8)
    out = torch.full((4704,), 9, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=match):
        call(kernels, img, out)
    assert bool((out == 9).all())  # nothing written


def test_opcheck(kernels):
    """Schema, fake (meta) implementation and dispatch agree (torch.library.opcheck)."""
    img = torch.randint(0, 256, (30, 50, 3), dtype=torch.uint8)
    out = torch.zeros(8 * 588)  # 28x56 with patch 14: 8 patches of 3 * 14 * 14, T 1
    torch.library.opcheck(torch.ops.vlmprep.resize_normalize_patchify.default,
                          (img, 28, 56, "bicubic", torch.randn(3, 256), out, 0, "merge_grouped", 14, 2,
                           1, 1))
