"""Llama 4 (``llama4``): geometry, prompt, pixels and to_hf against transformers 5.24's
``Llama4ImageProcessor`` (torchvision only: transformers has no PIL class for it) and
``Llama4Processor``, built from the checkpoint's values (vlmprep/presets/checkpoints/llama4.json:
the class defaults, which the converter saves).

Oracles: ``Llama4ImageProcessor._preprocess`` itself over a sweep of sizes, its resize and
normalize replaced by shape-only stand-ins (every size decision is its code); its
``find_supported_resolutions`` / ``get_best_fit`` over a larger sweep; the real processor on black
images of tiny and extreme sizes; ``Llama4Processor`` with a word-level stand-in tokenizer for the
prompt; real photos (JPEG, PNG, WebP) for the pixels: ``match="torchvision"`` bit-exact (its
bfloat16 rescale and normalize included), the reference and plain torch backends (Pillow's
bilinear, float32 normalize) within 1 level / one bfloat16 step.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.imgdata import crop, family_inputs, tiled
from hfref import CONFIGS, config, hf_outputs, hf_processor, tiny_tokenizer

import vlmprep
from vlmprep import ImageError
from vlmprep.backends import fusion
from vlmprep.plan import plan_image
from vlmprep.plan.llama4 import llama4_canvas, llama4_fit, llama4_placeholder, llama4_resolutions

T = 336
SPECIAL = ["<|image|>", "<|image_start|>", "<|image_end|>", "<|patch|>", "<|tile_x_separator|>",
           "<|tile_y_separator|>"]
# the checkpoints (the preset), the other canvas rule, a smaller tile budget
VARIANTS = {"checkpoint": {}, "max_canvas": {"resize_to_max_canvas": True},
            "max4": {"max_patches": 4}}


def _proc(**kw):
    return vlmprep.Processor.from_pretrained(str(CONFIGS / "llama4.json"), **kw)


def _pipe(variant: str):
    return vlmprep.presets.from_config({**config("llama4"), **VARIANTS[variant]})


# -- geometry: a few hand-checked sizes --------------------------------------------------------
# H x W -> (rows, cols, resized HxW, num_embeddings, num_tokens)
TABLE = {(1, 1): (1, 1, (336, 336), 144, 147), (336, 336): (1, 1, (336, 336), 144, 147),
         (337, 337): (2, 2, (337, 337), 720, 727), (336, 672): (1, 2, (336, 672), 432, 437),
         (1080, 1920): (3, 5, (945, 1680), 2304, 2322), (17, 900): (1, 3, (17, 900), 576, 582),
         (900, 17): (3, 1, (900, 17), 576, 582), (1, 5376): (1, 16, (1, 5376), 2448, 2467),
         (1, 9000): (1, 16, (1, 5376), 2448, 2467),
         (13_377, 13_377): (4, 4, (1344, 1344), 2448, 2467)}


@pytest.mark.parametrize("hw,want", TABLE.items())
def test_table(hw, want):
    rows, cols, rhw, emb, tokens = want
    p = plan_image(vlmprep.presets.get("llama4"), hw)
    assert (p.num_embeddings, p.num_tokens) == (emb, tokens)
    assert p.placeholder.count("<|patch|>") == emb
    grid = [(r * T, c * T, T, T) for r in range(rows) for c in range(cols)]
    assert p.canvases[0].resize_hw == rhw and p.canvases[0].hw == (rows * T, cols * T)
    if rows * cols == 1:
        assert p.tiles == grid and len(p.canvases) == 1
        return
    assert p.tiles == grid + [(0, 0, T, T)] and p.tile_canvas == [0] * len(grid) + [1]
    assert p.canvases[1].resize_hw == (T, T) and p.canvases[1].parent == -1
    assert p.grid_thw == [(1, 24, 24)] * (len(grid) + 1)


def _edges():
    # around the canvas thresholds (multiples of 336 +- 1, up to 16 tiles), tiny sides
    e = (1, 2, 3, 17, 100, 167, 168, 169, 335, 336, 337, 671, 672, 673, 1007, 1008, 1009, 1343,
         1344, 1345, 1679, 1680, 1681, 2015, 2016, 2017, 5375, 5376, 5377, 8000)
    return [(h, w) for h in e for w in e]


def _sizes(rng, n):
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 6000, (n, 2))]
    sizes += [(int(h), int(w)) for h, w in rng.integers(1, 400, (n // 4, 2))]
    return sizes


def _hf_ip(variant: str):
    import transformers
    cfg = {**config("llama4"), **VARIANTS[variant]}
    drop = ("image_processor_type", "processor_class")
    return transformers.Llama4ImageProcessor(**{k: v for k, v in cfg.items() if k not in drop})


def _hf_preprocess(ip, hw):
    """``_preprocess`` on a shape-only stand-in, its resizes recorded -> (resize sizes in call
    order, tiles, aspect_ratio)."""
    from transformers import Llama4ImageProcessor
    from transformers.image_processing_backends import TorchvisionBackend
    calls = []

    def resize(self, image, size, **kw):
        calls.append((size.height, size.width))
        return torch.zeros(1, dtype=torch.uint8).expand(image.shape[0], 3, size.height, size.width)

    real = TorchvisionBackend.resize, Llama4ImageProcessor.rescale_and_normalize
    TorchvisionBackend.resize = resize
    Llama4ImageProcessor.rescale_and_normalize = lambda self, x, *a: x
    try:
        stand_in = torch.zeros(1, dtype=torch.uint8).expand(3, *hw)
        out = ip._preprocess([stand_in], do_resize=True, size=ip.size, resample=ip.resample,
                             do_rescale=False, rescale_factor=1 / 255, do_normalize=False,
                             image_mean=ip.image_mean, image_std=ip.image_std,
                             max_patches=ip.max_patches,
                             resize_to_max_canvas=ip.resize_to_max_canvas,
                             disable_grouping=None, return_tensors=None)
    finally:
        TorchvisionBackend.resize, Llama4ImageProcessor.rescale_and_normalize = real
    return calls, out["pixel_values"][0].shape[0], out["aspect_ratios"][0].tolist()


@pytest.mark.hf
@pytest.mark.parametrize("variant", VARIANTS)
def test_geometry_sweep_matches_transformers(variant, seed):
    """Resize sizes, canvas (aspect_ratios), tile count and the placeholder of ``_preprocess`` /
    ``_prompt_split_image`` over ~1,000 sizes: the canvas thresholds and random ones."""
    from transformers import Llama4Processor
    ip, pipe = _hf_ip(variant), _pipe(variant)
    proc = Llama4Processor(image_processor=ip, tokenizer=_tokenizer())
    sizes = _edges() + _sizes(np.random.default_rng(seed), 80)
    if variant != "checkpoint":  # the same code paths: the thresholds every 4th, fewer random
        sizes = sizes[::4]
    for hw in sizes:
        calls, n, ratio = _hf_preprocess(ip, hw)
        p = plan_image(pipe, hw)
        assert [c.resize_hw for c in p.canvases] == calls, (variant, hw)
        assert [p.canvases[0].hw[0] // T, p.canvases[0].hw[1] // T] == ratio, (variant, hw)
        assert len(p.tiles) == n, (variant, hw)
        assert p.placeholder == proc._prompt_split_image(ratio, 144), (variant, hw)


@pytest.mark.hf
def test_canvas_and_resolutions_equal_transformers_functions(seed):
    """``find_supported_resolutions`` (order included) and ``get_best_fit`` (float32 scales,
    ties) over 4,000 sizes and every budget up to 16."""
    from transformers.image_utils import SizeDict
    from transformers.models.llama4.image_processing_llama4 import (
        find_supported_resolutions,
        get_best_fit,
    )
    size = SizeDict(height=T, width=T)
    for m in range(1, 17):
        want = find_supported_resolutions.__wrapped__(m, size)
        assert [(a * T, b * T) for a, b in llama4_resolutions(m)] == want, m
    res = torch.tensor(find_supported_resolutions.__wrapped__(16, size))
    rng = np.random.default_rng(seed)
    sizes = _edges() + _sizes(rng, 3000) + [(int(h), int(w)) for h, w in rng.integers(1, 40, (300, 2))]
    for hw in sizes:
        for to_max in (False, True):
            want = [int(v) // T for v in get_best_fit(hw, res, resize_to_max_canvas=to_max)]
            assert list(llama4_canvas(hw[0], hw[1], T, 16, to_max)) == want, (hw, to_max)


def test_placeholder_string_and_fit():
    assert llama4_placeholder(1, 1, 2) == "<|image_start|><|image|><|patch|><|patch|><|image_end|>"
    assert llama4_placeholder(1, 2, 1) == (
        "<|image_start|><|patch|><|tile_x_separator|><|patch|><|tile_y_separator|><|image|>"
        "<|patch|><|image_end|>")
    assert llama4_placeholder(2, 1, 1).count("<|tile_y_separator|>") == 2
    assert llama4_resolutions(4) == ((1, 4), (2, 2), (1, 1), (4, 1), (1, 3), (3, 1), (1, 2), (2, 1))
    assert llama4_fit(1080, 1920, 1008, 1680, T) == (945, 1680)
    assert llama4_fit(1, 1, T, T, T) == (T, T)
    assert llama4_fit(17, 900, T, 1008, T) == (17, 900)
    assert llama4_fit(17, 900, T, 1008, T, to_max=True) == (19, 1008)


# -- tiny and extreme sizes through the real processor -------------------------------------------
TINY = [(1, 1), (1, 2), (2, 1), (3, 3), (5, 7), (1, 150), (150, 1), (1, 1000), (1000, 1),
        (17, 900), (900, 17), (337, 336), (1, 6000)]


@pytest.mark.hf
def test_tiny_and_extreme_sizes_match_the_processor():
    """The real processor on black-and-white images: every key, bit for bit (uint8)."""
    hf = hf_processor("llama4", "torchvision", raw=True)
    proc = _proc(backend="torch", match="torchvision", dtype="uint8")
    for hw in TINY:
        arr = np.zeros(hw + (3,), np.uint8)
        arr[::2, ::3] = 255
        want = hf([arr], return_tensors="pt", input_data_format="channels_last")
        got = proc([arr]).to_hf()
        assert set(got) == set(want) == {"pixel_values", "aspect_ratios"}
        for k in want:
            assert got[k].shape == want[k].shape and torch.equal(got[k], want[k]), (hw, k)


def test_limits_and_config_variants():
    pipe = vlmprep.presets.get("llama4")
    assert vlmprep.presets.from_config(config("llama4")) == pipe
    assert vlmprep.presets.from_config({"image_processor_type": "Llama4ImageProcessor"}) == pipe
    with pytest.raises(ImageError, match="source pixels"):
        plan_image(pipe, (13_378, 13_378))
    with pytest.raises(ImageError, match="at least 1x1"):
        plan_image(pipe, (0, 5))
    with pytest.raises(ValueError, match="do_resize"):
        vlmprep.presets.from_config({**config("llama4"), "do_resize": False})
    with pytest.raises(ValueError, match="square"):
        vlmprep.presets.from_config({**config("llama4"), "size": {"height": 336, "width": 448}})
    with pytest.raises(ValueError, match="resize_to_max_canvas"):
        vlmprep.ops.llama4_tile(resize_to_max_canvas=1)
    with pytest.raises(ValueError, match="max_patches"):
        vlmprep.ops.llama4_tile(max_patches=0)
    assert _pipe("max4").sizing.max_patches == 4 and _pipe("max_canvas").sizing.resize_to_max_canvas


# -- the prompt ----------------------------------------------------------------------------------
def _tokenizer():
    return tiny_tokenizer(SPECIAL)


@pytest.mark.hf
def test_placeholder_equals_processor_expansion():
    """``Llama4Processor`` on one-image prompts: its expanded input_ids hold num_tokens special
    tokens, num_embeddings of them ``<|patch|>``, in the plan's placeholder order."""
    from PIL import Image
    from transformers import Llama4Processor
    proc = Llama4Processor(image_processor=hf_processor("llama4", "torchvision"),
                           tokenizer=_tokenizer())
    tok = proc.tokenizer
    special = set(tok.convert_tokens_to_ids(SPECIAL))
    patch = tok.convert_tokens_to_ids("<|patch|>")
    arrs = [crop("astronaut", 301, 453), crop("chelsea", 37, 451), tiled("rocket", 1010, 1390)]
    for arr in arrs:
        plan = _proc().plan([arr]).images[0]
        out = proc(text=["describe <|image|> a"], images=[Image.fromarray(arr)],
                   return_tensors="pt")
        ids = out["input_ids"][0].tolist()
        assert ids[1:-1] == tok.convert_tokens_to_ids(tok.tokenize(plan.placeholder))
        assert sum(i in special for i in ids) == plan.num_tokens
        assert ids.count(patch) == plan.num_embeddings
    assert len(plan.tiles) == 16  # the last photo: 3 x 5 and the global view


