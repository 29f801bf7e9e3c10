"""The torch backend's GPU pipeline (vlmprep/backends/torch/gpu.py): a batch run stage by stage
(batched device JPEG decode, host decodes on threads into one staging block, grouped resizes,
one rows kernel call) gives the bits image by image gives.

On the CPU ``gpu.forced()`` runs the same code there (torchvision's CPU ``decode_jpeg`` stands
in for nvJPEG, an unpinned block for the pinned one), so everything but the device calls is
checked without a GPU; the ``gpu`` tests run it on cuda against the CPU.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from _support.imgdata import encode, tiled
from PIL import Image

import vlmprep
from vlmprep import backends
from vlmprep import kernels as vk
from vlmprep.backends.context import Context
from vlmprep.backends.torch import gpu
from vlmprep.backends.torch import ops as torch_ops
from vlmprep.backends.torch import resize as resize_mod
from vlmprep.backends.torch.resize import resize_like_pil
from vlmprep.backends.torch.staging import Staging
from vlmprep.io.inputs import Source


def _jpeg(rgb: np.ndarray, subsampling: int | None = None, **kw) -> bytes:
    buf = io.BytesIO()
    extra = {} if subsampling is None else {"subsampling": subsampling}
    Image.fromarray(rgb).save(buf, "JPEG", quality=90, **extra, **kw)
    return buf.getvalue()


COFFEE = tiled("coffee", 301, 517)
JPEG_420 = _jpeg(COFFEE)                          # host threads (chroma upsampled)
JPEG_444 = _jpeg(tiled("chelsea", 211, 97), 0)    # device decoder (no upsampling)
JPEG_GRAY = encode(tiled("astronaut", 120, 333), "jpeg_gray")  # device decoder
TRUNCATED = JPEG_420[: len(JPEG_420) // 2]        # fails at decode time (no EOI): an ImageError
NOT_AN_IMAGE = b"\xff\xd8\xffjunk"                # fails in the plan (probe)

#: Mixed formats and kinds; two equal-size JPEGs and two equal arrays (resize groups of 2), a
#: CPU tensor, and two bad items (errors="skip").
IMAGES = [JPEG_420, tiled("astronaut", 640, 203), encode(tiled("chelsea", 96, 1000), "png"),
          JPEG_444, NOT_AN_IMAGE, JPEG_GRAY, JPEG_420, TRUNCATED,
          torch.from_numpy(tiled("coffee", 64, 80)).permute(2, 0, 1).contiguous(),
          tiled("astronaut", 640, 203)]


@pytest.fixture
def seen(monkeypatch):
    """What the batched path did: the plans' decoders, and the images the device decoder got."""
    got: dict[str, list] = {"decoders": [], "device_decoded": []}
    plan_batch, device_decode = gpu.plan_batch, gpu.device_decode

    def spy_plan(*a, **k):
        p = plan_batch(*a, **k)
        got["decoders"].extend(p.decoders)
        return p

    def spy_decode(datas, device):
        got["device_decoded"].extend(datas)
        return device_decode(datas, device)
    monkeypatch.setattr(gpu, "plan_batch", spy_plan)
    monkeypatch.setattr(gpu, "device_decode", spy_decode)
    return got


def _same(got, want, what: str) -> None:
    assert got.seqlens == want.seqlens, what
    assert got.pixel_values.dtype == want.pixel_values.dtype, what
    assert torch.equal(got.pixel_values.view(torch.uint8), want.pixel_values.view(torch.uint8)), what
    assert sorted(got.errors) == sorted(want.errors), what
    assert {i: str(e) for i, e in got.errors.items()} == {i: str(e) for i, e in want.errors.items()}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8"])
@pytest.mark.parametrize("preset", vlmprep.presets.names())
def test_batched_equals_image_by_image(preset, dtype, seen):
    want = vlmprep.Processor(preset, dtype=dtype, errors="skip")(IMAGES)
    with gpu.forced():
        got = vlmprep.Processor(preset, dtype=dtype, errors="skip")(IMAGES)
    _same(got, want, f"{preset} {dtype}")
    assert sorted(got.errors) == [4, 7]  # the probe's and the decode's
    # the batch really went stage by stage, the two 4:4:4 / gray JPEGs through the device decoder
    # every 8-bit baseline JPEG is a candidate by its header (the truncated one too)
    assert seen["decoders"].count(gpu.DEVICE_JPEG) == 5
    assert sorted(seen["device_decoded"]) == sorted([JPEG_444, JPEG_GRAY])


