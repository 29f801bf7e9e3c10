"""The `resize` and `center_crop` ops on every backend, against transformers' CLIP processor
(shortest-edge resize + centre crop, LLaVA-1.5 style) and against a plain numpy oracle."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.imgdata import crop

import vlmprep
from vlmprep import ops
from vlmprep.plan.boxes import box_overlap

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _pipe(resize_op, crop_hw):
    return vlmprep.Pipeline([
        resize_op, ops.center_crop(height=crop_hw[0], width=crop_hw[1]),
        ops.normalize(rescale=1 / 255, mean=CLIP_MEAN, std=CLIP_STD),
        ops.patchify(patch_size=14, temporal_patch_size=1, merge_size=1)])


def _unpatchify(rows: torch.Tensor, hw) -> torch.Tensor:
    # merge 1, T 1: rows are raster patches of [c, py, px] -> (C, H, W)
    gh, gw = hw[0] // 14, hw[1] // 14
    return rows.view(gh, gw, 3, 14, 14).permute(2, 0, 3, 1, 4).reshape(3, hw[0], hw[1])


@pytest.mark.hf
@pytest.mark.parametrize("backend", ["reference", "torch"])
@pytest.mark.parametrize("name,h,w", [("astronaut", 301, 453), ("hopper", 477, 389),
                                      ("coffee", 100, 599)])
def test_shortest_edge_and_center_crop_match_clip(backend, name, h, w):
    from PIL import Image
    from transformers import CLIPImageProcessorPil
    img = crop(name, h, w)
    hf = CLIPImageProcessorPil(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336},
                               image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD))
    want = hf([Image.fromarray(img)], return_tensors="pt")["pixel_values"][0]
    proc = vlmprep.Processor(_pipe(ops.resize(mode="shortest_edge", size=336), (336, 336)),
                             backend=backend)
    plan = proc.plan([img]).images[0]
    short = min(h, w)
    assert min(plan.resized_hw) == 336 and max(plan.resized_hw) == int(336 * max(h, w) / short)
    got = _unpatchify(proc([img]).pixel_values, (336, 336))
    level = 1 / 255 / min(CLIP_STD)
    d = (got - want).abs()
    if backend == "reference":
        assert torch.equal(got, want)
    else:  # the torch backend's resize bound (see test_parity_hf)
        assert float(d.max()) <= 3 * level + 1e-5 and float(d.mean()) <= 0.5 * level


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_crop_larger_than_image_pads_zero(backend):
    # Fixed resize to 28x42, crop 56x56. As transformers: top =
    # (28 - 56) // 2 = -14, left = (42 - 56) // 2 = -7; outside is 0 before normalize.
    img = np.random.default_rng().integers(1, 256, (50, 60, 3), dtype=np.uint8)
    pipe = vlmprep.Pipeline([ops.resize(mode="fixed", height=28, width=42),
                             ops.center_crop(height=56, width=56),
                             ops.patchify(patch_size=14, temporal_patch_size=1, merge_size=1)])
    proc = vlmprep.Processor(pipe, backend=backend, dtype="uint8")
    assert proc.plan([img]).images[0].tiles == [(-14, -7, 56, 56)]
    got = _unpatchify(proc([img]).pixel_values, (56, 56)).permute(1, 2, 0).numpy()
    from PIL import Image
    resized = np.asarray(Image.fromarray(img).resize((42, 28), Image.BICUBIC))
    want = np.zeros((56, 56, 3), np.uint8)
    want[14:42, 7:49] = resized
    tol = 0 if backend == "reference" else 2
    assert np.abs(got.astype(int) - want.astype(int)).max() <= tol
    assert (got[:14] == 0).all() and (got[:, :7] == 0).all()


def test_box_overlap():
    assert box_overlap((-2, 1, 6, 3), (4, 5)) == ((0, 4, 1, 4), (2, 6, 0, 3))
    assert box_overlap((1, 1, 2, 2), (4, 4)) == ((1, 3, 1, 3), (0, 2, 0, 2))
    assert box_overlap((10, 0, 2, 2), (4, 4)) is None


def test_longest_edge_rule():
    from vlmprep.plan import longest_edge, shortest_edge
    assert longest_edge(480, 640, 320) == (240, 320)
    assert longest_edge(640, 480, 320) == (320, 240)
    assert longest_edge(1, 1000, 100) == (1, 100)
    assert shortest_edge(480, 640, 336) == (336, 448)
