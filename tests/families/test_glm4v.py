"""GLM-4.1V (``glm4v``): geometry, placeholder, pixels and to_hf against transformers 5.24's
``Glm4vImageProcessorPil`` (the oracle), ``Glm4vImageProcessor`` (torchvision) and
``Glm4vProcessor`` (built offline with a word-level tokenizer holding GLM's special tokens).

Pixel bounds: reference and torch (CPU) identical to the PIL oracle (uint8 levels and float32
bits); torch with ``match="torchvision"`` identical to the torchvision processor; dali within
the 3 levels of tests/backends/test_dali.py.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.imgdata import crop, encode, hf_view, tiled
from hfref import config, hf_outputs

import vlmprep
from vlmprep import ImageError, presets
from vlmprep.plan import plan_image
from vlmprep.plan.glm4v import IMAGE_TOKEN, glm4v_size

SPECIAL = ["<|image|>", "<|video|>", "<|begin_of_image|>", "<|end_of_image|>",
           "<|begin_of_video|>", "<|end_of_video|>"]
PHOTOS = [("astronaut", 301, 453), ("chelsea", 300, 451), ("coffee", 399, 597),
          ("hopper", 477, 389)]


def _levels(a, b) -> tuple[float, float]:
    assert a.shape == b.shape, (a.shape, b.shape)
    d = (torch.as_tensor(a).double() - torch.as_tensor(b).double()).abs()
    return float(d.max()), float(d.mean())


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "a": 2, "b": 3}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]")
    tok.add_tokens(SPECIAL, special_tokens=True)
    return tok


@pytest.fixture(scope="module")
def hf_proc():
    """``Glm4vProcessor`` from the checkpoint's image and video configs, offline."""
    from hfref import hf_processor
    from transformers import Glm4vProcessor, Glm4vVideoProcessor
    vp = Glm4vVideoProcessor.from_dict(presets.glm4v.video_configs()["glm4v"])
    return Glm4vProcessor(image_processor=hf_processor("glm4v", "pil"), tokenizer=tokenizer(),
                          video_processor=vp)


# -- values --------------------------------------------------------------------------------------
def test_checkpoint_values():
    """FAMILIES2.md section 2: size 12,544..9,633,792, patch 14 / 2 / 2, CLIP, bicubic."""
    p = presets.get("glm4v")
    r = p.sizing
    assert (r.name, r.factor, r.min_pixels, r.max_pixels, r.temporal_factor, r.interpolation) == (
        "glm4v_resize", 28, 12544, 9_633_792, 2, "bicubic")
    pf = p.patchify
    assert (pf.patch_size, pf.temporal_patch_size, pf.merge_size, pf.order) == (14, 2, 2,
                                                                                 "merge_grouped")
    assert p.normalize.mean == vlmprep.ops.CLIP_MEAN and p.normalize.std == vlmprep.ops.CLIP_STD
    assert (p.pack.image_token, p.pack.hf_output) == ("<|image|>", "glm4v")
    assert presets.from_config(config("glm4v")) == p
    # the class default longest_edge (28*28*15000) where a config has no size
    bare = presets.from_config({"image_processor_type": "Glm4vImageProcessorFast"})
    assert (bare.sizing.min_pixels, bare.sizing.max_pixels) == (12544, 11_760_000)
    with pytest.raises(ValueError, match="do_resize"):
        presets.from_config({**config("glm4v"), "do_resize": False})
    with pytest.raises(ValueError, match="min_pixels"):
        p.replace(min_pixels=10**8)


@pytest.mark.hf
def test_oracle_is_built_from_the_checkpoint_values():
    from hfref import hf_processor
    for backend in ("pil", "torchvision"):
        ip = hf_processor("glm4v", backend)
        assert (ip.size["shortest_edge"], ip.size["longest_edge"]) == (12544, 9_633_792)
        assert (ip.patch_size, ip.temporal_patch_size, ip.merge_size, int(ip.resample)) == (
            14, 2, 2, 3)


# -- geometry ------------------------------------------------------------------------------------
L = 9_633_792
#: edges: 1x1 and tiny (the upscale below 28), aspect 200 (after the upscale: 1x200 passes,
#: 1x201 and 27x5401 fail), around min_pixels (2*h*w vs 12,544) and max_pixels (2*h*w vs
#: 9,633,792), the largest source the decoder allows (178,956,970 pixels).
EDGES = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 5), (13, 27), (27, 27), (28, 28), (29, 29),
         (1, 200), (200, 1), (1, 201), (201, 1), (27, 5400), (27, 5401), (28, 5600), (28, 5601),
         (100, 20000), (100, 20001), (56, 112), (56, 111), (55, 112), (79, 79), (80, 80),
         (56, 84), (2184, 2184), (2185, 2185), (2194, 2195), (2212, 2184), (2196, 2196),
         (1092, 4410), (4410, 1092), (3000, 4000), (13377, 13377), (8000, 22369), (1, 1500),
         (1500, 1), (480, 640), (1080, 1920), (1920, 1080)]


