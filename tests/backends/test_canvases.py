"""The canvas executor shared by every backend: parent -> cut box -> resize -> pad with fill."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vlmprep.backends.base import build_canvases, cut_tiles
from vlmprep.plan import Canvas, ImagePlan


def _plan():
    return ImagePlan(
        index=0, source_hw=(40, 50),
        canvases=[Canvas((10, 12), box=(2, 3, 20, 20)),
                  Canvas((6, 6), parent=0, size=(8, 9), offset=(1, 2), fill=(10, 20, 30),
                         interpolation="bilinear")],
        tiles=[(0, 0, 8, 9), (-1, 4, 4, 4)], tile_canvas=[1, 0])


def _oracle(img: np.ndarray) -> list[np.ndarray]:
    # Independent: PIL crop/resize and numpy padding, written out step by step.
    c0 = np.asarray(Image.fromarray(img[2:22, 3:23]).resize((12, 10), Image.BICUBIC))
    c1 = np.empty((8, 9, 3), np.uint8)
    c1[:] = (10, 20, 30)
    c1[1:7, 2:8] = np.asarray(Image.fromarray(c0).resize((6, 6), Image.BILINEAR))
    t1 = np.zeros((4, 4, 3), np.uint8)
    t1[1:, :] = c0[0:3, 4:8]
    return [c1, t1]


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_canvas_steps(backend):
    img = np.random.default_rng().integers(0, 256, (40, 50, 3), dtype=np.uint8)
    want = _oracle(img)
    if backend == "reference":
        from vlmprep.backends.reference.ops import cut, resize
        got = cut_tiles(build_canvases(img, _plan(), "bicubic", resize, cut), _plan(), cut)
    else:
        from vlmprep.backends.torch.ops import cut
        from vlmprep.backends.torch.resize import resize_like_pil
        x = torch.from_numpy(img).permute(2, 0, 1)
        got = [t.permute(1, 2, 0).numpy() for t in
               cut_tiles(build_canvases(x, _plan(), "bicubic", resize_like_pil, cut), _plan(), cut)]
    tol = 0 if backend == "reference" else 2  # torch resize bound, see test_torch_resize
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.abs(g.astype(int) - w.astype(int)).max() <= tol
    assert (got[0][0] == (10, 20, 30)).all() and (got[1][0] == 0).all()  # fill is exact


def _normalized_plan():
    # canvas 1 is resized from canvas 0's normalized values; tile 2 reaches outside canvas 0
    return ImagePlan(
        index=0, source_hw=(40, 50),
        canvases=[Canvas((16, 20)), Canvas((8, 8), parent=0, normalized=True)],
        tiles=[(0, 0, 8, 8), (0, 0, 8, 8), (12, 16, 8, 8)], tile_canvas=[1, 0, 0])


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_normalized_canvas_steps(backend):
    """``Canvas.normalized``: with a normalize (fusion.NORMALIZED_CANVAS) the canvas is its
    parent's normalized values resized without antialias, every tile leaves normalized, and a
    tile reaching outside its canvas has the normalized fill (the level 0 normalized), not 0.0;
    without one (uint8) the parent's levels are resized. Oracle: torch's interpolate written out,
    the backend's own canvas 0 and normalize."""
    from vlmprep import ops
    from vlmprep.backends import normalize_lut
    img = np.random.default_rng().integers(0, 256, (40, 50, 3), dtype=np.uint8)
    op = ops.normalize(mean=0.5, std=0.5)
    p = _normalized_plan()
    if backend == "reference":
        from vlmprep.backends.reference.ops import cut, resize, resize_normalized
        x = img

        def norm(a):
            return normalize_lut.normalize_array(op, a)

        def chw(a):  # HWC numpy -> CHW tensor (a writable copy)
            return torch.from_numpy(np.array(a)).permute(2, 0, 1)
    else:
        from vlmprep.backends.torch import ops as tops
        cut, resize, resize_normalized = tops.cut, tops.resize, tops.resize_normalized
        x = torch.from_numpy(img).permute(2, 0, 1)

        def norm(a):
            return tops.normalize_tensor(op, a)

        def chw(a):
            return a
    c0 = chw(resize(x, (16, 20), "bicubic"))
    f0 = chw(norm(resize(x, (16, 20), "bicubic")))
    want_glob = torch.nn.functional.interpolate(f0[None].float(), size=(8, 8), mode="bicubic",
                                                align_corners=False, antialias=False)[0]
    got = [chw(t) for t in cut_tiles(build_canvases(x, p, "bicubic", resize, cut, resize_normalized,
                                                    norm), p, cut, norm)]
    assert all(t.dtype == torch.float32 for t in got)
    assert torch.equal(got[0], want_glob) and torch.equal(got[1], f0[:, :8, :8])
    fill = chw(norm(np.zeros((1, 1, 3), np.uint8)) if backend == "reference"
               else norm(torch.zeros(3, 1, 1, dtype=torch.uint8)))
    assert torch.equal(got[2][:, :4, :4], f0[:, 12:, 16:])
    assert torch.equal(got[2][:, 4:, :], fill.expand(3, 4, 8)) and float(fill.abs().min()) > 0
    raw = [chw(t) for t in cut_tiles(build_canvases(x, p, "bicubic", resize, cut, resize_normalized),
                                     p, cut)]
    want_raw = torch.nn.functional.interpolate(c0[None].contiguous(), size=(8, 8), mode="bicubic",
                                               align_corners=False, antialias=False)[0]
    assert raw[0].dtype == torch.uint8 and torch.equal(raw[0], want_raw)
