"""PackedBatch invariants: cu_seqlens / seqlens / max_seqlen / image_index, split, concat, to_hf."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import vlmprep
from vlmprep.pack import concat


def _images(rng, n):
    # Random sizes (some tiny, some wide), random content: fresh each run.
    sizes = [(int(rng.integers(1, 300)), int(rng.integers(1, 300))) for _ in range(n)]
    sizes = [(h, w) if max(h, w) / min(h, w) <= 200 else (h, h) for h, w in sizes]
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]


@pytest.mark.parametrize("preset", ["qwen2-vl", "qwen3-vl"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8"])
def test_invariants_and_round_trips(preset, dtype, seed):
    rng = np.random.default_rng(seed)
    imgs = _images(rng, 5)
    proc = vlmprep.Processor(preset, backend="reference", dtype=dtype)
    b = proc(imgs)
    pf = proc.pipeline.patchify
    assert b.layout == "patches"
    assert b.pixel_values.shape == (sum(b.seqlens), 3 * 2 * pf.patch_size ** 2)
    assert b.pixel_values.dtype == getattr(torch, dtype)
    assert b.cu_seqlens.dtype == torch.int32 and b.cu_seqlens[0] == 0
    assert b.cu_seqlens.tolist() == np.concatenate([[0], np.cumsum(b.seqlens)]).tolist()
    assert b.max_seqlen == max(b.seqlens)
    assert b.grid_thw.dtype == torch.int64 and b.grid_thw.shape == (5, 3)
    assert b.seqlens == b.grid_thw.prod(1).tolist()
    assert b.image_index.tolist() == [0, 1, 2, 3, 4]
    assert b.num_tokens == [int(g.prod()) // 4 for g in b.grid_thw]
    # split: one batch per image, equal to processing that image alone (batch invariance).
    parts = list(b.split())
    assert len(parts) == 5
    for img, part in zip(imgs, parts):
        alone = proc([img])
        assert torch.equal(part.pixel_values, alone.pixel_values)
        assert torch.equal(part.grid_thw, alone.grid_thw)
        assert part.cu_seqlens.tolist() == alone.cu_seqlens.tolist()
        assert part.num_tokens == alone.num_tokens
    # concat is the exact inverse of split.
    back = concat(parts)
    for f in ("pixel_values", "cu_seqlens", "grid_thw", "image_index"):
        assert torch.equal(getattr(back, f), getattr(b, f)), f
    assert (back.seqlens, back.max_seqlen, back.num_tokens) == (b.seqlens, b.max_seqlen,
                                                                b.num_tokens)
    # to_hf: transformers' keys and dtypes; the tensors are the packed ones.
    hf = b.to_hf()
    assert set(hf) == {"pixel_values", "image_grid_thw"}
    assert hf["pixel_values"] is b.pixel_values and hf["image_grid_thw"].dtype == torch.int64
    assert b.to_hf(images_per_sample=[2, 3])["pixel_values"] is b.pixel_values
    with pytest.raises(ValueError, match="summing to 5"):
        b.to_hf(images_per_sample=[2, 2])


def test_merge_grouped_row_order():
    # Given a 56x56 image whose pixel value encodes its patch (row, col) -> rows come out in
    # merge-grouped order: (0,0) (0,1) (1,0) (1,1) | (0,2) (0,3) (1,2) (1,3) | ...
    pipe = vlmprep.presets.get("qwen2-vl").replace(min_pixels=1, max_pixels=56 * 56)
    img = np.zeros((56, 56, 3), np.uint8)
    for r in range(4):
        for c in range(4):
            img[r * 14:(r + 1) * 14, c * 14:(c + 1) * 14] = (r * 4 + c, r, c)
    b = vlmprep.Processor(pipe, backend="reference", dtype="uint8")([img])
    got = [(int(row[0]), int(row[-1])) for row in b.pixel_values]  # (channel0 first, channel2 last)
    want = [(r * 4 + c, c) for br in range(2) for bc in range(2) for mr in range(2) for mc in range(2)
            for r, c in [(2 * br + mr, 2 * bc + mc)]]
    assert got == want
    # Inside a row: [c, t, py, px] with the still image repeated over t.
    row = b.pixel_values[5].view(3, 2, 14, 14)
    assert torch.equal(row[:, 0], row[:, 1])
    # row 5 is patch (0, 3): channels hold (r*4+c, r, c) = (3, 0, 3)
    assert [row[k].unique().tolist() for k in range(3)] == [[3], [0], [3]]


def test_skip_keeps_good_images_and_split_reports_error(seed):
    rng = np.random.default_rng(seed)
    good = _images(rng, 2)
    bad = b"not an image at all"
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc([good[0], bad, good[1]])
    assert sorted(b.errors) == [1] and b.errors[1].index == 1
    assert b.num_tokens[1] == 0 and b.image_index.tolist() == [0, 2]
    parts = list(b.split())
    assert parts[1].num_seqs == 0 and list(parts[1].errors) == [0]
    assert parts[1].errors[0].index == 0  # the error's index follows its key
    joined = concat([parts[1], parts[0], parts[1]])
    assert {k: e.index for k, e in joined.errors.items()} == {0: 0, 2: 2}
    alone = proc([good[1]])
    assert torch.equal(parts[2].pixel_values, alone.pixel_values)
    assert len(b.to_hf()["image_grid_thw"]) == 2


def test_empty_batch():
    b = vlmprep.Processor("qwen2-vl", backend="reference")([])
    assert b.pixel_values.shape == (0, 1176) and b.cu_seqlens.tolist() == [0]
    assert b.max_seqlen == 0 and b.num_tokens == []