@pytest.mark.hf
def test_model_inputs_equal_the_processor():
    """``adapters.transformers.model_inputs`` (the prompt expanded by vlmprep, bfloat16 pixels by
    match="torchvision") equals ``Llama4Processor``'s output, every key (it drops
    aspect_ratios: ``unused_input_names``)."""
    from PIL import Image
    from transformers import Llama4Processor

    from vlmprep.adapters.transformers import model_inputs
    proc = Llama4Processor(image_processor=hf_processor("llama4", "torchvision"),
                           tokenizer=_tokenizer())
    arrs = [crop("astronaut", 301, 453), tiled("rocket", 1010, 1390)]
    texts = ["describe <|image|> a <|image|>"]
    got = model_inputs(proc, texts, _proc(match="torchvision", dtype="bfloat16")(arrs))
    want = proc(text=texts, images=[Image.fromarray(a) for a in arrs], return_tensors="pt")
    assert set(got) == set(want) == {"input_ids", "attention_mask", "pixel_values"}
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k


# -- pixels and to_hf ------------------------------------------------------------------------------
def _inputs():
    return family_inputs()


@pytest.mark.hf
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8"])
def test_match_torchvision_equals_the_processor(dtype):
    """Bit for bit, the bfloat16 rescale and normalize included (float32 output holds the
    processor's bfloat16 values exactly)."""
    items, oracle = _inputs()
    got = _proc(backend="torch", match="torchvision", dtype=dtype)(items).to_hf()
    want = hf_outputs("llama4", "torchvision", oracle, raw=dtype == "uint8")
    assert set(got) == set(want) == {"pixel_values", "aspect_ratios"}
    assert want["pixel_values"].dtype == (torch.uint8 if dtype == "uint8" else torch.bfloat16)
    assert got["pixel_values"].dtype == getattr(torch, dtype)
    assert torch.equal(got["aspect_ratios"], want["aspect_ratios"])
    assert torch.equal(got["pixel_values"].to(want["pixel_values"].dtype), want["pixel_values"])
    if dtype != "uint8":
        assert torch.equal(got["pixel_values"].double(), want["pixel_values"].double())
    # 1 x 2, 2 x 2, 1 x 2, 2 x 1, 3 x 5, each + the global view
    assert want["pixel_values"].shape == (30, 3, T, T)
    assert want["aspect_ratios"].tolist() == [[1, 2], [2, 2], [1, 2], [2, 1], [3, 5]]


