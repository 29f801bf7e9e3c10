"""The compiled resize's torchvision variant (``match="torchvision"``) against its oracle,
torchvision's ``resize(antialias=True)`` of a uint8 CHW tensor on the CPU (torch's
``_upsample_bilinear2d_aa`` / ``_upsample_bicubic2d_aa`` / ``_upsample_lanczos2d_aa`` uint8
kernels; lanczos from torch 2.14): byte for byte, up and down, one axis unchanged, 1-pixel
sides, extreme ratios, noise and photos, threads 1 and 2, every instruction-set path
(VLMPREP_CPU_ISA); and the fused ops with the variant against tvF.resize then
normalize_patchify.

The oracle is this machine's torch: on x86 with AVX2 its AVX kernel, elsewhere its generic (or
aarch64's) one. torchvision resizes bilinear uint8 natively only where
``_do_native_uint8_resize_on_cpu`` says so (AVX2/AVX512 or aarch64); elsewhere it goes through
float and these tests would fail: they are skipped there (tv_exact falls back to tvF)."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from _support.imgdata import tiled
from _support.seed import SEED
from PIL import Image

tv2 = pytest.importorskip("torchvision.transforms.v2.functional")
from torchvision.transforms import InterpolationMode  # noqa: E402

MODES = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC,
         "lanczos": InterpolationMode.LANCZOS}


def _native_uint8(f: str) -> bool:
    from torchvision.transforms.v2.functional._geometry import _do_native_uint8_resize_on_cpu
    if f == "lanczos" and not hasattr(torch._C._nn, "_upsample_lanczos2d_aa"):
        return False  # a torch before antialiased lanczos
    return _do_native_uint8_resize_on_cpu(MODES[f])


def _tv(img: torch.Tensor, hw, f: str, channels_last: bool = True) -> torch.Tensor:
    """torchvision's resize of an (H, W, 3) uint8 image, as (h, w, 3). Channels-last by default:
    torch 2.14's AVX kernel fails an internal assert for a 1x1 output from a contiguous CHW
    tensor (num_channels == unpacked_output.size(0)); other sizes give the same bytes in
    either layout (test_oracle_is_layout_free...)."""
    chw = img.permute(2, 0, 1)
    if not channels_last:
        chw = chw.contiguous()
    out = tv2.resize(chw, list(hw), interpolation=MODES[f], antialias=True)
    return out.permute(1, 2, 0).contiguous()



@pytest.fixture(params=list(MODES))
def f(request):
    if not _native_uint8(request.param):
        pytest.skip(f"torchvision resizes uint8 {request.param} through float (or not at all) here")
    return request.param


def _check(kernels, img: torch.Tensor, hw, f: str, ctx: str = "") -> None:
    want = _tv(img, hw, f)
    got = kernels.resize(img, hw, f, match="torchvision")
    if not torch.equal(got, want):
        d = (got.int() - want.int()).abs()
        raise AssertionError(f"{ctx} {tuple(img.shape[:2])} -> {hw} {f}: {(d > 0).sum().item()} bytes "
                             f"differ, by up to {d.max().item()}")


SIZES = [(1, 1), (1, 9), (9, 1), (2, 3), (17, 9), (50, 70), (224, 224), (333, 517), (640, 480)]


def test_sizes_match_torchvision(kernels, isa, f):
    """Every source of SIZES to every other (up, down, mixed), to itself with one axis changed,
    and to 1-pixel sides; threads 1 and 2."""
    g = torch.Generator().manual_seed(SEED)
    k = 0
    for H, W in SIZES:
        img = torch.randint(0, 256, (H, W, 3), dtype=torch.uint8, generator=g)
        outs = set(SIZES) | {(H, 2 * W + 1), (3 * H + 2, W), (H, max(1, W // 7)), (max(1, H // 5), W),
                             (1, W), (H, 1), (1, 1)}
        for hw in sorted(outs):
            k += 1
            kernels.set_num_threads(1 + k % 2)
            try:
                _check(kernels, img, hw, f, f"seed {SEED} {isa}")
            finally:
                kernels.set_num_threads(None)


def test_random_sizes_match_torchvision(kernels, f):
    rng = np.random.default_rng(SEED)
    for _ in range(40):
        H, W, h, w = (int(v) for v in rng.integers(1, 400, 4))
        img = torch.from_numpy(rng.integers(0, 256, (H, W, 3), dtype=np.uint8))
        _check(kernels, img, (h, w), f, f"seed {SEED}")


@pytest.mark.parametrize("src_hw,dst_hw", [
    ((100, 20000), (224, 224)),     # extreme: width / 89, height x 2.24
    ((20000, 100), (224, 224)),
    ((1, 5000), (3, 3)),
    ((4000, 3), (2, 700)),
    ((2, 2), (1000, 999)),          # upscale by 500
])
def test_extreme_ratios_match_torchvision(kernels, isa, f, src_hw, dst_hw):
    g = torch.Generator().manual_seed(SEED)
    img = torch.randint(0, 256, (*src_hw, 3), dtype=torch.uint8, generator=g)
    _check(kernels, img, dst_hw, f, isa)


def test_every_unrolled_tap_pair_count_matches_torchvision(kernels, isa, f):
    """The horizontal pass unrolls its tap-pair loop for 2..13 pairs (beyond: one loop): a
    downscale of a 37-row strip to each width whose window gives each count, plus wider ones
    (2-12x: 720p or 1080p frames to 384-512 tiles), at 1 and 2 threads."""
    g = torch.Generator().manual_seed(SEED)
    img = torch.randint(0, 256, (37, 2048, 3), dtype=torch.uint8, generator=g)
    support = {"bilinear": 1.0, "bicubic": 2.0, "lanczos": 3.0}[f]
    widths = set()
    for pairs in range(2, 16):  # the window is about 2 * support * scale + 1 taps
        scale = (2 * pairs - 1) / (2 * support)
        if scale > 1:
            widths.add(max(1, round(2048 / scale)))
    for threads in (1, 2):
        kernels.set_num_threads(threads)
        try:
            for w in sorted(widths | {384, 448, 512}):
                _check(kernels, img, (37, w), f, f"{isa} width {w} threads {threads}")
        finally:
            kernels.set_num_threads(None)


@pytest.mark.parametrize("name,src_hw,dst_hw", [
    ("astronaut", (1080, 1920), (1092, 1932)),  # Qwen2-VL's 1080p
    ("chelsea", (300, 451), (224, 224)),
    ("coffee", (400, 600), (896, 1344)),
    ("astronaut", (512, 512), (512, 300)),      # one axis unchanged
    ("coffee", (1000, 1500), (140, 196)),
])
@pytest.mark.parametrize("threads", [1, 2])
def test_photos_match_torchvision(kernels, f, name, src_hw, dst_hw, threads):
    img = torch.from_numpy(tiled(name, *src_hw))
    kernels.set_num_threads(threads)
    try:
        _check(kernels, img, dst_hw, f, name)
    finally:
        kernels.set_num_threads(None)


def test_oracle_is_layout_free_and_the_match_matters(kernels, f):
    """torch gives the same bytes for a contiguous and a channels-last CHW tensor (callers pass
    either), and the two matches differ (the variant is really another arithmetic)."""
    img = torch.from_numpy(tiled("chelsea", 300, 451))
    assert torch.equal(_tv(img, (224, 224), f), _tv(img, (224, 224), f, channels_last=False))
    assert torch.equal(kernels.resize(img, (224, 224), f, match="torchvision"), _tv(img, (224, 224), f))
    assert not torch.equal(kernels.resize(img, (224, 224), f), kernels.resize(img, (224, 224), f, match="torchvision"))


def test_bad_match_arguments(kernels):
    img = torch.zeros(5, 7, 3, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="match: expected pillow or torchvision, got 'tv'"):
        kernels.resize(img, (3, 3), "bicubic", match="tv")
    out = torch.zeros(28 * 28 * 3)
    with pytest.raises(RuntimeError, match="match: expected pillow or torchvision, got 'PIL'"):
        kernels.resize_normalize_patchify(img, (28, 28), "bicubic", torch.randn(3, 256), out, 0, "raster", 28,
                                          match="PIL")


# ----------------------------------------------------------------------------- fused ops

ORDERS = [("merge_grouped", 14, 2, 2), ("raster", 16, 1, 1), ("naflex", 16, 1, 1)]


def _two_step(kernels, img, hw, f, lut, n, dtype, order, P, m, T):
    """The definition: torchvision's resize, then normalize_patchify."""
    want = torch.zeros(n, dtype=dtype)
    kernels.normalize_patchify([_tv(img, hw, f)], lut, want, [0], order, P, m, T)
    return want


