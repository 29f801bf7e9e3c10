"""A video's temporal group through the kernels: ``normalize_patchify`` and
``resize_normalize_patchify`` take ``(T, h, w, 3)`` frames (merge_grouped, T ==
temporal_patch_size) and write frame t's values into each row's t-th ``[py, px]`` slots,
bit-exact with the numpy oracle (tests/kernels/oracle.group_rows), on every CPU path (band,
AVX2 rows, scalar rows: the ``cpu_path`` fixture) and 1 and 2 threads. Frames are placed as a
video decoder or a crop leaves them: rows wider than the image, frames further apart than a
frame. backends/video.py's fused rows rest on this; the guard-page sweep covers the reads."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.seed import SEED

from tests.kernels.oracle import group_rows, rows
from tests.kernels.test_normalize_patchify import DTYPES, POISON, _bits, _lut

CASES = [(14, 2, 2), (16, 2, 2), (2, 2, 3), (8, 1, 2)]  # Qwen2-VL, Qwen3-VL, generic loops


def _group(rng, T, h, w):
    """(T, h, w, 3) uint8 frames as a view: rows 3 * (w + 5) bytes apart, frames one row further
    apart than their rows span."""
    canvas = rng.integers(0, 256, (T, h + 1, w + 5, 3), dtype=np.uint8)
    return torch.from_numpy(canvas)[:, 1:, 2:2 + w]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("P,m,T", CASES)
def test_groups_match_oracle(kernels, cpu_path, P, m, T, dtype):
    rng = np.random.default_rng(SEED)
    q = P * m
    groups = [_group(rng, T, q * int(rng.integers(1, 4)), q * int(rng.integers(1, 4)))
              for _ in range(3)]
    lut = _lut(rng, dtype)
    lut_np = None if lut is None else lut.float().numpy()
    parts = [group_rows(g.numpy(), lut_np, P, m) for g in groups]
    want = torch.from_numpy(np.concatenate(parts)).to(dtype)
    offsets = np.cumsum([0] + [len(x) for x in parts])[:-1].tolist()
    for threads in (1, 2):
        kernels.set_num_threads(threads)
        try:
            out = torch.full((want.numel(),), POISON[dtype], dtype=dtype)
            kernels.normalize_patchify(groups, lut, out, offsets, "merge_grouped", P, m, T)
        finally:
            kernels.set_num_threads(None)
        assert torch.equal(_bits(out), _bits(want)), f"seed {SEED}, {threads} threads, {cpu_path}"


def test_a_group_of_one_frame_repeated_equals_the_still_image(kernels, cpu_path):
    """Frames t all equal: the rows of the image with the temporal copies (what an image gets)."""
    rng = np.random.default_rng(SEED)
    img = rng.integers(0, 256, (56, 84, 3), dtype=np.uint8)
    lut = _lut(rng, torch.float32)
    still = torch.empty(rows(img, None, "merge_grouped", 14, 2, 2).size)
    group = torch.empty_like(still)
    kernels.normalize_patchify([torch.from_numpy(img)], lut, still, [0], "merge_grouped", 14, 2, 2)
    kernels.normalize_patchify([torch.from_numpy(np.stack([img, img]))], lut, group, [0],
                               "merge_grouped", 14, 2, 2)
    assert torch.equal(_bits(still), _bits(group))


@pytest.mark.parametrize("match", ["pillow", "torchvision"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_group_equals_each_frame_resized(kernels, cpu_path, match, dtype):
    """resize_normalize_patchify of a group = the kernels' resize of each frame, then the
    oracle's group rows (upscale, downscale, one axis unchanged; 1 and 2 threads)."""
    rng = np.random.default_rng(SEED)
    lut = _lut(rng, dtype)
    lut_np = None if lut is None else lut.float().numpy()
    for (H, W), hw, f in (((90, 130), (112, 140), "bicubic"), ((300, 200), (56, 84), "bilinear"),
                          ((56, 333), (56, 112), "lanczos")):
        frames = _group(rng, 2, H, W)
        resized = np.stack([kernels.resize(fr.contiguous(), hw, f, match=match).numpy()
                            for fr in frames])
        want = torch.from_numpy(group_rows(resized, lut_np, 14, 2)).to(dtype)
        for threads in (1, 2):
            kernels.set_num_threads(threads)
            try:
                out = torch.full((want.numel() + 7,), POISON[dtype], dtype=dtype)
                kernels.resize_normalize_patchify(frames, hw, f, lut, out, 7, "merge_grouped", 14, 2, 2,
                                                  match=match)
            finally:
                kernels.set_num_threads(None)
            assert torch.equal(_bits(out[7:]), _bits(want)), (H, W, hw, f, threads, cpu_path)
            assert torch.equal(_bits(out[:7]), _bits(torch.full((7,), POISON[dtype], dtype=dtype)))


@pytest.mark.parametrize("bad,order,T,match", [
    (lambda g: g, "raster", 1, "temporal group"),
    (lambda g: g[:1], "merge_grouped", 2, "temporal group"),
    (lambda g: torch.cat([g, g]), "merge_grouped", 2, "temporal group"),
    (lambda g: g.as_strided(g.shape, (3 * 28, 3 * 28, 3, 1)), "merge_grouped", 2, "frames apart"),
])
def test_bad_groups_say_what_was_expected(kernels, bad, order, T, match):
    g = torch.zeros((2, 28, 28, 3), dtype=torch.uint8)
    out = torch.empty(4 * 1176)
    with pytest.raises(RuntimeError, match=match):
        kernels.normalize_patchify([bad(g)], torch.zeros(3, 256), out, [0], order, 14, 2 if T > 1 else 1, T)
    with pytest.raises(RuntimeError, match=match):
        kernels.resize_normalize_patchify(bad(g), (28, 28), "bicubic", torch.zeros(3, 256), out, 0,
                                          order, 14, 2 if T > 1 else 1, T)
