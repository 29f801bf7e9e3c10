"""``Processor(match="torchvision")`` against transformers' torchvision-backend processors (the
"fast" ones vLLM and SGLang run), bit for bit on the CPU, for every preset.

The default (``match="pil"``) matches the PIL-backend processors (the models' training pixels):
the photos below put the two transformers backends up to 15 levels apart, and the default's own
tests hold it to PIL. Here the oracle is the real ``<Family>ImageProcessor`` (torchvision
backend) built from the checkpoint config (tests/hfref.py), run on the same photos as PIL images;
every key of its output (pixels, grids, masks, sizes) must be equal, for float32 (rescale and
normalize fused, as transformers does), bfloat16 (that float32, rounded) and uint8
(``do_rescale=False, do_normalize=False``), by the fused executor and op by op.
"""
from __future__ import annotations

import io
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _support import figures
from _support.imgdata import crop, tiled
from hfref import CONFIGS, config, hf_outputs

import vlmprep
from vlmprep.backends import fusion, tv_exact
from vlmprep.backends.torch import tv_match
from vlmprep.bench import hf as bench_hf
from vlmprep.plan import plan_images

pytestmark = pytest.mark.hf

#: Presets match='torchvision' refuses (their sizing op is not ``torchvision_exact``): none
#: since Phi-4-multimodal's global view is a ``plan.Canvas.normalized`` canvas (issue 30).
NOT_EXACT: tuple[str, ...] = ()
PRESETS = [n for n in vlmprep.presets.names() if n not in NOT_EXACT]
#: Presets whose transformers processor has no PIL class (LFM2-VL): their levels figure is
#: vlmprep's reference backend (Pillow's resize) vs the torchvision processor.
NO_PIL = ("lfm2-vl", "llama4", "phi4-multimodal")

# Real photos: up- and downscales for every family, thin strips (down to one pixel), a tiny image,
# and two images of one shape (transformers resizes those as one stacked batch).
PHOTOS = [crop("astronaut", 301, 453), crop("hopper", 477, 389), crop("chelsea", 97, 131),
          crop("astronaut", 97, 131), crop("chelsea", 17, 451), crop("coffee", 5, 7),
          crop("chelsea", 1, 150), crop("chelsea", 150, 1), tiled("rocket", 1010, 1390)]
# The levels table (docs/how-to/vllm.md): photos at ten sizes, 97x131 to 2000x1500.
SWEEP = [crop("astronaut", 301, 453), crop("hopper", 477, 389), crop("chelsea", 97, 131),
         tiled("rocket", 1010, 1390), tiled("coffee", 1500, 2100), tiled("astronaut", 720, 1280),
         tiled("chelsea", 1080, 1920), tiled("camera", 2000, 1500), tiled("coffee", 333, 777),
         tiled("rocket", 640, 427)]


#: The pixels' key in the processors' outputs (Phi-4-multimodal: image_pixel_values).
PIXEL_KEYS = ("pixel_values", "image_pixel_values")


def _pv(out) -> torch.Tensor:
    """The pixels of a processor's or to_hf's output."""
    return next(out[k] for k in PIXEL_KEYS if k in out)


def _pil(arrs):
    from PIL import Image
    return [Image.fromarray(a) for a in arrs]


def _proc(preset: str, **kw) -> vlmprep.Processor:
    return vlmprep.Processor.from_pretrained(str(CONFIGS / f"{preset}.json"), match="torchvision",
                                             **kw)


def _assert_same(got: dict, want: dict, cast=None) -> None:
    """Every key of transformers' output equal in ``got`` (pixels bit for bit; ``cast``: the
    dtype transformers' pixels are compared in)."""
    assert set(got) == set(want), (set(got), set(want))
    for k, w in want.items():
        g = got[k]
        if not isinstance(w, torch.Tensor):
            assert g == w, k
            continue
        g = torch.as_tensor(g)
        if k in PIXEL_KEYS:
            w = w.to(cast) if cast is not None else w
            g = g.to(w.dtype)
        assert g.shape == w.shape, (k, g.shape, w.shape)
        assert torch.equal(g, w), (k, float((g.double() - w.double()).abs().max()))


