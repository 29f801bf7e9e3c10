"""vLLM's image loading with the JPEG decode left to vlmprep (part of the vLLM plugin).

vLLM decodes every request image with Pillow in its media connector
(``ImageMediaIO.load_bytes``), before any processor runs, and keeps the encoded bytes beside the
decoded image (``MediaWithBytes``: its mm hash is taken from those bytes). With the plugin on,
``load_bytes`` does for a plain JPEG (RGB, no EXIF rotation, the server's ``image_mode`` RGB)
everything vLLM's does except the decode: the same allowlisted open, the same
``VLLM_MAX_IMAGE_PIXELS`` and decoded-memory budget checks with vLLM's messages, the same
``MediaWithBytes`` (same bytes, same ``io_config``, so the same hash and cache keys). The image
inside stays an unloaded Pillow image that carries its bytes (``encoded_jpeg``); vlmprep's
image processor decodes those bytes itself, fused with the resize, into the same pixels Pillow's
decode gives. Whatever loads the image first (another processor, a fallback call) gets Pillow's
pixels as before. Any other image (PNG, CMYK or grey JPEG, an EXIF-rotated one) takes vLLM's own
path unchanged.
"""
from __future__ import annotations

import io
from typing import Any, Callable

__all__ = ["encoded_jpeg", "install_load_bytes"]

_ATTR = "_vlmprep_jpeg"
_SOI = b"\xff\xd8\xff"
_ORIENTATION = 0x0112


def encoded_jpeg(image: Any) -> bytes | None:
    """The JPEG bytes of an image ``load_bytes`` left undecoded, while it is still undecoded
    (after Pillow loads it, its pixels may have been changed in place: then None)."""
    data = getattr(image, _ATTR, None)
    if data is None or getattr(image, "_im", 0) is not None:
        return None
    return data


def install_load_bytes(media_io_cls: Any, switch: Callable[[], bool]) -> None:
    """Give vLLM's ``ImageMediaIO`` (``media_io_cls``) the deferred JPEG decode while ``switch()``
    is true (asked per call; otherwise vLLM's own ``load_bytes`` runs). Idempotent."""
    own = media_io_cls.load_bytes
    if getattr(own, "_vlmprep", False):
        return

    def load_bytes(self: Any, data: bytes) -> Any:
        if switch() and self.image_mode == "RGB" and data[:3] == _SOI:
            got = _deferred(self, data)
            if got is not None:
                return got
        return own(self, data)

    load_bytes._vlmprep = True  # type: ignore[attr-defined]
    load_bytes.__wrapped__ = own  # type: ignore[attr-defined]
    media_io_cls.load_bytes = load_bytes


def _deferred(media_io: Any, data: bytes) -> Any:
    """vLLM's ``load_bytes`` for a plain RGB JPEG without its decode, or None for any other
    image (then vLLM's own runs, errors included)."""
    from vllm import envs
    from vllm.multimodal.image import open_image
    from vllm.multimodal.media import MediaWithBytes
    try:
        image = open_image(io.BytesIO(data))
        if image.format != "JPEG" or image.mode != "RGB" or image.getexif().get(_ORIENTATION, 1) != 1:
            return None
    except Exception:  # noqa: BLE001 (vLLM's own then opens it again and gives its error)
        return None
    w, h = image.size
    max_pixels = envs.VLLM_MAX_IMAGE_PIXELS
    if max_pixels > 0 and w * h > max_pixels:
        return None  # vLLM's own refuses it, with its message
    if media_io.decoded_budget is not None:
        media_io.decoded_budget.charge(w * h * 4)  # as vLLM's: before the (here deferred) decode
    setattr(image, _ATTR, data)
    return MediaWithBytes(image, data, None)  # io_config None: an RGB image is not converted
