"""Ovis2 (``ovis2``): geometry, prompt string, pixels and to_hf against transformers' own
``Ovis2ImageProcessorPil`` / ``Ovis2ImageProcessor`` / ``Ovis2Processor``, built from the
checkpoint's config (vlmprep/presets/checkpoints/ovis2.json, thisisiron/Ovis2-2B-hf).

Oracles: transformers' grid functions (``get_min_tile_covering_grid``,
``get_optimal_tiled_canvas``) over a sweep of sizes; its ``crop_image_to_patches`` run on
shape-only stand-ins (every size decision is its code); the real PIL processor on black images
of the tiny and extreme sizes; ``Ovis2Processor`` with a word-level stand-in tokenizer for the
prompt; real photos (JPEG, PNG, WebP) for the pixels: reference and torch bit-exact against the
PIL processor, ``match="torchvision"`` bit-exact against the torchvision one.
"""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from _support.imgdata import crop, family_inputs
from hfref import CONFIGS, config, hf_outputs, hf_processor

import vlmprep
from vlmprep import ImageError
from vlmprep.plan import plan_image
from vlmprep.plan.ovis2 import covering_grid, ovis2_grid, ovis2_placeholder

T = 448
INDICATORS = ("<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>")


def _proc(**kw):
    return vlmprep.Processor.from_pretrained(str(CONFIGS / "ovis2.json"), **kw)


def _rows_cols(p):
    return p.canvases[0].resize_hw[0] // T, p.canvases[0].resize_hw[1] // T


# -- geometry: a few hand-checked sizes --------------------------------------------------------
# H x W -> (grids [rows, cols] as transformers returns them, tiles incl. thumbnail, num_tokens).
# The covering grid is used transposed (a wide image gets rows, see vlmprep.plan.ovis2).
TABLE = {(1, 1): ((1, 1), 1, 259), (448, 448): ((1, 1), 1, 259), (448, 896): ((2, 1), 3, 772),
         (896, 448): ((1, 2), 3, 772), (1080, 1920): ((4, 3), 13, 3342),
         (3, 5000): ((11, 1), 12, 3085), (5000, 3): ((1, 11), 12, 3085)}


@pytest.mark.parametrize("hw,want", TABLE.items())
def test_table(hw, want):
    (rows, cols), n, tokens = want
    p = plan_image(vlmprep.presets.get("ovis2"), hw)
    assert _rows_cols(p) == (rows, cols) and len(p.tiles) == n and p.num_tokens == tokens
    assert p.num_embeddings == 256 * n and p.placeholder.count("<IMG_ATOM>") == 256 * n
    assert p.grid_thw == [(1, 32, 32)] * n and p.num_patches == 1024 * n
    grid = [(r * T, c * T, T, T) for r in range(rows) for c in range(cols)]
    if n == 1:
        assert p.tiles == grid and p.tile_canvas == [0] and len(p.canvases) == 1
    else:  # the thumbnail (its own canvas, the whole image squashed) first, then row-major
        assert p.tiles == [(0, 0, T, T)] + grid and p.tile_canvas == [1] + [0] * (n - 1)
        assert p.canvases[1].resize_hw == (T, T) and p.canvases[1].parent == -1
    assert p.canvases[0].resize_hw == (rows * T, cols * T) and p.canvases[0].parent == -1


def _sizes(rng, n=1500):
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 6000, (n, 2))]
    sizes += [(int(h), int(w)) for h, w in rng.integers(1, 60, (200, 2))]
    # tiny, extreme, tile multiples and their neighbours (the cover crosses 0.9 there), ties
    edge = (1, 2, 3, 4, 11, 12, 13, 223, 224, 447, 448, 449, 497, 498, 896, 897, 1344, 5376, 5377)
    sizes += [(h, w) for h in edge for w in edge]
    sizes += [(T * r + d, T * c + e) for r in range(1, 5) for c in range(1, 5)
              for d in (-1, 0, 1) for e in (-1, 0, 1)]
    sizes += [(1, 178_956_970), (178_956_970, 1), (13_377, 13_377)]  # the largest allowed
    return sizes


