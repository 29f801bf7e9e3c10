"""Classify and validate input items; the boundary where bad inputs become ImageErrors.

An input item is one image: encoded bytes, a path, a PIL image, an HWC uint8 RGB
numpy array or a CHW uint8 RGB torch tensor. ``resolve`` looks only at headers
and shapes; pixels are read by ``vlmprep.io.decode``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .probe import ProbeResult

from ..errors import ImageError, describe_source

__all__ = ["Source", "resolve"]

_ENCODED = (bytes, bytearray, memoryview)


@dataclass(frozen=True)
class Source:
    """One validated input item.

    Fields:
        kind: ``"encoded"`` (bytes or path), ``"pil"``, ``"array"`` (HWC uint8 numpy) or
            ``"tensor"`` (CHW uint8 torch).
        item: the item as given (a path is kept as a path; bytes are read at decode).
        hw: ``(H, W)`` the decoded image will have (after EXIF orientation for encoded inputs).
        header: the probe result for encoded inputs, else None.
        desc: short description for error messages.
    """

    kind: str
    item: Any
    hw: tuple[int, int]
    header: "ProbeResult | None"
    desc: str


def _is_torch_tensor(x: Any) -> bool:
    # Checked by module name so that a caller without torch never imports it here.
    return type(x).__module__.startswith("torch") and type(x).__name__ in ("Tensor", "Parameter")


def resolve(item: Any) -> Source:
    """Validate one input item from its header or shape -> Source; raises ImageError."""
    desc = describe_source(item)
    if isinstance(item, _ENCODED) or isinstance(item, (str, os.PathLike)):
        if isinstance(item, (str, os.PathLike)):
            p = Path(item)
            if not p.is_file():
                what = "a directory" if p.is_dir() else "nothing"
                raise ImageError(f"expected an image file at this path, found {what}; check the "
                                 f"path (relative paths resolve from {os.getcwd()})", source=desc)
        from .probe import probe
        hdr = probe(item)
        return Source("encoded", item, hdr.size_hw, hdr, desc)
    mod = type(item).__module__ or ""
    if mod.startswith("PIL"):
        w, h = item.size
        return Source("pil", item, (h, w), None, desc)
    if type(item).__name__ == "ndarray":
        _check_array(item, desc, layout="HWC", channel_axis=2)
        return Source("array", item, (int(item.shape[0]), int(item.shape[1])), None, desc)
    if _is_torch_tensor(item):
        _check_array(item, desc, layout="CHW", channel_axis=0)
        return Source("tensor", item, (int(item.shape[1]), int(item.shape[2])), None, desc)
    raise ImageError(f"expected bytes, a path, a PIL.Image, an HWC uint8 numpy array or a CHW "
                     f"uint8 torch.Tensor, got {type(item).__module__}.{type(item).__name__}; "
                     f"pass one image per list item", source=desc)


def _check_array(a: Any, desc: str, layout: str, channel_axis: int) -> None:
    shape = tuple(a.shape)
    dtype = str(a.dtype).replace("torch.", "")
    if dtype != "uint8":
        raise ImageError(f"expected a {layout} uint8 RGB array, got dtype {dtype}; convert with "
                         f"(x * 255).round().clip(0, 255) to uint8 first, or pass the encoded file",
                         source=desc)
    if len(shape) != 3 or shape[channel_axis] != 3:
        raise ImageError(f"expected a {layout} RGB array with 3 channels on axis {channel_axis}, "
                         f"got shape {shape}; stack gray to 3 channels or drop alpha first (or pass "
                         f"a PIL image, which is converted as transformers does)", source=desc)
    h, w = (shape[0], shape[1]) if layout == "HWC" else (shape[1], shape[2])
    if h < 1 or w < 1:
        raise ImageError(f"expected an image of at least 1x1 pixels, got shape {shape}",
                         source=desc)
