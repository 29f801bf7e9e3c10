"""LFM2-VL (``lfm2-vl``): geometry, prompt, pixels and to_hf against transformers 5.24's
``Lfm2VlImageProcessor`` (torchvision only: transformers has no PIL class for it) and
``Lfm2VlProcessor``, built from the checkpoint's values (vlmprep/presets/checkpoints/lfm2-vl.json,
LiquidAI/LFM2-VL-1.6B's processor_config.json).

Oracles: ``Lfm2VlImageProcessor.resize_and_split`` itself over a sweep of sizes, its resizes
replaced by shape-only stand-ins (every size decision is its code); the real processor on black
images of tiny and extreme sizes; ``Lfm2VlProcessor`` with a word-level stand-in tokenizer for the
prompt; real photos (JPEG, PNG, WebP) for the pixels: ``match="torchvision"`` bit-exact, the
reference and plain torch backends (Pillow's bilinear) within 1 level.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.imgdata import crop, family_inputs, tiled
from hfref import CONFIGS, config, hf_outputs, hf_processor, tiny_tokenizer

import vlmprep
from vlmprep import ImageError
from vlmprep.plan import plan_image
from vlmprep.plan.lfm2_vl import lfm2_grid, lfm2_placeholder, lfm2_smart_resize

T = 512
SPECIAL = ["<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"] + [
    f"<|img_row_{r}_col_{c}|>" for r in range(1, 11) for c in range(1, 11)]
# the 1.6B checkpoint (the preset), the 450M (tolerance 2.0, no thumbnail), no splitting
VARIANTS = {"1.6B": {}, "450M": {"max_pixels_tolerance": 2.0, "use_thumbnail": False},
            "nosplit": {"do_image_splitting": False}}


def _proc(**kw):
    return vlmprep.Processor.from_pretrained(str(CONFIGS / "lfm2-vl.json"), **kw)


def _pipe(variant: str):
    return vlmprep.presets.from_config({**config("lfm2-vl"), **VARIANTS[variant]})


# -- geometry: a few hand-checked sizes --------------------------------------------------------
# H x W -> (rows, cols, thumbnail HxW or the one tile, num_embeddings, num_tokens) for the 1.6B
TABLE = {(1, 1): (1, 1, (256, 256), 64, 66), (500, 500): (1, 1, (512, 512), 256, 258),
         (608, 608): (1, 1, (512, 512), 256, 258), (627, 627): (2, 2, (512, 512), 1280, 1287),
         (1080, 1920): (2, 4, (384, 672), 2300, 2311), (1, 150): (1, 1, (32, 3136), 98, 100),
         (40, 4000): (1, 1, (32, 4000), 125, 127),
         (200, 8000): (1, 10, (64, 3232), 2762, 2775),
         (13_377, 13_377): (3, 3, (512, 512), 2560, 2572)}


@pytest.mark.parametrize("hw,want", TABLE.items())
def test_table(hw, want):
    rows, cols, small, emb, tokens = want
    p = plan_image(vlmprep.presets.get("lfm2-vl"), hw)
    assert (p.num_embeddings, p.num_tokens) == (emb, tokens)
    assert p.placeholder.count("<image>") == emb
    if rows == cols == 1:
        assert p.tiles == [(0, 0) + small] and p.canvases[0].resize_hw == small
        return
    grid = [(r * T, c * T, T, T) for r in range(rows) for c in range(cols)]
    assert p.tiles == grid + [(0, 0) + small] and p.tile_canvas == [0] * len(grid) + [1]
    assert [c.resize_hw for c in p.canvases] == [(rows * T, cols * T), small]
    assert p.grid_thw == [(1, 32, 32)] * len(grid) + [(1, small[0] // 16, small[1] // 16)]


def _sizes(rng, n=1200):
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 5000, (n, 2))]
    sizes += [(int(h), int(w)) for h, w in rng.integers(1, 80, (200, 2))]
    # around the smart-resize bounds (256^2, 512^2), the tolerance (1.5: ~627^2, 2.0: ~724^2),
    # the rounding to 32 (x16 +- 1), tile multiples and aspect ties
    edge = (1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 49, 255, 256, 257, 511, 512, 513, 607, 608,
            623, 624, 625, 626, 627, 640, 719, 720, 724, 736, 1023, 1024, 1025, 2048, 5120)
    sizes += [(h, w) for h in edge for w in edge]
    sizes += [(1, 1000), (1000, 1), (1, 1024), (3, 1100), (40, 4000), (13_377, 13_377)]
    return sizes


def _hf_split(ip, hw):
    """``resize_and_split`` on a shape-only stand-in, its resizes recorded -> (resize sizes in
    call order, tile shapes in output order, rows, cols, image_sizes)."""
    from transformers.image_processing_backends import TorchvisionBackend
    calls = []

    def resize(self, image, size, **kw):
        calls.append((size.height, size.width))
        return torch.zeros(1, dtype=torch.uint8).expand(image.shape[0], 3, size.height, size.width)

    real, TorchvisionBackend.resize = TorchvisionBackend.resize, resize
    try:
        stand_in = torch.zeros(1, dtype=torch.uint8).expand(1, 3, *hw)
        kw = {k: getattr(ip, k) for k in (
            "downsample_factor", "min_tiles", "max_tiles", "use_thumbnail", "min_image_tokens",
            "max_image_tokens", "encoder_patch_size", "tile_size", "max_pixels_tolerance")}
        if not ip.do_image_splitting:
            kw.update(min_tiles=1, max_tiles=1)
        images, rows, cols, sizes = ip.resize_and_split(stand_in, resample=ip.resample, **kw)
    finally:
        TorchvisionBackend.resize = real
    return calls, [tuple(t.shape[-2:]) for t in images[0]], rows[0], cols[0], sizes[0]


def _hf_ip(variant: str):
    import transformers
    cfg = {**config("lfm2-vl"), **VARIANTS[variant]}
    drop = ("image_processor_type", "processor_class")
    return transformers.Lfm2VlImageProcessor(**{k: v for k, v in cfg.items() if k not in drop})


@pytest.mark.hf
@pytest.mark.parametrize("variant", VARIANTS)
def test_geometry_sweep_matches_transformers(variant, seed):
    """Resize sizes, tile shapes and order, rows / cols and the token counts of
    ``Lfm2VlProcessor`` over ~2,600 sizes; sizes transformers cannot pad are refused."""
    from transformers import Lfm2VlProcessor
    ip, pipe = _hf_ip(variant), _pipe(variant)
    proc = Lfm2VlProcessor(image_processor=ip, tokenizer=_tokenizer())
    refused = 0
    for hw in _sizes(np.random.default_rng(seed)):
        calls, shapes, rows, cols, size = _hf_split(ip, hw)
        try:
            p = plan_image(pipe, hw)
        except ImageError:  # a sequence longer than the 1024 padded rows
            assert max(h // 16 * (w // 16) for h, w in shapes) > 1024, (variant, hw)
            refused += 1
            continue
        assert [c.resize_hw for c in p.canvases] == calls, (variant, hw)
        assert [b[2:] for b in p.tiles] == shapes, (variant, hw)
        assert p.canvases[0].resize_hw == (rows * T, cols * T) or rows == cols == 1, (variant, hw)
        per_tile, for_image = proc._get_image_num_tokens(size)
        text = proc._build_image_tokens(rows, cols, per_tile, for_image, ip.use_thumbnail, True)
        assert p.placeholder == text, (variant, hw)
    assert refused < 60, refused


def test_placeholder_string_and_grid():
    assert lfm2_placeholder(1, 1, 0, 2, True) == "<|image_start|><image><image><|image_end|>"
    assert lfm2_placeholder(1, 2, 1, 1, True) == (
        "<|image_start|><|img_row_1_col_1|><image><|img_row_1_col_2|><image><|img_thumbnail|>"
        "<image><|image_end|>")
    assert lfm2_placeholder(1, 2, 1, 1, False, special=False) == "<image><image>"
    op = vlmprep.presets.get("lfm2-vl").sizing
    assert lfm2_grid(1080, 1920, op) == (2, 4) and lfm2_grid(1000, 1000, op) == (2, 2)
    assert lfm2_grid(2000, 2000, op) == (3, 3)  # ties at ratio 1: 3 x 3 once > half covered
    assert lfm2_smart_resize(1, 1, op) == (256, 256)


# -- tiny and extreme sizes through the real processor -------------------------------------------
TINY = [(1, 1), (1, 2), (2, 1), (3, 3), (5, 7), (1, 150), (150, 1), (1, 1000), (1000, 1),
        (17, 900), (900, 17), (626, 627), (40, 4000)]


@pytest.mark.hf
def test_tiny_and_extreme_sizes_match_the_processor():
    """The real processor on black images: every key's shape and the mask / spatial_shapes."""
    hf = hf_processor("lfm2-vl", "torchvision")
    proc = _proc(backend="torch", match="torchvision", dtype="uint8")
    for hw in TINY:
        arr = np.zeros(hw + (3,), np.uint8)
        want = hf([arr], return_tensors="pt", input_data_format="channels_last",
                  do_rescale=False, do_normalize=False)
        got = proc([arr]).to_hf()
        for k in want:
            assert got[k].shape == want[k].shape and torch.equal(got[k], want[k]), (hw, k)


