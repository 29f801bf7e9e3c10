"""``pil_resample`` (the torch backend's resize on CUDA) against ``PIL.Image.resize``, bit for bit.

The path is device-generic torch (integer coefficients, float64 banded products), so running it
on the CPU checks the arithmetic the GPU runs; tests/backends/test_torch_resize.py's
``test_device_matches_pil[cuda]`` checks it on a GPU when there is one. Routing is checked here
too: a tensor on a device that is not the CPU (``meta`` stands in for CUDA) never reaches
torchvision's resize, whose CUDA kernels have no antialiased Lanczos and run out of shared memory
for one-axis downscales beyond ~94x (bicubic) / ~184x (bilinear).

Randomised tests take the run's ``seed`` fixture; ``VLMPREP_TEST_SEED=<seed>`` replays a run.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
from PIL import Image

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from _support.figures import record  # noqa: E402
from _support.imgdata import photo, tiled  # noqa: E402

import vlmprep  # noqa: E402
from vlmprep.backends.resample_order import pil_pass_order  # noqa: E402
from vlmprep.backends.torch import pil_resample as pr  # noqa: E402
from vlmprep.backends.torch import resize as resize_mod  # noqa: E402
from vlmprep.ops import PIL_RESAMPLE  # noqa: E402

SECTION = "pil_resample vs Pillow (bit-exact)"
FILTERS = pr.FILTERS
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hopper", "camera")

# (src_hw, dst_hw): 1-pixel sides, upscales, downscales up to 200x, odd aspects, Qwen shapes.
SWEEP = [
    ((1, 1), (5, 3)), ((1, 37), (4, 1)), ((29, 1), (1, 1)), ((3, 1), (40, 2)), ((1, 300), (1, 7)),
    ((2, 2), (1, 1)), ((1, 2), (1, 3)),
    ((17, 23), (211, 97)), ((64, 48), (1000, 50)), ((5, 7), (9, 1400)),
    ((40, 12000), (20, 60)), ((12000, 30), (60, 15)), ((600, 800), (3, 4)), ((801, 403), (4, 2)),
    ((100, 20000), (224, 224)), ((20000, 100), (224, 224)), ((31, 9000), (37, 45)),
    ((1080, 1920), (1092, 1932)), ((900, 17), (896, 28)), ((333, 777), (336, 784)),
    ((399, 599), (101, 561)), ((100, 100), (60, 80)), ((100, 100), (59, 80)),
]


def _img(src_hw, k: int) -> np.ndarray:
    """A real photo, mirror-tiled or cropped to ``src_hw`` (uint8 ``(H, W, 3)``)."""
    return tiled(PHOTOS[k % len(PHOTOS)], *src_hw)


def _pil(a: np.ndarray, dst_hw, interpolation: str) -> np.ndarray:
    return np.asarray(Image.fromarray(a).resize((dst_hw[1], dst_hw[0]), PIL_RESAMPLE[interpolation]))


def _chw(a: np.ndarray) -> "torch.Tensor":
    return torch.from_numpy(np.array(a, copy=True)).permute(2, 0, 1).contiguous()


def _hwc(t: "torch.Tensor") -> np.ndarray:
    return t.permute(1, 2, 0).cpu().numpy()


def _mismatch(got: np.ndarray, want: np.ndarray) -> tuple[int, int]:
    d = np.abs(got.astype(np.int16) - want.astype(np.int16))
    return int(d.max()), int((d > 0).sum())


def _random_pairs(seed: int, n: int):
    rng = random.Random(seed)
    for _ in range(n):
        h, w = rng.randint(1, 300), rng.randint(1, 300)
        f = [rng.choice((0.005, 0.03, 0.3, 0.7, 0.97, 1.0, 1.4, 3.0, 11.0)) for _ in range(2)]
        yield (h, w), (max(1, round(h * f[0])), max(1, round(w * f[1])))


# ---------------------------------------------------------------------------- vs PIL


@pytest.mark.parametrize("interp", FILTERS)
def test_sweep_matches_pil_bit_exact(interp, seed):
    cases = SWEEP + list(_random_pairs(seed, 12))
    bad, pixels = [], 0
    for k, (src, dst) in enumerate(cases):
        a = _img(src, k)
        got = _hwc(pr.resample(_chw(a), dst, interp))
        want = _pil(a, dst, interp)
        assert got.shape == want.shape
        pixels += want.size
        if not np.array_equal(got, want):
            bad.append((src, dst, pil_pass_order(src, dst, interp), _mismatch(got, want)))
    record(SECTION, f"{interp} seed={seed}: {len(cases)} resizes, {pixels} values, {len(bad)} differ")
    assert not bad, f"seed {seed} (VLMPREP_TEST_SEED={seed} replays): {bad[:10]}"


@pytest.mark.parametrize("pillow", [(12, 1), (12, 2), (13, 0)])
def test_older_pillow_orders_match_pils_two_step_reference(pillow):
    """What a GPU machine with an older Pillow compares against: ``Image.resize`` there is the
    two one-axis resizes (the same in every version) in that version's order; pil_resample with
    ``pil_pass_order(..., pillow=...)`` gives exactly that composition."""
    for k, (src, dst) in enumerate([((100, 100), (50, 80)), ((2101, 20), (1500, 30)),
                                    ((3000, 20), (2999, 5)), ((133, 277), (136, 284))]):
        a = _img(src, k)
        for interp in FILTERS:
            order = pil_pass_order(src, dst, interp, pillow=pillow)
            img, f = Image.fromarray(a), PIL_RESAMPLE[interp]
            (h1, w1), (h2, w2) = src, dst
            if order == ("v", "h"):
                want = img.resize((w1, h2), f).resize((w2, h2), f)
            else:
                want = img.resize((w2, h1), f).resize((w2, h2), f)
            got = pr.resample(_chw(a), dst, interp, order=order)
            assert np.array_equal(_hwc(got), np.asarray(want)), (pillow, src, dst, interp, order)


@pytest.mark.parametrize("interp", FILTERS)
def test_noise_matches_pil_bit_exact(interp, seed):
    """Uniform noise puts sums on every side of the rounding boundaries: a coefficient one unit
    off shows up here (~1 differing value per 16k at 255/2**22 per unit)."""
    rng = np.random.default_rng(seed)
    bad = []
    for src, dst in list(_random_pairs(seed + 1, 10)) + [((97, 1201), (89, 1187)), ((700, 50), (13, 999))]:
        a = rng.integers(0, 256, src + (3,), dtype=np.uint8)
        got = _hwc(pr.resample(_chw(a), dst, interp))
        if not np.array_equal(got, _pil(a, dst, interp)):
            bad.append((src, dst, _mismatch(got, _pil(a, dst, interp))))
    assert not bad, f"seed {seed}: {bad}"


def test_channels_batches_and_layouts():
    """1 and 4 channels (each channel as a PIL "L" image), a batch dim, channels-last views."""
    a = tiled("coffee", 45, 67)
    for interp in FILTERS:
        for c in (1, 3, 4):
            x = np.dstack([a, a[..., :1]])[..., :c] if c == 4 else a[..., :c]
            want = np.stack([_pil(np.ascontiguousarray(x[..., i]), (31, 90), interp)
                             for i in range(c)], -1)
            view = torch.from_numpy(np.ascontiguousarray(x)).permute(2, 0, 1)  # HWC memory
            got = pr.resample(view, (31, 90), interp)
            assert got.is_contiguous() and np.array_equal(_hwc(got), want)
            batch = pr.resample(torch.stack([view, view.flip(0)]), (31, 90), interp)
            assert batch.shape == (2, c, 31, 90)
            assert torch.equal(batch[0], got) and torch.equal(batch[1], got.flip(0))


@pytest.mark.parametrize("exact", [True, False])
def test_batched_resize_like_pil_equals_per_image_calls(exact, monkeypatch):
    """``resize_like_pil`` on an ``(N, C, H, W)`` stack (backends/torch/gpu.py's grouped resize,
    one launch per group on CUDA) gives each image's own call bit for bit, on the exact path and
    on the CPU's torchvision path."""
    monkeypatch.setattr(resize_mod, "EXACT_ON_CPU", exact)
    xs = [_chw(tiled(name, 37, 53)) for name in ("astronaut", "coffee", "rocket")]
    for interp in FILTERS:
        for hw in ((20, 90), (111, 17), (1, 1)):
            batch = resize_mod.resize_like_pil(torch.stack(xs), hw, interp)
            assert batch.shape == (3, 3) + hw and batch.is_contiguous()
            for k, x in enumerate(xs):
                assert torch.equal(batch[k], resize_mod.resize_like_pil(x, hw, interp)), (interp, hw, k)