@pytest.mark.hf
def test_grid_sweep_matches_transformers(seed):
    """Both grid rules, transformers' functions as the oracle, over random and edge sizes."""
    from transformers.models.ovis2.image_processing_pil_ovis2 import (
        get_min_tile_covering_grid,
        get_optimal_tiled_canvas,
    )
    rng = np.random.default_rng(seed)
    for h, w in _sizes(rng):
        for hi in (12, 6, 2, 1):
            want = get_min_tile_covering_grid((h, w), target_patch_size=T, max_image_tiles=hi)
            assert covering_grid(h, w, T, hi) == tuple(want), (seed, h, w, hi)
        for lo, hi in ((1, 12), (2, 9)):
            want = get_optimal_tiled_canvas((h, w), (T, T), lo, hi)
            op = vlmprep.ops.ovis2_tile(min_tiles=lo, max_tiles=hi, covering=False)
            assert ovis2_grid(h, w, op) == (want[1], want[0]), (seed, h, w, lo, hi)


def _shape_only(h, w):
    """A (3, h, w) uint8 stand-in that costs no memory (transformers reads shapes and slices)."""
    return np.broadcast_to(np.uint8(0), (3, h, w))


def _hf_crop(hw, covering=True, lo=1, hi=12):
    """transformers' ``crop_image_to_patches`` on a stand-in -> (resize sizes in call order,
    tile shapes in output order, [rows, cols]); ``resize`` records and returns stand-ins."""
    from transformers.image_utils import SizeDict
    from transformers.models.ovis2.image_processing_pil_ovis2 import Ovis2ImageProcessorPil
    calls = []

    def resize(image, size, resample=None, **kw):
        calls.append((size.height, size.width))
        return _shape_only(size.height, size.width)
    fake = types.SimpleNamespace(resize=resize)
    tiles, grid = Ovis2ImageProcessorPil.crop_image_to_patches(
        fake, _shape_only(*hw), lo, hi, use_covering_area_grid=covering,
        patch_size=SizeDict(height=T, width=T), resample=3)
    return calls, [t.shape[1:] for t in tiles], list(grid)


@pytest.mark.hf
def test_crop_geometry_matches_transformers(seed):
    rng = np.random.default_rng(seed)
    sizes = _sizes(rng, 200)
    for covering, lo, hi in ((True, 1, 12), (False, 1, 12), (False, 3, 6)):
        pipe = vlmprep.presets.get("ovis2", covering=covering, min_tiles=lo, max_tiles=hi)
        for hw in sizes:
            calls, shapes, grid = _hf_crop(hw, covering, lo, hi)
            p = plan_image(pipe, hw)
            assert list(_rows_cols(p)) == grid, (seed, covering, hw)
            assert [c.resize_hw for c in p.canvases] == calls, (seed, covering, hw)
            assert [b[2:] for b in p.tiles] == [tuple(s) for s in shapes], (seed, covering, hw)


TINY = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 3), (1, 1500), (1500, 1), (3, 1400), (1400, 3),
        (17, 900), (900, 17), (447, 449), (449, 1345)]


@pytest.mark.hf
def test_tiny_and_extreme_sizes_match_the_processor():
    """The real PIL processor on black images: pixel_values shape and grids (no error here;
    with transformers' channel guessing, 1- and 3-pixel-wide images may be misread, so the
    channel axis is given, as tests/data/make_golden_families.py does)."""
    hf = hf_processor("ovis2", "pil")
    pipe = vlmprep.presets.get("ovis2")
    for hw in TINY:
        out = hf([np.zeros(hw + (3,), np.uint8)], return_tensors="pt",
                 input_data_format="channels_last")
        p = plan_image(pipe, hw)
        assert tuple(out["pixel_values"].shape) == (len(p.tiles), 3, T, T), hw
        assert out["grids"].tolist() == [list(_rows_cols(p))], hw


