"""MiniCPM-V 4.6 (``minicpm-v``): geometry, prompt string, pixels and to_hf against transformers'
own ``MiniCPMV4_6ImageProcessorPil`` / ``MiniCPMV4_6ImageProcessor`` / ``MiniCPMV4_6Processor``,
built from the checkpoint's config (vlmprep/presets/checkpoints/minicpm-v.json).

Oracles: the processor's own sizing methods (``get_sliced_grid``, ``find_best_resize``,
``get_refine_size``) over a sweep of sizes, composed as its ``_preprocess`` composes them; the
real PIL processor on black images of tiny, extreme and threshold sizes (``target_sizes``,
``grids``, shapes); ``MiniCPMV4_6Processor`` with a word-level stand-in tokenizer for the prompt;
real photos (JPEG, PNG, WebP) for the pixels: reference and torch bit-exact against the PIL
processor (every torch executor), ``match="torchvision"`` bit-exact against the torchvision one.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.imgdata import crop, family_inputs, tiled
from hfref import CONFIGS, config, hf_outputs, hf_processor

import vlmprep
from vlmprep import ImageError
from vlmprep.backends import fusion
from vlmprep.plan import plan_image
from vlmprep.plan.minicpmv import minicpmv_placeholder, sliced_grid

S, Q = 448, 56  # scale_resolution, patch 14 x merge 4 ("16x")
WRAPPERS = ("<image>", "</image>", "<slice>", "</slice>")


def _proc(**kw):
    return vlmprep.Processor.from_pretrained(str(CONFIGS / "minicpm-v.json"), **kw)


def _grid(p):
    """``grids`` as transformers returns it: ``[rows, cols]``, ``[0, 0]`` unsliced."""
    if len(p.tiles) == 1:
        return [0, 0]
    return [p.canvases[1].resize_hw[0] // p.tiles[-1][2], p.canvases[1].resize_hw[1] // p.tiles[-1][3]]


def _target_sizes(p):
    return [[b[2] // 14, b[3] // 14] for b in p.tiles]


# -- geometry: a few hand-checked sizes --------------------------------------------------------
# H x W -> (source (h, w), grid, slice (h, w), image tokens = num_embeddings, num_tokens)
TABLE = {
    (1, 1): ((448, 448), None, None, 64, 66),
    (448, 448): ((448, 448), None, None, 64, 66),
    (449, 449): ((448, 448), (2, 1), (336, 616), 64 + 2 * 66, 64 + 2 * 66 + 6 + 1),
    (1080, 1920): ((336, 616), (2, 4), (448, 448), 66 + 8 * 64, 66 + 8 * 64 + 18 + 1),
    (5000, 3): ((18312, 56), None, None, 1308 * 4 // 16, 1308 * 4 // 16 + 2),
}


@pytest.mark.parametrize("hw,want", TABLE.items())
def test_table(hw, want):
    source, grid, tile, emb, tokens = want
    p = plan_image(vlmprep.presets.get("minicpm-v"), hw)
    assert p.canvases[0].resize_hw == source and p.tiles[0] == (0, 0, *source)
    assert (p.num_embeddings, p.num_tokens) == (emb, tokens)
    assert p.placeholder.count("<|image_pad|>") == emb
    if grid is None:
        assert len(p.tiles) == 1 and len(p.canvases) == 1
        return
    rows, cols = grid
    th, tw = tile
    assert p.canvases[1].resize_hw == (rows * th, cols * tw) and p.canvases[1].parent == -1
    assert p.tiles[1:] == [(r * th, c * tw, th, tw) for r in range(rows) for c in range(cols)]
    assert p.tile_canvas == [0] + [1] * rows * cols
    assert p.placeholder.count("\n") == rows - 1


def _sizes(rng, n=1500):
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 6000, (n, 2))]
    sizes += [(int(h), int(w)) for h, w in rng.integers(1, 60, (150, 2))]
    # tiny, extreme, the slicing thresholds (S*S pixels, k*S*S for the slice counts) and around
    edge = (1, 2, 3, 27, 28, 55, 56, 57, 223, 224, 447, 448, 449, 895, 896, 897, 1344, 5376, 13377)
    sizes += [(h, w) for h in edge for w in edge]
    sizes += [(S * r + d, S * c + e) for r in range(1, 4) for c in range(1, 4)
              for d in (-1, 0, 1) for e in (-1, 0, 1)]
    sizes += [(1, 178_956_970), (178_956_970, 1), (13_377, 13_377), (1, 200_704), (1, 200_705)]
    return sizes


def _hf_geometry(ip, hw, max_slices=9, slice_mode=True):
    """``_preprocess``'s sizing on ``hw``, by the processor's own methods -> (canvas sizes,
    tile shapes, grid)."""
    grid = ip.get_sliced_grid(hw, max_slices, S) if slice_mode else None
    source = ip.find_best_resize(hw, S, 14, "16x", allow_upscale=grid is None)
    if grid is None:
        return [tuple(source)], [tuple(source)], [0, 0]
    refine = ip.get_refine_size(hw, grid, S, 14, "16x", allow_upscale=True)
    tile = (refine[0] // grid[0], refine[1] // grid[1])
    return [tuple(source), tuple(refine)], [tuple(source)] + [tile] * (grid[0] * grid[1]), grid


@pytest.mark.hf
def test_geometry_sweep_matches_transformers(seed):
    """The plan's canvases, tile sizes and grid equal the processor's sizing methods, over random,
    tiny, extreme and threshold sizes, for three slice caps and without slicing."""
    import transformers
    ip = transformers.MiniCPMV4_6ImageProcessorPil()
    rng = np.random.default_rng(seed)
    for hi, mode in ((9, True), (4, True), (36, True), (9, False)):
        pipe = vlmprep.presets.get("minicpm-v", max_slice_nums=hi, slice_mode=mode)
        for hw in _sizes(rng, 600 if hi == 9 else 150):
            canvases, tiles, grid = _hf_geometry(ip, hw, hi, mode)
            p = plan_image(pipe, hw)
            assert [c.resize_hw for c in p.canvases] == canvases, (seed, hi, hw)
            assert [b[2:] for b in p.tiles] == tiles and _grid(p) == list(grid), (seed, hi, hw)
            if mode:
                want = ip.get_sliced_grid(hw, hi, S)
                assert sliced_grid(hw[0], hw[1], hi, S) == (tuple(want) if want else None)


TINY = [(1, 1), (1, 2), (2, 1), (3, 3), (1, 1500), (1500, 1), (3, 1400), (1400, 3), (17, 900),
        (900, 17), (447, 449), (448, 448), (448, 449), (449, 449), (896, 896), (897, 897),
        (1344, 1345), (2000, 60)]


@pytest.mark.hf
def test_tiny_and_extreme_sizes_match_the_processor():
    """The real PIL processor on black images: pixel_values length, target_sizes, grids and
    tiles per image (the channel axis given, as for Ovis2: 1- and 3-pixel-wide images)."""
    hf = hf_processor("minicpm-v", "pil")
    pipe = vlmprep.presets.get("minicpm-v")
    for hw in TINY:
        out = hf([np.zeros(hw + (3,), np.uint8)], return_tensors="pt",
                 input_data_format="channels_last")
        p = plan_image(pipe, hw)
        assert out["target_sizes"].tolist() == _target_sizes(p), hw
        assert out["grids"] == [_grid(p)] and out["num_patches_per_image"] == [len(p.tiles)], hw
        assert tuple(out["pixel_values"].shape) == (1, 3, 14, 14 * p.num_patches), hw


def test_limits_and_config_variants():
    pipe = vlmprep.presets.get("minicpm-v")
    with pytest.raises(ImageError, match="source pixels"):
        plan_image(pipe, (13_378, 13_378))
    with pytest.raises(ImageError, match="at least 1x1"):
        plan_image(pipe, (0, 5))
    cfg = config("minicpm-v")
    assert vlmprep.presets.from_config(cfg) == pipe
    four = plan_image(vlmprep.presets.from_config({**cfg, "downsample_mode": "4x"}), (1080, 1920))
    assert four.canvases[0].resize_hw == (336, 588)  # multiples of 28 (616 with 56)
    assert four.num_embeddings == sum(b[2] * b[3] // (14 * 14 * 4) for b in four.tiles)
    flat = plan_image(vlmprep.presets.from_config({**cfg, "slice_mode": False}), (1080, 1920))
    assert len(flat.tiles) == 1 and flat.tiles[0] == (0, 0, 336, 616)
    bare = vlmprep.presets.from_config({"image_processor_type": "MiniCPMV4_6ImageProcessor"})
    assert bare == pipe  # the class defaults are the checkpoint's values
    with pytest.raises(ValueError, match="do_resize"):
        vlmprep.presets.from_config({**cfg, "do_resize": False})
    with pytest.raises(ValueError, match="downsample_mode"):
        vlmprep.presets.from_config({**cfg, "downsample_mode": "8x"})
    with pytest.raises(ValueError, match="slice_mode"):
        vlmprep.ops.minicpmv_slice(slice_mode=1)
    with pytest.raises(ValueError, match="max_slice_nums"):
        vlmprep.ops.minicpmv_slice(max_slice_nums=0)


# -- the prompt ----------------------------------------------------------------------------------
def test_placeholder_string():
    assert minicpmv_placeholder([1], None, "x") == "<image>x</image>"
    assert minicpmv_placeholder([1, 2, 1, 1, 1], (2, 2), "x") == (
        "<image>x</image><slice>xx</slice><slice>x</slice>\n<slice>x</slice><slice>x</slice>")


EXTRA = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
         "image_start_token": "<image>", "image_end_token": "</image>",
         "slice_start_token": "<slice>", "slice_end_token": "</slice>",
         "image_id_start_token": "<image_id>", "image_id_end_token": "</image_id>"}


def _minicpm_processor():
    """``MiniCPMV4_6Processor`` with a word-level stand-in tokenizer carrying the checkpoint's
    special tokens as ``extra_special_tokens`` (a newline is one token, as in Qwen's BPE)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import MiniCPMV4_6Processor, MiniCPMV4_6VideoProcessor, PreTrainedTokenizerFast
    vocab = {"[UNK]": 0, "[PAD]": 1, "describe": 2, "a": 3, "\n": 4}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]",
                                  extra_special_tokens=EXTRA)
    return MiniCPMV4_6Processor(image_processor=hf_processor("minicpm-v", "pil"),
                                video_processor=MiniCPMV4_6VideoProcessor(), tokenizer=tok)


