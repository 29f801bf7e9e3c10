"""Phi-4-multimodal (``phi4-multimodal``): geometry, masks, tokens, prompt, pixels and to_hf
against transformers 5.24's ``Phi4MultimodalImageProcessor`` (torchvision only: transformers has
no PIL class for it) and ``Phi4MultimodalProcessor``, built from the checkpoint's values
(vlmprep/presets/checkpoints/phi4-multimodal.json: dynamic_hd 36 and the class defaults).

Oracles: ``dynamic_preprocess`` itself over a sweep of sizes, its resize and pad replaced by
shape-only stand-ins (every size and mask decision is its code); ``_preprocess`` the same way for
``num_img_tokens`` and the per-crop masks; the real processor on black images of tiny, extreme
and threshold sizes; ``Phi4MultimodalProcessor`` with a word-level stand-in tokenizer for the
prompt; real photos (JPEG, PNG, WebP, arrays, tensors) for the pixels. ``match="torchvision"``
equals the processor bit for bit, every key, the global view included (the plan's
``Canvas.normalized``: the normalized canvas resized without antialias, as transformers does), in
float32, bfloat16 (that float32 rounded: the processor has no dtype argument) and uint8; the
default backends' figures are in docs/presets/phi4-multimodal.md.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _support.imgdata import crop, family_inputs, tiled
from hfref import CONFIGS, hf_outputs, hf_processor, tiny_tokenizer
from PIL import Image

import vlmprep
from vlmprep import ImageError
from vlmprep.plan import plan_image
from vlmprep.plan.phi4_multimodal import phi4_grid, phi4_hd_size, phi4_mask_valid

T, M = 448, 32
TOKEN = "<|endoftext10|>"
KEYS = {"image_pixel_values", "image_sizes", "image_attention_mask", "num_img_tokens"}


def _proc(**kw):
    return vlmprep.Processor.from_pretrained(str(CONFIGS / "phi4-multimodal.json"), **kw)


# -- geometry: a few hand-checked sizes ---------------------------------------------------------
# H x W -> (rows, cols, resized HxW, num_img_tokens)
TABLE = {(1, 1): (1, 1, (448, 448), 545), (448, 448): (1, 1, (448, 448), 545),
         (448, 449): (1, 2, (448, 449), 273 + 16 * 17 + 16),
         (1080, 1920): (3, 5, (1260, 2240), 3918),
         (2688, 2688): (6, 6, (2688, 2688), 273 + 96 * 96 + 96),
         (3000, 3000): (6, 6, (2688, 2688), 273 + 96 * 96 + 96),
         (100, 20000): (1, 36, (80, 16128), 273 + 3 * 576 + 3)}


@pytest.mark.parametrize("hw,want", TABLE.items())
def test_table(hw, want):
    rows, cols, resized, tokens = want
    p = plan_image(vlmprep.presets.get("phi4-multimodal"), hw)
    assert p.canvases[0].resize_hw == resized and p.canvases[0].hw == (rows * T, cols * T)
    assert p.canvases[1].resize_hw == (T, T) and p.canvases[1].parent == 0
    assert p.canvases[1].normalized and not p.canvases[0].normalized
    assert p.tiles == [(0, 0, T, T)] + [(r * T, c * T, T, T) for r in range(rows)
                                        for c in range(cols)]
    assert p.tile_canvas == [1] + [0] * (rows * cols)
    if tokens is not None:
        assert p.num_tokens == tokens
    assert p.placeholder == TOKEN * p.num_tokens and p.num_embeddings == p.num_tokens


def _sizes(rng, n=1000):
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 4000, (n, 2))]
    sizes += [(int(h), int(w)) for h, w in rng.integers(1, 60, (150, 2))]
    # the crop-count thresholds (multiples of 448 +- 1), 36 crops and beyond, the mask's patch
    # (padding of 13 / 14 / 15 pixels), the 10-pixel limit
    edge = (1, 9, 10, 11, 13, 14, 15, 433, 434, 435, 447, 448, 449, 896, 897, 1343, 1344, 1345,
            2687, 2688, 2689, 3136, 4032, 6000)
    sizes += [(h, w) for h in edge for w in edge]
    sizes += [(1, 1000), (1000, 1), (50, 16128), (16128, 50), (100, 20000), (13_377, 13_377)]
    return sizes


class _ShapeOnly:
    """``tvF`` for ``dynamic_preprocess``: resize and pad return zero tensors of the right shape."""

    def __init__(self):
        self.calls = []

    def resize(self, image, size):
        self.calls.append(tuple(size))
        return torch.zeros(1, dtype=torch.uint8).expand(3, *size)

    def pad(self, image, padding, fill):
        assert fill == [255, 255, 255] and padding[:2] == [0, 0]
        h, w = image.shape[-2:]
        return torch.zeros(1, dtype=torch.uint8).expand(3, h + padding[3], w + padding[2])


def _hf_dynamic(ip, hw, monkeypatch):
    """``dynamic_preprocess`` on a shape-only stand-in -> (resize size, padded size, mask) or the
    ValueError it raises."""
    from transformers.models.phi4_multimodal import image_processing_phi4_multimodal as mod
    fake = _ShapeOnly()
    monkeypatch.setattr(mod, "tvF", fake)
    stand_in = torch.zeros(1, dtype=torch.uint8).expand(3, *hw)
    try:
        img, mask = ip.dynamic_preprocess(stand_in, T, 14, M, max_num=ip.dynamic_hd)
    except ValueError:
        return None
    return fake.calls[0], tuple(img.shape[-2:]), mask


def _mask(p, op) -> torch.Tensor:
    """The full HD mask of a plan (what to_hf cuts into per-crop masks)."""
    rows, cols = p.canvases[0].hw[0] // T, p.canvases[0].hw[1] // T
    vr, vc = phi4_mask_valid(p.canvases[0].resize_hw, p.canvases[0].hw, op)
    full = torch.zeros(rows * M, cols * M)
    full[:vr, :vc] = 1
    return full


@pytest.mark.hf
def test_geometry_sweep_matches_transformers(seed, monkeypatch):
    """Resize size, padded canvas, the HD attention mask and num_img_tokens (transformers' own
    formula on its mask) over ~1,700 sizes; what transformers refuses is refused."""
    ip, pipe = hf_processor("phi4-multimodal", "torchvision"), vlmprep.presets.get("phi4-multimodal")
    refused = 0
    for hw in _sizes(np.random.default_rng(seed)):
        got = _hf_dynamic(ip, hw, monkeypatch)
        if got is None:
            with pytest.raises(ImageError, match="phi4_hd"):
                plan_image(pipe, hw)
            refused += 1
            continue
        (rh, rw), padded, mask = got
        p = plan_image(pipe, hw)
        assert p.canvases[0].resize_hw == (rh, rw) and p.canvases[0].hw == padded, hw
        assert torch.equal(_mask(p, pipe.sizing), mask), hw
        down = mask[0::2, 0::2]
        tokens = 256 + 1 + int(down.sum()) + int(down[:, 0].sum()) + 16
        assert p.num_tokens == tokens and p.num_embeddings == tokens, hw
        assert len(p.tiles) == 1 + mask.numel() // (M * M), hw
    assert 0 < refused < 150, refused


# sizes for the real processor: tiny, thin, thresholds, padding of 13 / 14 pixels, the largest
# grid (36 crops) and beyond it
REAL = [(1, 1), (10, 10), (11, 900), (900, 11), (435, 448), (434, 448), (448, 449), (449, 448),
        (897, 1345), (1080, 1920), (2688, 2688), (3000, 2000), (60, 4000)]


@pytest.mark.hf
def test_tiny_extreme_and_threshold_sizes_match_the_processor():
    """image_sizes, the per-crop masks (padded across the batch with ones), num_img_tokens and
    the shapes from the real processor on black images, one batch."""
    arrs = [np.zeros(hw + (3,), np.uint8) for hw in REAL]
    want = hf_outputs("phi4-multimodal", "torchvision", [Image.fromarray(a) for a in arrs])
    got = _proc(backend="reference", dtype="uint8")(arrs).to_hf()
    assert set(got) == set(want) == KEYS
    for k in KEYS - {"image_pixel_values"}:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    assert got["image_pixel_values"].shape == want["image_pixel_values"].shape == (13, 37, 3, T, T)


@pytest.mark.hf
def test_too_thin_is_refused_as_transformers_refuses():
    for hw in [(1, 150), (150, 1), (9, 448), (5, 7000)]:
        with pytest.raises(ValueError, match="extreme"):
            hf_outputs("phi4-multimodal", "torchvision", [Image.fromarray(np.zeros(hw + (3,),
                                                                                   np.uint8))])
        with pytest.raises(ImageError, match="towards a square"):
            plan_image(vlmprep.presets.get("phi4-multimodal"), hw)
    b = _proc(backend="reference", errors="skip")([np.zeros((1, 150, 3), np.uint8),
                                                   crop("chelsea", 97, 131)])
    assert list(b.errors) == [0] and b.to_hf()["image_pixel_values"].shape == (1, 2, 3, T, T)


def test_normalized_canvas_shape_is_checked():
    """check_sizing: a normalized canvas is a leaf, the whole parent resized, no padding, its
    tiles inside it, tiles kept as images (expected / got / fix)."""
    from vlmprep.plan import Canvas, Sizing, check_sizing
    pipe = vlmprep.presets.get("phi4-multimodal")
    hd = Canvas((448, 896))
    good = Sizing([hd, Canvas((T, T), parent=0, normalized=True)], [(0, 0, T, T), (0, 0, T, T)],
                  [1, 0])
    assert check_sizing(good, pipe.sizing, pipe) is good
    bad = [Sizing([hd, Canvas((T, T), parent=0, normalized=True, size=(T, T + 1))],
                  [(0, 0, T, T)], [1]),
           Sizing([hd, Canvas((T, T), parent=0, normalized=True, box=(0, 0, 10, 10))],
                  [(0, 0, T, T)], [1]),
           Sizing([hd, Canvas((T, T), parent=0, normalized=True), Canvas((T, T), parent=1)],
                  [(0, 0, T, T)], [2]),
           Sizing([hd, Canvas((T, T - 1), parent=0, normalized=True)], [(0, 0, T, T)], [1])]
    for sz in bad:
        with pytest.raises(ValueError, match=r"canvas 1 \(normalized\): expected a leaf.*got.*; "
                                             r"resize the parent"):
            check_sizing(sz, pipe.sizing, pipe)
    raster = vlmprep.presets.get("minicpm-v")
    with pytest.raises(ValueError, match="order 'raster'"):
        check_sizing(good, raster.sizing, raster)


def test_grid_and_config():
    assert phi4_grid(1080, 1920, T, 36) == (5, 3) and phi4_grid(1, 1, T, 36) == (1, 1)
    assert phi4_grid(3000, 3000, T, 36) == (6, 6) and phi4_grid(100, 20000, T, 36) == (36, 1)
    assert phi4_grid(3000, 3000, T, 4) == (2, 2)
    op = vlmprep.presets.get("phi4-multimodal").sizing
    assert phi4_hd_size(1080, 1920, op) == ((1260, 2240), (1344, 2240))  # type: ignore[arg-type]
    pipe = vlmprep.presets.from_config({"image_processor_type": "Phi4MultimodalImageProcessor",
                                        "dynamic_hd": 16, "resample": 2})
    assert pipe.sizing.dynamic_hd == 16 and pipe.sizing.global_interpolation == "bilinear"
    assert pipe.sizing.interpolation == "bilinear" and pipe.tile_hw == (T, T)
    assert vlmprep.presets.from_config(
        {"image_processor_type": "Phi4MultimodalImageProcessorFast"}) == vlmprep.presets.get(
        "phi4-multimodal")
    with pytest.raises(ValueError, match="square"):
        vlmprep.presets.from_config({"image_processor_type": "Phi4MultimodalImageProcessor",
                                     "size": {"height": 448, "width": 336}})
    with pytest.raises(ValueError, match="dynamic_hd"):
        vlmprep.ops.phi4_hd(dynamic_hd=0)


# -- the prompt ----------------------------------------------------------------------------------
def _tokenizer():
    return tiny_tokenizer(extra={"image_token": TOKEN, "audio_token": "<|endoftext11|>"})


def phi4_processor():
    from transformers import Phi4MultimodalFeatureExtractor, Phi4MultimodalProcessor
    return Phi4MultimodalProcessor(image_processor=hf_processor("phi4-multimodal", "torchvision"),
                                   audio_processor=Phi4MultimodalFeatureExtractor(),
                                   tokenizer=_tokenizer())


@pytest.mark.hf
def test_placeholder_equals_processor_expansion():
    """``Phi4MultimodalProcessor``: the prompt's one image token becomes num_img_tokens of them,
    the plan's placeholder; its image keys are the image processor's but num_img_tokens."""
    proc = phi4_processor()
    image = proc.tokenizer.convert_tokens_to_ids(TOKEN)
    arrs = [crop("astronaut", 301, 453), crop("chelsea", 37, 451), tiled("rocket", 1010, 1390)]
    plans = vlmprep.Processor("phi4-multimodal").plan(arrs).images
    out = proc(text=[f"describe {TOKEN} a {TOKEN} {TOKEN}"],
               images=[Image.fromarray(a) for a in arrs], return_tensors="pt")
    ids = out["input_ids"][0].tolist()
    assert ids.count(image) == sum(p.num_tokens for p in plans)
    assert len(ids) == 2 + sum(p.num_tokens for p in plans)
    # the Processor drops num_img_tokens (its count is the prompt's)
    assert set(out) >= KEYS - {"num_img_tokens"} and "num_img_tokens" not in out


# -- pixels and to_hf ------------------------------------------------------------------------------
def _inputs():
    return family_inputs()


# photos at sizes that stress the global view: tiny, thin both ways (the 10-pixel limit's
# neighbours), one crop exactly (448 x 448: the global view is the crop, transformers' resize
# returns it unchanged), two rows, and 9 crops of a 60-pixel strip
SIZES = [tiled("chelsea", 10, 10), tiled("coffee", 11, 900), tiled("hopper", 900, 11),
         tiled("astronaut", 448, 448), tiled("rocket", 449, 448), tiled("camera", 60, 4000)]


def _same(got: dict, want: dict, dtype: str) -> None:
    """Every key of the processor's output equal, the pixels bit for bit (bfloat16: the
    processor's float32 rounded, as the other families are compared)."""
    assert set(got) == set(want) == KEYS
    for k in KEYS:
        w, g = want[k], torch.as_tensor(got[k])
        if k == "image_pixel_values" and dtype == "bfloat16":
            w = w.to(torch.bfloat16)
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
        assert torch.equal(g, w), (k, float((g.double() - w.double()).abs().max()))


