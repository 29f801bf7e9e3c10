"""The fused executors (vlmprep.backends.fusion) change no bit: every preset and dtype, the
reference backend with the compiled ops equals its pure numpy path (fusion.OP_BY_OP); the torch
backend on the CPU (compiled Pillow-exact resize + fused rows) equals it too in uint8, and in float
within the ~1 ulp its own normalize formula differs by (rescale folded into mean/std, as
transformers' torchvision backend)."""
from __future__ import annotations

import threading

import pytest
import torch
from _support.imgdata import encode, tiled
from _support.spies import record_returns

import vlmprep
from vlmprep import kernels as vk
from vlmprep.backends import fusion

IMAGES = [encode(tiled("coffee", 301, 517), "jpeg"), tiled("astronaut", 640, 203),
          encode(tiled("chelsea", 96, 1000), "png")]


@pytest.fixture
def pure(monkeypatch):
    """Run a callable with the kernels off (the backends' pure implementations)."""
    def run(fn):
        with monkeypatch.context() as m, fusion.at_most(fusion.OP_BY_OP):
            m.setattr(vk, "available", lambda: False)
            return fn()
    return run


@pytest.fixture
def chosen(monkeypatch):
    """The executors ``fusion.choose`` picks, one per image, in order."""
    return record_returns(monkeypatch, fusion, "choose")


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
def test_resize_rows_changes_no_bit(kernels, chosen, preset, dtype):
    """On the CPU, plans that resize the whole source into one tile leave the resize to the
    kernel that writes the rows (fusion.RESIZE_ROWS): the output equals the torch backend's
    resize-then-write path (ROWS) bit for bit, and the fused resize really runs."""
    with vk.local_threads(1):  # one thread: no JPEG decode in the kernel
        got = vlmprep.Processor(preset, dtype=dtype)(IMAGES)
        assert chosen == [fusion.RESIZE_ROWS] * len(IMAGES)
        chosen.clear()
        with fusion.at_most(fusion.ROWS):
            want = vlmprep.Processor(preset, dtype=dtype)(IMAGES)
    assert chosen == [fusion.ROWS] * len(IMAGES)
    assert got.seqlens == want.seqlens
    assert torch.equal(got.pixel_values.view(torch.uint8), want.pixel_values.view(torch.uint8))


def test_tiles_layout_presets_keep_the_canvas_executor(kernels, chosen):
    """Tiling presets (crops, padding, several canvases; the tiles layout) never resize in the
    rows kernel: the canvases are built first, then the rows kernel writes them. With two
    threads an InternVL JPEG's canvases (source boxes) are resized beside its decode
    (`DECODE_ROWS`); LLaVA-1.5's padded canvas is not a source box."""
    with vk.local_threads(1):
        vlmprep.Processor("llava-1.5")(IMAGES[:1])
        vlmprep.Processor("internvl")(IMAGES[:1])
    assert chosen == [fusion.ROWS, fusion.ROWS]
    if not vk.jpeg_available():
        return
    chosen.clear()
    vk.set_num_threads(2)
    try:
        vlmprep.Processor("llava-1.5")(IMAGES[:1])
        got = vlmprep.Processor("internvl")(IMAGES[:1])
        with fusion.at_most(fusion.ROWS):
            want = vlmprep.Processor("internvl")(IMAGES[:1])
    finally:
        vk.set_num_threads(None)
    assert chosen == [fusion.ROWS, fusion.DECODE_ROWS, fusion.ROWS]
    assert torch.equal(got.pixel_values, want.pixel_values)


def test_no_normalize_float_runs_op_by_op(kernels, chosen):
    """A float pipeline without normalize has no lut: op by op (the uint8 levels as floats),
    equal to the reference."""
    p = vlmprep.presets.get("qwen2-vl")
    pipe = vlmprep.Pipeline([op for op in p.ops if op.name != "normalize"], name="raw")
    got = vlmprep.Processor(pipe, backend="torch")(IMAGES[1:2])
    assert chosen == [fusion.OP_BY_OP]
    want = vlmprep.Processor(pipe, backend="torch", dtype="uint8")(IMAGES[1:2])
    assert torch.equal(got.pixel_values, want.pixel_values.float())


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
@pytest.mark.parametrize("preset", ["qwen2-vl", "pixtral", "siglip2-naflex"])
def test_decode_resize_rows_changes_no_bit(kernels, chosen, preset, dtype):
    """With two threads for an image, an 8-bit JPEG's decode is left to the kernel as well
    (fusion.DECODE_RESIZE_ROWS): one call per image, equal bit for bit to the one-thread path
    (decode, then resize_normalize_patchify). Other inputs (PNG, arrays) are decoded first."""
    if not vk.jpeg_available():
        pytest.skip("built without libjpeg-turbo's headers")
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
    assert chosen == [fusion.DECODE_RESIZE_ROWS] + [fusion.RESIZE_ROWS] * 5


