"""Gemma 3: squash, pan-and-scan crops, placeholder text, pixels and to_hf against transformers'
Gemma3ImageProcessor[Pil] built from the public checkpoint's config (pan & scan off, as
Gemma3Processor fills the config's nulls), and with ``do_pan_and_scan=True``.

Pixel bounds are those of tests/families/test_tiles_families.py (reference: identical; torch:
max 3, mean 0.5 levels: torchvision's bilinear uint8 kernel vs Pillow's, PEERS.md 0.2).
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from _support.imgdata import crop, encode, hf_view, tiled
from hfref import CONFIGS, config, hf_outputs, hf_processor

import vlmprep
from vlmprep.plan import plan_image
from vlmprep.plan.gemma3 import pan_and_scan_crops

PAS = {"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 256,
       "pan_and_scan_max_num_crops": 4, "pan_and_scan_min_ratio_to_activate": 1.2}
LEVEL = 1 / 255 / 0.5  # one uint8 level after normalization with std 0.5
SEQ = "\n\n<start_of_image>" + "<image_soft_token>" * 256 + "<end_of_image>\n\n"


def _proc(**kw):
    return vlmprep.Processor.from_pretrained(CONFIGS / "gemma3.json", **kw)


@functools.lru_cache(maxsize=None)
def _hf_pas(raw: bool):
    """The oracle with pan & scan on (Gemma3Processor's other values)."""
    import transformers
    base = hf_processor("gemma3", "pil", raw)
    return transformers.Gemma3ImageProcessorPil(**{**base.to_dict(), **PAS})


# -- geometry and prompt ---------------------------------------------------------------------------
# PEERS.md 2.12 (verified there with Gemma3Processor): H x W -> pan-and-scan crops (on).
TABLE = {(333, 777): 2, (1080, 1920): 2, (3000, 4000): 2, (17, 900): 0}


@pytest.mark.parametrize("hw,crops", TABLE.items())
def test_peers_table(hw, crops):
    off = plan_image(vlmprep.presets.get("gemma3"), hw)
    assert (len(off.tiles), off.num_tokens, off.placeholder) == (1, 256, SEQ)
    assert off.resized_hw == (896, 896) and off.grid_thw == [(1, 64, 64)]
    on = plan_image(vlmprep.presets.get("gemma3", do_pan_and_scan=True), hw)
    assert len(on.tiles) == 1 + crops and on.num_tokens == 256 * (1 + crops)
    assert on.placeholder.count("<image_soft_token>") == on.num_tokens
    if crops:
        assert on.placeholder == ("Here is the original image " + SEQ + " and here are some crops "
                                  "to help you see better " + " ".join([SEQ] * crops))
    # Crops come from the original image (boxes in source pixels), each squashed to 896.
    assert [c.box for c in on.canvases[1:]] == pan_and_scan_crops(*hw, 256, 4, 1.2)
    assert all(c.parent == -1 and c.resize_hw == (896, 896) for c in on.canvases)


def test_crop_boxes_examples():
    assert pan_and_scan_crops(1080, 1920, 256, 4, 1.2) == [(0, 0, 1080, 960), (0, 960, 1080, 960)]
    # Portrait: crops stacked top to bottom; the last one shorter (ceil(1001 / 3) = 334).
    assert pan_and_scan_crops(1001, 300, 256, 4, 1.2) == [(0, 0, 334, 300), (334, 0, 334, 300),
                                                          (668, 0, 333, 300)]
    assert pan_and_scan_crops(500, 590, 256, 4, 1.2) == []  # ratio 1.18 < 1.2


@pytest.mark.hf
def test_crop_sweep_matches_transformers(seed):
    # transformers' own pan_and_scan over random sizes: coordinate planes (broadcast views, no
    # memory) tell where each slice starts and its shape.
    rng = np.random.default_rng(seed)
    hf = hf_processor("gemma3", "pil")
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 6000, (600, 2))]
    sizes += [(int(h), int(w)) for h, w in rng.integers(1, 1500, (600, 2))]
    sizes += [(256, 512), (512, 256), (100, 120), (100, 119), (257, 1030), (1, 1), (300, 300)]
    for args in [(256, 4, 1.2), (100, 8, 1.0), (512, 2, 2.0)]:
        for h, w in sizes:
            rows = np.broadcast_to(np.arange(h)[None, :, None], (1, h, w))
            cols = np.broadcast_to(np.arange(w)[None, None, :], (1, h, w))
            kw = dict(zip(("pan_and_scan_min_crop_size", "pan_and_scan_max_num_crops",
                           "pan_and_scan_min_ratio_to_activate"), args))
            r = hf.pan_and_scan(rows, **kw)
            c = hf.pan_and_scan(cols, **kw)
            want = [(int(a[0, 0, 0]), int(b[0, 0, 0]), a.shape[1], a.shape[2]) for a, b in zip(r, c)]
            assert pan_and_scan_crops(h, w, *args) == want, (seed, h, w, args)


# -- pixels and to_hf ------------------------------------------------------------------------------
def _levels(a, b):
    d = (a.double() - b.double()).abs()
    return float(d.max()), float(d.mean())


