"""Tiling / fixed-size families (siglip, llava-1.5, internvl): geometry, pixels and to_hf against
transformers' processors built from the public checkpoints' configs.

Pixel bounds are those of tests/backends/test_parity_hf.py (reference: identical; torch: max 3,
mean 0.5 levels), for the same reasons.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.imgdata import crop, encode, hf_view, tiled
from hfref import CONFIGS, config, hf_outputs

import vlmprep
from vlmprep.plan import plan_image
from vlmprep.plan.internvl import internvl_grid

FAMILIES = ["siglip", "llava-1.5", "internvl"]
PHOTOS = [("astronaut", 301, 453), ("hopper", 477, 389), ("chelsea", 17, 451), ("coffee", 399, 37)]


def _proc(preset, **kw):
    return vlmprep.Processor.from_pretrained(str(CONFIGS / f"{preset}.json"), **kw)


# -- geometry ----------------------------------------------------------------------------------
# PEERS.md 2.6 (InternVL, verified there against InternVLProcessor): H x W -> (tiles incl.
# thumbnail, tokens incl. <img>, </img>).
INTERNVL_TABLE = {(1, 1): (1, 258), (17, 900): (13, 3330), (333, 777): (11, 2818),
                  (1080, 1920): (9, 2306), (3000, 4000): (13, 3330)}


@pytest.mark.parametrize("hw,want", INTERNVL_TABLE.items())
def test_internvl_table(hw, want):
    p = plan_image(vlmprep.presets.get("internvl"), hw)
    assert (len(p.tiles), p.num_tokens) == want
    n_img = want[1] - 2
    assert p.placeholder == "<img>" + "<IMG_CONTEXT>" * n_img + "</img>"
    assert all(g == (1, 32, 32) for g in p.grid_thw) and p.num_patches == 1024 * want[0]


def test_fixed_families_tokens():
    # SigLIP so400m-384: 27 x 27 = 729 patches (384 is not a multiple of 14: the conv floors).
    p = plan_image(vlmprep.presets.get("siglip"), (480, 640))
    assert (p.grid_thw, p.num_tokens, p.placeholder, p.tiles) == ([(1, 27, 27)], 729, "",
                                                                 [(0, 0, 384, 384)])
    # LLaVA-1.5: short side 336, long int(336 * 640 / 480) = 448, crop left (448 - 336) // 2 = 56.
    p = plan_image(vlmprep.presets.get("llava-1.5"), (480, 640))
    assert p.resized_hw == (336, 448) and p.tiles == [(0, 56, 336, 336)]
    assert p.num_tokens == 576 and p.placeholder == "<image>" * 576


@pytest.mark.hf
def test_internvl_grid_sweep_matches_transformers(seed):
    # transformers' own grid chooser over random and edge sizes, for 1..12 and other ranges.
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import get_optimal_tiled_canvas
    rng = np.random.default_rng(seed)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 6000, (3000, 2))]
    sizes += [(h, w) for h in (1, 2, 224, 448, 449, 896) for w in (1, 3, 448, 900, 1344, 5376)]
    sizes += [(448 * r, 448 * c) for r in range(1, 7) for c in range(1, 7)]  # exact-ratio ties
    for lo, hi in [(1, 12), (1, 6), (2, 9), (1, 1)]:
        for h, w in sizes:
            want = get_optimal_tiled_canvas((h, w), (448, 448), lo, hi)
            assert internvl_grid(h, w, 448, lo, hi) == tuple(want), (seed, h, w, lo, hi)


# -- pixels and to_hf ------------------------------------------------------------------------------
def _levels(a, b):
    d = (a.double() - b.double()).abs()
    return float(d.max()), float(d.mean())


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
@pytest.mark.parametrize("preset", FAMILIES)
def test_pixels_match_transformers(preset, backend):
    from PIL import Image
    arrs = [crop(*p) for p in PHOTOS] + [tiled("rocket", 1010, 1390)]
    items = [encode(arrs[0], "jpeg"), Image.fromarray(arrs[1]), arrs[2],
             torch.from_numpy(arrs[3]).permute(2, 0, 1), encode(arrs[4], "png")]
    oracle_in = [hf_view(items[0]), Image.fromarray(arrs[1]), Image.fromarray(arrs[2]),
                 Image.fromarray(arrs[3]), hf_view(items[4])]
    # uint8 (resized, tiled, not normalized) against the raw oracle.
    got = _proc(preset, backend=backend, dtype="uint8")(items)
    want = hf_outputs(preset, "pil", oracle_in, raw=True)
    assert got.layout == "tiles" and got.pixel_values.dtype == torch.uint8
    assert got.pixel_values.shape == want["pixel_values"].shape
    mx, mean = _levels(got.pixel_values, want["pixel_values"])
    bound = (0, 0.0) if backend == "reference" else (3, 0.5)
    assert mx <= bound[0] and mean <= bound[1], (preset, backend, mx, mean)
    # float32 to_hf against the normalized oracle: same keys, shapes, dtypes.
    got = _proc(preset, backend=backend)(items)
    hf = got.to_hf()
    want = hf_outputs(preset, "pil", oracle_in)
    assert set(hf) == set(want)
    for k in want:
        assert hf[k].shape == want[k].shape and hf[k].dtype == want[k].dtype, k
    if backend == "reference":
        assert all(torch.equal(hf[k], want[k]) for k in want)
    else:
        level = 1 / 255 / min(config(preset)["image_std"])
        mx, mean = _levels(hf["pixel_values"], want["pixel_values"])
        assert mx <= 3 * level + 1e-5 and mean <= 0.5 * level
    # PackedBatch: one ViT sequence per tile, image_index maps tiles to images.
    counts = torch.bincount(got.image_index, minlength=5).tolist()
    plan = _proc(preset, backend=backend).plan(items)
    assert counts == [len(p.tiles) for p in plan.images]
    assert got.num_tokens == plan.num_tokens
    assert got.seqlens == [int(g.prod()) for g in got.grid_thw]


@pytest.mark.parametrize("preset", FAMILIES)
def test_split_concat_and_skip(preset, seed):
    from vlmprep.pack import concat
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 200)), int(rng.integers(1, 200)), 3),
                         dtype=np.uint8) for _ in range(3)]
    proc = vlmprep.Processor(preset, backend="reference", errors="skip")
    b = proc([imgs[0], b"junk", imgs[1], imgs[2]])
    assert list(b.errors) == [1] and b.num_tokens[1] == 0
    parts = list(b.split())
    assert [p.num_seqs for p in parts] == [len(proc.plan([x]).images[0].tiles) if x is not None
                                           else 0 for x in (imgs[0], None, imgs[1], imgs[2])]
    for img, part in zip([imgs[0], imgs[1], imgs[2]], [parts[0], parts[2], parts[3]]):
        assert torch.equal(part.pixel_values, proc([img]).pixel_values)
    back = concat(parts)
    assert torch.equal(back.pixel_values, b.pixel_values)
    assert back.cu_seqlens.tolist() == b.cu_seqlens.tolist()


def test_from_pretrained_recognises_families():
    for preset in FAMILIES:
        p = vlmprep.presets.from_config(config(preset))
        assert p == vlmprep.presets.get(preset), preset


def test_tiles_layout_needs_a_fixed_tile():
    from vlmprep import ops
    with pytest.raises(ValueError, match="one tile size"):
        vlmprep.Pipeline([ops.resize(mode="shortest_edge", size=100),
                          ops.patchify(patch_size=14, order="tiles")])
