"""``pil_pass_order`` against the installed Pillow (and older Pillows' rules), and
``resize_like_pil`` against ``PIL.Image.resize``.

Randomised tests take the run's ``seed`` fixture (tests/conftest.py: one per run, printed in the
header); it is in the failure message and ``VLMPREP_TEST_SEED=<seed>`` replays it.

Measured on this stack (torch 2.14.1, torchvision 0.29.1, Pillow 13.0.0, x86 AVX512),
|resize_like_pil - PIL| in uint8 levels, on the photo cases below (Qwen2-VL shapes, odd
crops, random pairs, the 3000x4000 mosaic; 15 of 34 go vertical first):

* CPU uint8 kernel: max 1 (bilinear) / 2 (bicubic, lanczos); pooled mean 0.0006 /
  0.0022 / 0.0035, worst per-image mean 0.011. Over 50 seeds of these cases: max 2
  for every filter, worst per-image mean 0.016. Over a few hundred random crops,
  including slivers a few pixels wide, the worst per-image mean was 0.033, on noise
  0.024. The 2s come from torchvision's uint8 kernel itself: one pass is already up to
  1 level off (its coefficient precision differs from Pillow's) and two passes add up.
* float32 path (the CPU without AVX2, bilinear), on CPU: max 1-2, pooled mean <= 0.0007.
* CUDA (and ``EXACT_ON_CPU``) runs ``pil_resample``: 0 levels (tests/backends/test_pil_resample.py).
* naive one-shot torchvision (always horizontal first): max 1 / 15 / 28, pooled mean
  0.065 / 0.075 / 0.095, per-image means up to 0.19-0.24 on vertical-first pairs.

Bounds: MAX_LEVELS = 2 is the measured worst case; MEAN_LEVELS = 0.05 is ~1.5x the
worst per-image mean seen (slivers) and still well below what the wrong pass order
gives on photos (0.08-0.24). Means are only checked on images of >= 64x64 pixels.
"""
from __future__ import annotations

import functools
import random

import numpy as np
import pytest
from PIL import Image

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from _support.figures import record  # noqa: E402

from vlmprep.backends.resample_order import pil_pass_order  # noqa: E402
from vlmprep.backends.torch import resize as resize_mod  # noqa: E402
from vlmprep.backends.torch.resize import resize_like_pil  # noqa: E402
from vlmprep.ops import PIL_RESAMPLE  # noqa: E402

SECTION = "torch resize vs Pillow (uint8 levels)"
MAX_LEVELS = 2
MEAN_LEVELS = 0.05
# The float path (bilinear on a CPU without AVX2) on uniform noise with bilinear: at scale factors such as 1.5 the
# filter weights put many outputs exactly on a half level, which float rounding and Pillow's
# 22-bit fixed point resolve differently (max stays 1). Measured over 300 random pairs: worst
# per-image mean 0.0625, above MEAN_LEVELS in 0.7% of pairs (so the 8 random pairs per run flaked);
# bicubic and lanczos stayed <= 0.0012. Photos keep MEAN_LEVELS on every path.
FLOAT_NOISE_BILINEAR_MEAN = 0.1
MIN_PIXELS_FOR_MEAN = 64 * 64  # a mean over a handful of pixels is noise, not a statistic

INTERPOLATIONS = ("bilinear", "bicubic", "lanczos")

QWEN_PAIRS = [  # (src_hw, dst_hw) that Qwen2-VL's smart_resize produces
    ((1080, 1920), (1092, 1932)),
    ((900, 17), (896, 28)),
    ((17, 900), (28, 896)),
    ((333, 777), (336, 784)),
]


# --------------------------------------------------------------------------- helpers


@functools.lru_cache(maxsize=None)
def _photos() -> tuple[np.ndarray, ...]:
    import skimage.data as skd
    from matplotlib import cbook

    with cbook.get_sample_data("grace_hopper.jpg") as fh:
        hopper = np.asarray(Image.open(fh).convert("RGB"))
    out = []
    for a in (skd.astronaut(), skd.chelsea(), skd.coffee(), skd.rocket(), hopper):
        a = np.ascontiguousarray(a[..., :3])
        a.setflags(write=False)
        out.append(a)
    return tuple(out)


