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
