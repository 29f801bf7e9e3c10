"""LLaVA-NeXT and LLaVA-OneVision (anyres): geometry, tokens, pixels and to_hf against
transformers' processors built from the public checkpoints' configs.

Oracles: transformers' own ``select_best_resolution`` / ``get_patch_output_size`` / the image
processors' ``_get_padding_size`` over a fresh random sweep (seed printed on failure), the
processors' ``_get_num_multimodal_tokens`` and prompt expansion (built offline with a tiny
word-level tokenizer), the PIL-backend image processors for pixels, and PEERS.md 2.4 / 2.5.
Pixel bounds as tests/backends/test_parity_hf.py: reference identical (same Pillow calls), torch
max 3 / mean 0.5 uint8 levels (torchvision's fixed-point resampler vs Pillow's, PEERS.md 0.2).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.imgdata import crop, encode, hf_view, tiled
from hfref import CONFIGS, config, hf_outputs, hf_processor

import vlmprep
from vlmprep.pack import concat
from vlmprep.plan import anyres, plan_image

PRESETS = ["llava-next", "llava-onevision"]
PHOTOS = [("astronaut", 301, 453), ("hopper", 477, 389), ("chelsea", 17, 451), ("coffee", 399, 37)]


def _proc(preset, **kw):
    return vlmprep.Processor.from_pretrained(str(CONFIGS / f"{preset}.json"), **kw)


# -- PEERS.md tables (verified there against the processors): H x W -> (best, crops, tokens) -----
TABLES = {
    "llava-next": {(1, 1): ((336, 672), 3, 1176), (17, 900): ((336, 1008), 4, 722),
                   (900, 17): ((1008, 336), 4, 792), (333, 777): ((336, 1008), 4, 1944),
                   (1080, 1920): ((672, 672), 5, 1948), (3000, 4000): ((672, 672), 5, 2340)},
    "llava-onevision": {(1, 1): ((384, 384), 2, 1485), (17, 900): ((384, 1152), 4, 811),
                        (900, 17): ((1152, 384), 4, 891), (333, 777): ((384, 1152), 4, 2457),
                        (1080, 1920): ((1152, 1920), 16, 7269),
                        (3000, 4000): ((1920, 2304), 31, 7309)},
}


@pytest.mark.parametrize("preset", PRESETS)
def test_peers_tables(preset):
    pipe = vlmprep.presets.get(preset)
    tile = 336 if preset == "llava-next" else 384
    for hw, (best, crops, tokens) in TABLES[preset].items():
        p = plan_image(pipe, hw)
        assert p.canvases[0].hw == best, hw
        assert (len(p.tiles), p.num_tokens) == (crops, tokens), hw
        assert p.placeholder == "<image>" * tokens
        # base image first (its own tile-size canvas), then the pinpoint canvas row-major.
        assert p.tile_canvas[0] == 1 and p.canvases[1].hw == (tile, tile)
        rows, cols = best[0] // tile, best[1] // tile
        assert p.tiles[1:] == [(r * tile, c * tile, tile, tile) for r in range(rows)
                               for c in range(cols)]
        g = tile // 14
        assert p.grid_thw == [(1, g, g)] * crops and p.num_patches == g * g * crops


def test_next_worked_example():
    # PEERS.md 2.4: 333x777 -> (336, 1008); aspect-fit: h = 336, w = min(ceil(777*336/333), 1008)
    # = 784; centred: left (1008 - 784) // 2 = 112; black fill.
    p = plan_image(vlmprep.presets.get("llava-next"), (333, 777))
    c = p.canvases[0]
    assert (c.resize_hw, c.size, c.offset, c.fill) == ((336, 784), (336, 1008), (0, 112), (0, 0, 0))


# -- geometry sweep against transformers' own functions -------------------------------------------
@pytest.fixture(scope="module")
def tf():
    """The transformers oracles: processors built offline with a synthetic tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.llava_next.processing_llava_next import LlavaNextProcessor
    from transformers.models.llava_onevision.processing_llava_onevision import LlavaOnevisionProcessor
    from transformers.models.llava_onevision.video_processing_llava_onevision import LlavaOnevisionVideoProcessor

    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "hi": 1}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    tok.add_tokens(["<image>", "<video>"], special_tokens=True)
    # llava-hf processor_config.json values (PEERS.md 2.4 / 2.5), not the class defaults.
    nxt = LlavaNextProcessor(image_processor=hf_processor("llava-next", "pil"), tokenizer=tok,
                             patch_size=14, vision_feature_select_strategy="default",
                             num_additional_image_tokens=1)
    ov = LlavaOnevisionProcessor(image_processor=hf_processor("llava-onevision", "pil"),
                                 tokenizer=tok, video_processor=LlavaOnevisionVideoProcessor(),
                                 num_image_tokens=729, vision_feature_select_strategy="full",
                                 vision_aspect_ratio="anyres_max_9")
    return {"llava-next": nxt, "llava-onevision": ov, "tok": tok}


