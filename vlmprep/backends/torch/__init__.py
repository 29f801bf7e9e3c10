"""``torch``: torchvision ops on CPU or CUDA.

Values flow as uint8 ``(C, H, W)`` tensors on the device until normalize, float32 after;
patchify writes the output rows. Resizes run as one-dimensional passes in Pillow's order
(``resize.resize_like_pil``) so the pixels stay within 2 levels of the PIL reference.
"""
from __future__ import annotations

from ..base import Backend as _Base
from . import ops as _ops  # noqa: F401  (registers the lowerings)


class Backend(_Base):
    name = "torch"
