"""numpy oracle of normalize_patchify: lut lookup, then the order's reshape/transpose
(written independently of the kernel's index math; the layouts are documented in
vlmprep/plan/grid.py)."""
from __future__ import annotations

import numpy as np


def rows(img: np.ndarray, lut: np.ndarray | None, order: str, P: int, m: int, T: int) -> np.ndarray:
    """uint8 (h, w, 3) -> the flat output elements of this image (lut: (3, 256) or None)."""
    x = img if lut is None else lut[np.arange(3)[None, None, :], img]  # (h, w, 3)
    h, w, C = x.shape
    if order == "tiles":
        return np.ascontiguousarray(x.transpose(2, 0, 1)).reshape(-1)
    gh, gw = h // P, w // P
    if order == "raster":
        y = x.reshape(gh, P, gw, P, C).transpose(0, 2, 4, 1, 3)
    elif order == "naflex":
        y = x.reshape(gh, P, gw, P, C).transpose(0, 2, 1, 3, 4)
    else:
        y = x.reshape(gh // m, m, P, gw // m, m, P, C).transpose(0, 3, 1, 4, 6, 2, 5)
        y = np.broadcast_to(y[:, :, :, :, :, None], y.shape[:5] + (T,) + y.shape[5:])
    return np.ascontiguousarray(y).reshape(-1)


def group_rows(frames: np.ndarray, lut: np.ndarray | None, P: int, m: int) -> np.ndarray:
    """uint8 (T, h, w, 3), a video's temporal group -> its flat merge_grouped elements: rows
    (bh, bw, mh, mw), columns [c, t, py, px] with frame t's values in slot t (Qwen2-VL's video
    patchify)."""
    x = frames if lut is None else lut[np.arange(3)[None, None, None, :], frames]  # (T, h, w, 3)
    T, h, w, C = x.shape
    gh, gw = h // P, w // P
    y = x.reshape(T, gh // m, m, P, gw // m, m, P, C).transpose(1, 4, 2, 5, 7, 0, 3, 6)
    return np.ascontiguousarray(y).reshape(-1)
