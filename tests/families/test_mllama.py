"""Mllama (Llama-3.2-Vision): canvas choice, aspect-fit size, tiles, pixels and to_hf against
transformers' MllamaImageProcessor[Pil] built from the public checkpoint's config.

Pixel bounds are those of tests/families/test_tiles_families.py (reference: identical; torch:
max 3, mean 0.5 levels: torchvision's bilinear uint8 kernel vs Pillow's, PEERS.md 0.2).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.imgdata import crop, encode, hf_view, tiled
from hfref import CONFIGS, config, hf_outputs, hf_processor

import vlmprep
from vlmprep.plan import plan_image
from vlmprep.plan.mllama import aspect_ratio_id, mllama_canvas, mllama_fit

PHOTOS = [("astronaut", 301, 453), ("hopper", 477, 389), ("chelsea", 17, 451), ("coffee", 399, 37)]
LEVEL = 1 / 255 / min(config("mllama")["image_std"])  # one uint8 level after normalization


def _proc(**kw):
    return vlmprep.Processor.from_pretrained(CONFIGS / "mllama.json", **kw)


# -- geometry ----------------------------------------------------------------------------------
# PEERS.md 2.7 (verified there against MllamaImageProcessor): H x W -> canvas, resized, tiles, id.
TABLE = {(1, 1): ((560, 560), (560, 560), 1, 1),
         (17, 900): ((560, 1120), (17, 900), 2, 2),
         (900, 17): ((1120, 560), (900, 17), 2, 5),
         (1080, 1920): ((1120, 1120), (630, 1120), 4, 6),
         (3000, 4000): ((1120, 1120), (840, 1120), 4, 6)}


@pytest.mark.parametrize("hw,want", TABLE.items())
def test_peers_table(hw, want):
    p = plan_image(vlmprep.presets.get("mllama"), hw)
    canvas, resized, n, ar_id = want
    assert (p.canvases[0].hw, p.resized_hw, len(p.tiles)) == (canvas, resized, n)
    assert aspect_ratio_id((canvas[0] // 560, canvas[1] // 560), 4) == ar_id
    # Row-major 560 tiles over the canvas; the resized image sits at the top-left, 0 around it.
    rows, cols = canvas[0] // 560, canvas[1] // 560
    assert p.tiles == [(r * 560, c * 560, 560, 560) for r in range(rows) for c in range(cols)]
    assert p.canvases[0].offset == (0, 0) and p.canvases[0].fill == (0, 0, 0)
    # One <|image|> per image (cross-attention); a tile is 40 x 40 patches of ViT-H/14.
    assert (p.num_tokens, p.placeholder) == (1, "<|image|>")
    assert p.grid_thw == [(1, 40, 40)] * n and p.num_patches == 1600 * n


@pytest.mark.hf
def test_canvas_and_fit_sweep_match_transformers(seed):
    from transformers.models.mllama import image_processing_pil_mllama as hf
    rng = np.random.default_rng(seed)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 5000, (1500, 2))]
    sizes += [(int(h), int(w)) for h, w in rng.integers(1, 1200, (1500, 2))]
    sizes += [(h, w) for h in (1, 2, 280, 559, 560, 561, 1120, 1121) for w in (1, 3, 560, 1119, 2240, 2241)]
    for max_tiles in (4, 1, 2, 6):
        for h, w in sizes:
            ch, cw = hf.get_optimal_tiled_canvas(h, w, max_tiles, 560)
            a, b = mllama_canvas(h, w, 560, max_tiles)
            assert (a * 560, b * 560) == (ch, cw), (seed, h, w, max_tiles)
            want = hf.get_image_size_fit_to_canvas(h, w, ch, cw, 560)
            assert mllama_fit(h, w, ch, cw, 560) == tuple(int(v) for v in want), (seed, h, w)
            assert aspect_ratio_id((a, b), max_tiles) == \
                hf.get_all_supported_aspect_ratios(max_tiles).index((a, b)) + 1


# -- pixels and to_hf ------------------------------------------------------------------------------
def _levels(a, b):
    d = (a.double() - b.double()).abs()
    return float(d.max()), float(d.mean())


def _batch():
    from PIL import Image
    arrs = [crop(*p) for p in PHOTOS] + [tiled("rocket", 610, 1190)]
    items = [encode(arrs[0], "jpeg"), Image.fromarray(arrs[1]), arrs[2],
             torch.from_numpy(arrs[3]).permute(2, 0, 1), encode(arrs[4], "png")]
    oracle_in = [hf_view(items[0]), Image.fromarray(arrs[1]), Image.fromarray(arrs[2]),
                 Image.fromarray(arrs[3]), hf_view(items[4])]
    return items, oracle_in


def _real_tiles(want: dict) -> torch.Tensor:
    """The oracle's real tiles (its num_tiles), in order: what PackedBatch.pixel_values holds."""
    pv = want["pixel_values"]
    return torch.cat([pv[s, j, :n] for s, row in enumerate(want["num_tiles"])
                      for j, n in enumerate(row)])


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_pixels_and_to_hf_match_transformers(backend):
    items, oracle_in = _batch()
    bound = (0, 0.0) if backend == "reference" else (3, 0.5)
    # uint8: resized, padded with 0, tiled; not normalized (raw oracle: rescale/normalize off).
    got = _proc(backend=backend, dtype="uint8")(items)
    want = hf_outputs("mllama", "pil", oracle_in, raw=True)
    assert got.layout == "tiles" and got.pixel_values.dtype == torch.uint8
    ref = _real_tiles(want)
    assert got.pixel_values.shape == ref.shape
    mx, mean = _levels(got.pixel_values, ref)
    assert mx <= bound[0] and mean <= bound[1], (backend, mx, mean)
    hf = got.to_hf()
    assert hf["pixel_values"].shape == want["pixel_values"].shape == (1, 5, 4, 3, 560, 560)
    assert hf["num_tiles"] == want["num_tiles"]
    # float32: every key, shape, dtype and value; pad inside the canvas is -mean/std, unused 0.
    got = _proc(backend=backend)(items)
    hf = got.to_hf()
    want = hf_outputs("mllama", "pil", oracle_in)
    assert set(hf) == set(want) == {"pixel_values", "aspect_ratio_ids", "aspect_ratio_mask",
                                    "num_tiles"}
    for k in ("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask"):
        assert hf[k].shape == want[k].shape and hf[k].dtype == want[k].dtype, k
    assert torch.equal(hf["aspect_ratio_ids"], want["aspect_ratio_ids"])
    assert torch.equal(hf["aspect_ratio_mask"], want["aspect_ratio_mask"])
    assert hf["num_tiles"] == want["num_tiles"] and isinstance(hf["num_tiles"][0], list)
    if backend == "reference":
        assert torch.equal(hf["pixel_values"], want["pixel_values"])
    else:
        mx, mean = _levels(got.pixel_values, _real_tiles(want))
        assert mx <= 3 * LEVEL + 1e-5 and mean <= 0.5 * LEVEL, (mx, mean)
        unused = hf["num_tiles"][0].index(1)  # an image with one real tile: slots 1..3 are 0
        assert not hf["pixel_values"][0, unused, 1:].any()
    # PackedBatch: sequences are the real tiles only; image_index maps them to images.
    plan = _proc(backend=backend).plan(items)
    counts = torch.bincount(got.image_index, minlength=5).tolist()
    assert counts == [len(p.tiles) for p in plan.images] == want["num_tiles"][0]
    assert got.num_tokens == plan.num_tokens == [1] * 5
    assert got.placeholders == [p.placeholder for p in plan.images] == ["<|image|>"] * 5
    assert got.seqlens == [1600] * sum(counts)