def test_exactness_follows_the_op_declarations():
    """A preset is refused exactly when it is in NOT_EXACT (its sizing op not
    ``torchvision_exact``)."""
    for preset in vlmprep.presets.names():
        exact = vlmprep.presets.get(preset).sizing.name in tv_match.SIZING_OPS
        assert exact == (preset not in NOT_EXACT), preset
        if not exact:
            with pytest.raises(ValueError, match="match='pil'"):
                _proc(preset)


def _photos(preset: str) -> list:
    """PHOTOS the preset's processor takes: the plan's refusals left out (Phi-4-multimodal
    refuses, as transformers raises on, the 1 x 150 and 150 x 1 strips)."""
    plans = plan_images(vlmprep.presets.get(preset), [a.shape[:2] for a in PHOTOS])
    return [a for a, p in zip(PHOTOS, plans) if p.ok]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8"])
@pytest.mark.parametrize("preset", PRESETS)
def test_equals_torchvision_processor(preset, dtype):
    raw = dtype == "uint8"
    photos = _photos(preset)
    want = hf_outputs(preset, "torchvision", _pil(photos), raw=raw)
    got = dict(_proc(preset, dtype=dtype)(photos).to_hf())
    _assert_same(got, want, torch.bfloat16 if dtype == "bfloat16" else None)


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_levels_table(preset):
    """One photo at a time over ``SWEEP``: match='torchvision' equals the torchvision processor
    (uint8), and the figures of what it removes: transformers' PIL vs torchvision processors
    (max, mean and share of differing output values, padding included)."""
    n = diff = 0
    total, worst = 0.0, []
    for a in SWEEP:
        want = _pv(hf_outputs(preset, "torchvision", _pil([a]), raw=True))
        got = _pv(_proc(preset, dtype="uint8")([a]).to_hf())
        assert torch.equal(torch.as_tensor(got).to(want.dtype), want), a.shape
        if preset in NO_PIL:  # nothing to compare with: the figure is vs vlmprep's reference
            pil = _pv(vlmprep.Processor.from_pretrained(str(CONFIGS / f"{preset}.json"),
                                                        dtype="uint8", backend="reference")([a]).to_hf())
        else:
            pil = _pv(hf_outputs(preset, "pil", _pil([a]), raw=True))
        d = (torch.as_tensor(pil).double() - want.double()).abs()
        worst.append(int(d.max()))
        n, diff, total = n + d.numel(), diff + int((d > 0).sum()), total + float(d.sum())
    figures.record("transformers' PIL vs torchvision processor, levels (match='torchvision': 0)",
                   f"{preset}{' (vlmprep reference: no PIL class)' if preset in NO_PIL else ''}: "
                   f"max {max(worst)}, mean {total / n:.4f}, differing "
                   f"{100 * diff / n:.2f}% (per size {worst})")


def test_resize_memory_format(seed):
    """tv_match.resize passes HWC-memory images as they are: the same bits as transformers' call
    on the C-contiguous image, for random sizes, contents and every antialiased filter."""
    from torchvision.transforms.v2 import functional as F
    rng = np.random.default_rng(seed)
    for _ in range(40):
        h, w = (int(v) for v in rng.integers(1, 400, 2))
        out = tuple(int(v) for v in rng.integers(1, 400, 2))
        hwc = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        if rng.random() < 0.5:  # smooth content too
            hwc = (np.cumsum(hwc, axis=1, dtype=np.int64) // max(w, 1) % 256).astype(np.uint8)
        img = torch.from_numpy(hwc).permute(2, 0, 1)
        for interp in ("bilinear", "bicubic", "lanczos"):
            want = F.resize(img.contiguous(), list(out), interpolation=tv_match.MODES[interp],
                            antialias=True)
            assert torch.equal(tv_match.resize(img, out, interp), want), ((h, w), out, interp)


@pytest.mark.parametrize("preset", ["qwen2-vl", "internvl", "idefics3", "llava-next"])
def test_op_by_op_equals_fused(preset):
    """Every executor gives the same bits (the fused rows kernel's lut is this normalize)."""
    arrs = PHOTOS[:4]
    with fusion.at_most(fusion.OP_BY_OP):
        slow = _proc(preset)(arrs)
    assert torch.equal(slow.pixel_values, _proc(preset)(arrs).pixel_values)
    _assert_same(dict(slow.to_hf()), hf_outputs(preset, "torchvision", _pil(arrs)))


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_encoded_inputs(fmt):
    """Encoded files as vLLM loads them (PIL open + RGB): the decode path is the default's."""
    from PIL import Image
    blobs = []
    for a in PHOTOS[:3]:
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, fmt, quality=90) if fmt == "JPEG" else \
            Image.fromarray(a).save(buf, fmt)
        blobs.append(buf.getvalue())
    images = [Image.open(io.BytesIO(b)).convert("RGB") for b in blobs]
    for preset in ("qwen2-vl", "qwen3-vl"):
        _assert_same(dict(_proc(preset)(blobs).to_hf()),
                     hf_outputs(preset, "torchvision", images))