def test_limits_and_config_variants():
    pipe = vlmprep.presets.get("ovis2")
    with pytest.raises(ImageError, match="source pixels"):
        plan_image(pipe, (13_378, 13_378))
    with pytest.raises(ImageError, match="at least 1x1"):
        plan_image(pipe, (0, 5))
    cfg = config("ovis2")
    assert vlmprep.presets.from_config(cfg) == pipe
    # class defaults: 384 tiles, no crop_to_patches -> one squashed tile
    one = vlmprep.presets.from_config({"image_processor_type": "Ovis2ImageProcessor"})
    p = plan_image(one, (1080, 1920))
    assert p.tiles == [(0, 0, 384, 384)] and (p.num_embeddings, p.num_tokens) == (196, 199)
    flat = vlmprep.presets.from_config({**cfg, "use_covering_area_grid": False})
    assert _rows_cols(plan_image(flat, (448, 896))) == (1, 2)
    with pytest.raises(ValueError, match="square"):
        vlmprep.presets.from_config({**cfg, "size": {"height": 448, "width": 224}})
    with pytest.raises(ValueError, match="do_resize"):
        vlmprep.presets.from_config({**cfg, "crop_to_patches": False, "do_resize": False})
    with pytest.raises(ValueError, match="min_tiles"):
        vlmprep.ops.ovis2_tile(min_tiles=3, max_tiles=2)
    with pytest.raises(ValueError, match="covering"):
        vlmprep.ops.ovis2_tile(covering=1)


# -- the prompt ----------------------------------------------------------------------------------
def test_placeholder_string():
    assert ovis2_placeholder(1, 1, 1) == "<IMG_START><IMG_ATOM><IMG_GRID><IMG_END>"
    assert ovis2_placeholder(2, 2, 1) == ("<IMG_START><IMG_ATOM><IMG_GRID><IMG_ATOM><IMG_COL>"
                                          "<IMG_ATOM><IMG_ROW><IMG_ATOM><IMG_COL><IMG_ATOM><IMG_END>")


def _ovis2_processor():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Ovis2Processor, PreTrainedTokenizerFast
    vocab = {"[UNK]": 0, "[PAD]": 1, "describe": 2, "a": 3}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]")
    tok.add_tokens(["<image>", "<IMG_ATOM>", *INDICATORS], special_tokens=True)
    return Ovis2Processor(image_processor=hf_processor("ovis2", "pil"), tokenizer=tok,
                          image_seq_length=256)


@pytest.mark.hf
def test_placeholder_equals_processor_expansion():
    """``Ovis2Processor`` on a one-image prompt: its replacement text is the plan's placeholder,
    its input_ids hold num_tokens tokens of the image and num_embeddings ``<IMG_ATOM>``."""
    from PIL import Image
    proc = _ovis2_processor()
    tok = proc.tokenizer
    ids_of = {tok.convert_tokens_to_ids(t) for t in ("<IMG_ATOM>", *INDICATORS)}
    atom = tok.convert_tokens_to_ids("<IMG_ATOM>")
    for arr in (crop("astronaut", 301, 453), crop("chelsea", 37, 451), crop("hopper", 477, 389)):
        plan = _proc().plan([arr]).images[0]
        text = "describe <image> a"
        out = proc(text=[text], images=[Image.fromarray(arr)], return_tensors="pt",
                   return_text_replacement_offsets=True)
        reps = [o["replacement"] for o in out["text_replacement_offsets"][0]]
        assert reps == [plan.placeholder]
        ids = torch.as_tensor(out["input_ids"][0]).tolist()
        assert ids == tok(text.replace("<image>", plan.placeholder),
                          add_special_tokens=False)["input_ids"]
        assert sum(i in ids_of for i in ids) == plan.num_tokens
        assert ids.count(atom) == plan.num_embeddings == 256 * len(plan.tiles)
        assert "grids" not in out  # the Processor drops it (unused_input_names)
    assert len(plan.tiles) > 1  # the last photo tiles


