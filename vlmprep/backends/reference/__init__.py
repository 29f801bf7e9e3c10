"""``reference``: PIL + numpy, operation for operation as transformers' PIL-backend processors.

Values flow as uint8 ``(H, W, 3)`` until normalize, float32 ``(H, W, 3)`` after; patchify writes
the output rows. With the kernels built, ``fusion.choose`` runs normalize + patchify as one kernel
call whose lut is this backend's normalize (``normalize_lut.normalize_array``: the same bits).
Always available (needs only Pillow, numpy and torch for the output tensors; its videos, the
shared video lowering, also torchvision).
"""
from __future__ import annotations

from ..base import Backend as _Base
from ..video import register_video
from . import ops as _ops  # noqa: F401  (registers the lowerings)

# Videos: the shared video lowering (backends/video.py; transformers' video processors run on
# torchvision only, so a video's pixels are its torchvision ops' whatever the image backend).
register_video("reference")


class Backend(_Base):
    name = "reference"
