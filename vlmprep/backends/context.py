"""What a lowering may read besides its op and its input value (one image's context)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch

    from ..io.inputs import Source
    from ..plan import ImagePlan

__all__ = ["Context"]


@dataclass
class Context:
    """What a lowering may read besides its op and its input value.

    Fields:
        source: the validated input item.
        plan: this image's plan (all sizes and boxes come from here).
        dest: this image's slice of the batch output, which patchify fills:
            ``(num_patches, patch_dim)`` rows or ``(num_tiles, C, H, W)`` tiles.
        dtype: ``"float32"`` | ``"bfloat16"`` | ``"uint8"``.
        device: torch device string.
        normalize: the backend's normalize of one uint8 image or canvas -> float32, set only
            where the normalize runs inside the sizing lowering (``fusion.NORMALIZED_CANVAS``:
            a ``plan.Canvas.normalized`` canvas in a normalized output); else None.
    """

    source: "Source"
    plan: "ImagePlan"
    dest: "torch.Tensor"
    dtype: str
    device: str
    normalize: Callable[[Any], Any] | None = None