@pytest.mark.hf
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8"])
def test_match_torchvision_bit_exact(dtype):
    """match='torchvision': every key equal to the torchvision processor's, crops and global
    views bit for bit, on the family's mixed batch (encoded and in-memory photos) and on the
    tiny / thin / one-crop / strip sizes (uint8: the processor without rescale and normalize,
    whose global view is torch's uint8 resize without antialias)."""
    raw = dtype == "uint8"
    proc = _proc(backend="torch", match="torchvision", dtype=dtype)
    items, oracle = _inputs()
    _same(dict(proc(items).to_hf()), hf_outputs("phi4-multimodal", "torchvision", oracle, raw=raw),
          dtype)
    want = hf_outputs("phi4-multimodal", "torchvision", [Image.fromarray(a) for a in SIZES], raw=raw)
    _same(dict(proc(SIZES).to_hf()), want, dtype)


@pytest.mark.hf
def test_match_torchvision_36_crops_and_ratio_search():
    """The largest grids: 36 crops of a 100 x 20000 strip (80 x 16128 in a 448 x 16128 canvas)
    and a 3000 x 2000 photo past 36 crops (the closest-ratio grid), float32."""
    arrs = [tiled("coffee", 100, 20000), tiled("astronaut", 3000, 2000)]
    proc = _proc(backend="torch", match="torchvision")
    for a in arrs:
        _same(dict(proc([a]).to_hf()),
              hf_outputs("phi4-multimodal", "torchvision", [Image.fromarray(a)]), "float32")


