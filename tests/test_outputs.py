"""Outputs that fit transformers and torch: to_hf's BatchFeature and return_tensors, PackedBatch's
len / pin_memory / accessors, errors by index, Processor's repr with its overrides."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from _support.imgdata import crop, encode

import vlmprep
import vlmprep.pack as pack


def _imgs():
    return [crop("astronaut", 60, 90), crop("coffee", 40, 30), crop("rocket", 33, 71)]


def test_to_hf_is_a_batch_feature_with_return_tensors():
    transformers = pytest.importorskip("transformers")
    b = vlmprep.Processor("qwen2-vl", backend="reference")(_imgs())
    hf = b.to_hf()
    assert isinstance(hf, transformers.BatchFeature)
    assert set(hf) == {"pixel_values", "image_grid_thw"} and hf["pixel_values"] is b.pixel_values
    assert hf.pixel_values is b.pixel_values  # attribute access, as the processor's output
    moved = hf.to("cpu")  # BatchFeature.to(device): what users call before model(**inputs)
    assert torch.equal(moved["image_grid_thw"], b.grid_thw)
    assert dict(hf).keys() == hf.keys() and {**hf}.keys() == hf.keys()
    hn = b.to_hf(return_tensors="np")
    assert isinstance(hn, transformers.BatchFeature)
    assert isinstance(hn["pixel_values"], np.ndarray) and hn["pixel_values"].dtype == np.float32
    assert hn["image_grid_thw"].dtype == np.int64
    np.testing.assert_array_equal(hn["pixel_values"], b.pixel_values.numpy())
    for bad in ("tf", "jax", None, 1):
        with pytest.raises(ValueError, match="return_tensors expected one of"):
            b.to_hf(return_tensors=bad)
    bf = vlmprep.Processor("qwen2-vl", backend="reference", dtype="bfloat16")(_imgs()[:1])
    with pytest.raises(ValueError, match="bfloat16"):
        bf.to_hf(return_tensors="np")
    assert bf.to_hf()["pixel_values"].dtype == torch.bfloat16


def test_to_hf_is_a_dict_without_transformers(monkeypatch):
    monkeypatch.setattr(pack, "_batch_feature", lambda: None)
    b = vlmprep.Processor("qwen2-vl", backend="reference")(_imgs()[:2])
    assert type(b.to_hf()) is dict and type(b.to_hf(return_tensors="np")) is dict


@pytest.mark.hf
def test_np_matches_the_processor_np_output():
    from PIL import Image
    from transformers import Qwen2VLImageProcessorPil
    imgs = _imgs()
    ours = vlmprep.Processor("qwen2-vl", backend="reference", max_pixels=1003520)(imgs)
    theirs = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=1003520)(
        [Image.fromarray(a) for a in imgs], return_tensors="np")
    got = ours.to_hf(return_tensors="np")
    assert set(got) == set(theirs)
    for k in got:
        assert type(got[k]) is type(theirs[k]) and got[k].dtype == theirs[k].dtype, k
        assert got[k].shape == theirs[k].shape, k
    np.testing.assert_allclose(got["pixel_values"], theirs["pixel_values"], atol=1e-5)


def test_lists_stay_lists_with_np():
    proc = vlmprep.Processor("mllama", backend="reference")
    hn = proc(_imgs()[:2]).to_hf(return_tensors="np")
    assert hn["num_tiles"] == [[len(p.tiles) for p in proc.plan(_imgs()[:2]).images]]
    assert isinstance(hn["pixel_values"], np.ndarray) and hn["aspect_ratio_ids"].dtype == np.int64


def test_len_and_accessors():
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc([_imgs()[0], b"junk", _imgs()[1]])
    assert len(b) == b.num_images == 3 and b.num_seqs == 2
    assert b.total_patches == sum(b.seqlens) == b.pixel_values.shape[0]
    assert b.total_tokens == sum(b.num_tokens) == proc.plan([_imgs()[0], _imgs()[1]]).total_tokens
    assert b.is_pinned is False
    empty = proc([])
    assert len(empty) == 0 and empty.total_tokens == 0 and empty.total_patches == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs an accelerator")
def test_pin_memory():
    b = vlmprep.Processor("qwen2-vl", backend="reference")(_imgs())
    p = b.pin_memory()
    assert p.is_pinned and p.cu_seqlens.is_pinned() and p.grid_thw.is_pinned()
    assert p.pixel_values is not b.pixel_values and torch.equal(p.pixel_values, b.pixel_values)
    assert p.pin_memory().pixel_values is p.pixel_values  # already pinned: itself, as torch's
    assert (p.seqlens, p.num_tokens) == (b.seqlens, b.num_tokens)
    g = p.to("cuda", non_blocking=True)
    assert g.pin_memory().pixel_values is g.pixel_values  # device tensors as they are


def test_errors_ordered_by_index():
    jpeg = encode(crop("astronaut", 120, 160), "jpeg")
    truncated = jpeg[: len(jpeg) // 2]  # found while decoding, after the plan
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc([truncated, b"junk header", _imgs()[0], truncated])
    assert list(b.errors) == [0, 1, 3]
    assert [e.index for e in b.errors.values()] == [0, 1, 3]


def test_repr_shows_the_overrides(tmp_path):
    plain = vlmprep.Processor("qwen2-vl", backend="reference")
    assert repr(plain) == ("Processor('qwen2-vl', backend='reference', device='cpu', "
                           "dtype='float32', errors='raise')")
    kw = vlmprep.Processor("qwen2-vl", backend="reference", max_pixels=1_003_520)
    assert repr(kw).endswith("errors='raise', max_pixels=1003520)")
    smol = Path(vlmprep.presets.__path__[0], "checkpoints", "smolvlm.json").read_text()
    (tmp_path / "preprocessor_config.json").write_text(smol)
    r = repr(vlmprep.Processor.from_pretrained(tmp_path, backend="reference"))
    assert r.startswith("Processor('idefics3'") and "longest_edge=2048" in r
    assert "patch_size=16" in r and "tile_size=512" in r
    mine = vlmprep.Pipeline(list(vlmprep.presets.get("qwen2-vl")), name="mine")
    custom = vlmprep.Processor(mine, backend="reference")
    assert repr(custom).startswith("Processor('mine'") and repr(custom).endswith("errors='raise')")


def test_clone_keeps_every_setting():
    def fetch(url):
        return b""

    proc = vlmprep.Processor("qwen2-vl", backend="reference", dtype="uint8", fetch=fetch,
                             fetch_timeout_s=3, max_pixels=1_003_520)
    c = proc.clone(errors="skip")
    assert (c.pipeline, c.backend_name, c.device, c.dtype, c.fetch, c.fetch_timeout_s) == \
        (proc.pipeline, "reference", "cpu", "uint8", fetch, 3.0)
    assert c.errors == "skip" and proc.errors == "raise" and c._backend is not proc._backend
    assert proc.clone(max_pixels=200_704).pipeline["smart_resize"].max_pixels == 200_704