@pytest.mark.hf
def test_what_transformers_cannot_pad_is_refused():
    """1 x 1100: smart resize gives 32 x 8512 = 1064 patches; transformers emits 1064 rows with a
    1024-long mask (inconsistent), vlmprep refuses the image, saying why."""
    hf = hf_processor("lfm2-vl", "torchvision")
    out = hf([np.zeros((1, 1100, 3), np.uint8)], return_tensors="pt",
             input_data_format="channels_last")
    assert out["pixel_values"].shape[1] == 1064 and out["pixel_attention_mask"].shape[1] == 1024
    with pytest.raises(ImageError, match="at most 1024 patches per sequence"):
        plan_image(vlmprep.presets.get("lfm2-vl"), (1, 1100))


def test_limits_and_config_variants():
    pipe = vlmprep.presets.get("lfm2-vl")
    assert vlmprep.presets.from_config(config("lfm2-vl")) == pipe
    assert vlmprep.presets.from_config({"image_processor_type": "Lfm2VlImageProcessor"}) == \
        vlmprep.presets.get("lfm2-vl", max_pixels_tolerance=2.0)  # the class defaults
    with pytest.raises(ImageError, match="source pixels"):
        plan_image(pipe, (13_378, 13_378))
    with pytest.raises(ImageError, match="at least 1x1"):
        plan_image(pipe, (0, 5))
    one = _pipe("nosplit")
    assert one.sizing.min_tiles == one.sizing.max_tiles == 1
    p = plan_image(one, (1080, 1920))
    assert p.tiles == [(0, 0, 384, 672)] and p.num_tokens == 254
    with pytest.raises(ValueError, match="do_pad"):
        vlmprep.presets.from_config({**config("lfm2-vl"), "do_pad": False})
    with pytest.raises(ValueError, match="min_tiles"):
        vlmprep.ops.lfm2_vl_tile(min_tiles=1, max_tiles=10)
    with pytest.raises(ValueError, match="min_image_tokens"):
        vlmprep.ops.lfm2_vl_tile(min_image_tokens=300)
    with pytest.raises(ValueError, match="max_pixels_tolerance"):
        vlmprep.ops.lfm2_vl_tile(max_pixels_tolerance=0)
    with pytest.raises(ValueError, match="use_thumbnail"):
        vlmprep.ops.lfm2_vl_tile(use_thumbnail=1)


