"""vlmprep.adapters.vit against transformers' own vision towers (tiny random-weight models).

Oracle: the tower run on the transformers PIL processor's outputs (tests/hfref.py), the way
transformers feeds it. vlmprep's reference backend reproduces those pixels bit for bit, and the
adapter hands the tower precomputed positions / cu_seqlens equal to what the tower computes, so
the embeddings are compared for equality (the same ops on the same bits in the same order).
The packed-vs-alone comparisons run different matmul shapes (N rows vs n_i rows, or a batch of
tiles vs one), so they get a float32 bound: max 1e-5 absolute on O(1) activations (a few ulp of
BLAS blocking); measured on CPU: 0 for every transformers tower (Qwen's SDPA path runs each
sequence apart, the tile and NaFlex towers see the same per-tile shapes) and <= 1.2e-6 for the
self-built ViT of encode_packed.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hfref import hf_outputs
from PIL import Image

import vlmprep
from vlmprep.adapters import vit

pytestmark = pytest.mark.hf

transformers = pytest.importorskip("transformers")

ATOL = 1e-5  # packed vs alone: BLAS blocking differs with the row count (see module doc)


def _images(sizes=((56, 84), (84, 56))):
    """Smooth gradients plus noise (PIL RGB), deterministic."""
    rng = np.random.default_rng(0)
    out = []
    for h, w in sizes:
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (h + w)], -1)
        img = np.clip(base + rng.normal(0, 30, (h, w, 3)), 0, 255).astype(np.uint8)
        out.append(Image.fromarray(img))
    return out


def _batch(preset, images, **kw):
    return vlmprep.Processor(preset, backend="reference", **kw)(images)


def _tower(cls, cfg):
    torch.manual_seed(0)
    return cls(cfg).eval()


def _maxdiff(a, b):
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def _alone(tower, batch):
    return [vit.encode(tower, b)[0] for b in batch.split()]


def _check_packed_and_uint8(tower, preset, images, got):
    """Packed == each image alone (ATOL); uint8 batch normalized on device == float path (bits)."""
    batch = _batch(preset, images)
    alone = _alone(tower, batch)
    for g, a in zip(got, alone):
        assert g.shape == a.shape
        assert _maxdiff(g, a) <= ATOL, _maxdiff(g, a)
    u8 = _batch(preset, images, dtype="uint8")
    assert u8.pixel_values.dtype == torch.uint8
    normed = vit.normalize_on_device(u8)
    assert normed.pixel_values.dtype == torch.float32
    assert torch.equal(normed.pixel_values, batch.pixel_values)
    for g, e in zip(vit.encode(tower, u8), got):
        assert torch.equal(g, e)


# -- Qwen -------------------------------------------------------------------------------------
def _qwen2_tower():
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel
    cfg = transformers.Qwen2VLVisionConfig(depth=1, embed_dim=32, hidden_size=48, num_heads=2,
                                           mlp_ratio=2, patch_size=14, temporal_patch_size=2,
                                           spatial_merge_size=2)
    return _tower(Qwen2VisionTransformerPretrainedModel, cfg)


def _qwen25_tower():
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel
    # window 56 px = 2x2 merged tokens: a 4x6 grid has 2x2 partial windows; block 1 is global.
    cfg = transformers.Qwen2_5_VLVisionConfig(depth=2, hidden_size=32, out_hidden_size=48,
                                              intermediate_size=64, num_heads=2, window_size=56,
                                              fullatt_block_indexes=[1])
    return _tower(Qwen2_5_VisionTransformerPretrainedModel, cfg)


def _qwen3_tower():
    cfg = transformers.Qwen3VLVisionConfig(depth=2, hidden_size=32, out_hidden_size=48,
                                           intermediate_size=64, num_heads=2, patch_size=16,
                                           num_position_embeddings=64, deepstack_visual_indexes=[0])
    return _tower(transformers.models.qwen3_vl.modeling_qwen3_vl.Qwen3VLVisionModel, cfg)


QWEN = {"qwen2-vl": ("qwen2-vl", _qwen2_tower), "qwen2.5-vl": ("qwen2-vl", _qwen25_tower),
        "qwen3-vl": ("qwen3-vl", _qwen3_tower)}


@pytest.mark.parametrize("name", sorted(QWEN))
def test_qwen_matches_transformers(name):
    preset, make = QWEN[name]
    tower, images = make(), _images()
    hf = hf_outputs(preset, "pil", images)
    batch = _batch(preset, images)
    assert torch.equal(batch.pixel_values, hf["pixel_values"])  # the oracle's own inputs
    assert torch.equal(batch.grid_thw, hf["image_grid_thw"])
    with torch.no_grad():
        ref = tower(hf["pixel_values"], grid_thw=hf["image_grid_thw"])
        got = vit.encode(tower, batch)
    sizes = (hf["image_grid_thw"].prod(-1) // 4).tolist()
    for g, r in zip(got, ref.pooler_output.split(sizes)):
        assert g.shape == r.shape
        assert torch.equal(g, r), _maxdiff(g, r)
    with torch.no_grad():
        _check_packed_and_uint8(tower, preset, images, got)
        if name == "qwen3-vl":  # deepstack: main then each level on the last dim
            deep = vit.encode(tower, batch, deepstack=True)
            want = torch.cat([ref.pooler_output] + list(ref.deepstack_features), -1).split(sizes)
            for g, w in zip(deep, want):
                assert g.shape == (w.shape[0], 96) and torch.equal(g, w)


# -- compact rows: the folded temporal kernel ---------------------------------------------------
# Bounds (float rounding only: Conv3d over T identical frames == the conv with the T weight slices
# summed, exactly, in real arithmetic):
# - patch embedding, a priori: each output is a dot product of K = C*T*P*P terms (full) or
#   C*P*P terms after one rounding of each summed weight (compact); by the standard dot-product
#   bound both lie within gamma(K + 1) * S of the exact value (gamma(n) = n*u / (1 - n*u), u =
#   2^-24, S = |W| . |x| + |b| in float64), so |compact - full| <= (2 * gamma(K + 1) + u) * S.
# - the tower's output in float64: the identity holds to float64 rounding: <= 1e-12 relative to
#   max |embedding| (measured <= 1e-16, 0 for Qwen2.5-VL).
# - the tower's output in float32: compact's error against that float64 oracle is at most 2x the
#   full path's own float32 error (both are float32 rounding; compact sums half the terms).
#   Measured on CPU, three images: max |compact - full| 7.5e-8 / 8.1e-8 / 8.6e-8 (Qwen2-VL /
#   2.5-VL / 3-VL) on embeddings of max magnitude ~0.1 (relative ~8e-7), while the full path is
#   itself 6.8e-8 / 7.3e-8 / 8.2e-8 from float64, compact 4.1e-8 / 6.9e-8 / 6.6e-8.
U32 = 2.0 ** -24


def _gamma(n):
    return n * U32 / (1 - n * U32)


def _compact(preset, images, **kw):
    return _batch(preset, images, row_form="compact", **kw)


def _patch_area(batch):
    return batch.pipeline.patchify.patch_size ** 2


def _as64(batch):
    return dataclasses.replace(batch, pixel_values=batch.pixel_values.double())


COMPACT_IMAGES = ((56, 84), (84, 56), (112, 140))


@pytest.mark.parametrize("name", sorted(QWEN))
def test_qwen_compact_patch_embedding_within_the_dot_product_bound(name):
    from vlmprep.adapters._fold import FoldedPatchEmbed
    preset, make = QWEN[name]
    tower = make()
    batch = _batch(preset, _images(COMPACT_IMAGES))
    compact = _compact(preset, _images(COMPACT_IMAGES))
    pe = tower.patch_embed
    with torch.no_grad():
        full = pe(batch.pixel_values).double()
        got = FoldedPatchEmbed(pe)(compact.pixel_values).double()
        w = pe.proj.weight.double().flatten(1)                        # (E, C*T*P*P)
        s = batch.pixel_values.double().abs() @ w.abs().T
        if pe.proj.bias is not None:
            s += pe.proj.bias.double().abs()
    k = w.shape[1]
    bound = (2 * _gamma(k + 1) + U32) * s
    assert got.shape == full.shape
    assert bool(((got - full).abs() <= bound).all()), float(((got - full).abs() / bound).max())


@pytest.mark.parametrize("name", sorted(QWEN))
def test_qwen_compact_rows_equal_full_rows_up_to_rounding(name):
    preset, make = QWEN[name]
    tower = make()
    images = _images(COMPACT_IMAGES)
    batch = _batch(preset, images)
    compact = _compact(preset, images)
    assert compact.row_form == "compact" and compact.pixel_values.shape[1] == 3 * _patch_area(batch)
    weight = tower.patch_embed.proj.weight.detach().clone()
    with torch.no_grad():
        full = vit.encode(tower, batch)
        got = vit.encode(tower, compact)
        t64 = _tower(type(tower), tower.config).double()
        t64.load_state_dict({k: v.double() for k, v in tower.state_dict().items()})
        ref = vit.encode(t64, _as64(batch))
        got64 = vit.encode(t64, _as64(compact))
    mag = max(float(r.abs().max()) for r in ref)
    for g, f, r, g64 in zip(got, full, ref, got64):
        assert g.shape == f.shape and g.dtype == torch.float32
        assert _maxdiff(g64, r) <= 1e-12 * mag                       # the identity, float64
        assert _maxdiff(g, r) <= 2 * max(_maxdiff(f, r), U32 * mag)  # as accurate as full
    # The user's tower is untouched (a view ran the folded embedding, not a swap).
    assert type(tower.patch_embed.proj) is torch.nn.Conv3d
    assert torch.equal(tower.patch_embed.proj.weight, weight)
    # uint8 compact rows: normalized on the device, then the same embeddings bit for bit.
    u8 = _compact(preset, images, dtype="uint8")
    assert u8.pixel_values.shape == compact.pixel_values.shape
    with torch.no_grad():
        for a, b in zip(vit.encode(tower, u8), got):
            assert torch.equal(a, b)


@pytest.mark.parametrize("name", sorted(QWEN))
def test_qwen_compact_bfloat16_as_accurate_as_full(name):
    """A bfloat16 tower: the folded weight is rounded once to bfloat16 (summed in float32); the
    compact path's error against float64 (the same bfloat16 weights) is at most twice the full
    path's. Measured: compact / full error 1.0-1.13, max |compact - full| 4.9e-4 - 6.1e-4 on
    embeddings of max ~0.1 (bfloat16 rounding, u = 2^-8)."""
    preset, make = QWEN[name]
    tower = make()
    images = _images(COMPACT_IMAGES)
    full, compact = _batch(preset, images), _compact(preset, images)
    t16 = _tower(type(tower), tower.config).to(torch.bfloat16)
    t16.load_state_dict({k: v.to(torch.bfloat16) for k, v in tower.state_dict().items()})
    t64 = _tower(type(tower), tower.config).double()
    t64.load_state_dict({k: v.double() for k, v in t16.state_dict().items()})
    with torch.no_grad():
        f, c = vit.encode(t16, full), vit.encode(t16, compact)
        ref = vit.encode(t64, _as64(full))
    for a, b, r in zip(c, f, ref):
        assert a.dtype == torch.bfloat16 and a.shape == b.shape
        assert _maxdiff(a, r) <= 2 * _maxdiff(b, r)


def test_qwen_compact_and_full_calls_from_two_threads():
    """Concurrent full and compact calls on one tower give each its own result (no swap)."""
    from concurrent.futures import ThreadPoolExecutor
    tower = _qwen2_tower()
    batch = _batch("qwen2-vl", _images(COMPACT_IMAGES))
    compact = _compact("qwen2-vl", _images(COMPACT_IMAGES))
    with torch.no_grad():
        want = {"full": vit.encode(tower, batch), "compact": vit.encode(tower, compact)}
        jobs = ["full", "compact"] * 4
        with ThreadPoolExecutor(2) as pool:
            outs = list(pool.map(lambda j: vit.encode(tower, batch if j == "full" else compact),
                                 jobs))
    for j, out in zip(jobs, outs):
        assert all(torch.equal(a, b) for a, b in zip(out, want[j])), j


def test_qwen_compact_calls_add_no_hooks_to_the_tower():
    """A config asking for hidden states makes transformers hook the blocks on the first call:
    compact calls (a view of the tower) install exactly the one set a full call installs."""
    def hooks(m):
        return sum(len(x._forward_hooks) + len(x._forward_pre_hooks) for x in m.modules())
    images = _images(COMPACT_IMAGES)
    full, compact = _batch("qwen2-vl", images), _compact("qwen2-vl", images)
    plain, viewed = _qwen2_tower(), _qwen2_tower()
    plain.config.output_hidden_states = viewed.config.output_hidden_states = True
    with torch.no_grad():
        vit.encode(plain, full)
        for _ in range(3):
            vit.encode(viewed, compact)
        assert hooks(plain) > 0 and hooks(viewed) == hooks(plain)
        vit.encode(viewed, full)
    assert hooks(viewed) == hooks(plain)


def test_qwen_compact_row_length_and_wrapped_towers_checked():
    tower = _qwen2_tower()
    batch = _batch("qwen2-vl", _images())
    with pytest.raises(ValueError, match=r"patch row length \(compact rows\): expected 588"):
        vit.encode(tower, dataclasses.replace(batch, row_form="compact"))
    # accelerate-style hooks: forward bound on the instance (a view would bypass the fold)
    tower.forward = tower.forward
    with pytest.raises(NotImplementedError, match="wrapped on the instance"):
        vit.encode(tower, _compact("qwen2-vl", _images()))


def test_qwen_full_model_uses_visual():
    cfg = transformers.Qwen2VLConfig(
        vision_config=dict(depth=1, embed_dim=32, hidden_size=48, num_heads=2, mlp_ratio=2),
        text_config=dict(hidden_size=48, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=128))
    torch.manual_seed(0)
    model = transformers.Qwen2VLModel(cfg).eval()
    images = _images()
    batch = _batch("qwen2-vl", images)
    with torch.no_grad():
        want = model.get_image_features(batch.pixel_values, batch.grid_thw).pooler_output
        got = vit.encode(model, batch)
    assert len(got) == 2 and all(torch.equal(g, w) for g, w in zip(got, want))


def test_rotary_position_ids_equal_transformers():
    from transformers.vision_utils import get_vision_position_ids
    for preset in ("qwen2-vl", "qwen3-vl"):
        batch = _batch(preset, _images(((56, 84), (84, 56), (28, 300))))
        ids = vit.rotary_position_ids(batch)
        want = get_vision_position_ids(batch.grid_thw, batch.pipeline.patchify.merge_size)
        assert ids.dtype == torch.int64 and torch.equal(ids, want)
    # Hand example (module doc): grid (1, 2, 4), merge 2.
    tiny = dataclasses.replace(batch, grid_thw=torch.tensor([[1, 2, 4]]), seqlens=[8],
                               pixel_values=batch.pixel_values[:8], image_index=torch.tensor([0]),
                               num_tokens=[2])
    assert vit.patch_positions(tiny).tolist() == [[0, 0], [0, 1], [1, 0], [1, 1],
                                                  [0, 2], [0, 3], [1, 2], [1, 3]]


def test_raster_positions_and_varlen_helpers():
    for preset in ("pixtral", "siglip2-naflex", "siglip"):
        batch = _batch(preset, _images())
        pos = vit.patch_positions(batch)
        want = torch.cat([torch.stack([torch.arange(h * w) // w, torch.arange(h * w) % w], -1)
                          for _, h, w in batch.grid_thw.tolist()])
        assert torch.equal(pos, want)
    with pytest.raises(ValueError, match="merge_grouped"):
        vit.rotary_position_ids(batch)
    batch = _batch("qwen2-vl", _images())  # seqlens [24, 24]
    args = vit.varlen_args(batch)
    assert args["cu_seqlens"].tolist() == [0, 24, 48] and args["max_seqlen"] == 24
    mask = vit.block_diagonal_mask(batch)
    assert mask.shape == (1, 1, 48, 48) and mask.dtype == torch.bool
    assert torch.equal(mask[0, 0], torch.block_diag(torch.ones(24, 24), torch.ones(24, 24)).bool())
    merged = torch.arange(12.0)[:, None]  # 48 patches / 4 after a 2x2 merger
    assert [p.flatten().tolist() for p in vit.split_images(merged, batch)] == [
        list(range(6)), list(range(6, 12))]
    with pytest.raises(ValueError, match="split_images"):
        vit.split_images(torch.zeros(7, 1), batch)


# -- SigLIP, CLIP (LLaVA-1.5), InternVL: tiles ---------------------------------------------------
def _siglip():
    cfg = transformers.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                          num_attention_heads=2, image_size=384, patch_size=14)
    return _tower(transformers.SiglipVisionModel, cfg)


def _clip():
    cfg = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=2, image_size=336, patch_size=14)
    return _tower(transformers.CLIPVisionModel, cfg)


def _internvl_tower():
    cfg = transformers.InternVLVisionConfig(hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=1, num_attention_heads=2)
    return _tower(transformers.InternVLVisionModel, cfg)


def _internvl_full():
    cfg = transformers.InternVLConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2),
        text_config=dict(model_type="qwen2", hidden_size=48, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         vocab_size=128))
    return _tower(transformers.InternVLModel, cfg)


def _llava_full():
    cfg = transformers.LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=2, image_size=336,
                           patch_size=14),
        text_config=dict(model_type="llama", hidden_size=48, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         vocab_size=128))
    return _tower(transformers.LlavaModel, cfg)


TILES = {"siglip": ("siglip", _siglip), "llava-1.5-clip": ("llava-1.5", _clip),
         "llava-1.5-full": ("llava-1.5", _llava_full),
         "internvl-tower": ("internvl", _internvl_tower),
         "internvl-full": ("internvl", _internvl_full)}


@pytest.mark.parametrize("name", sorted(TILES))
def test_tiles_match_transformers(name):
    preset, make = TILES[name]
    tower = make()
    # InternVL cuts a 56x84 image into 7 tiles; one image per family keeps the file fast, and
    # the second checks per-image grouping where tiles are cheap.
    images = _images(((56, 84),)) if preset == "internvl" else _images()
    hf = hf_outputs(preset, "pil", images)
    batch = _batch(preset, images)
    assert torch.equal(batch.pixel_values, hf["pixel_values"])
    with torch.no_grad():
        if name.endswith("full"):
            ref = tower.get_image_features(pixel_values=hf["pixel_values"]).pooler_output
            ref = torch.stack(list(ref)) if isinstance(ref, (list, tuple)) else ref
        else:
            ref = tower(pixel_values=hf["pixel_values"]).last_hidden_state
        got = vit.encode(tower, batch)
    counts = torch.bincount(batch.image_index, minlength=len(images)).tolist()
    assert [g.shape[0] for g in got] == counts
    for g, r in zip(got, ref.split(counts)):
        assert g.shape == r.shape and torch.equal(g, r), _maxdiff(g, r)
    if name == "internvl-full":
        assert got[0].shape == (7, 256, 48)  # pixel shuffle 0.5: 32x32 -> 16x16 tokens per tile
    with torch.no_grad():
        _check_packed_and_uint8(tower, preset, images, got)


# -- SigLIP2 NaFlex ------------------------------------------------------------------------------
def test_siglip2_matches_transformers():
    cfg = transformers.Siglip2VisionConfig(hidden_size=32, intermediate_size=64,
                                           num_hidden_layers=1, num_attention_heads=2,
                                           patch_size=16, num_patches=64)
    tower = _tower(transformers.Siglip2VisionModel, cfg)
    images = _images()
    hf = hf_outputs("siglip2-naflex", "pil", images)
    batch = _batch("siglip2-naflex", images)
    inp = vit.naflex_inputs(batch)
    for k in ("pixel_values", "pixel_attention_mask", "spatial_shapes"):
        assert torch.equal(inp[k], hf[k]), k
    with torch.no_grad():
        ref = tower(**hf).last_hidden_state
        got = vit.encode(tower, batch)
    for i, (g, n) in enumerate(zip(got, batch.seqlens)):
        assert g.shape == (n, 32) and torch.equal(g, ref[i, :n])
    with torch.no_grad():
        _check_packed_and_uint8(tower, "siglip2-naflex", images, got)


# -- device-side normalization, every layout ---------------------------------------------------
@pytest.mark.parametrize("preset", ["qwen2-vl", "qwen3-vl", "pixtral", "siglip2-naflex",
                                    "llava-1.5", "internvl"])
def test_normalize_on_device_bit_equal(preset):
    images = _images(((56, 84),))
    f32 = _batch(preset, images)
    u8 = _batch(preset, images, dtype="uint8")
    out = vit.normalize_on_device(u8)
    assert out.pixel_values.shape == f32.pixel_values.shape
    assert torch.equal(out.pixel_values, f32.pixel_values)
    assert vit.normalize_on_device(f32) is f32  # already normalized: untouched
    bf16 = vit.normalize_on_device(u8, dtype=torch.bfloat16)
    assert torch.equal(bf16.pixel_values, _batch(preset, images, dtype="bfloat16").pixel_values)


# -- mismatches --------------------------------------------------------------------------------
def test_mismatches_are_caught():
    tower = _qwen2_tower()
    batch = _batch("qwen2-vl", _images())
    bad = dataclasses.replace(batch, grid_thw=torch.tensor([[1, 4, 6], [1, 4, 4]]))
    with pytest.raises(ValueError, match=r"grid \(1, 4, 4\)"):
        vit.encode(tower, bad)
    # A Qwen3-VL batch (patch 16) for a Qwen2-VL tower (patch 14).
    with pytest.raises(ValueError, match=r"patch_size: expected 14 \(the model's\), got 16"):
        vit.encode(tower, _batch("qwen3-vl", _images()))
    with pytest.raises(ValueError,
                       match=r"tile size \(H, W\): expected \(384, 384\).*got \(336, 336\)"):
        vit.encode(_siglip(), _batch("llava-1.5", _images()))
    with pytest.raises(ValueError, match="tower's device"):
        vit.encode(tower, batch.to("meta"))
    with pytest.raises(NotImplementedError, match="Qwen3VLVisionModel"):
        vit.encode(torch.nn.Linear(2, 2), batch)


def test_skipped_image_gets_empty_tensor():
    tower = _qwen2_tower()
    batch = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")(
        [_images()[0], b"not an image"])
    assert list(batch.errors) == [1]
    with torch.no_grad():
        got = vit.encode(tower, batch)
    assert got[0].shape == (6, 48) and got[1].shape == (0, 48)


# -- encode_packed: a self-built ViT -------------------------------------------------------------
class TinyViT(torch.nn.Module):
    """Pre-norm blocks on SDPA with a boolean mask, plus a learned 2D position table."""

    def __init__(self, dim=32, heads=2, depth=2):
        super().__init__()
        self.heads = heads
        self.row = torch.nn.Embedding(64, dim)
        self.col = torch.nn.Embedding(64, dim)
        self.blocks = torch.nn.ModuleList(
            torch.nn.ModuleDict(dict(n1=torch.nn.LayerNorm(dim), qkv=torch.nn.Linear(dim, 3 * dim),
                                     o=torch.nn.Linear(dim, dim), n2=torch.nn.LayerNorm(dim),
                                     mlp=torch.nn.Linear(dim, dim))) for _ in range(depth))

    def forward(self, x, attn_mask, positions):
        x = x + (self.row(positions[:, 0]) + self.col(positions[:, 1]))[None]
        b, n, d = x.shape
        for blk in self.blocks:
            qkv = blk["qkv"](blk["n1"](x)).reshape(b, n, 3, self.heads, -1)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
            x = x + blk["o"](a.transpose(1, 2).reshape(b, n, d))
            x = x + blk["mlp"](blk["n2"](x)).tanh()
        return x


def test_encode_packed_equals_each_image_alone():
    torch.manual_seed(0)
    vitm = TinyViT().eval()
    embed = torch.nn.Linear(768, 32)
    batch = _batch("pixtral", _images(((56, 84), (84, 56), (40, 40))))
    with torch.no_grad():
        got = vit.encode_packed(vitm, batch, embed, positions=True)
        alone = [vit.encode_packed(vitm, b, embed, positions=True)[0] for b in batch.split()]
        # Independent: each image without any mask, positions from its raster grid.
        plain = []
        for b in batch.split():
            (_, h, w), = b.grid_thw.tolist()
            pos = torch.stack([torch.arange(h * w) // w, torch.arange(h * w) % w], -1)
            plain.append(vitm(embed(b.pixel_values)[None], None, pos)[0])
    assert [g.shape[0] for g in got] == batch.seqlens
    for g, a, p in zip(got, alone, plain):
        assert _maxdiff(g, a) <= ATOL and _maxdiff(g, p) <= ATOL
    # Without the mask the images would see each other: the mask is what keeps them apart.
    with torch.no_grad():
        x = embed(batch.pixel_values)[None]
        leaky = vitm(x, None, vit.patch_positions(batch))[0]
    assert _maxdiff(leaky[:batch.seqlens[0]], got[0]) > 1e-3
    # uint8 batch: normalized on the device first, same result.
    u8 = _batch("pixtral", _images(((56, 84), (84, 56), (40, 40))), dtype="uint8")
    with torch.no_grad():
        for g, e in zip(vit.encode_packed(vitm, u8, embed, positions=True), got):
            assert torch.equal(g, e)
    # Tiles: a conv patch embedding; (S, L, D) flattened in raster order.
    conv = torch.nn.Conv2d(3, 32, 14, 14)
    tiles = _batch("llava-1.5", _images())
    with torch.no_grad():
        out = vit.encode_packed(lambda x, m: vitm(x, m, vit.patch_positions(tiles)), tiles,
                                lambda t: conv(t).flatten(2).transpose(1, 2))
    assert [o.shape for o in out] == [(576, 32), (576, 32)]
    with pytest.raises(ValueError, match="patch_embed"):
        vit.encode_packed(vitm, tiles)


def test_internvl_encode_output_feeds_the_engine_adapters():
    """The issue's case: InternVL's ``encode`` gives (7, 256, D) for a 7-tile image; vLLM and
    SGLang take 7 * 256 = 1792 rows (``num_embeddings``), not the 1794 placeholder tokens."""
    from vlmprep.adapters import sglang as sg
    from vlmprep.adapters import vllm as vl
    tower = _internvl_full()
    batch = _batch("internvl", _images(((56, 84),)))
    with torch.no_grad():
        got = vit.encode(tower, batch)
    assert got[0].shape == (7, 256, 48)
    assert (batch.num_tokens, batch.num_embeddings) == ([1794], [1792])
    img = vl.prompt_inputs("<IMG_CONTEXT>", batch, embeds=got)["multi_modal_data"]["image"]
    assert img.shape == (1, 1792, 48) and torch.equal(img[0], got[0].flatten(0, 1))
    item = sg.precomputed_embedding(got, batch, [1] * 1794)
    assert torch.equal(item["feature"], got[0].flatten(0, 1))


# -- issue 30 families: GLM-4.1V (Qwen-like), Llama 4 and Ovis2 (tiles), LFM2-VL (NaFlex) ------
def _glm4v_tower():
    cfg = transformers.Glm4vVisionConfig(depth=1, hidden_size=32, out_hidden_size=48,
                                         intermediate_size=64, num_heads=2)
    return _tower(transformers.Glm4vVisionModel, cfg)


def _glm4v_full():
    cfg = transformers.Glm4vConfig(
        vision_config=dict(depth=1, hidden_size=32, out_hidden_size=48, intermediate_size=64,
                           num_heads=2),
        text_config=dict(hidden_size=48, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=128))
    return _tower(transformers.Glm4vModel, cfg)


def test_glm4v_matches_transformers():
    """Glm4vVisionModel takes Qwen's inputs (rows + grid_thw, the precomputed positions and
    cu_seqlens popped); its learned position table is resampled per image from the grid."""
    tower, images = _glm4v_tower(), _images(((56, 84), (84, 56), (112, 140)))
    hf = hf_outputs("glm4v", "pil", images)
    batch = _batch("glm4v", images)
    assert torch.equal(batch.pixel_values, hf["pixel_values"])
    assert torch.equal(batch.grid_thw, hf["image_grid_thw"])
    with torch.no_grad():
        ref = tower(hf["pixel_values"], grid_thw=hf["image_grid_thw"]).pooler_output
        got = vit.encode(tower, batch)
    sizes = (hf["image_grid_thw"].prod(-1) // 4).tolist()
    assert [g.shape for g in got] == [(n, 48) for n in sizes]
    for g, r in zip(got, ref.split(sizes)):
        assert torch.equal(g, r), _maxdiff(g, r)
    with torch.no_grad():
        _check_packed_and_uint8(tower, "glm4v", images, got)
        # Compact rows (the temporal kernel folded, as for Qwen): float rounding only. Bound
        # 1e-5 relative to max |embedding|: float32 sums of half the terms (the Qwen tests above
        # bound it a priori); measured 1.6e-6 (3.8e-9 on embeddings of max 2.4e-3).
        comp = vit.encode(tower, _batch("glm4v", images, row_form="compact"))
    mag = max(float(g.abs().max()) for g in got)
    for c, g in zip(comp, got):
        assert c.shape == g.shape and _maxdiff(c, g) <= 1e-5 * mag, _maxdiff(c, g) / mag


def test_glm4v_full_model_images_and_videos_equal_get_features():
    """The full model: its ``visual``; videos as ``get_video_features`` runs them (one (1, h, w)
    grid row per frame group, which GLM's position-table resampling reads per segment)."""
    from vlmprep import Video
    model = _glm4v_full()
    images = _images()
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8)
              for n, h, w in ((4, 56, 112), (6, 112, 56))]
    batch = vlmprep.Processor("glm4v", backend="reference")(
        images, videos=[Video(f, source_fps=2.0) for f in frames])
    v = batch.videos
    assert v.grid_thw[:, 0].max() > 1  # t > 1: the per-frame grid matters
    with torch.no_grad():
        want = model.get_image_features(batch.pixel_values, batch.grid_thw).pooler_output
        got = vit.encode(model, batch)
        want_v = model.get_video_features(v.pixel_values, v.grid_thw).pooler_output
        got_v = vit.encode(model, v)
    assert len(got) == 2 and all(torch.equal(g, w) for g, w in zip(got, want))
    assert len(got_v) == 2 and all(torch.equal(g, w) for g, w in zip(got_v, want_v))