def _batch():
    from PIL import Image
    arrs = [tiled("astronaut", 301, 653), crop("hopper", 477, 389), crop("chelsea", 17, 451),
            crop("coffee", 399, 37), tiled("rocket", 290, 1010)]
    items = [encode(arrs[0], "jpeg"), Image.fromarray(arrs[1]), arrs[2],
             torch.from_numpy(arrs[3]).permute(2, 0, 1), encode(arrs[4], "png")]
    oracle_in = [hf_view(items[0]), Image.fromarray(arrs[1]), Image.fromarray(arrs[2]),
                 Image.fromarray(arrs[3]), hf_view(items[4])]
    return items, oracle_in


@pytest.mark.hf
@pytest.mark.parametrize("pas", [False, True], ids=["squash", "pan_and_scan"])
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_pixels_and_to_hf_match_transformers(backend, pas):
    items, oracle_in = _batch()
    kw = {"do_pan_and_scan": True} if pas else {}
    oracle = (lambda raw: dict(_hf_pas(raw)(oracle_in, return_tensors="pt"))) if pas else \
        (lambda raw: hf_outputs("gemma3", "pil", oracle_in, raw=raw))
    bound = (0, 0.0) if backend == "reference" else (3, 0.5)
    got = _proc(backend=backend, dtype="uint8", **kw)(items)
    want = oracle(True)
    assert got.layout == "tiles" and got.pixel_values.dtype == torch.uint8
    assert got.pixel_values.shape == want["pixel_values"].shape
    mx, mean = _levels(got.pixel_values, want["pixel_values"])
    assert mx <= bound[0] and mean <= bound[1], (backend, pas, mx, mean)
    got = _proc(backend=backend, **kw)(items)
    hf, want = got.to_hf(), oracle(False)
    assert set(hf) == set(want) == {"pixel_values", "num_crops"}
    for k in want:
        assert hf[k].shape == want[k].shape and hf[k].dtype == want[k].dtype, k
    assert torch.equal(hf["num_crops"], want["num_crops"])
    # Pan & scan on: 301x653 -> 2 crops (width 327), 290x1010 -> 3 (337); the others none.
    assert want["num_crops"].tolist() == ([2, 0, 0, 0, 3] if pas else [0] * 5)
    if backend == "reference":
        assert torch.equal(hf["pixel_values"], want["pixel_values"])
    else:
        mx, mean = _levels(hf["pixel_values"], want["pixel_values"])
        assert mx <= 3 * LEVEL + 1e-5 and mean <= 0.5 * LEVEL, (mx, mean)
    plan = _proc(backend=backend, **kw).plan(items)
    counts = torch.bincount(got.image_index, minlength=5).tolist()
    assert counts == [len(p.tiles) for p in plan.images] == (want["num_crops"] + 1).tolist()
    assert got.num_tokens == plan.num_tokens == [256 * n for n in counts]
    assert got.placeholders == [p.placeholder for p in plan.images]
    assert got.seqlens == [64 * 64] * sum(counts)
    # images_per_sample: the processor flattens samples, so only the count is checked.
    assert torch.equal(got.to_hf(images_per_sample=[2, 3])["pixel_values"], hf["pixel_values"])


def test_split_concat_and_skip(seed):
    from vlmprep.pack import concat
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 120)), int(rng.integers(1, 700)), 3),
                         dtype=np.uint8) for _ in range(2)] + [np.zeros((260, 600, 3), np.uint8)]
    proc = vlmprep.Processor("gemma3", backend="reference", errors="skip", do_pan_and_scan=True,
                             pan_and_scan_min_crop_size=32)
    b = proc([imgs[0], b"junk", imgs[1], imgs[2]])
    assert list(b.errors) == [1] and b.num_tokens[1] == 0
    parts = list(b.split())
    assert parts[3].num_seqs == 3  # 600 / 260 -> 2 crops of 300
    for img, part in zip(imgs, [parts[0], parts[2], parts[3]]):
        assert torch.equal(part.pixel_values, proc([img]).pixel_values)
    back = concat(parts)
    assert torch.equal(back.pixel_values, b.pixel_values)
    assert back.cu_seqlens.tolist() == b.cu_seqlens.tolist()
    hf = back.to_hf()
    assert hf["num_crops"].tolist() == [len(proc.plan([x]).images[0].tiles) - 1 for x in imgs]


def test_from_pretrained_and_overrides():
    assert vlmprep.presets.from_config(config("gemma3")) == vlmprep.presets.get("gemma3")
    on = vlmprep.presets.from_config({**config("gemma3"), "do_pan_and_scan": True})
    assert on == vlmprep.presets.get("gemma3", do_pan_and_scan=True)
    bare = vlmprep.presets.from_config({"image_processor_type": "Gemma3ImageProcessorPil"})
    assert (bare.sizing.height, bare.sizing.width) == (224, 224)  # the class default, not 896
    with pytest.raises(ValueError, match="pan_and_scan_max_num_crops"):
        vlmprep.presets.get("gemma3", pan_and_scan_max_num_crops=1)
    with pytest.raises(ValueError, match="image_seq_length"):
        vlmprep.presets.from_config({**config("gemma3"), "image_seq_length": 64})