@pytest.mark.hf
def test_match_torchvision_bilinear_global_view():
    """A config's ``resample`` is the global view's filter (2: bilinear, still without
    antialias on the normalized canvas); the HD resize stays tvF.resize's default."""
    import transformers
    from hfref import config

    from vlmprep.bench import hf as bench_hf
    cfg = {**config("phi4-multimodal"), "resample": 2}
    pipe = vlmprep.presets.from_config(cfg)
    assert pipe.sizing.global_interpolation == "bilinear"
    ip = transformers.Phi4MultimodalImageProcessor(**bench_hf.processor_kwargs(cfg, pipe))
    arrs = [crop("astronaut", 301, 453), tiled("rocket", 1010, 1390)]
    want = dict(ip([Image.fromarray(a) for a in arrs], return_tensors="pt"))
    _same(dict(vlmprep.Processor(pipe, match="torchvision")(arrs).to_hf()), want, "float32")


@pytest.mark.hf
def test_lanczos_global_view_is_refused_as_transformers_fails():
    """resample=1 (LANCZOS): torchvision refuses lanczos without antialias, so the processor
    fails on any image; vlmprep refuses the config (expected / got / fix)."""
    import transformers
    ip = transformers.Phi4MultimodalImageProcessor(resample=1)
    with pytest.raises(ValueError, match="antialias"):
        ip([Image.fromarray(crop("chelsea", 97, 131))], return_tensors="pt")
    with pytest.raises(ValueError, match=r"global_interpolation: expected .*got 'lanczos'; use"):
        vlmprep.presets.from_config({"image_processor_type": "Phi4MultimodalImageProcessor",
                                     "resample": 1})