def _llama4_tower():
    # fc1 of the pixel-shuffle MLP takes hidden * 4 (ratio 0.5): intermediate_size = 4 * 32
    cfg = transformers.Llama4VisionConfig(hidden_size=32, intermediate_size=128,
                                          num_hidden_layers=1, num_attention_heads=2,
                                          image_size=336, patch_size=14, vision_output_dim=48,
                                          projector_input_dim=48, projector_output_dim=48)
    return _tower(transformers.Llama4VisionModel, cfg)


def test_llama4_matches_transformers():
    """Llama4VisionModel per tile (canvas tiles, then the global view). The oracle is the
    torchvision processor (transformers has no PIL one): its bfloat16 pixels, which
    ``match="torchvision"`` float32 output holds exactly; the tower runs in float32 on both."""
    tower, images = _llama4_tower(), _images(((56, 84), (400, 200)))
    hf = hf_outputs("llama4", "torchvision", images)
    batch = vlmprep.Processor("llama4", backend="torch", match="torchvision")(images)
    assert torch.equal(batch.pixel_values.to(torch.bfloat16), hf["pixel_values"])
    with torch.no_grad():
        ref = tower(pixel_values=hf["pixel_values"].float()).last_hidden_state
        got = vit.encode(tower, batch)
    counts = torch.bincount(batch.image_index, minlength=len(images)).tolist()
    assert counts[1] > 1  # a multi-tile image (tiles + global view)
    assert [g.shape for g in got] == [(c, 144, 48) for c in counts]  # 24x24 patches, shuffled 0.5
    for g, r in zip(got, ref.split(counts)):
        assert torch.equal(g, r), _maxdiff(g, r)