@pytest.mark.hf
def test_op_by_op_equals_fused():
    items, oracle = _inputs()
    with fusion.at_most(fusion.OP_BY_OP):
        slow = _proc(backend="torch", match="torchvision")(items)
    fast = _proc(backend="torch", match="torchvision")(items)
    assert torch.equal(slow.pixel_values, fast.pixel_values)


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_pillow_backends_within_one_level(backend):
    """Pillow's bilinear (the reference and default torch backends) against torchvision's
    antialiased bilinear: shapes and aspect_ratios equal, uint8 within 1 level; float32
    (normalized in float32, not bfloat16) within one level's step plus bfloat16's rounding
    (docs/presets/llama4.md)."""
    items, oracle = _inputs()
    want = hf_outputs("llama4", "torchvision", oracle, raw=True)
    got = _proc(backend=backend, dtype="uint8")(items).to_hf()
    assert torch.equal(got["aspect_ratios"], want["aspect_ratios"])
    d = (got["pixel_values"].double() - want["pixel_values"].double()).abs()
    assert float(d.max()) <= 1 and float(d.mean()) <= 0.05, (float(d.max()), float(d.mean()))
    hf = _proc(backend=backend)(items).to_hf()
    want = hf_outputs("llama4", "torchvision", oracle)
    d = (hf["pixel_values"].double() - want["pixel_values"].double()).abs()
    assert hf["pixel_values"].dtype == torch.float32
    assert float(d.max()) <= 2 / 255 + 2 ** -8 + 2 ** -9, float(d.max())  # measured 0.0117