def _odd_crop(a: np.ndarray) -> np.ndarray:
    """Crop to odd height and width (keeps the odd-size code paths honest)."""
    h, w = a.shape[:2]
    return np.ascontiguousarray(a[: h - 1 + h % 2, : w - 1 + w % 2])


@functools.lru_cache(maxsize=None)
def _mosaic(h: int, w: int) -> np.ndarray:
    """A ``(h, w)`` canvas of the real photos at native resolution, flipped tile to tile."""
    photos = _photos()
    out = np.empty((h, w, 3), np.uint8)
    y, k = 0, 0
    while y < h:
        x, row_h = 0, 0
        while x < w:
            p = photos[k % len(photos)]
            if k % 2:
                p = p[:, ::-1]
            if k % 3 == 0:
                p = p[::-1]
            k += 1
            th, tw = min(p.shape[0], h - y), min(p.shape[1], w - x)
            out[y:y + th, x:x + tw] = p[:th, :tw]
            x += tw
            row_h = max(row_h, th)
        y += row_h
    out.setflags(write=False)
    return out


def _photo_for(src_hw: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A real-photo crop of exactly ``src_hw`` (from the mosaic when it is bigger than a photo)."""
    h, w = src_hw
    fits = [p for p in _photos() if p.shape[0] >= h and p.shape[1] >= w]
    p = fits[int(rng.integers(len(fits)))] if fits else _mosaic(max(h, 1200), max(w, 2000))
    y = int(rng.integers(0, p.shape[0] - h + 1))
    x = int(rng.integers(0, p.shape[1] - w + 1))
    return np.ascontiguousarray(p[y:y + h, x:x + w])


def _pil(a: np.ndarray, dst_hw, interpolation: str) -> np.ndarray:
    return np.asarray(Image.fromarray(a).resize((dst_hw[1], dst_hw[0]), PIL_RESAMPLE[interpolation]))


def _chw(a: np.ndarray, device: str = "cpu") -> "torch.Tensor":
    return torch.from_numpy(np.array(a, copy=True)).permute(2, 0, 1).contiguous().to(device)


def _hwc(t: "torch.Tensor") -> np.ndarray:
    return t.permute(1, 2, 0).cpu().numpy()


def _err(a: np.ndarray, b: np.ndarray) -> tuple[int, float]:
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return int(d.max()), float(d.mean())


def _naive(t: "torch.Tensor", dst_hw, interpolation: str) -> "torch.Tensor":
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    return F.resize(t, list(dst_hw), interpolation=InterpolationMode(interpolation), antialias=True)


def _check_bounds(results, label: str, mean_bound: float = MEAN_LEVELS) -> None:
    """``results``: (case, max, mean, n_values). Fails listing every case out of bounds."""
    bad = [
        r for r in results
        if r[1] > MAX_LEVELS or (r[3] >= MIN_PIXELS_FOR_MEAN * 3 and r[2] > mean_bound)
    ]
    worst_max = max(r[1] for r in results)
    worst_mean = max((r[2] for r in results if r[3] >= MIN_PIXELS_FOR_MEAN * 3), default=0.0)
    record(SECTION, f"{label}: {len(results)} cases, worst max {worst_max}, worst mean {worst_mean:.4f}")
    assert not bad, f"{label}: out of bounds (max<={MAX_LEVELS}, mean<={mean_bound}): {bad[:10]}"


# --------------------------------------------------------------------- pass order


@pytest.mark.parametrize(
    "src, dst, order",
    [
        ((3000, 4000), (2996, 4004), ("v", "h")),  # height down, width up
        ((1080, 1920), (1092, 1932), ("h", "v")),  # height up
        ((900, 17), (896, 28), ("v", "h")),
        ((17, 900), (28, 896), ("h", "v")),
        ((333, 777), (336, 784), ("h", "v")),
        ((100, 100), (50, 80), ("v", "h")),  # both down: 50 > 2 * 20
        ((100, 100), (60, 80), ("h", "v")),  # 40 == 2 * 20: a tie goes horizontal
        ((100, 100), (59, 80), ("v", "h")),
        ((100, 100), (50, 100), ("v",)),
        ((100, 100), (100, 7), ("h",)),
        ((100, 100), (100, 100), ()),
        ((1, 1), (5, 3), ("h", "v")),
        ((6, 3), (1, 1), ("v", "h")),  # 5 > 2 * 2
        ((5, 3), (1, 1), ("h", "v")),  # 4 == 2 * 2
    ],
)
def test_pass_order_examples(src, dst, order):
    for interp in ("nearest",) + INTERPOLATIONS:  # the order never depends on the filter
        assert pil_pass_order(src, dst, interp, pillow=(13, 0)) == order


@pytest.mark.parametrize(
    "src, dst, pillow, order",
    [
        ((100, 100), (50, 80), (12, 1), ("h", "v")),  # before 12.2: always horizontal first
        ((3000, 4000), (2996, 4004), (11, 3), ("h", "v")),
        ((10000, 50), (9999, 10), (12, 1), ("h", "v")),
        ((100, 100), (50, 100), (12, 1), ("v",)),  # one axis: one pass, in any version
        ((100, 100), (50, 80), (12, 2), ("h", "v")),  # 12.2-12.3: only H1 > 100 * W1 ...
        ((10000, 50), (9999, 10), (12, 3), ("v", "h")),  # ... and H2 < H1 goes vertical first
        ((10000, 50), (9999, 50), (12, 2), ("v",)),
        ((10000, 50), (10001, 10), (12, 2), ("h", "v")),  # height grows
        ((5000, 50), (4000, 10), (12, 2), ("h", "v")),  # H1 == 100 * W1 is not > 100 * W1
        ((5001, 50), (4000, 60), (12, 2), ("v", "h")),
        ((10000, 50), (9999, 10), (13, 0), ("h", "v")),  # 13: 1 > 2 * 40 is false
        ((5001, 50), (4000, 60), (13, 1), ("v", "h")),
    ],
)
def test_pass_order_older_pillow(src, dst, pillow, order):
    assert pil_pass_order(src, dst, "bicubic", pillow=pillow) == order


def test_pass_order_rule_names_the_installed_pillow():
    import PIL

    from vlmprep.backends import resample_order as ro

    major, minor = (int(v) for v in PIL.__version__.split(".")[:2])
    assert ro.pillow_version() == (major, minor)
    assert ro.pass_order_rule() == ro.pass_order_rule((major, minor))
    assert [ro.pass_order_rule(v) for v in ((9, 5), (12, 1), (12, 2), (12, 3), (13, 0), (14, 2))] == [
        "pillow<12.2", "pillow<12.2", "pillow 12.2-12.x", "pillow 12.2-12.x", "pillow>=13", "pillow>=13"]
    assert ro.describe_rule((13, 0)).startswith("pillow>=13: vertical first iff")
    # the default is the installed Pillow's rule
    assert pil_pass_order((10000, 50), (9999, 10), "bilinear") == pil_pass_order(
        (10000, 50), (9999, 10), "bilinear", pillow=(major, minor))


def test_pass_order_rejects_bad_input():
    with pytest.raises(ValueError):
        pil_pass_order((10, 10), (5, 5), "area")
    with pytest.raises(ValueError):
        pil_pass_order((10, 10), (0, 5), "bicubic")


def _two_step(img: Image.Image, order, dst_hw, f) -> Image.Image:
    (h2, w2), (w1, h1) = dst_hw, img.size
    if order == ("h", "v"):
        return img.resize((w2, h1), f).resize((w2, h2), f)
    if order == ("v", "h"):
        return img.resize((w1, h2), f).resize((w2, h2), f)
    return img.resize((w2, h2), f)  # a single pass (or a copy)


def _random_pairs(rng: random.Random, n: int, max_side: int):
    def side(s: int) -> int:
        k = rng.randrange(10)
        if k == 0:
            return s  # unchanged
        if k == 1:
            return 1  # 1-pixel
        if k == 2:
            return max(1, s + rng.randint(-3, 3))
        return max(1, int(s * rng.uniform(0.05, 2.5)))

    for _ in range(n):
        h1 = rng.choice((1, 2, 3, rng.randint(4, max_side)))
        w1 = rng.choice((1, 2, 3, rng.randint(4, max_side)))
        if rng.random() < 0.15 and h1 > 2 and w1 > 2:  # both shrink, on the tie line +-1
            dw = rng.randint(1, (w1 - 1))
            dh = min(h1 - 1, max(1, 2 * dw + rng.randint(-1, 1)))
            yield (h1, w1), (h1 - dh, w1 - dw)
        else:
            yield (h1, w1), (side(h1), side(w1))


def test_pass_order_matches_pillow_bit_exact(seed):
    """One-shot ``Image.resize`` == the two one-axis resizes in the predicted order."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    cases = list(_random_pairs(rng, 160, 160)) + [
        ((1, 1), (3, 2)), ((2, 1), (1, 1)), ((1, 7), (1, 3)), ((9, 1), (3, 1)),
        ((40, 40), (20, 30)), ((40, 40), (19, 30)), ((41, 40), (20, 30)),
        ((120, 90), (30, 100)), ((31, 150), (7, 149)), ((90, 9), (50, 7)),
    ]
    failures, orders = [], {}
    for i, (src, dst) in enumerate(cases):
        if i % 2:
            a = nrng.integers(0, 256, src + (3,), dtype=np.uint8)
        else:
            a = _photo_for(src, nrng)
        img = Image.fromarray(a).convert("L" if i % 5 == 0 else "RGB")
        for interp in INTERPOLATIONS:
            f = PIL_RESAMPLE[interp]
            order = pil_pass_order(src, dst, interp)
            orders[order] = orders.get(order, 0) + 1
            one = np.asarray(img.resize((dst[1], dst[0]), f))
            two = np.asarray(_two_step(img, order, dst, f))
            if not np.array_equal(one, two):
                failures.append((src, dst, interp, img.mode, order))
    record(SECTION, f"pass order, seed {seed}: {len(cases) * len(INTERPOLATIONS)} resizes, orders {orders}")
    assert not failures, f"seed {seed} (VLMPREP_TEST_SEED={seed} replays): {failures[:10]}"
    assert orders.get(("v", "h"), 0) >= 30 and orders.get(("h", "v"), 0) >= 30, orders