def _sizes(rng, n):
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 6000, (n, 2))]
    sizes += [(int(h), int(w)) for h, w in rng.integers(1, 400, (n // 4, 2))]  # small: upscales
    sizes += [(h, w) for h in (1, 2, 335, 336, 337, 383, 384, 385, 672, 1008, 2304)
              for w in (1, 3, 336, 384, 672, 768, 1008, 1152, 2304, 4000)]
    sizes += [(a * k, b * k) for a in range(1, 7) for b in range(1, 7) for k in (1, 7, 56, 111)]
    return sizes


@pytest.mark.hf
@pytest.mark.parametrize("preset", PRESETS)
def test_geometry_and_tokens_sweep_match_transformers(preset, tf, seed):
    from transformers.image_processing_utils import get_patch_output_size, select_best_resolution
    from transformers.image_utils import ChannelDimension
    rng = np.random.default_rng(seed)
    sizes = _sizes(rng, 1500)
    pipe = vlmprep.presets.get(preset)
    op = pipe.sizing
    pins = config(preset)["image_grid_pinpoints"]
    pil = hf_processor(preset, "pil")
    want_tokens = tf[preset]._get_num_multimodal_tokens(image_sizes=sizes)["num_image_tokens"]
    for (h, w), n in zip(sizes, want_tokens):
        best = select_best_resolution((h, w), pins)
        assert anyres.select_best_resolution(h, w, op.pinpoints) == tuple(best), (seed, h, w)
        fake = np.broadcast_to(np.zeros((), np.uint8), (3, h, w))  # only its shape is read
        rhw = get_patch_output_size(fake, best, input_data_format=ChannelDimension.FIRST)
        pad = pil._get_padding_size(rhw, best)
        p = plan_image(pipe, (h, w))
        c = p.canvases[0]
        assert (c.resize_hw, c.size, c.offset) == (tuple(rhw), tuple(best),
                                                   (pad[0][0], pad[1][0])), (seed, h, w)
        assert p.num_tokens == n and len(p.placeholder) == 7 * n, (seed, h, w)


@pytest.mark.hf
def test_placeholders_match_processor_prompts(tf, seed):
    from PIL import Image
    tok = tf["tok"]
    img_id = tok.convert_tokens_to_ids("<image>")
    rng = np.random.default_rng(seed)
    ims = [Image.fromarray(rng.integers(0, 256, hw + (3,), dtype=np.uint8))
           for hw in [(37, 61), (120, 20), (5, 300)]]
    for preset in PRESETS:
        plans = vlmprep.Processor(preset).plan(ims)
        for im, p in zip(ims, plans):
            out = tf[preset](text=["hi <image> hi"], images=[im])
            assert sum(t == img_id for t in out["input_ids"][0]) == p.num_tokens == \
                len(p.placeholder) // len("<image>"), preset
    # OneVision, a two-image sample: each image gets 729 + 1 newline (strategy "full").
    out = tf["llava-onevision"](text=["<image> hi <image>"], images=[ims[:2]])
    multi = vlmprep.Processor("llava-onevision", multi_image=True).plan(ims[:2])
    assert sum(t == img_id for t in out["input_ids"][0]) == sum(multi.num_tokens) == 2 * 730
    assert multi[0].placeholder == "<image>" * 730 and multi[0].tiles == [(0, 0, 384, 384)]


# -- pixels and to_hf ------------------------------------------------------------------------------
def _levels(a, b):
    d = (a.double() - b.double()).abs()
    return float(d.max()), float(d.mean())


def _inputs():
    from PIL import Image
    arrs = [crop(*p) for p in PHOTOS] + [tiled("rocket", 331, 1010)]
    items = [encode(arrs[0], "jpeg"), Image.fromarray(arrs[1]), arrs[2],
             torch.from_numpy(arrs[3]).permute(2, 0, 1), encode(arrs[4], "png")]
    oracle = [hf_view(items[0]), Image.fromarray(arrs[1]), Image.fromarray(arrs[2]),
              Image.fromarray(arrs[3]), hf_view(items[4])]
    return items, oracle


def _check_pixels(got_hf, want, backend, preset, uint8):
    assert set(got_hf) == set(want), (set(got_hf), set(want))
    for k in want:
        assert got_hf[k].shape == want[k].shape and got_hf[k].dtype == want[k].dtype, k
        if k != "pixel_values":
            assert torch.equal(got_hf[k], want[k]), k
    if backend == "reference":
        assert torch.equal(got_hf["pixel_values"], want["pixel_values"]), preset
        return 0.0, 0.0
    level = 1.0 if uint8 else 1 / 255 / min(config(preset)["image_std"])
    mx, mean = _levels(got_hf["pixel_values"], want["pixel_values"])
    assert mx <= 3 * level + 1e-5 and mean <= 0.5 * level, (preset, backend, mx, mean)
    return mx / level, mean / level


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
@pytest.mark.parametrize("preset", PRESETS)
def test_pixels_and_to_hf_match_transformers(preset, backend):
    items, oracle = _inputs()
    # uint8 (resized, padded, tiled, not normalized) against the raw oracle, batch-padded.
    got = _proc(preset, backend=backend, dtype="uint8")(items)
    want = hf_outputs(preset, "pil", oracle, raw=True)
    assert got.layout == "tiles" and got.pixel_values.dtype == torch.uint8
    mx_u8 = _check_pixels(got.to_hf(), {k: torch.as_tensor(v) for k, v in want.items()},
                          backend, preset, uint8=True)
    # float32 to_hf against the normalized oracle: keys, shapes, dtypes, padding, values.
    got = _proc(preset, backend=backend)(items)
    want = hf_outputs(preset, "pil", oracle)
    mx_f = _check_pixels(got.to_hf(), want, backend, preset, uint8=False)
    print(f"{preset} {backend}: uint8 max/mean {mx_u8}, float32 (levels) {mx_f}")
    # One ViT sequence per tile; image_index maps tiles to images; plan() equals proc().
    plan = _proc(preset, backend=backend).plan(items)
    assert torch.bincount(got.image_index, minlength=5).tolist() == [len(p.tiles) for p in plan]
    assert got.num_tokens == plan.num_tokens and got.placeholders == [p.placeholder for p in plan]
    assert got.seqlens == [int(g.prod()) for g in got.grid_thw]
    assert [list(p.source_hw) for p in plan] == want["image_sizes"].tolist()


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_onevision_multi_image_samples(backend):
    # transformers: a nested list [[a, b], [c]] pads a and b to squares with the mean colour
    # (int(255 * 0.5) = 127) and gives each one 384 tile; c (alone) gets its anyres tiles.
    items, oracle = _inputs()
    for raw in (True, False):
        kw = {"dtype": "uint8"} if raw else {}
        multi = _proc("llava-onevision", backend=backend, multi_image=True, **kw)(items[:2])
        single = _proc("llava-onevision", backend=backend, **kw)(items[2:3])
        got = concat([multi, single]).to_hf(images_per_sample=[2, 1])
        want = {k: torch.as_tensor(v) for k, v in
                hf_outputs_nested(oracle[:2], oracle[2:3], raw).items()}
        assert want["pixel_values"].shape[:2] == (3, single.num_seqs)  # 1, 1, anyres
        _check_pixels(got, want, backend, "llava-onevision", uint8=raw)
    # The padding colour really is the mean: the astronaut (301x453) pads 76 rows at the top.
    u8 = _proc("llava-onevision", backend=backend, multi_image=True, dtype="uint8")(items[:1])
    assert multi.num_tokens == [730, 730] and u8.pixel_values.shape == (1, 3, 384, 384)
    assert (u8.pixel_values[0, :, :56, :] == 127).all()
    # A batch processed the other way round cannot pass for multi-image samples.
    assert single.to_hf(images_per_sample=[1])["batch_num_images"].tolist() == [1]
    with pytest.raises(ValueError, match="multi_image=True"):
        _proc("llava-onevision")(items[:2]).to_hf(images_per_sample=[2])
    with pytest.raises(ValueError, match="multi_image=True"):
        multi.to_hf()  # a flat list is single-image samples to the processor


def hf_outputs_nested(sample_a: list, sample_b: list, raw: bool) -> dict:
    return dict(hf_processor("llava-onevision", "pil", raw)([sample_a, sample_b],
                                                            return_tensors="pt"))


@pytest.mark.hf
def test_next_nested_samples_flatten_like_transformers():
    items, oracle = _inputs()
    got = _proc("llava-next", backend="reference")(items[:3]).to_hf(images_per_sample=[2, 1])
    want = dict(hf_processor("llava-next", "pil")([oracle[:2], oracle[2:3]], return_tensors="pt"))
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.parametrize("preset", PRESETS)
def test_split_concat_and_skip(preset, seed):
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 120)), int(rng.integers(1, 120)), 3),
                         dtype=np.uint8) for _ in range(3)]
    proc = vlmprep.Processor(preset, backend="reference", errors="skip")
    b = proc([imgs[0], b"junk", imgs[1], imgs[2]])
    assert list(b.errors) == [1] and b.num_tokens[1] == 0
    hf = b.to_hf()
    assert hf["pixel_values"].shape[0] == 3 and hf["image_sizes"].tolist() == [
        list(x.shape[:2]) for x in imgs]
    parts = list(b.split())
    assert [p.num_seqs for p in parts] == [len(proc.plan([x])[0].tiles) if x is not None else 0
                                           for x in (imgs[0], None, imgs[1], imgs[2])]
    for img, part in zip(imgs, [parts[0], parts[2], parts[3]]):
        assert torch.equal(part.pixel_values, proc([img]).pixel_values)
    back = concat(parts)
    assert torch.equal(back.pixel_values, b.pixel_values)
    assert back.cu_seqlens.tolist() == b.cu_seqlens.tolist()
    for k, v in back.to_hf().items():
        assert torch.equal(v, hf[k]), k