def test_one_thread_decodes_in_the_calling_thread(seen):
    want = vlmprep.Processor("llava-next", errors="skip")(IMAGES)
    with gpu.forced(), vk.local_threads(1):
        got = vlmprep.Processor("llava-next", errors="skip")(IMAGES)
    _same(got, want, "llava-next, 1 thread")
    assert sorted(seen["device_decoded"]) == sorted([JPEG_444, JPEG_GRAY])


@pytest.mark.parametrize("preset", ["qwen2-vl", "qwen3-vl"])
def test_compact_rows(preset):
    """row_form='compact': the backend's own pipeline (temporal_patch_size 1) sizes the rows."""
    want = vlmprep.Processor(preset, row_form="compact", errors="skip")(IMAGES)
    with gpu.forced():
        got = vlmprep.Processor(preset, row_form="compact", errors="skip")(IMAGES)
    _same(got, want, f"{preset} compact")


def test_errors_raise_is_the_first_error():
    with pytest.raises(vlmprep.ImageError) as want:
        vlmprep.Processor("qwen2-vl")([JPEG_420, TRUNCATED, JPEG_444])
    with gpu.forced(), pytest.raises(vlmprep.ImageError) as got:
        vlmprep.Processor("qwen2-vl")([JPEG_420, TRUNCATED, JPEG_444])
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("preset", ["llava-next", "internvl", "idefics3", "qwen2-vl", "llava-1.5"])
def test_grouped_resizes_without_the_kernels(preset, monkeypatch):
    """Without the compiled ops every resize is ``resize_like_pil``: equal shapes go as one
    ``(N, C, H, W)`` call, and the output still equals image by image (op by op there)."""
    calls: list[int] = []

    def spy(img, hw, interpolation):
        calls.append(img.dim())
        return resize_like_pil(img, hw, interpolation)
    monkeypatch.setattr(vk, "available", lambda: False)
    want = vlmprep.Processor(preset, errors="skip")(IMAGES)
    monkeypatch.setattr(gpu, "resize_like_pil", spy)
    with gpu.forced():
        got = vlmprep.Processor(preset, errors="skip")(IMAGES)
    _same(got, want, preset)
    assert 4 in calls, f"{preset}: no grouped resize ran"