def test_global_view_is_a_normalized_canvas_and_its_executor():
    """The plan marks the global view ``Canvas.normalized``; a normalized output runs it by
    fusion.NORMALIZED_CANVAS (whatever at_most allows), a uint8 output as any other plan."""
    from vlmprep.backends import fusion
    from vlmprep.backends.context import Context
    pipe = vlmprep.presets.get("phi4-multimodal")
    p = plan_image(pipe, (1080, 1920))
    assert [c.normalized for c in p.canvases] == [False, True]
    for dtype, want in (("float32", fusion.NORMALIZED_CANVAS), ("bfloat16", fusion.NORMALIZED_CANVAS),
                        ("uint8", None)):
        be = vlmprep.Processor(pipe, backend="torch", dtype=dtype)._backend
        ctx = Context(None, p, torch.empty(16, 3, T, T), dtype, "cpu")  # type: ignore[arg-type]
        with fusion.at_most(fusion.OP_BY_OP):
            how = fusion.choose(be.fusion, ctx)
        assert (how == fusion.NORMALIZED_CANVAS) == (want is not None), dtype


@pytest.mark.parametrize("backend,match", [("torch", "torchvision"), ("torch", "pil"),
                                           ("reference", "pil")])
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_executors_and_gpu_stages_agree(backend, match, dtype):
    """Op by op, the fused choice and (torch) the stage-by-stage GPU path forced on the CPU give
    the same bits, the global view included, in a batch mixed with another plan's images."""
    from vlmprep.backends import fusion
    from vlmprep.backends.torch import gpu
    arrs = [crop("astronaut", 301, 453), tiled("rocket", 1010, 1390), tiled("chelsea", 10, 10)]
    proc = _proc(backend=backend, match=match, dtype=dtype)
    want = proc(arrs).pixel_values
    with fusion.at_most(fusion.OP_BY_OP):
        assert torch.equal(proc(arrs).pixel_values, want)
    if backend == "torch":
        with gpu.forced():
            assert torch.equal(proc(arrs).pixel_values, want)