# -- the prompt ----------------------------------------------------------------------------------
def _tokenizer():
    return tiny_tokenizer(SPECIAL)


@pytest.mark.hf
def test_placeholder_equals_processor_expansion():
    """``Lfm2VlProcessor`` on one-image prompts: its replacement text is the plan's placeholder,
    its input_ids hold num_tokens special and image tokens, num_embeddings of them ``<image>``;
    with ``use_image_special_tokens=False`` too."""
    from PIL import Image
    from transformers import Lfm2VlProcessor
    proc = Lfm2VlProcessor(image_processor=hf_processor("lfm2-vl", "torchvision"),
                           tokenizer=_tokenizer())
    tok = proc.tokenizer
    special = set(tok.convert_tokens_to_ids(SPECIAL))
    image = tok.convert_tokens_to_ids("<image>")
    arrs = [crop("astronaut", 301, 453), crop("chelsea", 37, 451), tiled("rocket", 1010, 1390)]
    for special_tokens in (True, False):
        for arr in arrs:
            pipe = vlmprep.presets.get("lfm2-vl", special_tokens=special_tokens)
            plan = vlmprep.Processor(pipe).plan([arr]).images[0]
            text = "describe <image> a"
            out = proc(text=[text], images=[Image.fromarray(arr)], return_tensors="pt",
                       return_text_replacement_offsets=True,
                       use_image_special_tokens=special_tokens)
            assert [o["replacement"] for o in out["text_replacement_offsets"][0]] == [
                plan.placeholder]
            ids = out["input_ids"][0].tolist()
            assert sum(i in special for i in ids) == plan.num_tokens
            assert ids.count(image) == plan.num_embeddings
            assert set(out) >= {"pixel_values", "pixel_attention_mask", "spatial_shapes"}
            assert not {"image_rows", "image_cols", "image_sizes"} & set(out)
    assert len(plan.tiles) == 7  # the last photo tiles: 2 x 3 and the thumbnail