def test_rules_per_pipeline():
    """The pipeline's part of fusion's table: which executors a backend instance may choose."""
    torch_be, ref_be = vlmprep.backends.get("torch"), vlmprep.backends.get("reference")
    qwen = vlmprep.presets.get("qwen2-vl")
    raw = vlmprep.Pipeline([op for op in qwen.ops if op.name != "normalize"], name="raw")
    # the last field: the output is normalized after the sizing op (NORMALIZED_CANVAS's half)
    assert torch_be(qwen, "cpu", "float32").fusion == fusion.Rules(True, True, "bicubic", True, True)
    assert torch_be(qwen, "cuda", "float32").fusion == fusion.Rules(True, False, "bicubic", False,
                                                                    True)
    assert ref_be(qwen, "cpu", "float32").fusion == fusion.Rules(True, False, "bicubic", False, True)
    ivl = torch_be(vlmprep.presets.get("internvl"), "cpu", "uint8").fusion
    assert ivl.resize_rows is False and ivl.decode_rows is True and ivl.normalizes is False
    assert torch_be(raw, "cpu", "float32").fusion == fusion.Rules(False, False, "bicubic", False)
    assert torch_be(raw, "cpu", "uint8").fusion == fusion.Rules(True, True, "bicubic", True)


def _decode_rows_output(preset: str, dtype: str, data: bytes, threads: int) -> torch.Tensor:
    """The rows fused.decode_rows (`DECODE_ROWS`) writes for one image, as base.run_image calls
    it: the torch backend's decode op, interpolation and lut, a fresh output of the plan's rows."""
    from vlmprep import backends
    from vlmprep.backends import fused
    from vlmprep.backends.context import Context
    from vlmprep.io.inputs import resolve
    from vlmprep.plan import plan_images
    pipe = vlmprep.presets.get(preset)
    be = backends.get("torch")(pipe, "cpu", dtype)
    src = resolve(data)
    (plan,) = plan_images(pipe, [src.hw])
    want = vlmprep.Processor(preset, backend="torch", dtype=dtype)([data]).pixel_values
    ctx = Context(src, plan, None, dtype, "cpu")  # type: ignore[arg-type]
    ctx.dest = torch.full_like(want, 7)
    assert fusion._source_canvases(ctx, be.fusion.interpolation)
    with vk.local_threads(threads):
        fused.decode_rows(src, be.decode_op, be.fusion.interpolation, be.lut(ctx), ctx,
                          pipe.patchify)
    return ctx.dest


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
@pytest.mark.parametrize("preset", ["internvl", "qwen2-vl"])
def test_decode_rows_changes_no_bit(kernels, preset, dtype, threads):
    """`DECODE_ROWS` (the JPEG decode beside the canvases' resize, then the tiles' rows) writes
    the bytes of the torch backend's decode-then-canvases path: InternVL's tile canvas and
    thumbnail, Qwen's whole-image resize; a JPEG the kernel declines for what it is (progressive
    is taken; CMYK is not) goes through Pillow with the same result."""
    if not vk.jpeg_available():
        pytest.skip("built without libjpeg-turbo's headers")
    import io

    from PIL import Image
    cmyk = io.BytesIO()
    Image.fromarray(tiled("coffee", 260, 390)).convert("CMYK").save(cmyk, "JPEG", quality=90)
    for data in (IMAGES[0], encode(tiled("astronaut", 700, 1500), "jpeg"), cmyk.getvalue()):
        with vk.local_threads(1):  # ROWS: decode, canvases, rows
            want = vlmprep.Processor(preset, backend="torch", dtype=dtype)([data]).pixel_values
        got = _decode_rows_output(preset, dtype, data, threads)
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), (preset, dtype)


def test_decode_rows_declines_damage(kernels):
    if not vk.jpeg_available():
        pytest.skip("built without libjpeg-turbo's headers")
    from vlmprep.errors import ImageError
    data = IMAGES[0]
    with pytest.raises(ImageError):
        _decode_rows_output("internvl", "uint8", data[: len(data) * 2 // 3], 2)


def test_at_most_is_checked():
    with pytest.raises(ValueError, match="expected one of"):
        with fusion.at_most("fused"):
            pass


def test_at_most_is_per_context_and_reaches_the_image_threads(monkeypatch):
    """The cap holds for the images a call runs on its threads (submitted in a copy of the
    caller's context) and not for another thread running beside the block."""
    if not vk.available():
        pytest.skip("no kernels: every choice is OP_BY_OP")
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    chosen = record_returns(monkeypatch, fusion, "choose")
    vk.set_num_threads(2)
    try:
        with fusion.at_most(fusion.OP_BY_OP):
            beside: list[str] = []
            t = threading.Thread(target=lambda: beside.append(fusion._CAP.get()))
            t.start()
            t.join()
            proc(IMAGES)
        capped = list(chosen)
        chosen.clear()
        proc(IMAGES)
    finally:
        vk.set_num_threads(None)
    assert beside == [fusion.DECODE_RESIZE_ROWS]
    assert len(capped) == len(IMAGES) and set(capped) == {fusion.OP_BY_OP}, capped
    assert fusion.OP_BY_OP not in chosen, chosen


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