# measured over test_torchvision_match's ten-photo sweep and the SIZES above
# (docs/presets/phi4-multimodal.md): the crops within 2 levels (Pillow's bilinear vs
# torchvision's), the global view within 2 levels too (the same resize of a canvas that
# differs by those levels); mean under 0.03 level
@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_pillow_backends_against_the_processor(backend):
    items, oracle = _inputs()
    for dtype, raw in (("float32", False), ("uint8", True)):
        want = hf_outputs("phi4-multimodal", "torchvision", oracle, raw=raw)
        got = _proc(backend=backend, dtype=dtype)(items).to_hf()
        assert set(got) == KEYS
        for k in KEYS - {"image_pixel_values"}:
            assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
        level = 1.0 if raw else 2 / 255  # a level in the output's units (std 0.5)
        d = (got["image_pixel_values"].double() - want["image_pixel_values"].double()).abs() / level
        for part, x in (("crops", d[:, 1:]), ("global", d[:, 0])):
            assert float(x.max()) <= 2 + 1e-3 and float(x.mean()) <= 0.03, (
                dtype, part, float(x.max()), float(x.mean()))


def test_to_hf_errors_skip_and_batch_padding(seed):
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(10, 300)), int(rng.integers(10, 700)), 3),
                         dtype=np.uint8), tiled("coffee", 700, 1500)]
    proc = _proc(backend="reference", errors="skip")
    b = proc([imgs[0], b"junk", imgs[1]])
    assert list(b.errors) == [1] and b.num_tokens[1] == 0
    plans = proc.plan(imgs).images
    hf = b.to_hf()
    n = max(len(p.tiles) for p in plans)
    assert hf["image_pixel_values"].shape == (2, n, 3, T, T)
    assert hf["num_img_tokens"].tolist() == [p.num_tokens for p in plans]
    assert hf["image_sizes"].tolist() == [list(p.canvases[0].hw) for p in plans]
    k = len(plans[0].tiles)
    assert float(hf["image_pixel_values"][0, k:].abs().sum()) == 0
    assert bool((hf["image_attention_mask"][0, k:] == 1).all())
    assert b.num_embeddings == [plans[0].num_tokens, 0, plans[1].num_tokens]
    assert math.prod(hf["image_attention_mask"].shape) == 2 * n * M * M


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_dali_against_reference(dtype):
    """dali builds the global view in torch from its canvas (the normalize's lut, then
    resize_normalized): within 3 levels of the reference, crops and global view (measured 2)."""
    if "dali" not in vlmprep.backends.available():
        pytest.skip("dali backend not available here")
    arrs = [crop("astronaut", 301, 453), tiled("chelsea", 700, 1500), tiled("coffee", 60, 4000)]
    want = vlmprep.Processor("phi4-multimodal", backend="reference", dtype=dtype)(arrs)
    got = vlmprep.Processor("phi4-multimodal", backend="dali", dtype=dtype)(arrs)
    for k in ("image_sizes", "num_img_tokens", "image_attention_mask"):
        assert torch.equal(got.to_hf()[k].cpu(), want.to_hf()[k]), k
    level = 1.0 if dtype == "uint8" else 2 / 255
    d = (got.pixel_values.cpu().double() - want.pixel_values.double()).abs() / level
    assert float(d.max()) <= 3 + 1e-3 and float(d.mean()) <= 0.5, (float(d.max()), float(d.mean()))