def test_from_pretrained_and_round_trip():
    for preset in PRESETS:
        p = vlmprep.presets.from_config(config(preset))
        assert p == vlmprep.presets.get(preset), preset
        assert vlmprep.Pipeline.from_dict(p.to_dict()) == p
    # Overridable fields; checkpoint values, not the class defaults (224 / CLIP mean).
    ov = vlmprep.presets.get("llava-onevision")
    assert ov.normalize.mean == (0.5, 0.5, 0.5) and ov.sizing.square_fill == (127, 127, 127)
    assert vlmprep.presets.get("llava-next").sizing.tile_size == 336
    # No pooling: 1080x1920 -> (1152, 1920), a 81 x 135 map; rows int(round(1080 * 135 / 1920,
    # 7)) = 75, so 81 - 2 * 3 = 75 rows kept: 75 * 135 + 75 newlines + 729.
    assert plan_image(ov.replace(max_num_patches=0), (1080, 1920)).num_tokens == \
        75 * 135 + 75 + 729
    assert plan_image(vlmprep.presets.get("llava-next", vision_feature_select_strategy="full"),
                      (1, 1)).num_tokens == 1177


def test_bad_fields_are_loud():
    from vlmprep import ops
    with pytest.raises(ValueError, match="multiples of tile_size"):
        ops.anyres_tile(tile_size=336, pinpoints=((336, 500),))
    with pytest.raises(ValueError, match="vision_feature_select_strategy"):
        ops.anyres_tile(vision_feature_select_strategy="cls")
    with pytest.raises(ValueError, match="square_fill"):
        ops.anyres_tile(square_fill=(300, 0, 0))
    with pytest.raises(ValueError, match="size == crop_size"):
        vlmprep.presets.from_config({**config("llava-next"), "crop_size": {"height": 224,
                                                                           "width": 224}})
