"""SigLIP2 NaFlex (``siglip2-naflex``): the scale search, [py, px, c] rows, padding mask and
spatial_shapes against transformers' Siglip2ImageProcessor[Pil].

Pixel bounds are those of tests/backends/test_parity_hf.py: reference identical to the PIL
oracle; torch within 3 levels max and 0.5 levels mean (bilinear: torchvision's fixed-point
kernel in Pillow's pass order, 1 level on photos, plus the float normalization order).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.imgdata import crop, encode, hf_view, tiled
from hfref import CONFIGS, config, hf_outputs, hf_processor

import vlmprep
from vlmprep.plan import plan_image
from vlmprep.plan.naflex import naflex_size

PHOTOS = [("astronaut", 301, 453), ("hopper", 477, 389), ("chelsea", 17, 451), ("coffee", 399, 37)]


def _proc(**kw):
    return vlmprep.Processor.from_pretrained(str(CONFIGS / "siglip2-naflex.json"), **kw)


def _levels(a, b):
    d = (a.double() - b.double()).abs()
    return float(d.max()), float(d.mean())


# -- geometry ----------------------------------------------------------------------------------
# PEERS.md 2.11 (verified there against transformers): H x W -> (max 256: resized, valid
# patches), (max 1024: resized, valid patches).
TABLE = {(17, 900): (((32, 1696), 212), ((64, 3392), 848)),
         (333, 777): (((160, 384), 240), ((336, 768), 1008)),
         (1080, 1920): (((192, 336), 252), ((384, 672), 1008)),
         (3000, 4000): (((224, 288), 252), ((432, 576), 972))}


@pytest.mark.parametrize("hw,want", TABLE.items())
def test_peers_table(hw, want):
    for budget, (rhw, n) in zip((256, 1024), want):
        p = plan_image(vlmprep.presets.get("siglip2-naflex", max_num_patches=budget), hw)
        assert (p.resized_hw, p.num_patches, p.num_tokens) == (rhw, n, n)
        assert p.grid_thw == [(1, rhw[0] // 16, rhw[1] // 16)] and p.placeholder == ""
    # The scale is capped at 100: 1 x 1 reaches only 112 x 112 (PEERS.md 2.11).
    p = plan_image(vlmprep.presets.get("siglip2-naflex"), (1, 1))
    assert p.resized_hw == (112, 112) and p.num_tokens == 49


@pytest.mark.hf
def test_scale_search_sweep_matches_transformers(seed):
    from transformers.models.siglip2.image_processing_pil_siglip2 import get_image_size_for_max_num_patches
    print("seed", seed)
    rng = np.random.default_rng(seed)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 6000, (600, 2))]
    sizes += [(h, w) for h in (1, 2, 15, 16, 17, 255, 256, 257, 4096)
              for w in (1, 7, 16, 33, 256, 1000, 20000)]
    for budget, patch in [(256, 16), (1024, 16), (64, 16), (729, 14), (1, 16)]:
        for h, w in sizes:
            want = get_image_size_for_max_num_patches(h, w, patch, budget)
            assert naflex_size(h, w, patch, budget) == tuple(want), (seed, h, w, budget, patch)


@pytest.mark.hf
def test_over_budget_is_an_image_error():
    # 1 x 20,000,000 with a budget of 1: even the smallest scale (1e-6) gives 16 x 32, two
    # patches; transformers would emit 2 rows for a 1-row budget. Here: an ImageError.
    from transformers.models.siglip2.image_processing_pil_siglip2 import get_image_size_for_max_num_patches
    assert get_image_size_for_max_num_patches(1, 20_000_000, 16, 1) == (16, 32)
    with pytest.raises(vlmprep.ImageError, match="max_num_patches"):
        plan_image(vlmprep.presets.get("siglip2-naflex", max_num_patches=1), (1, 20_000_000))


# -- pixels and to_hf ------------------------------------------------------------------------------
@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_pixels_and_to_hf_match_transformers(backend):
    from PIL import Image
    arrs = [crop(*p) for p in PHOTOS] + [tiled("rocket", 1010, 1390)]
    items = [encode(arrs[0], "jpeg"), Image.fromarray(arrs[1]), arrs[2],
             torch.from_numpy(arrs[3]).permute(2, 0, 1), encode(arrs[4], "png")]
    oracle_in = [hf_view(items[0]), Image.fromarray(arrs[1]), Image.fromarray(arrs[2]),
                 Image.fromarray(arrs[3]), hf_view(items[4])]
    bound = (0, 0.0) if backend == "reference" else (3, 0.5)
    # uint8 (resized, patchified, not normalized) against the raw oracle, valid rows only.
    got = _proc(backend=backend, dtype="uint8")(items)
    want = hf_outputs("siglip2-naflex", "pil", oracle_in, raw=True)
    mask = want["pixel_attention_mask"].bool()
    hf = got.to_hf()
    assert hf["pixel_values"].shape == want["pixel_values"].shape == (5, 256, 768)
    assert hf["pixel_values"].dtype == want["pixel_values"].dtype == torch.uint8
    mx, mean = _levels(hf["pixel_values"][mask], want["pixel_values"][mask])
    assert mx <= bound[0] and mean <= bound[1], (backend, mx, mean)
    # float32 to_hf against the normalized oracle: same keys, shapes, dtypes, padding.
    got = _proc(backend=backend)(items)
    hf = got.to_hf()
    want = hf_outputs("siglip2-naflex", "pil", oracle_in)
    assert set(hf) == set(want) == {"pixel_values", "pixel_attention_mask", "spatial_shapes"}
    for k in want:
        assert type(hf[k]) is type(want[k]) and hf[k].shape == want[k].shape, k
        assert hf[k].dtype == want[k].dtype, k
    assert torch.equal(hf["pixel_attention_mask"], want["pixel_attention_mask"])
    assert torch.equal(hf["spatial_shapes"], want["spatial_shapes"])
    assert hf["pixel_values"][~mask].abs().max() == 0  # zero rows after the valid ones
    if backend == "reference":
        assert torch.equal(hf["pixel_values"], want["pixel_values"])
    else:
        level = 1 / 255 / min(config("siglip2-naflex")["image_std"])
        mx, mean = _levels(hf["pixel_values"][mask], want["pixel_values"][mask])
        assert mx <= 3 * level + 1e-5 and mean <= 0.5 * level, (mx / level, mean / level)
    # PackedBatch: one sequence per image of its valid patches, in [py, px, c] order.
    plan = _proc(backend=backend).plan(items)
    assert got.num_tokens == plan.num_tokens == want["pixel_attention_mask"].sum(1).tolist()
    assert got.grid_thw[:, 1:].tolist() == want["spatial_shapes"].tolist()
    assert got.seqlens == [p.num_patches for p in plan] and got.image_index.tolist() == [0, 1, 2, 3, 4]
    assert got.placeholders == [""] * 5
    # Multi-image samples: the processor flattens them; only the count is checked.
    nested = hf_outputs("siglip2-naflex", "pil", [oracle_in[:2], oracle_in[2:]])
    hf2 = got.to_hf(images_per_sample=[2, 3])
    assert all(hf2[k].shape == nested[k].shape for k in nested)


@pytest.mark.hf
def test_row_layout_is_py_px_c():
    # Independent of the oracle's own patchify: rebuild one row from the resized image.
    from PIL import Image
    a = crop("astronaut", 40, 70)
    b = vlmprep.Processor("siglip2-naflex", backend="reference", dtype="uint8")([a])
    h, w = plan_image(vlmprep.presets.get("siglip2-naflex"), (40, 70)).resized_hw
    img = np.asarray(Image.fromarray(a).resize((w, h), Image.Resampling.BILINEAR))
    gw = w // 16
    for r in (0, 1, gw, b.seqlens[0] - 1):
        gy, gx = divmod(r, gw)
        want = img[16 * gy:16 * gy + 16, 16 * gx:16 * gx + 16, :].reshape(-1)  # [py, px, c]
        assert np.array_equal(b.pixel_values[r].numpy(), want), r


@pytest.mark.hf
def test_budget_override_and_non_rgb_inputs():
    # max_num_patches is often raised per call in transformers; same here by override.
    from PIL import Image
    a = crop("hopper", 477, 389)
    got = vlmprep.Processor("siglip2-naflex", backend="reference", max_num_patches=1024)([a])
    want = hf_processor("siglip2-naflex", "pil")([Image.fromarray(a)], max_num_patches=1024,
                                                 return_tensors="pt")
    assert all(torch.equal(got.to_hf()[k], want[k]) for k in want)
    # do_convert_rgb is None in Siglip2ImageProcessor: RGBA and gray inputs crash there; we
    # convert (transparency on white), equal to transformers fed the converted image.
    items = [encode(crop("coffee", 60, 90), f) for f in ("png_rgba", "png_gray")]
    with pytest.raises(ValueError, match="mean must have 4 elements"):  # RGBA: 4 channels
        hf_outputs("siglip2-naflex", "pil", [hf_view(items[0])])
    from transformers.image_transforms import convert_to_rgb
    want = hf_outputs("siglip2-naflex", "pil", [convert_to_rgb(hf_view(x)) for x in items])
    got = _proc(backend="reference")(items).to_hf()
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_split_concat_and_skip(seed):
    from vlmprep.pack import concat
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 200)), int(rng.integers(1, 200)), 3),
                         dtype=np.uint8) for _ in range(3)]
    proc = vlmprep.Processor("siglip2-naflex", backend="reference", errors="skip")
    b = proc([imgs[0], b"junk", imgs[1], imgs[2]])
    assert list(b.errors) == [1] and b.num_tokens[1] == 0
    hf = b.to_hf()
    assert hf["pixel_values"].shape == (3, 256, 768) and hf["spatial_shapes"].shape == (3, 2)
    parts = list(b.split())
    assert [p.num_seqs for p in parts] == [1, 0, 1, 1]
    for img, part in zip(imgs, [parts[0], parts[2], parts[3]]):
        assert torch.equal(part.pixel_values, proc([img]).pixel_values)
    back = concat(parts)
    assert torch.equal(back.pixel_values, b.pixel_values)
    assert back.cu_seqlens.tolist() == b.cu_seqlens.tolist()
    assert all(torch.equal(back.to_hf()[k], hf[k]) for k in hf)


def test_from_pretrained_recognises_siglip2():
    p = vlmprep.presets.from_config(config("siglip2-naflex"))
    assert p == vlmprep.presets.get("siglip2-naflex")
    # SigLIP v1 configs still go to siglip, not here.
    assert vlmprep.presets.from_config(config("siglip")).sizing.name == "resize"
    fast = dict(config("siglip2-naflex"), image_processor_type="Siglip2ImageProcessorFast",
                max_num_patches=1024)
    assert vlmprep.presets.from_config(fast).sizing.max_num_patches == 1024
    assert vlmprep.Pipeline.from_dict(p.to_dict()) == p
