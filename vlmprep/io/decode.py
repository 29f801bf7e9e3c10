"""Decode a validated Source to uint8 RGB ``(H, W, 3)`` with the semantics API.md settles.

- encoded inputs: first frame, EXIF orientation applied (as transformers' load_image);
- transparency (alpha band, palette or tRNS) composited on white, other modes converted
  as Pillow converts them (as transformers' ``convert_to_rgb``);
- 16-bit samples scaled to 8 bits as ``round(v / 257)`` (Pillow would clip or truncate);
- truncated or corrupt data is an ImageError, never a silently partial image.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ImageError
from .inputs import Source

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

__all__ = ["decode", "read_bytes", "to_rgb", "orient"]

# PIL transpose method per EXIF orientation (same table as PIL.ImageOps.exif_transpose).
_ORIENT_OPS = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE",
               6: "ROTATE_270", 7: "TRANSVERSE", 8: "ROTATE_90"}


def read_bytes(src: Source) -> bytes:
    """The encoded bytes of an ``"encoded"`` Source (reads the file for a path)."""
    item = src.item
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    try:
        return Path(item).read_bytes()
    except OSError as e:
        raise ImageError(f"expected a readable file, got {type(e).__name__}: {e.strerror}; check "
                         f"permissions and that the file still exists", source=src.desc) from e


def orient(img: "Image.Image", orientation: int) -> "Image.Image":
    """Apply EXIF orientation 1..8 to a PIL image (1 and unknown values: unchanged)."""
    from PIL import Image
    op = _ORIENT_OPS.get(orientation)
    return img.transpose(getattr(Image.Transpose, op)) if op else img


def to_rgb(img: "Image.Image") -> "np.ndarray":
    """PIL image of any mode -> uint8 ``(H, W, 3)``, transparency composited on white."""
    import numpy as np
    from PIL import Image
    if img.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        # 16-bit gray: Pillow's convert clips at 255 (a white photo); scale instead.
        a = np.asarray(img).astype(np.uint32)
        img = Image.fromarray(((a + 128) // 257).clip(0, 255).astype(np.uint8), "L")
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(white, rgba)
    out = np.asarray(img.convert("RGB") if img.mode != "RGB" else img)
    return np.ascontiguousarray(out)


def _decode_16bit(data: bytes) -> "Image.Image":
    """16-bit PNG/TIFF -> 8-bit PIL image of mode L/LA/RGB/RGBA, samples round(v / 257).

    Pillow reads 16-bit RGB by dropping the low byte; OpenCV keeps all 16 bits.
    """
    import cv2
    import numpy as np
    from PIL import Image
    a = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)  # no EXIF rotation
    if a is None or a.dtype != np.uint16:
        raise ValueError("OpenCV could not read the 16-bit samples")
    a8 = ((a.astype(np.uint32) + 128) // 257).astype(np.uint8)
    if a8.ndim == 2:
        return Image.fromarray(a8, "L")
    if a8.shape[2] == 2:
        return Image.fromarray(a8, "LA")
    if a8.shape[2] == 3:
        return Image.fromarray(np.ascontiguousarray(a8[..., ::-1]), "RGB")
    return Image.fromarray(np.ascontiguousarray(a8[..., [2, 1, 0, 3]]), "RGBA")


def _decode_jpeg_fast(data: bytes) -> "np.ndarray | None":
    """8-bit YCbCr / gray JPEG -> uint8 ``(H, W, 3)`` with torchvision's libjpeg-turbo, EXIF
    orientation applied; None when it cannot (then Pillow decodes and reports errors).

    Same library and settings as Pillow's decoder (islow DCT, fancy upsampling), so the same
    pixels (tests/io/test_decode_fast.py), without Pillow's 4-byte RGB to 3-byte copy (~2x).
    """
    import warnings
    try:
        import torch
        with warnings.catch_warnings():  # torchvision 0.29 deprecates its image io (still here)
            warnings.simplefilter("ignore", DeprecationWarning)
            from torchvision.io import ImageReadMode, decode_jpeg
            t = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                            mode=ImageReadMode.RGB, apply_exif_orientation=True)
    except Exception:  # not installed, CMYK, corrupt or truncated: Pillow's path decides
        return None
    return t.permute(1, 2, 0).numpy()  # decode_jpeg's CHW is a view of HWC memory


def _decode_encoded(src: Source, fast: bool = False) -> "np.ndarray":
    from PIL import Image
    hdr = src.header
    assert hdr is not None
    data = read_bytes(src)
    if fast and hdr.format == "jpeg" and hdr.bit_depth == 8 and hdr.channels in (1, 3):
        out = _decode_jpeg_fast(data)
        if out is not None and out.flags.c_contiguous:
            return out
    if hdr.bit_depth == 16 and hdr.format in ("png", "tiff"):
        return to_rgb(orient(_decode_16bit(data), hdr.orientation))
    from PIL import ImageOps
    img = Image.open(io.BytesIO(data))  # opens at frame 0: an animation gives its first frame
    img.load()  # raises on truncated data (Image.LOAD_TRUNCATED_IMAGES stays False)
    ImageOps.exif_transpose(img, in_place=True)  # exactly what transformers' load_image does
    return to_rgb(img)


def decode(src: Source, fast: bool = False) -> "np.ndarray":
    """Source -> uint8 ``(H, W, 3)`` RGB, C-contiguous; ``shape[:2] == src.hw``.

    ``fast``: decode 8-bit JPEGs with torchvision (same pixels as Pillow, about twice as fast;
    Pillow stays the decoder of everything else and the judge of bad data).
    Raises ImageError (with the decoder's message as cause) for corrupt or truncated data.
    """
    import numpy as np
    if src.kind == "array":
        return np.ascontiguousarray(src.item)
    if src.kind == "tensor":
        return np.ascontiguousarray(src.item.detach().cpu().permute(1, 2, 0).numpy())
    try:
        out = to_rgb(src.item) if src.kind == "pil" else _decode_encoded(src, fast)
    except ImageError:
        raise
    except MemoryError:
        raise
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError, struct.error ...
        fmt = src.header.format.upper() if src.header else "image"
        raise ImageError(f"expected a complete, valid {fmt} file, but decoding failed "
                         f"({type(e).__name__}: {e}); the file is truncated or corrupt: re-encode "
                         f"or re-download it", source=src.desc) from e
    if out.shape[:2] != src.hw:
        raise ImageError(f"expected {src.hw[0]}x{src.hw[1]} (HxW) from the header, decoded "
                         f"{out.shape[0]}x{out.shape[1]}; the file's header lies: re-encode it",
                         source=src.desc)
    return out
