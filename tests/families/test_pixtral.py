"""Pixtral (``pixtral``, and the Mistral-Small-3.x variant by overrides): floor scaling, break
tokens, raster [c, py, px] rows, to_hf against transformers' PixtralImageProcessor[Pil] and
PixtralProcessor.

Pixel bounds are those of tests/backends/test_parity_hf.py: reference identical to the PIL
oracle (same PIL resize, same float ops); torch within 3 levels max and 0.5 levels mean (its
resize is torchvision's fixed-point kernel in Pillow's pass order: <= 2 levels on photos, plus
one for the float normalization order).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _support.imgdata import crop, encode, hf_view, tiled
from hfref import CONFIGS, config, hf_outputs

import vlmprep
from vlmprep.plan import plan_image

PHOTOS = [("astronaut", 301, 453), ("hopper", 477, 389), ("chelsea", 17, 451), ("coffee", 399, 37)]
#: Mistral-Small-3.1/3.2 (processor_config: patch 14, spatial_merge_size 2; size 1540).
MISTRAL_SMALL = dict(patch_size=14, merge_size=2, longest_edge=1540)


def _proc(**kw):
    return vlmprep.Processor.from_pretrained(CONFIGS / "pixtral.json", **kw)


def _levels(a, b):
    d = (a.double() - b.double()).abs()
    return float(d.max()), float(d.mean())


# -- geometry ----------------------------------------------------------------------------------
# PEERS.md 2.9 (verified there with PixtralProcessor): H x W -> Pixtral-12B tokens, and
# Mistral-Small-3.1 (resized, tokens).
TABLE = {(1, 1): (2, (28, 28), 2), (17, 900): (116, (28, 924), 34), (333, 777): (1050, (336, 784), 348),
         (1080, 1920): (2340, (868, 1540), 1736), (3000, 4000): (3120, (1176, 1540), 2352)}


@pytest.mark.parametrize("hw,want", TABLE.items())
def test_peers_table(hw, want):
    p = plan_image(vlmprep.presets.get("pixtral"), hw)
    assert p.num_tokens == want[0]
    m = plan_image(vlmprep.presets.get("pixtral", **MISTRAL_SMALL), hw)
    assert (m.resized_hw, m.num_tokens) == want[1:]
    # One ViT sequence of 14 x 14 patches (the merger joins 2 x 2 of them per token).
    assert m.grid_thw == [(1, m.resized_hw[0] // 14, m.resized_hw[1] // 14)]
    assert plan_image(vlmprep.presets.get("pixtral"), (1080, 1920)).resized_hw == (576, 1024)
    assert plan_image(vlmprep.presets.get("pixtral"), (900, 17)).num_tokens == 171


def test_placeholder_string():
    # 40 x 50 -> 48 x 64: rows 3, cols 4; PixtralProcessor's string written out by hand.
    p = plan_image(vlmprep.presets.get("pixtral"), (40, 50))
    row = "[IMG]" * 4
    assert p.placeholder == row + "[IMG_BREAK]" + row + "[IMG_BREAK]" + row + "[IMG_END]"
    assert p.num_tokens == 15 and p.grid_thw == [(1, 3, 4)] and p.num_patches == 12
    assert p.tiles == [(0, 0, 48, 64)]


def _hf_processor_self(patch: int, merge: int, longest_edge: int):
    """The attributes PixtralProcessor's own methods read, without a tokenizer."""
    return SimpleNamespace(patch_size=patch, spatial_merge_size=merge, image_token="[IMG]",
                           image_break_token="[IMG_BREAK]", image_end_token="[IMG_END]",
                           _merge_kwargs=lambda **kw: {"images_kwargs": {}},
                           image_processor=SimpleNamespace(size={"longest_edge": longest_edge}))