def _ovis2_vision_config():
    return dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                image_size=448, patch_size=14, hidden_stride=2, vocab_size=64)


def _ovis2_tower():
    from transformers.models.ovis2.modeling_ovis2 import Ovis2VisionModel
    return _tower(Ovis2VisionModel,
                  transformers.Ovis2VisionConfig(**_ovis2_vision_config()))


def _ovis2_full():
    cfg = transformers.Ovis2Config(
        vision_config=_ovis2_vision_config(), hidden_size=48, vocab_size=128,
        text_config=dict(hidden_size=48, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=128))
    return _tower(transformers.Ovis2Model, cfg)


@pytest.mark.parametrize("name", ["tower", "full"])
def test_ovis2_matches_transformers(name):
    """Ovis2VisionModel: last_hidden_state per tile (32x32 patches, hidden_stride 2: 256 rows of
    4 * hidden); Ovis2Model: get_image_features, the visual-vocabulary embeddings per tile."""
    tower = _ovis2_tower() if name == "tower" else _ovis2_full()
    images = _images(((56, 84), (84, 56)))
    hf = hf_outputs("ovis2", "pil", images)
    batch = _batch("ovis2", images)
    assert torch.equal(batch.pixel_values, hf["pixel_values"])
    with torch.no_grad():
        if name == "tower":
            ref = tower(pixel_values=hf["pixel_values"]).last_hidden_state
        else:
            ref = tower.get_image_features(pixel_values=hf["pixel_values"]).pooler_output
        got = vit.encode(tower, batch)
    counts = torch.bincount(batch.image_index, minlength=len(images)).tolist()
    assert [g.shape for g in got] == [(c, 256, 128 if name == "tower" else 48) for c in counts]
    for g, r in zip(got, ref.split(counts)):
        assert torch.equal(g, r), _maxdiff(g, r)
    with torch.no_grad():
        _check_packed_and_uint8(tower, "ovis2", images, got)