@pytest.mark.parametrize("rows_kernel", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
@pytest.mark.parametrize("preset", ["llava-next", "idefics3", "qwen2-vl", "gemma3"])
def test_the_cuda_path_emulated_is_pillows_pixels(preset, dtype, rows_kernel, monkeypatch, seen):
    """The batch as it runs on cuda, on the CPU: every resize is ``resize_like_pil`` with its
    Pillow-exact device resample (``resize.EXACT_ON_CPU``) on grouped stacks, whose CHW output
    the rows kernel gets through the stacked pixel-stride copies, in one call per batch
    (``rows_kernel``; else, as without a CUDA build, the lowerings); against the CPU's default
    (compiled Pillow-exact resize, rows kernel): the same bits."""
    want = vlmprep.Processor(preset, dtype=dtype, errors="skip")(IMAGES)
    calls: list[int] = []
    normalize_patchify = vk.normalize_patchify

    def spy(images, *a, **k):
        calls.append(len(images))
        return normalize_patchify(images, *a, **k)
    if rows_kernel:  # the compiled ops stay, their CPU resize does not
        monkeypatch.setattr(vk, "RESIZE_INTERPOLATIONS", ())
        monkeypatch.setattr(vk, "normalize_patchify", spy)
    else:
        monkeypatch.setattr(vk, "available", lambda: False)
    monkeypatch.setattr(resize_mod, "EXACT_ON_CPU", True)
    with gpu.forced():
        got = vlmprep.Processor(preset, dtype=dtype, errors="skip")(IMAGES)
    _same(got, want, f"{preset} {dtype}")
    assert sorted(seen["device_decoded"]) == sorted([JPEG_444, JPEG_GRAY])
    if rows_kernel:
        assert len(calls) == 1 and calls[0] >= 8  # every tile of the 8 good images, one call


def test_device_decoder_failing_falls_back_to_the_host(monkeypatch, seen):
    """A batch the device decoder refuses is decoded one by one; one it still refuses (or
    decodes to another size) is decoded on the host: same bits, no error."""
    import torchvision.io as tvio
    real = tvio.decode_jpeg
    refused = {JPEG_444}

    def flaky(data, **kw):
        if isinstance(data, list) and len(data) > 1:
            raise RuntimeError("batch failed")
        if bytes(data[0].numpy()) in refused:
            raise RuntimeError("this one failed")
        out = real(data, **kw)
        return [x[:, :-1] for x in out]  # a size other than the header's: the host decodes
    monkeypatch.setattr(tvio, "decode_jpeg", flaky)
    want = vlmprep.Processor("siglip", errors="skip")(IMAGES)
    with gpu.forced():
        got = vlmprep.Processor("siglip", errors="skip")(IMAGES)
    _same(got, want, "siglip")
    assert sorted(seen["device_decoded"]) == sorted([JPEG_444, JPEG_GRAY])


def test_plan_decoders():
    """Which decoder each input gets (the module's table): 8-bit baseline JPEGs with no EXIF
    rotation are device candidates by header, and ``device_jpeg`` keeps those whose frame has no
    chroma upsampling; everything else is decoded on the host."""
    from _support.imgdata import with_exif_orientation
    rotated = with_exif_orientation(tiled("coffee", 64, 48), 6)
    items = [JPEG_420, JPEG_444, JPEG_GRAY, encode(COFFEE, "jpeg_progressive"),
             encode(COFFEE, "jpeg_cmyk"), rotated, encode(COFFEE, "png"), COFFEE]
    proc = vlmprep.Processor("siglip")
    sources, plans = proc.prepare(items)
    jobs = [Context(s, p, torch.empty(0), "float32", "cpu") for s, p in zip(sources, plans)]
    plan = gpu.plan_batch(backends.get("torch")(proc.pipeline, "cpu", "float32"), jobs)
    assert plan.decoders == (gpu.DEVICE_JPEG,) * 3 + (gpu.HOST,) * 5
    assert plan.grouped_sizing and plan.own_decode
    # a tensor already on a device is used as it is (a meta tensor stands in for a cuda one)
    on_device = Source("tensor", torch.empty(3, 4, 4, dtype=torch.uint8, device="meta"), (4, 4),
                       None, "tensor")
    jobs = [Context(on_device, plans[0], torch.empty(0), "float32", "cpu")]
    assert gpu.plan_batch(backends.get("torch")(proc.pipeline, "cpu", "float32"),
                          jobs).decoders == (gpu.ON_DEVICE,)
    assert [gpu.device_jpeg(d) for d in (JPEG_420, _jpeg(COFFEE, 1), JPEG_444, JPEG_GRAY)] == \
        [False, False, True, True]
    # an APP14 Adobe segment (its transform flag is libjpeg's to read) goes to the host; the
    # word in EXIF text does not
    app14 = JPEG_444[:2] + b"\xff\xee\x00\x0eAdobe\x00\x64\x00\x00\x00\x00\x01" + JPEG_444[2:]
    exif = Image.Exif()
    exif[0x0131] = "Adobe Photoshop 25.0"
    assert not gpu.device_jpeg(app14)
    assert gpu.device_jpeg(_jpeg(tiled("chelsea", 211, 97), 0, exif=exif.tobytes()))


def test_chunks():
    assert gpu.chunks([4, 4, 4, 9, 1], 8) == [range(0, 2), range(2, 3), range(3, 4), range(4, 5)]
    assert gpu.chunks([1, 1, 1], 8) == [range(0, 3)]
    assert gpu.chunks([], 8) == []


def test_a_batch_in_chunks_matches(monkeypatch, seen):
    """A batch above CHUNK_BYTES runs chunk by chunk (each its own decode, groups, rows call)."""
    monkeypatch.setattr(gpu, "CHUNK_BYTES", 400_000)
    want = vlmprep.Processor("llava-onevision", errors="skip")(IMAGES)
    with gpu.forced():
        got = vlmprep.Processor("llava-onevision", errors="skip")(IMAGES)
    _same(got, want, "llava-onevision in chunks")
    assert len(seen["decoders"]) == 9  # every job planned once, over several chunks


def test_more_tiles_than_one_launch_takes(monkeypatch):
    """Past KERNEL_IMAGES tiles (the CUDA grid's 65535), the rows go in several calls."""
    calls: list[int] = []
    normalize_patchify = vk.normalize_patchify

    def spy(images, *a, **k):
        calls.append(len(images))
        return normalize_patchify(images, *a, **k)
    want = vlmprep.Processor("llava-next", errors="skip")(IMAGES)
    monkeypatch.setattr(gpu, "KERNEL_IMAGES", 4)
    monkeypatch.setattr(vk, "normalize_patchify", spy)
    with gpu.forced():
        got = vlmprep.Processor("llava-next", errors="skip")(IMAGES)
    _same(got, want, "llava-next, 4 tiles a call")
    assert len(calls) > 1 and max(calls) == 4


def test_resize_groups():
    assert gpu.resize_groups(["a", "b", "a", "c", "b"]) == [[0, 2], [1, 4], [3]]
    assert gpu.resize_groups([]) == []


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear", "bicubic", "lanczos"])
def test_resize_like_pil_on_a_stack_is_each_image(interpolation, seed):
    """What grouping relies on: resize_like_pil of an (N, C, H, W) stack is each image's
    resize, bit for bit (here on the CPU; the cuda test below covers the device)."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randint(0, 256, (3, 37, 53), dtype=torch.uint8, generator=g) for _ in range(3)]
    for hw in ((20, 91), (37, 20), (64, 53), (5, 7)):
        got = resize_like_pil(torch.stack(xs), hw, interpolation)
        for k, x in enumerate(xs):
            assert torch.equal(got[k], resize_like_pil(x, hw, interpolation)), (hw, k)


def test_resize_group_keeps_equal_sizes_and_matches_ops_resize(seed):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randint(0, 256, (3, 30, 40), dtype=torch.uint8, generator=g) for _ in range(2)]
    same = gpu.resize_group(xs, (30, 40), "bicubic")
    assert all(a is b for a, b in zip(same, xs))
    for a, x in zip(gpu.resize_group(xs, (17, 61), "bicubic"), xs):
        assert torch.equal(a, torch_ops.resize(x, (17, 61), "bicubic"))


def test_staging_offsets_growth_and_overflow():
    st = Staging("cpu", pin=False, limit=1000)
    st.begin(300)
    assert st.capacity == 300
    a = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    b = np.full((4, 5, 3), 7, np.uint8)
    assert st.reserve(a.size) == 0 and st.reserve(b.size) == 18
    st.put(0, a)
    st.put(18, b)
    assert st.reserve(300) is None  # does not fit: the caller copies that image itself
    dev = st.upload()
    assert dev is not None and dev.numel() == 18 + 60
    assert torch.equal(dev[:18].view(2, 3, 3), torch.from_numpy(a))
    assert torch.equal(dev[18:].view(4, 5, 3), torch.from_numpy(b))
    st.begin(700)  # grows (twice the old size at least), at most the limit, offsets reset
    assert st.capacity == 700 and st.used == 0 and st.reserve(10) == 0
    st.begin(5000)
    assert st.capacity == 1000
    st.begin(0)
    assert st.upload() is None


def test_a_batch_larger_than_the_block_still_matches(monkeypatch):
    """Images that do not fit the staging block go up from their own memory."""
    st = gpu.staging("cpu")
    monkeypatch.setattr(st, "limit", 50_000)
    want = vlmprep.Processor("qwen2-vl", errors="skip")(IMAGES)
    with gpu.forced():
        got = vlmprep.Processor("qwen2-vl", errors="skip")(IMAGES)
    _same(got, want, "qwen2-vl")
    assert st.capacity == 50_000
    assert gpu.staging("cpu") is st  # one per process and device


def test_a_failed_block_upload_goes_image_by_image(monkeypatch):
    """No room on the device for the whole block at once: each staged image goes up alone."""
    def no_room(self):
        raise torch.OutOfMemoryError("no room for the block")
    monkeypatch.setattr(Staging, "upload", no_room)
    want = vlmprep.Processor("internvl", errors="skip")(IMAGES)
    with gpu.forced():
        got = vlmprep.Processor("internvl", errors="skip")(IMAGES)
    _same(got, want, "internvl")


def test_fill_tensor_made_once():
    a = torch_ops.fill_tensor((1, 2, 3), torch.uint8, torch.device("cpu"))
    assert a is torch_ops.fill_tensor((1, 2, 3), torch.uint8, torch.device("cpu"))
    assert a.tolist() == [1, 2, 3]


def test_image_by_image_on_the_cpu_by_default():
    assert not gpu.batched("cpu") and gpu.batched("cuda") and gpu.batched("cuda:1")
    with gpu.forced():
        assert gpu.batched("cpu")
    assert not gpu.batched("cpu")


# -- on a GPU --------------------------------------------------------------------------------

#: Levels a device-decoded (nvJPEG: gray, 4:4:4) image's output may differ from the CPU's by.
#: Nothing is upsampled there, so only the IDCT's rounding can differ (torchvision's CPU decoder
#: and 4:4:4 nvJPEG were reported to match Pillow), and a 1-level input difference becomes at
#: most 2 after a filter with negative lobes (bicubic / lanczos weights sum to ~1.3 in absolute
#: value). bench/gpu_check.py's device-decode row measures the decode itself; if it is above
#: 1 level, leave gray / 4:4:4 out of gpu.DEVICE_SAMPLINGS rather than widen this.
DEVICE_DECODE_LEVELS = 2

HOST_DECODED = [x for k, x in enumerate(IMAGES) if k not in (3, 4, 5, 7)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8"])
@pytest.mark.parametrize("preset", vlmprep.presets.names())
def test_cuda_batched_matches_cpu(preset, dtype):
    """Host-decoded images on cuda give the CPU's bits: the same decoders, the Pillow-exact
    device resample (resize.py), the rows kernel with the CPU's lut; on a side stream."""
    on_device = torch.from_numpy(tiled("chelsea", 50, 70)).permute(2, 0, 1).contiguous()
    want = vlmprep.Processor(preset, dtype=dtype)(HOST_DECODED + [on_device])
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # the Processor's stream: a Batcher worker's own, say
        got = vlmprep.Processor(preset, device="cuda", dtype=dtype)(
            HOST_DECODED + [on_device.cuda()])  # a cuda tensor input is used where it is
    stream.synchronize()
    assert got.seqlens == want.seqlens
    if dtype == "uint8" or vk.build_info()["torch_ext"].get("cuda"):
        assert torch.equal(got.pixel_values.cpu().view(torch.uint8),
                           want.pixel_values.view(torch.uint8)), preset
    else:  # no CUDA rows kernel: normalize op by op there, mean / std divided on the device
        diff = (got.pixel_values.cpu().float() - want.pixel_values.float()).abs().max().item()
        assert diff <= (4.8e-7 if dtype == "float32" else 0.0313), f"{preset}: {diff}"
    block = gpu.staging("cuda").block
    assert block is not None and block.is_pinned()


@pytest.mark.gpu
@pytest.mark.parametrize("preset", vlmprep.presets.names())
def test_cuda_device_decoded_within_bound(preset, seen):
    items = [JPEG_444, JPEG_GRAY]
    want = vlmprep.Processor(preset, dtype="uint8")(items)
    got = vlmprep.Processor(preset, device="cuda", dtype="uint8")(items)
    assert sorted(seen["device_decoded"]) == sorted(items)  # nvJPEG really ran
    assert got.seqlens == want.seqlens
    diff = (got.pixel_values.cpu().int() - want.pixel_values.int()).abs().max().item()
    assert diff <= DEVICE_DECODE_LEVELS, f"{preset}: {diff} levels"


@pytest.mark.gpu
def test_cuda_device_decode_is_pillows_pixels():
    """nvJPEG on gray and 4:4:4 JPEGs (no chroma upsampling) against the host decoder."""
    from vlmprep.io import decode as io_decode
    from vlmprep.io.inputs import resolve
    got = gpu.device_decode([JPEG_444, JPEG_GRAY], torch.device("cuda"))
    for data, img in zip([JPEG_444, JPEG_GRAY], got):
        assert img is not None
        want = torch.from_numpy(io_decode.decode(resolve(data))).permute(2, 0, 1)
        diff = (img.cpu().int() - want.int()).abs().max().item()
        assert diff <= 1, diff  # the IDCT may round differently; E's gpu_check row measures it


@pytest.mark.gpu
def test_cuda_errors_skip_and_pinned_reuse():
    proc = vlmprep.Processor("qwen2-vl", device="cuda", errors="skip")
    first = proc(IMAGES)
    block = gpu.staging("cuda").block
    second = proc(IMAGES)
    assert sorted(first.errors) == sorted(second.errors) == [4, 7]
    assert gpu.staging("cuda").block is block  # reused, not made again
    assert torch.equal(first.pixel_values, second.pixel_values)
