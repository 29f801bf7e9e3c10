"""Real test photos (from installed packages) and encoders for every input format."""
from __future__ import annotations

import functools
import io
import os

import numpy as np
from PIL import Image


@functools.lru_cache(maxsize=None)
def photo(name: str) -> np.ndarray:
    """uint8 ``(H, W, 3)`` RGB photo by name: astronaut, chelsea, coffee, rocket, hopper, camera."""
    import skimage.data as d
    if name == "hopper":
        import matplotlib
        p = os.path.join(matplotlib.get_data_path(), "sample_data", "grace_hopper.jpg")
        a = np.asarray(Image.open(p).convert("RGB"))
    elif name == "camera":
        a = np.repeat(d.camera()[..., None], 3, axis=2)
    else:
        a = getattr(d, name)()[..., :3]
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def crop(name: str, h: int, w: int, top: int = 0, left: int = 0) -> np.ndarray:
    a = photo(name)[top:top + h, left:left + w]
    assert a.shape[:2] == (h, w), (name, a.shape)
    return np.ascontiguousarray(a)


def tiled(name: str, h: int, w: int) -> np.ndarray:
    """A real photo mirrored-tiled to ``(h, w)`` (keeps photo statistics at any size)."""
    a = photo(name)
    reps = (-(-h // a.shape[0]), -(-w // a.shape[1]), 1)
    big = np.tile(np.concatenate([a, a[:, ::-1]], axis=1), reps)
    return np.ascontiguousarray(big[:h, :w])


def with_alpha(rgb: np.ndarray) -> np.ndarray:
    """RGBA with a smooth alpha ramp (0 at the left edge) plus a fully transparent square."""
    h, w = rgb.shape[:2]
    alpha = np.tile(np.linspace(0, 255, w).astype(np.uint8), (h, 1))
    alpha[: h // 4, : w // 4] = 0
    return np.dstack([rgb, alpha])


def encode(rgb: np.ndarray, fmt: str) -> bytes:
    """Encode a uint8 RGB image in one of the named formats (see FORMATS)."""
    buf = io.BytesIO()
    img = Image.fromarray(rgb)
    if fmt == "jpeg":
        img.save(buf, "JPEG", quality=90)
    elif fmt == "jpeg_progressive":
        img.save(buf, "JPEG", quality=90, progressive=True)
    elif fmt == "jpeg_gray":
        img.convert("L").save(buf, "JPEG", quality=90)
    elif fmt == "jpeg_cmyk":
        img.convert("CMYK").save(buf, "JPEG", quality=90)
    elif fmt == "png":
        img.save(buf, "PNG")
    elif fmt == "png_rgba":
        Image.fromarray(with_alpha(rgb), "RGBA").save(buf, "PNG")
    elif fmt == "png_gray":
        img.convert("L").save(buf, "PNG")
    elif fmt == "png_la":
        Image.fromarray(with_alpha(rgb), "RGBA").convert("LA").save(buf, "PNG")
    elif fmt == "png_palette":
        img.convert("P", palette=Image.Palette.ADAPTIVE, colors=200).save(buf, "PNG")
    elif fmt == "png_palette_trns":
        p = img.convert("P", palette=Image.Palette.ADAPTIVE, colors=200)
        p.save(buf, "PNG", transparency=int(np.asarray(p)[0, 0]))
    elif fmt == "webp":
        img.save(buf, "WEBP", quality=85)
    elif fmt == "webp_lossless":
        img.save(buf, "WEBP", lossless=True)
    elif fmt == "webp_alpha":
        Image.fromarray(with_alpha(rgb), "RGBA").save(buf, "WEBP", quality=85)
    elif fmt == "bmp":
        img.save(buf, "BMP")
    elif fmt == "gif":
        img.convert("P", palette=Image.Palette.ADAPTIVE).save(buf, "GIF")
    elif fmt == "gif_animated":
        frames = [img.convert("P", palette=Image.Palette.ADAPTIVE),
                  Image.fromarray(rgb[::-1].copy()).convert("P", palette=Image.Palette.ADAPTIVE)]
        frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=100)
    elif fmt == "tiff":
        img.save(buf, "TIFF")
    elif fmt == "tiff_lzw":
        img.save(buf, "TIFF", compression="tiff_lzw")
    else:
        raise ValueError(fmt)
    return buf.getvalue()


FORMATS = ("jpeg", "jpeg_progressive", "jpeg_gray", "jpeg_cmyk", "png", "png_rgba", "png_gray",
           "png_la", "png_palette", "png_palette_trns", "webp", "webp_lossless", "webp_alpha", "bmp",
           "gif", "gif_animated", "tiff", "tiff_lzw")


def with_exif_orientation(rgb: np.ndarray, orientation: int, fmt: str = "JPEG") -> bytes:
    img = Image.fromarray(rgb)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    img.save(buf, fmt, exif=exif.tobytes(), **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def png16(rgb16: np.ndarray) -> bytes:
    """16-bit PNG (gray ``(H, W)`` or RGB ``(H, W, 3)`` uint16) written with OpenCV."""
    import cv2
    a = rgb16 if rgb16.ndim == 2 else rgb16[..., ::-1]
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(a))
    assert ok
    return buf.tobytes()


def hf_view(data: bytes) -> Image.Image:
    """What a transformers user hands the processor for encoded bytes: first frame, EXIF applied."""
    from PIL import ImageOps
    img = Image.open(io.BytesIO(data))
    img.seek(0)
    img.load()
    return ImageOps.exif_transpose(img)


#: Four photo crops (``crop`` arguments) of the family tests' mixed inputs.
FAMILY_PHOTOS = (("astronaut", 301, 453), ("hopper", 477, 389), ("chelsea", 17, 451), ("coffee", 399, 37))


def family_inputs(photos=FAMILY_PHOTOS):
    """The family tests' mixed batch -> ``(items, oracle)``: five photos as JPEG bytes, WebP
    bytes, an HWC uint8 array, a CHW uint8 tensor and PNG bytes (a 1010x1390 tiled one last), and
    what a transformers user hands the processor for each (``hf_view`` of the bytes, PIL images
    of the arrays)."""
    import torch
    arrs = [crop(*p) for p in photos] + [tiled("rocket", 1010, 1390)]
    items = [encode(arrs[0], "jpeg"), encode(arrs[1], "webp"), arrs[2],
             torch.from_numpy(arrs[3]).permute(2, 0, 1), encode(arrs[4], "png")]
    oracle = [hf_view(items[0]), hf_view(items[1]), Image.fromarray(arrs[2]),
              Image.fromarray(arrs[3]), hf_view(items[4])]
    return items, oracle