# -- pixels and to_hf ------------------------------------------------------------------------------
def _inputs():
    return family_inputs()


@pytest.mark.hf
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_match_torchvision_equals_the_processor(dtype):
    items, oracle = _inputs()
    got = _proc(backend="torch", match="torchvision", dtype=dtype)(items).to_hf()
    want = hf_outputs("lfm2-vl", "torchvision", oracle, raw=dtype == "uint8")
    assert set(got) == set(want) == {"pixel_values", "pixel_attention_mask", "spatial_shapes"}
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    assert want["pixel_values"].shape == (11, 1024, 768)  # 4 images + 6 tiles and a thumbnail


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_pillow_backends_within_one_level(backend):
    """Pillow's bilinear (the reference and default torch backends) against torchvision's
    antialiased bilinear: masks and shapes equal, pixels within 1 level (mean ~0.1 over the
    valid rows; docs/presets/lfm2-vl.md), float32 within one level's step (2/255)."""
    items, oracle = _inputs()
    want = hf_outputs("lfm2-vl", "torchvision", oracle, raw=True)
    got = _proc(backend=backend, dtype="uint8")(items).to_hf()
    for k in ("pixel_attention_mask", "spatial_shapes"):
        assert torch.equal(got[k], want[k]), k
    valid = want["pixel_attention_mask"].bool()
    d = (got["pixel_values"].double() - want["pixel_values"].double()).abs()[valid]
    assert float(d.max()) <= 1 and float(d.mean()) <= 0.2, (float(d.max()), float(d.mean()))
    hf = _proc(backend=backend)(items).to_hf()
    want = hf_outputs("lfm2-vl", "torchvision", oracle)
    d = (hf["pixel_values"].double() - want["pixel_values"].double()).abs()
    assert hf["pixel_values"].dtype == torch.float32 and float(d.max()) <= 2 / 255 + 1e-6


def test_to_hf_and_num_embeddings_by_tile(seed):
    """One sequence per tile (the thumbnail last), padded to 1024 rows; errors skip images."""
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 300)), int(rng.integers(1, 700)), 3),
                         dtype=np.uint8), tiled("coffee", 700, 1500)]
    proc = _proc(backend="reference", errors="skip")
    b = proc([imgs[0], b"junk", imgs[1]])
    assert list(b.errors) == [1] and b.num_tokens[1] == 0
    plans = proc.plan(imgs).images
    hf = b.to_hf()
    n = sum(len(p.tiles) for p in plans)
    assert hf["pixel_values"].shape == (n, 1024, 768)
    assert hf["spatial_shapes"].tolist() == [list(g[1:]) for p in plans for g in p.grid_thw]
    assert hf["pixel_attention_mask"].sum(1).tolist() == [g[1] * g[2] for p in plans
                                                          for g in p.grid_thw]
    assert b.num_embeddings == [plans[0].num_embeddings, 0, plans[1].num_embeddings]


def test_dali_equals_reference():
    if "dali" not in vlmprep.backends.available():
        pytest.skip("dali backend not available here")
    arrs = [crop("astronaut", 301, 453), tiled("chelsea", 700, 1500)]
    want = vlmprep.Processor("lfm2-vl", backend="reference", dtype="uint8")(arrs)
    got = vlmprep.Processor("lfm2-vl", backend="dali", dtype="uint8")(arrs)
    assert torch.equal(got.to_hf()["spatial_shapes"], want.to_hf()["spatial_shapes"])
    d = (got.pixel_values.cpu().double() - want.pixel_values.double()).abs()
    assert float(d.max()) <= 3 and float(d.mean()) <= 0.5, (float(d.max()), float(d.mean()))
