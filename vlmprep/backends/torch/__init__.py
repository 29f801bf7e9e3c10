"""``torch``: torchvision ops on CPU or CUDA.

Values flow as uint8 ``(C, H, W)`` tensors on the device until normalize, float32 after;
patchify writes the output rows. Resizes run as one-dimensional passes in Pillow's order
(``resize.resize_like_pil``): on CUDA Pillow's exact integer resample (``pil_resample``, 0 levels
from PIL); on the CPU the compiled Pillow-exact resize when built, which ``fusion`` may run
inside the kernel that writes the rows (``resize_in_kernel``), else torchvision's uint8 kernel
per pass (within 2 levels). ``tv_match.Backend`` is this backend
with transformers' torchvision-backend resize and normalize (``Processor(match="torchvision")``).
On cuda a batch runs as a GPU pipeline, stage by stage (``gpu``: the plan and its table;
``staging``: the pinned upload block); docs/how-to/gpu.md says what runs where.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..base import Backend as _Base
from ..video import register_video
from . import gpu
from . import ops as _ops  # (registers the lowerings)

# Videos, on CPU and cuda: the shared video lowering (backends/video.py: the rows made on the CPU,
# where torchvision's uint8 resize is transformers', then moved to the device).
register_video("torch")

if TYPE_CHECKING:
    import torch

    from ...errors import ImageError
    from ..context import Context


class Backend(_Base):
    name = "torch"
    normalize_levels: Callable[..., Any] = staticmethod(_ops.normalize_levels)
    resize_in_kernel = True

    @staticmethod
    def hwc(tile: Any) -> Any:
        """uint8 ``(C, h, w)`` -> ``(h, w, C)`` (a view)."""
        return tile.permute(1, 2, 0)

    def run_jobs(self, jobs: list["Context"], out: "torch.Tensor") -> list["ImageError | None"]:
        """On cuda a batch runs stage by stage (``gpu.run_batch``: batched decode, one staged
        upload, grouped resizes, one rows kernel call); on the CPU image by image."""
        if gpu.batched(self.device):
            return gpu.run_batch(self, jobs, out)
        return super().run_jobs(jobs, out)
