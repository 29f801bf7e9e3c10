"""The fused kernel path changes no bit: every preset and dtype, the reference backend with the
compiled ops equals its pure numpy path; the torch backend on the CPU (compiled Pillow-exact
resize + fused rows) equals it too in uint8, and in float within the ~1 ulp its own normalize
formula differs by (rescale folded into mean/std, as transformers' torchvision backend)."""
from __future__ import annotations

import pytest
import torch
from _support.imgdata import encode, tiled

import vlmprep
from vlmprep import kernels as vk
from vlmprep.backends import fused

IMAGES = [encode(tiled("coffee", 301, 517), "jpeg"), tiled("astronaut", 640, 203),
          encode(tiled("chelsea", 96, 1000), "png")]


@pytest.fixture
def pure(monkeypatch):
    """Run a callable with the kernels off (the backends' pure implementations)."""
    def run(fn):
        with monkeypatch.context() as m:
            m.setattr(fused, "usable", lambda ctx: False)
            m.setattr(vk, "available", lambda: False)
            return fn()
    return run


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8"])
@pytest.mark.parametrize("preset", vlmprep.presets.names())
def test_fused_equals_pure(kernels, pure, preset, dtype):
    want = pure(lambda: vlmprep.Processor(preset, backend="reference", dtype=dtype)(IMAGES))
    for backend in ("reference", "torch"):
        got = vlmprep.Processor(preset, backend=backend, dtype=dtype)(IMAGES)
        assert got.pixel_values.dtype == want.pixel_values.dtype
        assert got.seqlens == want.seqlens
        if backend == "reference" or dtype == "uint8":
            assert torch.equal(got.pixel_values.view(torch.uint8),
                               want.pixel_values.view(torch.uint8)), f"{preset} {dtype} {backend}"
        else:
            # Same pixels, another float formula: 1 float32 ulp (|x| < 4 -> 4.8e-7), and for
            # bfloat16 the rare value that lands on the other side of a rounding boundary.
            diff = (got.pixel_values.float() - want.pixel_values.float()).abs()
            ulp = 4.8e-7 if dtype == "float32" else 0.0313
            assert diff.max().item() <= ulp, f"{preset} {dtype}: {diff.max().item()}"



@pytest.mark.parametrize("dtype", ["float32", "uint8"])
@pytest.mark.parametrize("preset", ["qwen2-vl", "pixtral", "siglip2-naflex"])
def test_deferred_resize_changes_no_bit(kernels, monkeypatch, preset, dtype):
    """On the CPU, plans that resize the whole source into one tile leave the resize to the
    kernel that writes the rows (fused.Deferred): the output equals the torch backend's
    resize-then-write path bit for bit, and the deferral really happens."""
    seen = []
    write_rows = fused.write_rows

    def spy(tiles, *a):
        seen.append(type(tiles[0]).__name__)
        return write_rows(tiles, *a)
    monkeypatch.setattr(fused, "write_rows", spy)
    got = vlmprep.Processor(preset, dtype=dtype)(IMAGES)
    assert seen == ["Deferred"] * len(IMAGES)
    monkeypatch.setattr(fused, "deferrable", lambda ctx, interpolation: False)
    seen.clear()
    want = vlmprep.Processor(preset, dtype=dtype)(IMAGES)
    assert "Deferred" not in seen
    assert got.seqlens == want.seqlens
    assert torch.equal(got.pixel_values.view(torch.uint8), want.pixel_values.view(torch.uint8))


def test_tiles_layout_presets_keep_the_canvas_executor(kernels):
    """Tiling presets (crops, padding, several canvases; the tiles layout) never defer."""
    seen = []
    write_rows = fused.write_rows
    try:
        fused.write_rows = lambda tiles, *a: (seen.append(type(tiles[0]).__name__), write_rows(tiles, *a))
        vlmprep.Processor("llava-1.5")(IMAGES[:1])
        vlmprep.Processor("internvl")(IMAGES[:1])
    finally:
        fused.write_rows = write_rows
    assert seen and "Deferred" not in seen


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
@pytest.mark.parametrize("preset", ["qwen2-vl", "pixtral", "siglip2-naflex"])
def test_deferred_jpeg_decode_changes_no_bit(kernels, monkeypatch, preset, dtype):
    """With two threads for an image, an 8-bit JPEG's decode is left to the kernel as well
    (fused.Encoded): one call per image, equal bit for bit to the one-thread path (torchvision
    decode, then resize_normalize_patchify). Other inputs (PNG, arrays) are decoded first."""
    if not vk.jpeg_available():
        pytest.skip("built without libjpeg-turbo's headers")
    seen = []
    write_rows = fused.write_rows

    def spy(tiles, *a):
        d = tiles[0]
        seen.append(type(d.image).__name__ if isinstance(d, fused.Deferred) else type(d).__name__)
        return write_rows(tiles, *a)
    monkeypatch.setattr(fused, "write_rows", spy)
    proc = vlmprep.Processor(preset, dtype=dtype)
    for img in IMAGES:
        vk.set_num_threads(2)
        try:
            got = proc([img])
        finally:
            vk.set_num_threads(None)
        with vk.local_threads(1):
            want = proc([img])
        assert got.seqlens == want.seqlens
        assert torch.equal(got.pixel_values.view(torch.uint8), want.pixel_values.view(torch.uint8))
    # per image: (2 threads, 1 thread); only the JPEG bytes (IMAGES[0]) go undecoded
    assert seen == ["Encoded", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor"]


def test_damaged_jpeg_on_the_deferred_path_is_the_same_error(kernels):
    """Data the kernel declines is decoded by the decode lowering's own path, which reports it:
    a truncated JPEG fails that image only, with the message of the one-thread path."""
    if not vk.jpeg_available():
        pytest.skip("built without libjpeg-turbo's headers")
    cut = IMAGES[0][: len(IMAGES[0]) * 2 // 3]
    proc = vlmprep.Processor("qwen2-vl", errors="skip")
    vk.set_num_threads(2)
    try:
        b2 = proc([cut])
        good = proc([IMAGES[0]])
    finally:
        vk.set_num_threads(None)
    with vk.local_threads(1):
        b1 = proc([cut])
    assert list(b2.errors) == [0] and str(b2.errors[0]) == str(b1.errors[0])
    assert "truncated or corrupt" in str(b2.errors[0])
    assert good.errors == {} and good.pixel_values.shape[0] > 0