def _lfm2_vision_config():
    return dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                patch_size=16, num_patches=256)


def _lfm2_images():
    return _images(((56, 84), (700, 700)))  # one sequence; 2x2 tiles + thumbnail


def _lfm2_batch_and_hf(images):
    hf = hf_outputs("lfm2-vl", "torchvision", images)
    batch = vlmprep.Processor("lfm2-vl", backend="torch", match="torchvision")(images)
    inp = vit.naflex_inputs(batch)
    for k in ("pixel_values", "pixel_attention_mask", "spatial_shapes"):
        assert torch.equal(inp[k], hf[k]), k
    assert hf["pixel_values"].shape[:2] == (6, 1024)  # padded to the processor's 1024 rows
    return batch, hf


def test_lfm2_vl_model_matches_get_image_features():
    """Lfm2VlModel: get_image_features (tower, unshuffle by downsample_factor, projector) on the
    processor's tensors: one (tokens, D) per tile; an image's tiles (thumbnail last) concatenated,
    the order its placeholder holds them."""
    cfg = transformers.Lfm2VlConfig(
        vision_config=dict(model_type="siglip2_vision_model", **_lfm2_vision_config()),
        projector_hidden_size=64,
        text_config=dict(model_type="lfm2", hidden_size=48, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         vocab_size=512))
    model = _tower(transformers.Lfm2VlModel, cfg)
    images = _lfm2_images()
    batch, hf = _lfm2_batch_and_hf(images)
    with torch.no_grad():
        ref = model.get_image_features(**hf).pooler_output           # one per tile
        got = vit.encode(model, batch)
    assert [g.shape[0] for g in got] == batch.num_embeddings
    want = [torch.cat(ref[:1]), torch.cat(ref[1:])]
    for g, w in zip(got, want):
        assert g.shape == w.shape and torch.equal(g, w), _maxdiff(g, w)


def test_lfm2_vl_siglip2_tower_matches_transformers():
    """LFM2-VL's vision tower is a Siglip2VisionModel (``Lfm2VlModel.vision_tower``): the naflex
    kind, padded to the processor's 1024 rows, one sequence per tile (a tiled image: its tiles
    then its thumbnail, concatenated). The oracle: the torchvision processor (no PIL class),
    which ``match="torchvision"`` equals bit for bit."""
    cfg = transformers.Siglip2VisionConfig(**_lfm2_vision_config())
    tower = _tower(transformers.Siglip2VisionModel, cfg)
    batch, hf = _lfm2_batch_and_hf(_lfm2_images())
    with torch.no_grad():
        ref = tower(**hf).last_hidden_state
        got = vit.encode(tower, batch)
    rows = [ref[i, :n] for i, n in enumerate(batch.seqlens)]
    want = [torch.cat(rows[:1]), torch.cat(rows[1:])]
    assert [g.shape[0] for g in got] == [sum(batch.seqlens[:1]), sum(batch.seqlens[1:])]
    for g, w in zip(got, want):
        assert torch.equal(g, w), _maxdiff(g, w)