# ----------------------------------------------------------- one-axis resizes


@pytest.mark.parametrize("interp", INTERPOLATIONS)
def test_one_axis_resize_is_one_pass_on_that_axis(interp):
    """Width-only changes interpolate within rows only, height-only within columns only.

    Checked bit-exactly: the result equals the same resize run on each row (column)
    alone, and equals torchvision's own single call (one pass, nothing on the other axis).
    """
    a = _odd_crop(_photos()[1])[:61, :83]  # (61, 83)
    t = _chw(a)
    w_only = resize_like_pil(t, (61, 120), interp)
    rows = torch.cat([resize_like_pil(t[:, r:r + 1], (1, 120), interp) for r in range(61)], dim=1)
    assert torch.equal(w_only, rows)
    assert torch.equal(w_only, _naive(t, (61, 120), interp))
    h_only = resize_like_pil(t, (29, 83), interp)
    cols = torch.cat([resize_like_pil(t[:, :, c:c + 1], (29, 1), interp) for c in range(83)], dim=2)
    assert torch.equal(h_only, cols)
    assert torch.equal(h_only, _naive(t, (29, 83), interp))
    for out, dst in ((w_only, (61, 120)), (h_only, (29, 83))):
        assert _err(_hwc(out), _pil(a, dst, interp))[0] <= 1  # one rounding step: <= 1 level