# -- pixels and to_hf ------------------------------------------------------------------------------
def _inputs():
    return family_inputs()


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_pixels_bit_exact_with_the_pil_processor(backend):
    items, oracle = _inputs()
    got = _proc(backend=backend, dtype="uint8")(items).to_hf()
    want = hf_outputs("ovis2", "pil", oracle, raw=True)
    assert set(got) == set(want) == {"pixel_values", "grids"}
    assert got["pixel_values"].dtype == torch.uint8
    assert torch.equal(got["pixel_values"], want["pixel_values"])
    batch = _proc(backend=backend)(items)
    hf = batch.to_hf()
    want = hf_outputs("ovis2", "pil", oracle)
    for k in want:
        assert hf[k].shape == want[k].shape and hf[k].dtype == want[k].dtype, k
    assert torch.equal(hf["grids"], want["grids"])
    if backend == "reference":
        assert torch.equal(hf["pixel_values"], want["pixel_values"])
    else:  # uint8 tiles equal; the normalize arithmetic differs by a few float32 ulps (~2e-7)
        d = (hf["pixel_values"].double() - want["pixel_values"].double()).abs()
        assert float(d.max()) <= 1e-6, float(d.max())
    # one ViT sequence per tile; image_index maps tiles to images
    plan = _proc(backend=backend).plan(items)
    assert torch.bincount(batch.image_index, minlength=5).tolist() == [len(p.tiles) for p in plan]
    assert batch.num_tokens == plan.num_tokens and batch.num_embeddings == plan.num_embeddings


@pytest.mark.hf
def test_match_torchvision_equals_the_torchvision_processor():
    items, oracle = _inputs()
    got = _proc(backend="torch", match="torchvision")(items).to_hf()
    want = hf_outputs("ovis2", "torchvision", oracle)
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k


@pytest.mark.hf
def test_one_tile_config_matches_the_processor():
    """crop_to_patches false (the class default): one squashed tile, grids [1, 1]."""
    import transformers
    from PIL import Image
    cfg = {**config("ovis2"), "crop_to_patches": False}
    arr = crop("astronaut", 301, 453)
    got = vlmprep.Processor(vlmprep.presets.from_config(cfg), backend="reference",
                            dtype="uint8")([arr]).to_hf()
    drop = ("image_processor_type", "processor_class", "do_rescale", "do_normalize")
    hf = transformers.Ovis2ImageProcessorPil(**{k: v for k, v in cfg.items() if k not in drop},
                                             do_rescale=False, do_normalize=False)
    want = hf([Image.fromarray(arr)], return_tensors="pt")
    assert torch.equal(got["pixel_values"], want["pixel_values"])
    assert torch.equal(got["grids"], want["grids"]) and got["grids"].tolist() == [[1, 1]]


def test_dali_equals_reference():
    if "dali" not in vlmprep.backends.available():
        pytest.skip("dali backend not available here")
    arrs = [crop("astronaut", 301, 453), crop("chelsea", 37, 451)]
    want = vlmprep.Processor("ovis2", backend="reference", dtype="uint8")(arrs)
    got = vlmprep.Processor("ovis2", backend="dali", dtype="uint8")(arrs)
    assert got.to_hf()["grids"].tolist() == want.to_hf()["grids"].tolist()
    d = (got.pixel_values.cpu().double() - want.pixel_values.double()).abs()
    assert got.pixel_values.shape == want.pixel_values.shape
    assert float(d.max()) <= 3 and float(d.mean()) <= 0.5, (float(d.max()), float(d.mean()))


def test_skip_keeps_grids_of_the_good_images(seed):
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 300)), int(rng.integers(1, 1200)), 3),
                         dtype=np.uint8) for _ in range(2)]
    proc = vlmprep.Processor("ovis2", backend="reference", errors="skip")
    b = proc([imgs[0], b"junk", imgs[1]])
    assert list(b.errors) == [1] and b.num_tokens[1] == 0
    hf = b.to_hf()
    plans = proc.plan(imgs).images
    assert hf["grids"].tolist() == [list(_rows_cols(p)) for p in plans]
    assert hf["pixel_values"].shape[0] == sum(len(p.tiles) for p in plans)