@pytest.mark.hf
@pytest.mark.parametrize("patch,merge,L", [(16, 1, 1024), (14, 2, 1540), (16, 1, 512)])
def test_geometry_sweep_matches_transformers(patch, merge, L, seed):
    from transformers.image_utils import ChannelDimension
    from transformers.models.pixtral.image_processing_pil_pixtral import get_resize_output_image_size
    from transformers.models.pixtral.processing_pixtral import PixtralProcessor
    print("seed", seed)
    rng = np.random.default_rng(seed)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 6000, (1500, 2))]
    sizes += [(h, w) for h in (1, 2, 15, 16, 17, 28, 29, L - 1, L, L + 1, 2 * L)
              for w in (1, 3, 16, 28, 333, L, L + 1, 3 * L)]
    sizes += [(1, 3000), (2, 5000), (4000, 3)]  # a side floors to 0 in transformers
    hf_self = _hf_processor_self(patch, merge, L)
    pipe = vlmprep.presets.get("pixtral", patch_size=patch, merge_size=merge, longest_edge=L)
    q = patch * merge
    for h, w in sizes:
        img = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (h, w, 3))  # shape only, no memory
        want = get_resize_output_image_size(img, (L, L), (q, q), ChannelDimension.LAST)
        if min(want) < 1:  # transformers' resize fails on it: an ImageError here
            with pytest.raises(vlmprep.ImageError, match="longest_edge"):
                plan_image(pipe, (h, w))
            continue
        p = plan_image(pipe, (h, w))
        assert p.resized_hw == tuple(want), (seed, h, w)
        s = PixtralProcessor.replace_image_token(hf_self, {"image_sizes": [want]}, 0)
        assert p.placeholder == s, (seed, h, w)
        assert p.num_tokens == s.count("[IMG"), (seed, h, w)  # [IMG], [IMG_BREAK], [IMG_END]
        assert p.grid_thw == [(1, want[0] // patch, want[1] // patch)]
    # The processor's own token count (what vLLM schedules with), on sizes cheap for its
    # np.zeros((h, w, 3)) probe; heights 1 and 3 are left out: that probe then reads as
    # channels-first and counts a (w, 3) image (a transformers quirk, not the processor's output).
    small = [(h, w) for h, w in sizes if h * w <= 1_500_000 and h not in (1, 3) and min(
        get_resize_output_image_size(np.broadcast_to(np.zeros((1, 1, 3)), (h, w, 3)), (L, L),
                                     (q, q), ChannelDimension.LAST)) > 0][:60]
    got = [plan_image(pipe, hw).num_tokens for hw in small]
    want = PixtralProcessor._get_num_multimodal_tokens(hf_self, image_sizes=small)
    assert got == want["num_image_tokens"], seed


# -- pixels and to_hf ------------------------------------------------------------------------------
def _batch_inputs():
    from PIL import Image
    arrs = [crop(*p) for p in PHOTOS] + [tiled("rocket", 1010, 1390)]  # the last is downscaled
    items = [encode(arrs[0], "jpeg"), Image.fromarray(arrs[1]), arrs[2],
             torch.from_numpy(arrs[3]).permute(2, 0, 1), encode(arrs[4], "png")]
    oracle_in = [hf_view(items[0]), Image.fromarray(arrs[1]), Image.fromarray(arrs[2]),
                 Image.fromarray(arrs[3]), hf_view(items[4])]
    return items, oracle_in


def _valid(pv, sizes):
    """Concatenated valid (unpadded) pixels of a (B, C, Hmax, Wmax) batch."""
    return torch.cat([pv[i, :, :h, :w].reshape(-1) for i, (h, w) in enumerate(sizes.tolist())])


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_pixels_and_to_hf_match_transformers(backend):
    items, oracle_in = _batch_inputs()
    bound = (0, 0.0) if backend == "reference" else (3, 0.5)
    # uint8 (resized, not normalized) against the raw oracle.
    got = _proc(backend=backend, dtype="uint8")(items)
    want = hf_outputs("pixtral", "pil", oracle_in, raw=True)
    hf = got.to_hf()
    assert got.layout == "patches" and hf["pixel_values"].dtype == want["pixel_values"].dtype
    assert hf["pixel_values"].shape == want["pixel_values"].shape == (5, 3, 752, 1024)
    assert torch.equal(hf["image_sizes"], want["image_sizes"])
    mx, mean = _levels(_valid(hf["pixel_values"], want["image_sizes"]),
                       _valid(want["pixel_values"], want["image_sizes"]))
    assert mx <= bound[0] and mean <= bound[1], (backend, mx, mean)
    # float32 to_hf against the normalized oracle: same keys, types, shapes, dtypes.
    got = _proc(backend=backend)(items)
    hf = got.to_hf()
    want = hf_outputs("pixtral", "pil", oracle_in)
    assert set(hf) == set(want) == {"pixel_values", "image_sizes"}
    for k in want:
        assert type(hf[k]) is type(want[k]) and hf[k].shape == want[k].shape, k
        assert hf[k].dtype == want[k].dtype, k
    assert torch.equal(hf["image_sizes"], want["image_sizes"])
    pad = torch.ones_like(want["pixel_values"], dtype=torch.bool)
    for i, (h, w) in enumerate(want["image_sizes"].tolist()):
        pad[i, :, :h, :w] = False
    assert hf["pixel_values"][pad].abs().max() == 0 and want["pixel_values"][pad].abs().max() == 0
    if backend == "reference":
        assert torch.equal(hf["pixel_values"], want["pixel_values"])
    else:
        level = 1 / 255 / min(config("pixtral")["image_std"])
        mx, mean = _levels(_valid(hf["pixel_values"], want["image_sizes"]),
                           _valid(want["pixel_values"], want["image_sizes"]))
        assert mx <= 3 * level + 1e-5 and mean <= 0.5 * level, (mx / level, mean / level)
    # Multi-image samples: the processor flattens them; only the count is checked.
    nested = hf_outputs("pixtral", "pil", [oracle_in[:2], oracle_in[2:]])
    hf2 = got.to_hf(images_per_sample=[2, 3])
    assert all(hf2[k].shape == nested[k].shape for k in nested)
    with pytest.raises(ValueError, match="images_per_sample"):
        got.to_hf(images_per_sample=[2, 2])
    # PackedBatch: one raster sequence per image; rows are the conv's patches of the image.
    plan = _proc(backend=backend).plan(items)
    assert got.num_tokens == plan.num_tokens and got.placeholders == [p.placeholder for p in plan]
    assert got.grid_thw.tolist() == [list(g) for p in plan for g in p.grid_thw]
    assert got.image_index.tolist() == [0, 1, 2, 3, 4]
    assert got.seqlens == [int(g.prod()) for g in got.grid_thw]
    assert got.pixel_values.shape == (plan.total_patches, 768)
    for i, (h, w) in enumerate(want["image_sizes"].tolist()):
        # torch's unfold gives a stride-16 conv's view: (C*16*16, L) columns in raster order.
        rows = torch.nn.functional.unfold(hf["pixel_values"][i:i + 1, :, :h, :w], 16, stride=16)
        s, e = got.cu_seqlens[i].item(), got.cu_seqlens[i + 1].item()
        assert torch.equal(got.pixel_values[s:e], rows[0].T), i


@pytest.mark.hf
def test_mistral_small_variant_pixels():
    # PixtralProcessor for Mistral-Small-3.1 hands patch 14 * merge 2 = 28 to the image processor.
    import transformers
    from PIL import Image
    arrs = [crop("astronaut", 301, 453), tiled("coffee", 1600, 1100)]
    oracle = transformers.PixtralImageProcessorPil(patch_size=28, size={"longest_edge": 1540})
    want = oracle([Image.fromarray(a) for a in arrs], return_tensors="pt")
    got = vlmprep.Processor("pixtral", backend="reference", **MISTRAL_SMALL)(arrs)
    hf = got.to_hf()
    assert torch.equal(hf["image_sizes"], want["image_sizes"])
    assert torch.equal(hf["pixel_values"], want["pixel_values"])
    assert got.grid_thw.tolist() == [[1, h // 14, w // 14] for h, w in want["image_sizes"].tolist()]
    assert got.num_tokens == [(h // 28) * (w // 28 + 1) for h, w in want["image_sizes"].tolist()]


def test_split_concat_and_skip(seed):
    from vlmprep.pack import concat
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 120)), int(rng.integers(1, 120)), 3),
                         dtype=np.uint8) for _ in range(3)]
    proc = vlmprep.Processor("pixtral", backend="reference", errors="skip")
    b = proc([imgs[0], b"junk", imgs[1], imgs[2]])
    assert list(b.errors) == [1] and b.num_tokens[1] == 0 and b.placeholders[1] == ""
    assert b.to_hf()["pixel_values"].shape[0] == 3
    parts = list(b.split())
    assert [p.num_seqs for p in parts] == [1, 0, 1, 1]
    for img, part in zip(imgs, [parts[0], parts[2], parts[3]]):
        one = proc([img])
        assert torch.equal(part.pixel_values, one.pixel_values)
        assert torch.equal(part.to_hf()["pixel_values"], one.to_hf()["pixel_values"])
    back = concat(parts)
    assert torch.equal(back.pixel_values, b.pixel_values)
    assert back.cu_seqlens.tolist() == b.cu_seqlens.tolist() and back.num_tokens == b.num_tokens


def test_too_thin_image_is_an_image_error():
    # 1 x 3000: floor(1 / (3000/1024)) = 0 rows (transformers' resize fails on it too).
    proc = vlmprep.Processor("pixtral", backend="reference", errors="skip")
    b = proc([np.zeros((1, 3000, 3), np.uint8), np.zeros((1, 1, 3), np.uint8)])
    assert list(b.errors) == [0] and "longest_edge" in str(b.errors[0])
    assert b.num_tokens == [0, 2]


def test_from_pretrained_and_overrides(tmp_path):
    import json
    assert vlmprep.presets.from_config(config("pixtral")) == vlmprep.presets.get("pixtral")
    # A Mistral-Small-3.1 preprocessor_config (patch 14 as a dict, 1540): merge 2 is inferred.
    cfg = dict(config("pixtral"), patch_size={"height": 14, "width": 14},
               size={"longest_edge": 1540}, image_processor_type="PixtralImageProcessorFast")
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(cfg))
    proc = vlmprep.Processor.from_pretrained(tmp_path, backend="reference")
    assert proc.pipeline == vlmprep.presets.get("pixtral", **MISTRAL_SMALL)
    assert proc.plan([np.zeros((1080, 1920, 3), np.uint8)]).num_tokens == [1736]
    cfg["spatial_merge_size"] = 1  # an explicit merge wins over the guess
    assert vlmprep.presets.from_config(cfg).patchify.merge_size == 1
    with pytest.raises(ValueError, match="patch_size"):
        vlmprep.presets.from_config(dict(cfg, patch_size={"height": 8, "width": 16}))
    p = vlmprep.presets.get("pixtral")
    assert vlmprep.Pipeline.from_dict(p.to_dict()) == p
    with pytest.raises(ValueError, match="temporal_patch_size"):
        p.replace(temporal_patch_size=2)