@pytest.mark.hf
def test_placeholder_equals_processor_expansion():
    """``MiniCPMV4_6Processor`` on a two-image prompt: each replacement is ``<image_id>k
    </image_id>`` (k: the image's index in its sample) + the plan's placeholder; without
    use_image_id it is the placeholder; input_ids hold num_tokens tokens of each image (image
    tokens, wrappers, row newlines) and num_embeddings ``<|image_pad|>``."""
    from PIL import Image
    proc = _minicpm_processor()
    tok = proc.tokenizer
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    ids_of = {tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", *WRAPPERS)}
    arrs = [crop("astronaut", 500, 450), crop("chelsea", 37, 451), tiled("hopper", 1010, 1390)]
    plans = _proc().plan(arrs).images
    assert [len(p.tiles) > 1 for p in plans] == [True, False, True]
    text = "describe <|image_pad|> a <|image_pad|>"
    for k in (0, 1):
        pair = [Image.fromarray(arrs[k]), Image.fromarray(arrs[2])]
        out = proc(text=[text], images=pair, return_tensors="pt", return_text_replacement_offsets=True)
        reps = [o["replacement"] for o in out["text_replacement_offsets"][0]]
        assert reps == [f"<image_id>{i}</image_id>" + p.placeholder
                        for i, p in enumerate((plans[k], plans[2]))]
        out = proc(text=[text], images=pair, return_tensors="pt", use_image_id=False)
        ids = torch.as_tensor(out["input_ids"][0]).tolist()
        body = text.replace("<|image_pad|>", "\0", 1).replace("<|image_pad|>", plans[2].placeholder)
        assert ids == tok(body.replace("\0", plans[k].placeholder), add_special_tokens=False)["input_ids"]
        counted = sum(i in ids_of for i in ids) + ids.count(4)
        assert counted == plans[k].num_tokens + plans[2].num_tokens
        assert ids.count(pad) == plans[k].num_embeddings + plans[2].num_embeddings
        assert set(out) == {"input_ids", "attention_mask", "pixel_values", "target_sizes"}


@pytest.mark.hf
@pytest.mark.parametrize("use_image_id", [None, False])
def test_model_inputs_and_expand_prompts_equal_the_processor(use_image_id):
    """Two texts (two images, one image): ``model_inputs`` / ``expand_prompts`` number each
    text's images from 0 as ``MiniCPMV4_6Processor`` does (``<image_id>k</image_id>`` before each
    replacement; none with use_image_id=False): the same text replacements, the same input_ids."""
    from PIL import Image

    from vlmprep.adapters.transformers import expand_prompts, model_inputs
    proc = _minicpm_processor()
    arrs = [crop("astronaut", 500, 450), crop("chelsea", 37, 451), tiled("hopper", 1010, 1390)]
    texts = ["describe <|image_pad|> a <|image_pad|>", "a <|image_pad|> describe"]
    kw = {} if use_image_id is None else {"use_image_id": use_image_id}
    want = proc(text=texts, images=[Image.fromarray(a) for a in arrs], return_tensors="pt",
                return_text_replacement_offsets=True, padding=True, **kw)
    batch = _proc()(arrs)
    got = model_inputs(proc, texts, batch, **kw)
    assert torch.equal(torch.as_tensor(got["input_ids"]), torch.as_tensor(want["input_ids"]))
    expanded, counts = expand_prompts(texts, batch, image_ids=use_image_id is None)
    assert counts == [2, 1]
    for text, offsets in zip(expanded, want["text_replacement_offsets"], strict=True):
        for o in offsets:  # each of the processor's replacements at its place in our text
            a, b = o["new_span"]
            assert text[a:b] == o["replacement"]
    if use_image_id is None:
        assert expanded[1].startswith("a <image_id>0</image_id><image>")
        assert expanded[0].count("<image_id>1</image_id>") == 1 and "<image_id>2" not in expanded[0]


# -- pixels and to_hf ------------------------------------------------------------------------------
PHOTOS = [("astronaut", 301, 453), ("hopper", 560, 480), ("chelsea", 17, 451), ("coffee", 399, 37)]


def _inputs():
    return family_inputs(PHOTOS)


KEYS = {"pixel_values", "target_sizes", "grids", "num_patches_per_image"}


def _check_meta(got, want):
    assert set(got) == set(want) == KEYS
    assert got["target_sizes"].dtype == torch.int32 and torch.equal(got["target_sizes"],
                                                                      want["target_sizes"])
    assert got["grids"] == want["grids"] and got["num_patches_per_image"] == want["num_patches_per_image"]


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_pixels_bit_exact_with_the_pil_processor(backend):
    items, oracle = _inputs()
    want = hf_outputs("minicpm-v", "pil", oracle, raw=True)
    got = _proc(backend=backend, dtype="uint8")(items).to_hf()
    _check_meta(got, want)
    assert got["pixel_values"].dtype == torch.uint8
    assert torch.equal(got["pixel_values"], want["pixel_values"])
    want = hf_outputs("minicpm-v", "pil", oracle)
    assert [g == [0, 0] for g in want["grids"]] == [True, False, True, True, False]  # 2 sliced
    executors = [None] if backend == "reference" else [fusion.OP_BY_OP, fusion.ROWS, None]
    for ex in executors:  # torch: op by op (the patchify lowering), the rows kernel, the default
        with fusion.at_most(ex or fusion.DECODE_RESIZE_ROWS):
            batch = _proc(backend=backend)(items)
        hf = batch.to_hf()
        _check_meta(hf, want)
        assert hf["pixel_values"].shape == want["pixel_values"].shape
        assert hf["pixel_values"].dtype == want["pixel_values"].dtype
        if backend == "reference":
            assert torch.equal(hf["pixel_values"], want["pixel_values"])
        else:  # uint8 tiles equal; the normalize arithmetic differs by one float32 rounding
            d = (hf["pixel_values"].double() - want["pixel_values"].double()).abs()
            assert float(d.max()) <= 1.2e-7, (ex, float(d.max()))
    plan = _proc(backend=backend).plan(items)
    assert torch.bincount(batch.image_index, minlength=5).tolist() == [len(p.tiles) for p in plan]
    assert batch.num_tokens == plan.num_tokens and batch.num_embeddings == plan.num_embeddings


@pytest.mark.hf
def test_match_torchvision_equals_the_torchvision_processor():
    items, oracle = _inputs()
    got = _proc(backend="torch", match="torchvision")(items).to_hf()
    want = hf_outputs("minicpm-v", "torchvision", oracle)
    _check_meta(got, want)
    assert got["pixel_values"].dtype == want["pixel_values"].dtype
    assert torch.equal(got["pixel_values"], want["pixel_values"])


@pytest.mark.hf
def test_config_variants_match_the_processor():
    """"4x", no slicing and a cap of 2 slices: the PIL processor built from the changed config."""
    import transformers
    from PIL import Image
    arrs = [crop("astronaut", 301, 453), tiled("rocket", 1010, 1390)]
    drop = ("image_processor_type", "processor_class", "do_rescale", "do_normalize")
    for change in ({"downsample_mode": "4x"}, {"slice_mode": False}, {"max_slice_nums": 2}):
        cfg = {**config("minicpm-v"), **change}
        got = vlmprep.Processor(vlmprep.presets.from_config(cfg), backend="reference",
                                dtype="uint8")(arrs).to_hf()
        hf = transformers.MiniCPMV4_6ImageProcessorPil(
            **{k: v for k, v in cfg.items() if k not in drop}, do_rescale=False, do_normalize=False)
        want = hf([Image.fromarray(a) for a in arrs], return_tensors="pt")
        _check_meta(got, want)
        assert torch.equal(got["pixel_values"], want["pixel_values"]), change


def test_dali_equals_reference():
    if "dali" not in vlmprep.backends.available():
        pytest.skip("dali backend not available here")
    arrs = [crop("astronaut", 301, 453), crop("chelsea", 37, 451), tiled("rocket", 1010, 1390)]
    want = vlmprep.Processor("minicpm-v", backend="reference", dtype="uint8")(arrs)
    got = vlmprep.Processor("minicpm-v", backend="dali", dtype="uint8")(arrs)
    a, b = got.to_hf(), want.to_hf()
    assert a["grids"] == b["grids"] and torch.equal(a["target_sizes"].cpu(), b["target_sizes"])
    d = (got.pixel_values.cpu().double() - want.pixel_values.double()).abs()
    assert got.pixel_values.shape == want.pixel_values.shape
    assert float(d.max()) <= 3 and float(d.mean()) <= 0.5, (float(d.max()), float(d.mean()))


def test_skip_keeps_the_good_images(seed):
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 700)), int(rng.integers(1, 1200)), 3),
                         dtype=np.uint8) for _ in range(2)]
    proc = vlmprep.Processor("minicpm-v", backend="reference", errors="skip")
    b = proc([imgs[0], b"junk", imgs[1]])
    assert list(b.errors) == [1] and b.num_tokens[1] == 0
    hf = b.to_hf()
    plans = proc.plan(imgs).images
    assert hf["grids"] == [_grid(p) for p in plans]
    assert hf["num_patches_per_image"] == [len(p.tiles) for p in plans]
    assert hf["target_sizes"].tolist() == [t for p in plans for t in _target_sizes(p)]
    assert hf["pixel_values"].shape == (1, 3, 14, 14 * sum(p.num_patches for p in plans))
