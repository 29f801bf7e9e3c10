"""Size sweeps (>= 2,000 fresh random sizes per family, seed in every failure message) against
transformers' own geometry functions, for the families whose test files sweep fewer: siglip and
llava-1.5 (none), idefics3, pixtral, siglip2-naflex and gemma3. Shape-only calls, no pixels.
Every sweep includes 1x1 and extreme aspect ratios (1xN, Nx1).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hfref import hf_processor

import vlmprep
from vlmprep.plan import plan_image

pytestmark = pytest.mark.hf
N = 2000


def _sizes(seed: int, hi: int = 6000, extreme: int = 5000) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, hi, (N, 2))]
    sizes += [(int(h), int(w)) for h, w in rng.integers(1, 400, (200, 2))]  # small: upscales
    for n in [1, 2, 3, 7, 16, 100, 333, 1000, extreme // 2, extreme] + \
            [int(v) for v in rng.integers(1, extreme, 20)]:
        sizes += [(1, n), (n, 1), (2, n), (n, 2)]
    return list(dict.fromkeys(sizes))


def test_siglip_fixed_squash(seed):
    pipe = vlmprep.presets.get("siglip")
    sizes = _sizes(seed)
    assert len(sizes) >= 2000 and (1, 1) in sizes and (1, 5000) in sizes
    for hw in sizes:
        p = plan_image(pipe, hw)
        assert (p.resized_hw, p.tiles, p.grid_thw, p.num_tokens, p.num_patches) == (
            (384, 384), [(0, 0, 384, 384)], [(1, 27, 27)], (384 // 14) ** 2, 729), (seed, hw)


def test_llava15_resize_and_center_crop(seed):
    from transformers.image_transforms import get_resize_output_image_size
    pipe = vlmprep.presets.get("llava-1.5")
    sizes = _sizes(seed)
    sizes += [(h, w) for h in (1, 335, 336, 337, 672, 673) for w in (1, 3, 335, 336, 337, 1009)]
    for h, w in sizes:
        fake = np.broadcast_to(np.zeros((), np.uint8), (h, w, 3))  # shape only
        rh, rw = get_resize_output_image_size(fake, 336, default_to_square=False,
                                              input_data_format="channels_last")
        p = plan_image(pipe, (h, w))
        assert p.resized_hw == (rh, rw), (seed, h, w)
        # transformers.image_transforms.center_crop: top = (H - 336) // 2, left = (W - 336) // 2
        assert p.tiles == [((rh - 336) // 2, (rw - 336) // 2, 336, 336)], (seed, h, w)
        assert p.num_tokens == 576 and p.grid_thw == [(1, 24, 24)], (seed, h, w)


def test_idefics3_rows_cols_and_tokens(seed):
    from transformers import Idefics3Processor
    hf = hf_processor("idefics3", "pil")
    fake = SimpleNamespace(_merge_kwargs=lambda **kw: {"images_kwargs": {}}, image_seq_len=169,
                           image_processor=hf, tokenizer=lambda t, add_special_tokens=False:
                           {"input_ids": [271]})  # "\n\n" is one token (Llama 3)
    pipe = vlmprep.presets.get("idefics3")
    sizes = _sizes(seed)
    want = Idefics3Processor._get_num_multimodal_tokens(fake, image_sizes=sizes)
    for hw, n_tok, n_img in zip(sizes, want["num_image_tokens"], want["num_image_patches"]):
        n, rows, cols = hf.get_number_of_image_patches(*hw, {})
        p = plan_image(pipe, hw)
        t = p.tiles[0][2]
        got_rc = (0, 0) if len(p.tiles) == 1 else (p.resized_hw[0] // t, p.resized_hw[1] // t)
        assert (len(p.tiles), got_rc) == (n, (rows, cols)) and n == n_img, (seed, hw)
        assert p.num_tokens == n_tok, (seed, hw)


def test_pixtral_resize_and_prompt(seed):
    from transformers.image_utils import ChannelDimension
    from transformers.models.pixtral.image_processing_pil_pixtral import get_resize_output_image_size
    from transformers.models.pixtral.processing_pixtral import PixtralProcessor
    fake = SimpleNamespace(patch_size=16, spatial_merge_size=1, image_token="[IMG]",
                           image_break_token="[IMG_BREAK]", image_end_token="[IMG_END]")
    pipe = vlmprep.presets.get("pixtral")
    n_ok = 0
    for h, w in _sizes(seed, extreme=20000):
        img = np.broadcast_to(np.zeros((1, 1, 3), np.uint8), (h, w, 3))
        want = get_resize_output_image_size(img, (1024, 1024), (16, 16), ChannelDimension.LAST)
        if min(want) < 1:  # transformers' resize fails on it: an ImageError here
            with pytest.raises(vlmprep.ImageError):
                plan_image(pipe, (h, w))
            continue
        p = plan_image(pipe, (h, w))
        assert p.resized_hw == tuple(want), (seed, h, w)
        s = PixtralProcessor.replace_image_token(fake, {"image_sizes": [want]}, 0)
        assert p.placeholder == s and p.num_tokens == s.count("[IMG"), (seed, h, w)
        n_ok += 1
    assert n_ok >= 2000


def test_siglip2_naflex_size_and_tokens(seed):
    from transformers.models.siglip2.image_processing_pil_siglip2 import get_image_size_for_max_num_patches
    pipe = vlmprep.presets.get("siglip2-naflex")
    for h, w in _sizes(seed, extreme=20000):
        rh, rw = get_image_size_for_max_num_patches(h, w, 16, 256)
        p = plan_image(pipe, (h, w))
        assert p.resized_hw == (rh, rw), (seed, h, w)
        n = (rh // 16) * (rw // 16)  # the valid rows of pixel_attention_mask
        assert p.num_tokens == n and p.grid_thw == [(1, rh // 16, rw // 16)], (seed, h, w)


def test_gemma3_squash_and_pan_and_scan(seed):
    from transformers import Gemma3Processor
    hf = hf_processor("gemma3", "pil")
    pas_kw = {"pan_and_scan_min_crop_size": 256, "pan_and_scan_max_num_crops": 4,
              "pan_and_scan_min_ratio_to_activate": 1.2}
    fake = SimpleNamespace(image_seq_length=256, _merge_kwargs=lambda **kw: {"images_kwargs": {}})
    sizes = _sizes(seed)
    want_tok = Gemma3Processor._get_num_multimodal_tokens(fake, image_sizes=sizes)
    squash = vlmprep.presets.get("gemma3")
    pas = vlmprep.presets.get("gemma3", do_pan_and_scan=True)
    n_crops = 0
    for (h, w), n_tok in zip(sizes, want_tok["num_image_tokens"]):
        p = plan_image(squash, (h, w))
        assert (p.tiles, p.num_tokens) == ([(0, 0, 896, 896)], n_tok), (seed, h, w)
        rows = np.broadcast_to(np.arange(h)[None, :, None], (1, h, w))
        cols = np.broadcast_to(np.arange(w)[None, None, :], (1, h, w))
        crops = [(int(a[0, 0, 0]), int(b[0, 0, 0]), a.shape[1], a.shape[2]) for a, b in
                 zip(hf.pan_and_scan(rows, **pas_kw), hf.pan_and_scan(cols, **pas_kw))]
        q = plan_image(pas, (h, w))
        # the global image first, then one 896x896 tile per crop
        assert len(q.tiles) == 1 + len(crops), (seed, h, w, crops, q.tiles)
        assert [c.box for c in q.canvases if c.box is not None] == crops, (seed, h, w)
        assert q.num_tokens == 256 * (1 + len(crops)), (seed, h, w)
        n_crops += len(crops) > 0
    assert n_crops > 100  # pan & scan really ran on a good share of the sweep
