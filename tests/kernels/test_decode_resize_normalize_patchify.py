"""The JPEG fast path (libjpeg-turbo, built where its headers are): ``decode_jpeg`` against
Pillow's decoder (the oracle: same library family, same settings), and
``decode_resize_normalize_patchify`` against Pillow's decode followed by
``resize_normalize_patchify`` (itself checked in test_resize_normalize_patchify), byte for
byte, on 1 and 2 threads (two: one thread decodes while the other writes the decoded bands);
damaged data is declined with libjpeg's reason, never a crash."""
from __future__ import annotations

import io
import os

import numpy as np
import pytest
import torch
from _support.imgdata import tiled
from _support.seed import SEED
from PIL import Image


@pytest.fixture
def jpeg(kernels):
    if not kernels.jpeg_available():
        if os.environ.get("VLMPREP_REQUIRE_KERNELS") and not os.environ.get("VLMPREP_NO_LIBJPEG"):
            pytest.fail("VLMPREP_REQUIRE_KERNELS is set but the JPEG fast path was not built: "
                        + str(kernels.build_info().get("torch_ext", {}).get("libjpeg_reason")))
        pytest.skip("built without libjpeg-turbo's headers")
    return kernels


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
