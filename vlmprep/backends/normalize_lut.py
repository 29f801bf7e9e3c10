"""The normalize lut: ``lut[c, v]``, the normalized value of uint8 level ``v`` in channel ``c``.

A uint8 channel has 256 levels, so a normalize is a per-channel 256-entry table. Every user of
the table gets it from ``normalize_lut`` here: the fused kernels of the reference and torch
backends (``lut_tensor``), DALI's lookup table and its plugin, ``adapters.vit.normalize_on_device``
and the benches. The table is a backend's own normalize applied to every level (the ``ramp``
image), so a lookup gives exactly the bits of that backend's op-by-op path, whatever order it
rounds in.

    Given  normalize(rescale=1/255, mean=CLIP_MEAN, std=CLIP_STD)
    Input  levels v = 0..255 of channels c = 0..2
    Output float32 (3, 256): lut[c, v] = ((v * rescale as f64 -> f32) - mean[c]) / std[c] (f32)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    import torch

    from ..ops import normalize

__all__ = ["normalize_array", "normalize_lut", "lut_tensor", "ramp"]


def normalize_array(op: "normalize", x: np.ndarray) -> np.ndarray:
    """uint8 ``(..., C)`` -> float32 ``(..., C)``, as transformers' PIL-backend processors:
    ``(x.astype(f64) * rescale).astype(f32)``, then ``(x - mean) / std`` in float32 (the same
    operations, so the same bits). The reference backend's normalize, and the default lut."""
    mean, std = np.asarray(op.mean, np.float32), np.asarray(op.std, np.float32)
    return ((x.astype(np.float64) * op.rescale).astype(np.float32) - mean) / std


def ramp(channels: int = 3) -> np.ndarray:
    """uint8 ``(256, channels)``: the image whose pixel ``v`` is ``(v, ..., v)``."""
    return np.repeat(np.arange(256, dtype=np.uint8)[:, None], channels, axis=1)


def normalize_lut(op: "normalize",
                  normalize: Callable[["normalize", np.ndarray], Any] = normalize_array
                  ) -> np.ndarray:
    """float32 ``(C, 256)``, C-contiguous, ``C = len(op.mean)``: ``lut[c, v]`` is
    ``normalize(op, ramp(C))[v, c]``.

    ``normalize(op, x)``: a backend's normalize of uint8 ``(256, C)`` levels into float32 values
    of the same shape (a numpy array or a CPU torch tensor); default ``normalize_array``.
    """
    values = np.asarray(normalize(op, ramp(len(op.mean))), dtype=np.float32)
    return np.ascontiguousarray(values.reshape(256, -1).T)


_CACHE: dict[tuple, "torch.Tensor"] = {}


def lut_tensor(op: "normalize", dtype: "torch.dtype", device: "torch.device | str",
               normalize: Callable[["normalize", np.ndarray], Any] = normalize_array
               ) -> "torch.Tensor":
    """``normalize_lut(op, normalize)`` as a ``(C, 256)`` tensor of ``dtype`` on ``device``, made
    once per (op, normalize, dtype, device). float32 -> bfloat16 rounds to nearest even, as the
    op-by-op paths' copy into a bfloat16 output does."""
    import torch
    key = (op, normalize, str(dtype), str(device))
    t = _CACHE.get(key)
    if t is None:
        t = _CACHE[key] = torch.from_numpy(normalize_lut(op, normalize)).to(dtype).to(device)
    return t
