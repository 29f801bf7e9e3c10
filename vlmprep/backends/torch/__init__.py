"""``torch``: torchvision ops on CPU or CUDA.

Values flow as uint8 ``(C, H, W)`` tensors on the device until normalize, float32 after;
patchify writes the output rows. Resizes run as one-dimensional passes in Pillow's order
(``resize.resize_like_pil``) so the pixels stay within 2 levels of the PIL reference.
"""
from __future__ import annotations

from ...ops import OP_TYPES
from .. import fused
from ..base import Backend as _Base
from . import ops as _ops  # (registers the lowerings)


class Backend(_Base):
    name = "torch"

    def __init__(self, pipeline, device: str, dtype: str):
        super().__init__(pipeline, device, dtype)
        names = [op.name for op in self.ops]
        # decode, one sizing op, then only normalize / patchify: on the CPU the compiled kernel
        # can resize while it writes the rows (ops.DeferredSizing decides per plan), and decode
        # a JPEG while it does (ops.DeferredDecode, per image).
        if (device.startswith("cpu") and len(names) >= 3 and OP_TYPES[names[1]].sizing
                and names[2:] in (["normalize", "patchify"], ["patchify"])
                and pipeline.patchify.order in fused.RESIZE_LAYOUTS):
            self.lowerings[1] = _ops.DeferredSizing(self.lowerings[1])
            if names[0] == "decode":
                self.lowerings[0] = _ops.DeferredDecode(
                    self.lowerings[0], getattr(self.ops[1], "interpolation", None) or "bicubic")
