"""The JPEG fast path (libjpeg-turbo, built where its headers are): ``decode_jpeg`` against
Pillow's decoder (the oracle: same library family, same settings), and
``decode_resize_normalize_patchify`` against Pillow's decode followed by
``resize_normalize_patchify`` (itself checked in test_resize_normalize_patchify), byte for
byte, on 1 and 2 threads (two: one thread decodes while the other writes the decoded bands);
damaged data is declined with libjpeg's reason, never a crash."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from _support.imgdata import tiled
from _support.seed import SEED
from PIL import Image


def _jpegs():
    """(label, bytes) over qualities, chroma subsamplings, progressive, gray, restart markers,
    odd sizes."""
    out = []
    for q, sub, (name, h, w) in [(50, 0, ("coffee", 301, 517)), (75, 1, ("astronaut", 640, 203)),
                                 (90, 2, ("chelsea", 97, 1001)), (95, 2, ("coffee", 1, 1)),
                                 (100, 0, ("rocket", 33, 17)), (85, 2, ("astronaut", 17, 300))]:
        b = io.BytesIO()
        Image.fromarray(tiled(name, h, w)).save(b, "JPEG", quality=q, subsampling=sub)
        out.append((f"{name} {h}x{w} q{q} s{sub}", b.getvalue()))
    b = io.BytesIO()
    Image.fromarray(tiled("coffee", 400, 300)).save(b, "JPEG", quality=85, progressive=True)
    out.append(("progressive", b.getvalue()))
    b = io.BytesIO()
    Image.fromarray(tiled("coffee", 250, 330)).convert("L").save(b, "JPEG", quality=85)
    out.append(("gray", b.getvalue()))
    b = io.BytesIO()
    Image.fromarray(tiled("chelsea", 300, 420)).save(b, "JPEG", quality=80, restart_marker_rows=2)
    out.append(("restart markers", b.getvalue()))
    return out


def _pil(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("label,data", _jpegs(), ids=lambda v: v if isinstance(v, str) else "")
def test_decode_equals_pillow(jpeg, label, data):
    want = _pil(data)
    got = jpeg.decode_jpeg(data, want.shape[:2]).numpy()
    assert np.array_equal(got, want), label


@pytest.mark.parametrize("order,P,m,T", [("merge_grouped", 14, 2, 2), ("raster", 16, 1, 1),
                                          ("naflex", 16, 1, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8], ids=str)
@pytest.mark.parametrize("threads", [1, 2])
def test_equals_pillow_decode_then_resize(jpeg, order, P, m, T, dtype, threads):
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    lut = None if dtype == torch.uint8 else torch.from_numpy(
        rng.standard_normal((3, 256)).astype(np.float32)).to(dtype)
    q = P * m
    for k, (label, data) in enumerate(_jpegs()):
        pix = _pil(data)
        h, w = (q * int(v) for v in rng.integers(1, 12, 2))
        f = ("bicubic", "bilinear", "lanczos")[k % 3]
        n = (h // P) * (w // P) * 3 * P * P * T
        want = torch.zeros(n, dtype=dtype)
        jpeg.resize_normalize_patchify(torch.from_numpy(pix.copy()), (h, w), f, lut, want, 0, order, P, m, T)
        out = torch.full((n + 9,), 5, dtype=dtype)
        jpeg.set_num_threads(threads)
        try:
            why = jpeg.decode_resize_normalize_patchify(data, pix.shape[:2], (h, w), f, lut, out, 9,
                                                        order, P, m, T)
        finally:
            jpeg.set_num_threads(None)
        assert why == "", label
        assert torch.equal(out[9:].view(torch.uint8), want.view(torch.uint8)), f"seed {SEED}: {label} -> {h}x{w} {f}"
        assert bool((out[:9] == 5).all())


@pytest.mark.parametrize("threads", [1, 2])
def test_damaged_data_is_declined_with_a_reason(jpeg, threads):
    data = dict(_jpegs())["coffee 301x517 q50 s0"]
    out = torch.zeros(22 * 38 * 1176)
    jpeg.set_num_threads(threads)
    try:
        cases = {
            "truncated": (data[: len(data) // 2], "Premature end"),
            "not a JPEG": (b"GIF89a" + bytes(100), "Not a JPEG file"),
            "wrong probed size": (data, "not the probed size"),
        }
        for label, (d, match) in cases.items():
            hw = (300, 517) if label == "wrong probed size" else (301, 517)
            why = jpeg.decode_resize_normalize_patchify(d, hw, (308, 532), "bicubic", torch.randn(3, 256),
                                                        out, 0, "merge_grouped", 14, 2, 2)
            assert match in why, (label, why)
        with pytest.raises(RuntimeError, match="Premature end"):
            jpeg.decode_jpeg(data[: len(data) // 2], (301, 517))
    finally:
        jpeg.set_num_threads(None)


def test_bad_arguments_say_what_was_expected(jpeg):
    import torch as t
    out = t.zeros(4704)
    with pytest.raises(RuntimeError, match="expected the file's bytes as a contiguous 1-D uint8"):
        t.ops.vlmprep.decode_resize_normalize_patchify(t.zeros(10), 28, 28, 28, 28, "bicubic", None,
                                                       out.byte(), 0, "merge_grouped", 14, 2, 2, 1)
    with pytest.raises(RuntimeError, match="expected merge_grouped, raster or naflex, got tiles"):
        jpeg.decode_resize_normalize_patchify(b"x", (28, 28), (28, 28), "bicubic", None, out.byte(), 0,
                                              "tiles", 14)


def test_opcheck(jpeg):
    data = dict(_jpegs())["restart markers"]
    out = torch.zeros(8 * 588)
    torch.library.opcheck(torch.ops.vlmprep.decode_resize_normalize_patchify.default,
                          (torch.frombuffer(bytearray(data), dtype=torch.uint8), 300, 420, 28, 56,
                           "bicubic", torch.randn(3, 256), out, 0, "merge_grouped", 14, 2, 1, 1))
    torch.library.opcheck(torch.ops.vlmprep.decode_jpeg.default,
                          (torch.frombuffer(bytearray(data), dtype=torch.uint8), 300, 420))


_PIL_FILTERS = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR,
                "lanczos": Image.Resampling.LANCZOS}


def _canvas_cases(rng, H: int, W: int) -> list[tuple[tuple[int, int, int, int], tuple[int, int]]]:
    """(box, size) per canvas: the whole source resized (down, up, the same size), a large
    downscale (a thumbnail), and random crops inside the source."""
    cases = [((0, 0, H, W), (max(1, H * 3 // 5), max(1, W * 4 // 5))),
             ((0, 0, H, W), (H + 7, W + 3)), ((0, 0, H, W), (H, W)),
             ((0, 0, H, W), (max(1, H // 5), max(1, W // 5)))]
    for _ in range(2):
        t, x = int(rng.integers(0, H)), int(rng.integers(0, W))
        h, w = int(rng.integers(1, H - t + 1)), int(rng.integers(1, W - x + 1))
        cases.append(((t, x, h, w), (int(rng.integers(1, 2 * h + 2)), int(rng.integers(1, 2 * w + 2)))))
    return cases


@pytest.mark.parametrize("threads", [1, 2])
def test_decode_resize_equals_pillow_crop_then_resize(jpeg, threads):
    """Every canvas a box of the source resized: Pillow's decode, crop and resize, byte for byte,
    whether the boxes are resized after the decode (one thread) or beside it (two)."""
    rng = np.random.default_rng(SEED)
    for k, (label, data) in enumerate(_jpegs()):
        im = Image.open(io.BytesIO(data)).convert("RGB")
        H, W = im.size[1], im.size[0]
        cases = _canvas_cases(rng, H, W)
        f = ("bicubic", "bilinear", "lanczos")[k % 3]
        jpeg.set_num_threads(threads)
        try:
            got, why = jpeg.decode_resize(data, (H, W), [b for b, _ in cases], [s for _, s in cases], f)
        finally:
            jpeg.set_num_threads(None)
        assert why == "" and len(got) == len(cases), label
        for (t, x, h, w), (oh, ow) in cases:
            want = np.asarray(im.crop((x, t, x + w, t + h)).resize((ow, oh), _PIL_FILTERS[f]))
            g = got[cases.index(((t, x, h, w), (oh, ow)))]
            assert g.shape == (oh, ow, 3) and np.array_equal(g.numpy(), want), \
                f"seed {SEED}: {label} box {(t, x, h, w)} -> {(oh, ow)} {f}"


@pytest.mark.parametrize("threads", [1, 2])
def test_decode_resize_declines_damage_and_refuses_bad_boxes(jpeg, threads):
    data = dict(_jpegs())["coffee 301x517 q50 s0"]
    jpeg.set_num_threads(threads)
    try:
        got, why = jpeg.decode_resize(data[: len(data) // 2], (301, 517), [(0, 0, 301, 517)],
                                      [(448, 448)], "bicubic")
        assert got == [] and "Premature end" in why
        got, why = jpeg.decode_resize(data, (300, 517), [(0, 0, 300, 517)], [(28, 28)], "bicubic")
        assert got == [] and "not the probed size" in why
        with pytest.raises(RuntimeError, match="boxes height: expected an integer in"):
            jpeg.decode_resize(data, (301, 517), [(10, 0, 300, 517)], [(28, 28)], "bicubic")
        with pytest.raises(ValueError, match="one box per size"):
            jpeg.decode_resize(data, (301, 517), [], [], "bicubic")
    finally:
        jpeg.set_num_threads(None)


def test_decode_resize_opcheck(jpeg):
    data = dict(_jpegs())["restart markers"]
    torch.library.opcheck(torch.ops.vlmprep.decode_resize.default,
                          (torch.frombuffer(bytearray(data), dtype=torch.uint8), 300, 420,
                           [0, 0, 300, 420, 10, 20, 100, 200], [56, 84, 30, 40], "bicubic", 2))