def test_gemma3_pan_and_scan():
    import transformers
    cfg = config("gemma3")
    pipe = vlmprep.presets.from_config(cfg).replace(do_pan_and_scan=True)
    kw = {**bench_hf.processor_kwargs(cfg, pipe), "do_pan_and_scan": True}
    want = dict(transformers.Gemma3ImageProcessor(**kw)(_pil(PHOTOS), return_tensors="pt"))
    proc = vlmprep.Processor(pipe, match="torchvision")
    assert len(proc.plan(PHOTOS).images[-1].tiles) > 1  # pan and scan did crop
    _assert_same(dict(proc(PHOTOS).to_hf()), want)


def test_nearest_override():
    """A non-default interpolation goes through transformers' mapping (NEAREST -> NEAREST_EXACT)."""
    import transformers
    cfg = config("siglip")
    pipe = vlmprep.presets.from_config(cfg).replace(interpolation="nearest")
    kw = {**bench_hf.processor_kwargs(cfg, pipe), "resample": 0}
    want = dict(transformers.SiglipImageProcessor(**kw)(_pil(PHOTOS), return_tensors="pt"))
    _assert_same(dict(vlmprep.Processor(pipe, match="torchvision")(PHOTOS).to_hf()), want)


def test_default_unchanged_and_plan_equal():
    """match only changes pixels: the default stays the torch backend's own class and every
    plan (sizes, tiles, tokens) is the same."""
    default, tv = vlmprep.Processor("internvl"), vlmprep.Processor("internvl", match="torchvision")
    assert default.match == "pil" and type(default._backend).__module__ == \
        "vlmprep.backends.torch"
    assert type(tv._backend) is tv_match.Backend and tv.backend_name == "torch"
    assert default.plan(PHOTOS) == tv.plan(PHOTOS)
    a, b = default(PHOTOS[:2]).pixel_values, tv(PHOTOS[:2]).pixel_values
    assert a.shape == b.shape and not torch.equal(a, b)


def test_settings_travel():
    proc = vlmprep.Processor("qwen2-vl", match="torchvision")
    assert "match='torchvision'" in repr(proc)
    assert "match" not in repr(vlmprep.Processor("qwen2-vl"))
    assert proc.clone(errors="skip").match == "torchvision"
    assert type(proc.clone(errors="skip")._backend) is tv_match.Backend
    assert proc.clone(match="pil").match == "pil"
    again = pickle.loads(pickle.dumps(proc))  # loader workers get the Processor pickled
    assert type(again._backend) is tv_match.Backend
    assert torch.equal(again(PHOTOS[:2]).pixel_values, proc(PHOTOS[:2]).pixel_values)