def test_to_hf_and_num_embeddings(seed):
    """Each image's tiles then its global view; aspect_ratios per good image; errors skip."""
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 300)), int(rng.integers(1, 700)), 3),
                         dtype=np.uint8), tiled("coffee", 700, 1500)]
    proc = _proc(backend="reference", errors="skip")
    b = proc([imgs[0], b"junk", imgs[1]])
    assert list(b.errors) == [1] and b.num_tokens[1] == 0
    plans = proc.plan(imgs).images
    hf = b.to_hf()
    assert hf["pixel_values"].shape == (sum(len(p.tiles) for p in plans), 3, T, T)
    assert hf["aspect_ratios"].tolist() == [[p.canvases[0].hw[0] // T, p.canvases[0].hw[1] // T]
                                            for p in plans]
    assert hf["aspect_ratios"].dtype == torch.int64
    assert b.num_embeddings == [plans[0].num_embeddings, 0, plans[1].num_embeddings]


def test_dali_equals_reference():
    if "dali" not in vlmprep.backends.available():
        pytest.skip("dali backend not available here")
    arrs = [crop("astronaut", 301, 453), tiled("chelsea", 700, 1500), crop("chelsea", 17, 451)]
    want = vlmprep.Processor("llama4", backend="reference", dtype="uint8")(arrs)
    got = vlmprep.Processor("llama4", backend="dali", dtype="uint8")(arrs)
    assert torch.equal(got.to_hf()["aspect_ratios"], want.to_hf()["aspect_ratios"])
    d = (got.pixel_values.cpu().double() - want.pixel_values.double()).abs()
    assert float(d.max()) <= 2 and float(d.mean()) <= 0.5, (float(d.max()), float(d.mean()))