@pytest.mark.hf
def test_geometry_sweep_matches_transformers(hf_proc, seed):
    """resized size (transformers' smart_resize as its image processors call it), grid and token
    counts (``Glm4vProcessor._get_num_multimodal_tokens``), errors where transformers raises."""
    from transformers.models.glm4v.image_processing_pil_glm4v import smart_resize
    print("seed", seed)
    rng = np.random.default_rng(seed)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 7000, (1500, 2))]
    sizes += [(int(h), int(w)) for h, w in rng.integers(1, 60, (200, 2))]
    sizes += EDGES
    pipe = presets.get("glm4v")
    ok = []
    for h, w in sizes:
        try:
            want = smart_resize(2, h, w, temporal_factor=2, factor=28, min_pixels=12544,
                                max_pixels=L)
        except ValueError:
            with pytest.raises(ImageError, match="aspect ratio"):
                plan_image(pipe, (h, w))
            continue
        p = plan_image(pipe, (h, w))
        assert p.resized_hw == tuple(want), (seed, h, w)
        assert p.grid_thw == [(1, want[0] // 14, want[1] // 14)]
        assert p.num_tokens == p.num_embeddings == want[0] * want[1] // (28 * 28)
        assert p.placeholder == IMAGE_TOKEN * p.num_tokens
        assert glm4v_size(h, w) == p.resized_hw
        ok.append(((h, w), p.num_tokens, p.num_patches))
    assert len(ok) > len(sizes) * 0.8
    got = hf_proc._get_num_multimodal_tokens(image_sizes=[hw for hw, _, _ in ok])
    assert got["num_image_tokens"] == [n for _, n, _ in ok]
    assert got["num_image_patches"] == [n for _, _, n in ok]


#: sizes run through the real PIL processor (black images), with its prompt expansion
LIVE = [(1, 1), (1, 2), (2, 1), (3, 5), (13, 27), (27, 27), (1, 150), (150, 1), (1, 201),
        (27, 5401), (56, 111), (56, 112), (79, 79), (480, 640), (1080, 1920), (2185, 2185),
        (2212, 2184)]


@pytest.mark.hf
def test_live_processor_geometry_and_placeholder(hf_proc):
    """The processor itself (image processor + prompt expansion): pixel_values shape,
    image_grid_thw, the exact replacement string and the image-token count of input_ids."""
    from PIL import Image
    pipe = presets.get("glm4v")
    tok_id = hf_proc.image_token_id
    for h, w in LIVE:
        img = Image.new("RGB", (w, h))
        try:
            out = hf_proc(text=["a <|image|> b"], images=[img], return_tensors="pt",
                          return_text_replacement_offsets=True)
        except ValueError:
            with pytest.raises(ImageError):
                plan_image(pipe, (h, w))
            continue
        p = plan_image(pipe, (h, w))
        assert out["image_grid_thw"].tolist() == [list(p.grid_thw[0])], (h, w)
        assert tuple(out["pixel_values"].shape) == (p.num_patches, 3 * 2 * 14 * 14)
        (rep,) = out["text_replacement_offsets"][0]
        assert rep["replacement"] == p.placeholder, (h, w)
        ids = out["input_ids"][0].tolist()
        assert sum(t == tok_id for t in ids) == p.num_embeddings == p.num_tokens


# -- pixels and to_hf ----------------------------------------------------------------------------
def _photos():
    return [crop(*p) for p in PHOTOS] + [tiled("coffee", 1010, 1390), tiled("chelsea", 17, 900),
                                         tiled("rocket", 3, 5)]


@pytest.mark.hf
@pytest.mark.parametrize("fmt", ["jpeg", "png", "webp"])
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_encoded_photos_equal_pil_processor(backend, fmt):
    """Real photos as encoded bytes: the uint8 rows equal the PIL oracle's (do_rescale /
    do_normalize off) bit for bit, and image_grid_thw too."""
    data = [encode(a, fmt) for a in _photos()[:3]]
    want = hf_outputs("glm4v", "pil", [hf_view(d) for d in data], raw=True)
    got = vlmprep.Processor("glm4v", backend=backend, dtype="uint8")(data)
    assert torch.equal(got.grid_thw, want["image_grid_thw"])
    assert torch.equal(got.pixel_values.to(want["pixel_values"].dtype), want["pixel_values"]), \
        _levels(got.pixel_values, want["pixel_values"])


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_float_rows_and_to_hf_equal_pil_processor(backend):
    """float32 to_hf(): the keys, types, shapes, dtypes and values of the PIL processor (decoded
    inputs of every kind in one batch: PIL, HWC array, CHW tensor; upscale, downscale, tiny):
    reference bit for bit; torch normalizes through a lut, within 1 float32 ulp."""
    from PIL import Image
    arrs = _photos()
    items = [Image.fromarray(arrs[0]), torch.from_numpy(arrs[1]).permute(2, 0, 1), *arrs[2:]]
    want = hf_outputs("glm4v", "pil", [Image.fromarray(a) for a in arrs])
    hf = vlmprep.Processor("glm4v", backend=backend)(items).to_hf()
    assert set(hf) == set(want) == {"pixel_values", "image_grid_thw"}
    for k in want:
        assert type(hf[k]) is type(want[k]) and hf[k].dtype == want[k].dtype, k
        assert hf[k].shape == want[k].shape, k
        if backend == "reference" or k != "pixel_values":
            assert torch.equal(hf[k], want[k]), (k, _levels(hf[k], want[k]))
        else:  # the same uint8 pixels (above), normalized by a lut: 1 float32 ulp (|x| < 4)
            assert _levels(hf[k], want[k])[0] <= 4.8e-7, _levels(hf[k], want[k])


@pytest.mark.hf
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_match_torchvision_equals_torchvision_processor(dtype):
    """torch with match="torchvision" equals Glm4vImageProcessor bit for bit (hence
    glm4v_resize.torchvision_exact); the record: its distance to the PIL oracle."""
    from _support.figures import record
    from PIL import Image
    arrs = _photos()
    pil = [Image.fromarray(a) for a in arrs]
    raw = dtype == "uint8"
    want = hf_outputs("glm4v", "torchvision", pil, raw=raw)
    got = vlmprep.Processor("glm4v", backend="torch", match="torchvision", dtype=dtype)(arrs)
    hf = got.to_hf()
    assert torch.equal(hf["image_grid_thw"], want["image_grid_thw"])
    assert torch.equal(hf["pixel_values"].to(want["pixel_values"].dtype), want["pixel_values"])
    if raw:
        oracle = hf_outputs("glm4v", "pil", pil, raw=True)["pixel_values"]
        mx, mean = _levels(want["pixel_values"], oracle)
        record("glm4v: transformers' torchvision vs PIL processor (uint8 levels)",
               f"max {mx:.0f} mean {mean:.4f} over {len(arrs)} photos")


@pytest.mark.dali
def test_dali_within_its_bound():
    """dali runs glm4v through the shared sizing lowering: within 3 levels of the PIL oracle."""
    from _support.figures import record
    from PIL import Image
    if "dali" not in vlmprep.backends.available():
        pytest.skip("dali is not usable here")
    arrs = _photos()
    want = hf_outputs("glm4v", "pil", [Image.fromarray(a) for a in arrs], raw=True)
    got = vlmprep.Processor("glm4v", backend="dali", dtype="uint8")(arrs)
    assert torch.equal(got.grid_thw, want["image_grid_thw"])
    mx, mean = _levels(got.pixel_values, want["pixel_values"])
    record("glm4v: dali vs PIL processor (uint8 levels)", f"max {mx:.0f} mean {mean:.4f}")
    assert mx <= 3 and mean <= 0.5, (mx, mean)


def test_plan_errors_and_adapter_facts():
    """An aspect ratio transformers refuses is a per-image error; the prompt tokens the adapters
    read; vLLM / SGLang embeddings refused (vLLM 0.33 cannot parse GLM image embeddings: the
    preset says why)."""
    from vlmprep.adapters import transformers as tfa
    from vlmprep.adapters import vllm
    proc = vlmprep.Processor("glm4v", backend="reference", errors="skip")
    ok = np.zeros((30, 50, 3), np.uint8)
    bad = np.zeros((1, 300, 3), np.uint8)
    b = proc([ok, bad])
    assert list(b.errors) == [1] and b.num_tokens[0] == 12
    assert "aspect ratio" in str(b.errors[1])
    assert tfa.prompt_image_token(b) == "<|image|>"
    assert tfa.PROMPT_VIDEO_TOKENS["glm4v"] == "<|video|>"
    assert "glm4v" in vllm._NO_EMBEDDINGS and "glm4v" not in vllm.EMBEDDING_FORMS