@pytest.mark.parametrize("kw, words", [
    (dict(match="bogus"), ["expected one of ('pil', 'torchvision')", "'bogus'"]),
    (dict(match="torchvision", backend="reference"),
     ["expected a backend that reproduces it", "backend='reference'", "use backend='torch'"]),
])
def test_refused_settings(kw, words):
    with pytest.raises(ValueError) as e:
        vlmprep.Processor("qwen2-vl", **kw)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_refused_device_and_unknown_sizing_op():
    """Never PIL pixels under match='torchvision': CUDA (transformers resizes in float there)
    and sizing ops not checked against a torchvision processor are refused (expected/got/fix)."""
    with pytest.raises(ValueError, match=r"expected device='cpu'.*got device='cuda'.*use device="):
        tv_match.Backend(vlmprep.presets.get("qwen2-vl"), "cuda", "float32")
    custom = SimpleNamespace(name="phi3v", ops=[SimpleNamespace(name="decode", sizing=False),
                                                SimpleNamespace(name="hd_tile", sizing=True)])
    with pytest.raises(ValueError, match=r"expected a pipeline whose sizing op.*got 'hd_tile'.*"
                                         r"match='pil'"):
        tv_match.Backend(custom, "cpu", "float32")  # type: ignore[arg-type]


def test_normalize_matches_transformers_fused_arithmetic():
    """The normalize alone on every level: transformers' fused rescale+normalize bits (the
    default's differs by a float ulp on some levels)."""
    from transformers.image_processing_backends import TorchvisionBackend
    op = vlmprep.presets.get("qwen2-vl").normalize
    levels = torch.arange(256, dtype=torch.uint8).view(1, 1, 256).expand(3, 1, 256).contiguous()
    want = TorchvisionBackend().rescale_and_normalize(
        levels, True, op.rescale, True, tuple(op.mean), tuple(op.std))
    got = tv_match.normalize_tensor(op, levels)
    assert torch.equal(got, want)
    lut = tv_match.normalize_levels(op, np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, 1))
    assert torch.equal(lut.t().reshape(3, 1, 256), want)


def test_resize_refuses_non_cpu_tensors():
    # a meta tensor stands in for CUDA: torch's antialiased CUDA resize has no lanczos and fails
    # on extreme one-axis downscales, so transformers' pixels are only made on the CPU
    from vlmprep.backends.torch import tv_match

    img = torch.empty((3, 100, 20000), dtype=torch.uint8, device="meta")
    with pytest.raises(ValueError, match="expected a CPU tensor"):
        tv_match.resize(img, (224, 224), "bicubic")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("preset,executor", [("qwen2-vl", None), ("internvl", fusion.DECODE_ROWS),
                                             ("llava-onevision", None), ("idefics3", None)])
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_fused_executors_on_jpeg_bytes(monkeypatch, preset, executor, threads, dtype):
    """The kernels resize in torchvision's arithmetic while they write the rows (RESIZE_ROWS at
    one kernel thread, DECODE_RESIZE_ROWS / DECODE_ROWS at two, from the JPEG bytes): the
    transformers torchvision processor's bits on Pillow's decode, and a fused executor ran."""
    from PIL import Image

    from vlmprep import kernels
    if not tv_exact.host_compiles("bicubic"):
        pytest.skip("the kernels' torchvision match does not stand in for tvF.resize on this host")
    blobs = []
    for a in PHOTOS[:3]:
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, "JPEG", quality=90)
        blobs.append(buf.getvalue())
    chosen = []
    real = fusion.choose
    monkeypatch.setattr(fusion, "choose", lambda *a, **k: chosen.append(real(*a, **k)) or chosen[-1])
    old = kernels.get_num_threads()
    kernels.set_num_threads(threads)
    try:  # one image a call: in a batch the images run side by side, one kernel thread each
        got = [dict(_proc(preset, dtype=dtype)([b]).to_hf()) for b in blobs]
    finally:
        kernels.set_num_threads(old)
    for g, b in zip(got, blobs):
        _assert_same(g, hf_outputs(preset, "torchvision", [Image.open(io.BytesIO(b)).convert("RGB")],
                                   raw=dtype == "uint8"))
    fused_ones = {fusion.RESIZE_ROWS, fusion.DECODE_RESIZE_ROWS, fusion.DECODE_ROWS}
    if executor is not None and threads >= 2:
        assert set(chosen) == {executor}, chosen
    elif preset == "qwen2-vl":
        assert set(chosen) == {fusion.RESIZE_ROWS if threads == 1 else fusion.DECODE_RESIZE_ROWS}, chosen
    else:
        assert chosen and set(chosen) <= fused_ones | {fusion.ROWS}, chosen