def _lut(dtype):
    if dtype == torch.uint8:
        return None
    return torch.randn(3, 256, generator=torch.Generator().manual_seed(SEED)).to(dtype)


@pytest.mark.parametrize("order,P,m,T", ORDERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8], ids=str)
def test_resize_normalize_patchify_equals_tv_resize_then_normalize_patchify(kernels, f, order, P, m, T, dtype):
    rng = np.random.default_rng(SEED)
    lut = _lut(dtype)
    q = P * m
    for k in range(8):
        H, W = (int(v) for v in rng.integers(1, 300, 2))
        h, w = (q * int(v) for v in rng.integers(1, 9, 2))
        if k == 0:
            H, W, h, w = 1080, 1920, 1092 // q * q, 1932 // q * q
        img = torch.from_numpy(rng.integers(0, 256, (H, W, 3), dtype=np.uint8)) if k % 2 else \
            torch.from_numpy(tiled("astronaut", H, W))
        n = (h // P) * (w // P) * 3 * P * P * T
        want = _two_step(kernels, img, (h, w), f, lut, n, dtype, order, P, m, T)
        out = torch.full((n + 20,), 7, dtype=dtype)
        kernels.set_num_threads(1 + k % 2)
        try:
            kernels.resize_normalize_patchify(img, (h, w), f, lut, out, 20, order, P, m, T, match="torchvision")
        finally:
            kernels.set_num_threads(None)
        ctx = f"seed {SEED}: {H}x{W} -> {h}x{w} {f} {order} {dtype}"
        assert torch.equal(out[20:].view(torch.uint8), want.view(torch.uint8)), ctx
        assert bool((out[:20] == 7).all()), ctx


def _jpeg(name, h, w, quality=90, subsampling=2) -> tuple[bytes, np.ndarray]:
    b = io.BytesIO()
    Image.fromarray(tiled(name, h, w)).save(b, "JPEG", quality=quality, subsampling=subsampling)
    data = b.getvalue()
    return data, np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("name,src_hw,dst_hw", [
    ("astronaut", (1080, 1920), (1092, 1932)),
    ("coffee", (301, 517), (448, 672)),
    ("chelsea", (97, 1001), (56, 1008)),
])
@pytest.mark.parametrize("threads", [1, 2])
def test_decode_resize_normalize_patchify_equals_decode_then_tv_resize(jpeg, f, name, src_hw, dst_hw, threads):
    data, pix = _jpeg(name, *src_hw)
    lut = _lut(torch.float32)
    n = (dst_hw[0] // 14) * (dst_hw[1] // 14) * 1176
    want = _two_step(jpeg, torch.from_numpy(pix.copy()), dst_hw, f, lut, n, torch.float32, "merge_grouped", 14, 2, 2)
    out = torch.empty(n)
    jpeg.set_num_threads(threads)
    try:
        why = jpeg.decode_resize_normalize_patchify(data, src_hw, dst_hw, f, lut, out, 0, "merge_grouped", 14, 2, 2,
                                                    match="torchvision")
    finally:
        jpeg.set_num_threads(None)
    assert why == ""
    assert torch.equal(out, want), f"{name} {src_hw} -> {dst_hw} {f}"


@pytest.mark.parametrize("threads", [1, 2])
def test_decode_resize_equals_decode_crop_then_tv_resize(jpeg, f, threads):
    data, pix = _jpeg("coffee", 400, 600)
    boxes = [(0, 0, 400, 600), (100, 150, 300, 448)]
    sizes = [(448, 448), (224, 672)]
    jpeg.set_num_threads(threads)
    try:
        got, why = jpeg.decode_resize(data, (400, 600), boxes, sizes, f, match="torchvision")
    finally:
        jpeg.set_num_threads(None)
    assert why == ""
    for g, (t, x, h, w), hw in zip(got, boxes, sizes):
        want = _tv(torch.from_numpy(pix[t:t + h, x:x + w].copy()), hw, f)
        assert torch.equal(g, want), (t, x, h, w, hw, f)