@pytest.mark.hf
def test_to_hf_nests_multi_image_samples():
    # Samples of 2, 0 and 3 images: batch-padded as transformers pads a nested list.
    items, oracle_in = _batch()
    got = _proc(backend="reference")(items)
    for per_sample in ([2, 3], [1, 0, 4], [5]):
        nested, k = [], 0
        for n in per_sample:
            nested.append(oracle_in[k:k + n])
            k += n
        want = dict(hf_processor("mllama", "pil")(nested, return_tensors="pt"))
        hf = got.to_hf(images_per_sample=per_sample)
        assert set(hf) == set(want)
        for key in ("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask"):
            assert hf[key].shape == want[key].shape and torch.equal(hf[key], want[key]), key
        assert hf["num_tiles"] == want["num_tiles"]
    with pytest.raises(ValueError, match="summing to 5"):
        got.to_hf(images_per_sample=[2, 2])


def test_split_concat_skip_and_to_hf(seed):
    from vlmprep.pack import concat
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 300)), int(rng.integers(1, 1300)), 3),
                         dtype=np.uint8) for _ in range(3)]
    proc = vlmprep.Processor("mllama", backend="reference", errors="skip")
    b = proc([imgs[0], b"junk", imgs[1], imgs[2]])
    assert list(b.errors) == [1] and b.num_tokens == [1, 0, 1, 1]
    parts = list(b.split())
    want_tiles = [len(proc.plan([x]).images[0].tiles) for x in imgs]
    assert [p.num_seqs for p in parts] == [want_tiles[0], 0, want_tiles[1], want_tiles[2]]
    for img, part in zip(imgs, [parts[0], parts[2], parts[3]]):
        one = proc([img])
        assert torch.equal(part.pixel_values, one.pixel_values)
        assert torch.equal(part.to_hf()["aspect_ratio_ids"], one.to_hf()["aspect_ratio_ids"])
    back = concat(parts)
    assert torch.equal(back.pixel_values, b.pixel_values)
    assert back.cu_seqlens.tolist() == b.cu_seqlens.tolist()
    # The skipped image is absent from to_hf, as if it had never been passed.
    hf, ok = back.to_hf(), proc(imgs).to_hf()
    assert hf["num_tiles"] == ok["num_tiles"] and len(hf["num_tiles"][0]) == 3
    for k in ("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask"):
        assert torch.equal(hf[k], ok[k]), k


def test_from_pretrained_and_overrides():
    assert vlmprep.presets.from_config(config("mllama")) == vlmprep.presets.get("mllama")
    # The class defaults (224, mean = std = 0.5) are not the checkpoint's.
    bare = vlmprep.presets.from_config({"image_processor_type": "MllamaImageProcessor"})
    assert bare.sizing.tile_size == 224 and bare.normalize.mean == (0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="do_pad"):
        vlmprep.presets.from_config({"image_processor_type": "MllamaImageProcessor",
                                     "do_pad": False})
    p = plan_image(vlmprep.presets.get("mllama", max_tiles=2), (1080, 1920))
    assert p.canvases[0].hw == (560, 1120) and len(p.tiles) == 2
    with pytest.raises(ValueError, match="max_tiles"):
        vlmprep.presets.get("mllama", max_tiles=0)