@pytest.mark.parametrize("interp", FILTERS)
def test_bits_do_not_depend_on_blocking_or_chunking(interp, monkeypatch):
    t = _chw(tiled("astronaut", 70, 333))
    for axis, n in ((-1, 41), (-1, 700), (-2, 9), (-2, 150)):
        ref = pr.resample_axis(t, axis, n, interp)
        for block in (1, 7, 1000):
            assert torch.equal(pr.resample_axis(t, axis, n, interp, block=block), ref)
        monkeypatch.setattr(pr, "_CHUNK_BYTES", 4096)  # many chunks of lines and of columns
        assert torch.equal(pr.resample_axis(t, axis, n, interp), ref)
        monkeypatch.undo()


def test_scratch_stays_within_the_chunk_bound(monkeypatch):
    """The module docstring's memory bound: each batched product's float64 input and output
    take at most ``_CHUNK_BYTES`` (or one line's worth, when a line alone needs more)."""
    chunk = 1 << 16
    monkeypatch.setattr(pr, "_CHUNK_BYTES", chunk)
    seen = []
    real_bmm = torch.bmm

    def spy(a, b):
        out = real_bmm(a, b)
        seen.append((b.numel() * 8, out.numel() * 8, b.shape[2]))
        return out

    monkeypatch.setattr(torch, "bmm", spy)
    t = _chw(tiled("chelsea", 120, 2000))
    for axis, n in ((-1, 20), (-1, 3100), (-2, 7), (-2, 400)):
        seen.clear()
        pr.resample_axis(t, axis, n, "lanczos")
        for g_bytes, out_bytes, lines in seen:
            assert max(g_bytes, out_bytes) <= max(chunk, (g_bytes + out_bytes) // lines), (axis, n)
        assert len(seen) > 1  # the bound forced several chunks


def test_same_size_is_a_copy_and_bad_inputs():
    t = _chw(tiled("rocket", 9, 11))
    out = pr.resample(t, (9, 11), "bicubic")
    assert torch.equal(out, t) and out.data_ptr() != t.data_ptr()
    with pytest.raises(ValueError, match="interpolation"):
        pr.resample(t, (5, 5), "nearest")
    with pytest.raises(ValueError, match="uint8"):
        pr.resample(t.float(), (5, 5), "bicubic")
    with pytest.raises(ValueError, match="positive"):
        pr.resample(t, (0, 5), "bicubic")
    with pytest.raises(ValueError):
        pr.pil_coeffs(0, 5, "bicubic")


def test_coefficients_are_pillows_ints():
    """Each output's ints sum to ~2**22 (Pillow rounds each weight, not the sum), the windows
    are Pillow's (monotone, inside the image), and the cache hands out read-only arrays."""
    for interp in FILTERS:
        for n_in, n_out in ((1, 1), (1, 9), (9, 1), (2, 3), (3, 2), (5, 4), (20000, 224),
                            (224, 1000), (777, 784)):
            first, count, k = pr.pil_coeffs(n_in, n_out, interp)
            assert k.dtype == np.int64 and not k.flags.writeable
            assert (np.diff(first) >= 0).all() and (first + count <= n_in).all() and (count >= 1).all()
            sums = k.sum(axis=1)
            assert np.abs(sums - (1 << 22)).max() <= k.shape[1]  # one rounding per tap
            # the module's exactness argument: |partial sums| < 255 * 2**23 < 2**31 << 2**53
            assert np.abs(k).sum(axis=1).max() < 1 << 23
            assert (k[np.arange(k.shape[1])[None, :] >= count[:, None]] == 0).all()
    # bilinear 4 -> 2 by hand: support 2, centers 1 and 3, windows [0, 3) and [1, 4), filter
    # values (0.75, 0.75, 0.25) and (0.25, 0.75, 0.75) over 1.75: 3/7 and 1/7 of 2**22, rounded
    first, count, k = pr.pil_coeffs(4, 2, "bilinear")
    big, small = int(0.5 + 3 / 7 * 2**22), int(0.5 + 1 / 7 * 2**22)
    assert (big, small) == (1797559, 599186)
    assert first.tolist() == [0, 1] and count.tolist() == [3, 3]
    assert k.tolist() == [[big, big, small, 0, 0], [small, big, big, 0, 0]]


@pytest.mark.parametrize("interp", FILTERS)
def test_matches_the_compiled_cpu_resize(interp):
    """The compiled CPU kernel (csrc/kernels/resize.cc) computes Pillow's weights in C++: the
    two agree bit for bit (a third implementation of the same ints)."""
    from vlmprep import kernels

    if not kernels.available():
        pytest.skip("compiled kernels not built")
    for k, (src, dst) in enumerate([((333, 777), (336, 784)), ((80, 3000), (20, 41)),
                                    ((1, 5), (7, 1))]):
        a = _img(src, k)
        want = kernels.resize(torch.from_numpy(a), dst, interp).numpy()
        assert np.array_equal(_hwc(pr.resample(_chw(a), dst, interp)), want)


# ---------------------------------------------------------------------------- routing


def _no_torchvision_resize(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("torchvision's resize was called")

    monkeypatch.setattr(resize_mod.F, "resize", boom)


@pytest.mark.parametrize("interp", FILTERS)
def test_non_cpu_devices_take_the_exact_path(interp, monkeypatch):
    """``meta`` (not the CPU, like CUDA) goes through pil_resample and never through
    torchvision's resize, for every filter and for the extreme ratios of issue 21 item 6."""
    _no_torchvision_resize(monkeypatch)
    assert resize_mod.uses_exact_path("cuda") and resize_mod.uses_exact_path(torch.device("cuda:1"))
    assert not resize_mod.uses_exact_path("cpu")
    for src, dst in (((100, 20000), (224, 224)), ((20000, 100), (224, 224)), ((10, 13), (50, 7))):
        x = torch.empty((3,) + src, dtype=torch.uint8, device="meta")
        out = resize_mod.resize_like_pil(x, dst, interp)
        assert out.device.type == "meta" and out.shape == (3,) + dst and out.dtype == torch.uint8


@pytest.mark.parametrize("interp", FILTERS)
def test_exact_on_cpu_switch_routes_extreme_ratios(interp, monkeypatch):
    """``EXACT_ON_CPU`` runs the device path on the CPU: a 20000-wide panorama to SigLIP's 224
    (89x, beyond torch's CUDA bicubic limit) and a 200x one-axis downscale, PIL's bits, with no
    torchvision call."""
    _no_torchvision_resize(monkeypatch)
    monkeypatch.setattr(resize_mod, "EXACT_ON_CPU", True)
    for k, (src, dst) in enumerate([((100, 20000), (224, 224)), ((60, 12000), (60, 60)),
                                    ((12000, 40), (60, 40))]):
        a = _img(src, k)
        got = _hwc(resize_mod.resize_like_pil(_chw(a), dst, interp))
        assert np.array_equal(got, _pil(a, dst, interp)), (src, dst, interp)


def test_torchvision_match_refuses_cuda():
    """match="torchvision" (tv_match, the one other torchvision resize) is CPU only, so no
    torchvision resize runs on CUDA anywhere (checked before any GPU is touched)."""
    from vlmprep.backends.torch import tv_match

    with pytest.raises(ValueError, match="device='cpu'"):
        tv_match.Backend(vlmprep.presets.get("siglip"), "cuda", "float32")


@pytest.mark.parametrize("preset", ["idefics3", "qwen2-vl"])
def test_processor_device_path_equals_default_cpu_output(preset, monkeypatch):
    """The torch backend with the device path forced on the CPU (no compiled kernels, so every
    resize is ``resize_like_pil``; ``EXACT_ON_CPU``) gives the default CPU output bit for bit:
    idefics3 resizes with LANCZOS, qwen2-vl with BICUBIC."""
    items = [tiled("chelsea", 300, 451), tiled("coffee", 199, 297), photo("astronaut")[:213, :171],
             tiled("hopper", 40, 700)]
    default = vlmprep.Processor(preset, backend="torch")(items)
    reference = vlmprep.Processor(preset, backend="reference", dtype="uint8")(items)

    calls = []
    real = pr.resample

    def counting(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(vlmprep.kernels, "available", lambda: False)
    monkeypatch.setattr(resize_mod.pil_resample, "resample", counting)
    monkeypatch.setattr(resize_mod, "EXACT_ON_CPU", True)
    _no_torchvision_resize(monkeypatch)
    forced = vlmprep.Processor(preset, backend="torch")(items)
    forced_u8 = vlmprep.Processor(preset, backend="torch", dtype="uint8")(items)
    assert calls, "the device path did not run"
    assert forced.pixel_values.dtype == default.pixel_values.dtype
    assert torch.equal(forced.pixel_values, default.pixel_values)
    assert torch.equal(forced_u8.pixel_values, reference.pixel_values)
    record(SECTION, f"Processor {preset}: {len(calls)} resizes on the device path, "
                    f"{forced.pixel_values.numel()} values equal to the default CPU output")