# -------------------------------------------------------------- vs PIL: photos


def _compare(cases, interp: str, *, force_float: bool = False, device: str = "cpu"):
    out = []
    for src_a, dst in cases:
        t = _chw(src_a, device)
        got = resize_mod._resize_like_pil(t, dst, interp, force_float=force_float)
        assert got.shape == (3,) + tuple(dst) and got.dtype == torch.uint8
        assert got.device == t.device
        mx, mean = _err(_hwc(got), _pil(src_a, dst, interp))
        out.append(((src_a.shape[:2], dst), mx, mean, got.numel()))
    return out


def _photo_cases(seed: int):
    nrng = np.random.default_rng(seed)
    rng = random.Random(seed)
    cases = [(_photo_for(src, nrng), dst) for src, dst in QWEN_PAIRS]
    for p in _photos():
        a = _odd_crop(p)
        h, w = a.shape[:2]
        cases.append((a, (int(h * 0.61) | 1, int(w * 0.47) | 1)))  # both down, vertical-first-ish
        cases.append((a, (h // 3, w - 5)))  # height much further down: vertical first
        cases.append((a, (h + 13, w + 28)))  # small upscale
    for _ in range(14):  # random pairs on random odd crops
        p = rng.choice(_photos())
        h, w = rng.randrange(15, p.shape[0], 2), rng.randrange(15, p.shape[1], 2)
        a = _photo_for((h, w), nrng)
        cases.append((a, (max(1, int(h * rng.uniform(0.2, 2.2))), max(1, int(w * rng.uniform(0.2, 2.2))))))
    return cases


@pytest.mark.parametrize("interp", INTERPOLATIONS)
def test_matches_pil_on_photos(interp, seed):
    res = _compare(_photo_cases(seed), interp)
    _check_bounds(res, f"photos {interp} uint8-kernel seed={seed}")


@pytest.mark.parametrize("interp", INTERPOLATIONS)
def test_float_path_matches_pil_on_photos(interp, seed):
    """The float32 + round-between-passes path (bilinear on a CPU without AVX2)."""
    res = _compare(_photo_cases(seed)[:9], interp, force_float=True)
    _check_bounds(res, f"photos {interp} float-path seed={seed}")


@pytest.mark.parametrize("interp", INTERPOLATIONS)
def test_matches_pil_on_noise(interp, seed):
    rng = np.random.default_rng(seed)
    cases = [(rng.integers(0, 256, src + (3,), dtype=np.uint8), dst) for src, dst in QWEN_PAIRS[1:]]
    for _ in range(8):
        h, w = (int(v) for v in rng.integers(1, 250, 2))
        dst = (max(1, int(h * rng.uniform(0.1, 2.5))), max(1, int(w * rng.uniform(0.1, 2.5))))
        cases.append((rng.integers(0, 256, (h, w, 3), dtype=np.uint8), dst))
    for force_float in (False, True):
        bound = FLOAT_NOISE_BILINEAR_MEAN if force_float and interp == "bilinear" else MEAN_LEVELS
        _check_bounds(_compare(cases, interp, force_float=force_float),
                      f"noise {interp} float={force_float} seed={seed}", bound)


def _ours_and_naive(a: np.ndarray, dst, interp: str, label: str):
    """A vertical-first pair: |resize_like_pil - PIL| and |one-shot torchvision - PIL| as (max,
    mean); ours is held to the bounds here."""
    assert pil_pass_order(a.shape[:2], dst, interp) == ("v", "h")
    t = _chw(a)
    ref = _pil(a, dst, interp)
    ours = _err(_hwc(resize_like_pil(t, dst, interp)), ref)
    naive = _err(_hwc(_naive(t, dst, interp)), ref)
    record(SECTION, f"{label}->{dst} {interp}: ours max {ours[0]} mean {ours[1]:.4f}; "
                    f"naive max {naive[0]} mean {naive[1]:.4f}")
    assert ours[0] <= MAX_LEVELS and ours[1] <= MEAN_LEVELS
    return ours, naive


@pytest.mark.parametrize("interp", ["bicubic", "lanczos", "bilinear"])
def test_qwen_3000x4000_photo_mosaic(interp):
    """3000x4000 -> 2996x4004 (Pillow goes vertical first); the naive one-shot resize is worse."""
    ours, naive = _ours_and_naive(_mosaic(3000, 4000), (2996, 4004), interp, "3000x4000")
    # Measured naive: mean 0.08 (bilinear) .. 0.12 (lanczos), max 15 / 27 (bicubic / lanczos).
    assert naive[1] > 10 * max(ours[1], 1e-3)
    if interp != "bilinear":  # bilinear has no negative lobes: the wrong order costs <= 1 level
        assert naive[0] >= 5


@pytest.mark.parametrize("interp", INTERPOLATIONS)
def test_naive_one_shot_is_worse_where_pillow_goes_vertical_first(interp):
    """Guards the order logic: on vertical-first photo pairs, ours beats the one-shot resize."""
    a = _odd_crop(_photos()[2])  # coffee, 399 x 599
    ours, naive = _ours_and_naive(a, (101, 561), interp, f"coffee {a.shape[:2]}")
    assert naive[1] > 10 * max(ours[1], 1e-3) and naive[1] > MEAN_LEVELS


# ------------------------------------------------------------- nearest, errors, devices


def test_nearest_is_bit_exact(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        h, w = (int(v) for v in rng.integers(1, 260, 2))
        h2, w2 = (int(v) for v in rng.integers(1, 600, 2))
        a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        got = _hwc(resize_like_pil(_chw(a), (h2, w2), "nearest"))
        assert np.array_equal(got, _pil(a, (h2, w2), "nearest")), f"seed {seed}: {(h, w)} -> {(h2, w2)}"


def test_odd_layouts_and_tiny_sizes():
    """Channels-last views, 1- and 4-channel images, 1-pixel sides (torch kernels' edge cases)."""
    rng = np.random.default_rng(0)
    sizes = (1, 2, 3, 17)
    for interp in INTERPOLATIONS:
        for h, w, h2, w2 in [(a, b, c, d) for a in sizes for b in sizes for c in sizes for d in sizes][::3]:
            for c in (1, 3, 4):
                a = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
                ref = np.stack([_pil(np.ascontiguousarray(a[..., k]), (h2, w2), interp) for k in range(c)], -1)
                view = torch.from_numpy(a).permute(2, 0, 1)  # channels-last strides
                for force_float in (False, True):
                    got = resize_mod._resize_like_pil(view, (h2, w2), interp, force_float=force_float)
                    assert got.shape == (c, h2, w2) and got.is_contiguous()
                    mx = _err(_hwc(got), ref)[0]
                    assert mx <= MAX_LEVELS, (interp, (c, h, w), (h2, w2), force_float, mx)


def test_same_size_returns_a_copy():
    t = _chw(_photos()[0][:20, :30])
    out = resize_like_pil(t, (20, 30), "bicubic")
    assert torch.equal(out, t) and out.data_ptr() != t.data_ptr()


def test_bad_inputs():
    t = _chw(_photos()[0][:20, :30])
    with pytest.raises(ValueError):
        resize_like_pil(t.float(), (10, 10), "bicubic")
    with pytest.raises(ValueError):
        resize_like_pil(t, (0, 10), "bicubic")
    with pytest.raises(ValueError):
        resize_like_pil(t, (10, 10), "area")
    with pytest.raises(TypeError):
        resize_like_pil(np.zeros((3, 4, 4), np.uint8), (2, 2), "bicubic")


def test_lanczos_without_torchvision_support_uses_the_exact_path(monkeypatch):
    """A torchvision without InterpolationMode.LANCZOS: the CPU resizes lanczos with the
    Pillow-exact path (pil_resample) instead of failing; PIL's bits."""
    class NoLanczos:
        BILINEAR = resize_mod.InterpolationMode.BILINEAR
        BICUBIC = resize_mod.InterpolationMode.BICUBIC

    monkeypatch.setattr(resize_mod, "InterpolationMode", NoLanczos)
    a = _photos()[0][:20, :30]
    got = resize_like_pil(_chw(a), (10, 13), "lanczos")
    assert np.array_equal(_hwc(got), _pil(a, (10, 13), "lanczos"))


def _devices():
    try:
        from _support.devices import devices  # cuda marked gpu, skipped centrally
    except ImportError:  # e.g. --import-mode=importlib
        has_cuda = torch.cuda.is_available()
        return ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not has_cuda, reason="no CUDA GPU"))]
    return devices()


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("interp", INTERPOLATIONS)
def test_device_matches_pil(device, interp, seed):
    """CPU: the torchvision uint8 path, within the bounds. CUDA: the Pillow-exact path
    (pil_resample), so 0 levels from PIL: bit for bit, lanczos included."""
    res = _compare(_photo_cases(seed)[:8], interp, device=device)
    if device == "cuda":
        assert all(r[1] == 0 for r in res), [r for r in res if r[1]][:5]
    _check_bounds(res, f"{device} {interp} seed={seed}")
