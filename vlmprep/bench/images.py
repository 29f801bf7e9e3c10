"""Benchmark inputs: synthetic mosaics of real photos, or the image files of a folder.

A synthetic image is a mosaic of several different real photos that scikit-image and matplotlib
ship (no downloads), each resized into its cell: one upsampled photo would make the JPEG
unrealistically cheap to decode. Everything here is deterministic (fixed seeds, fixed quality).
"""
from __future__ import annotations

import functools
import importlib.util
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ImageError
from ..io.probe import probe
from ..processor import Processor

if TYPE_CHECKING:
    import numpy as np

    from ..pipeline import Pipeline

__all__ = ["SIZES", "FORMATS", "photos", "mosaic", "encode", "parse_size", "ImageSet", "synthetic_set",
           "folder_set", "why_unusable"]

#: Named sizes, (H, W).
SIZES = {"720p": (720, 1280), "1080p": (1080, 1920), "4k": (2160, 3840)}
_ALIASES = {"2160p": "4k", "uhd": "4k", "fhd": "1080p", "hd": "720p"}
_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
JPEG_QUALITY = 90


def _need_photo_packages() -> None:
    missing = [m for m in ("skimage", "matplotlib") if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(f"synthetic images are mosaics of the photos that scikit-image and "
                         f"matplotlib ship; {' and '.join(missing)} not installed: pip install "
                         f"scikit-image matplotlib, or pass --images DIR")


@functools.lru_cache(maxsize=1)
def _photos() -> tuple:
    import matplotlib  # deferred: optional
    import numpy as np  # deferred: heavy
    import skimage.data as d  # deferred: optional
    from PIL import Image  # deferred: heavy
    out = [d.astronaut(), d.chelsea(), d.coffee(), d.rocket(), d.hubble_deep_field(),
           d.retina(), d.motorcycle_left() if hasattr(d, "motorcycle_left") else d.immunohistochemistry()]
    hopper = os.path.join(matplotlib.get_data_path(), "sample_data", "grace_hopper.jpg")
    out.append(np.asarray(Image.open(hopper).convert("RGB")))
    pics = []
    for p in out:
        p = np.ascontiguousarray(p[..., :3])
        p.setflags(write=False)
        pics.append(p)
    return tuple(pics)


def photos() -> list["np.ndarray"]:
    """Real RGB photos, uint8 ``(H, W, 3)``: scikit-image's data folder and matplotlib's samples."""
    _need_photo_packages()
    return list(_photos())


def mosaic(hw: tuple[int, int], seed: int = 0) -> "np.ndarray":
    """uint8 ``(H, W, 3)``: a 2x3 grid of different photos (random crops), each resized to its cell.

    Deterministic for a given ``(hw, seed)``.
    """
    import numpy as np  # deferred: heavy
    from PIL import Image  # deferred: heavy
    rng = np.random.default_rng(seed)
    H, W = hw
    pics = photos()
    rng.shuffle(pics)
    out = np.zeros((H, W, 3), np.uint8)
    rows, cols = 2, 3
    ys = np.linspace(0, H, rows + 1).astype(int)
    xs = np.linspace(0, W, cols + 1).astype(int)
    k = 0
    for r in range(rows):
        for c in range(cols):
            p = pics[k % len(pics)]
            k += 1
            ch, cw = max(8, p.shape[0] * 3 // 4), max(8, p.shape[1] * 3 // 4)
            y0 = rng.integers(0, p.shape[0] - ch + 1)
            x0 = rng.integers(0, p.shape[1] - cw + 1)
            cell = Image.fromarray(p[y0:y0 + ch, x0:x0 + cw])
            h, w = ys[r + 1] - ys[r], xs[c + 1] - xs[c]
            out[ys[r]:ys[r + 1], xs[c]:xs[c + 1]] = np.asarray(cell.resize((w, h), Image.Resampling.BICUBIC))
    return out


def encode(img: "np.ndarray", fmt: str = "JPEG", **kw) -> bytes:
    """uint8 ``(H, W, 3)`` -> encoded bytes with Pillow (``kw``: Pillow's save options)."""
    from PIL import Image  # deferred: heavy
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, fmt, **kw)
    return buf.getvalue()


def parse_size(s: str) -> tuple[str, tuple[int, int]]:
    """``"1080p"`` / ``"4k"`` / ``"640x480"`` (width x height) -> ``(label, (H, W))``."""
    key = s.strip().lower()
    key = _ALIASES.get(key, key)
    if key in SIZES:
        return key, SIZES[key]
    m = re.fullmatch(r"(\d+)\s*[x*]\s*(\d+)", key)
    if m:
        w, h = int(m.group(1)), int(m.group(2))
        if not (16 <= w <= 16384 and 16 <= h <= 16384):
            raise ValueError(f"--synthetic: expected sides between 16 and 16384 pixels, got "
                             f"{w}x{h}")
        return f"{w}x{h}", (h, w)
    raise ValueError(f"--synthetic: expected {', '.join(SIZES)} or WIDTHxHEIGHT (e.g. 640x480), "
                     f"comma-separated, got {s!r}")


@dataclass(frozen=True)
class ImageSet:
    """Encoded images measured together (one row group of the results).

    Fields:
        label: ``"1080p"``, ``"640x480"`` or the folder's name.
        items: encoded files, as bytes.
        names: one name per item (file name or ``mosaic_<label>_<seed>.jpg``).
        hw: ``(H, W)`` for a synthetic set, None for a folder (sizes vary).
        skipped: ``(name, reason)`` of each folder file left out because it cannot be measured
            (not an image, damaged, refused by the pipeline).
    """

    label: str
    items: tuple[bytes, ...]
    names: tuple[str, ...]
    hw: tuple[int, int] | None = None
    skipped: tuple[tuple[str, str], ...] = ()

    def describe(self) -> dict:
        heads = [probe(b) for b in self.items]
        mp = [h.size_hw[0] * h.size_hw[1] / 1e6 for h in heads]
        return {"label": self.label, "count": len(self.items),
                "height": self.hw[0] if self.hw else None, "width": self.hw[1] if self.hw else None,
                "formats": sorted({h.format for h in heads}),
                "mean_megapixels": round(sum(mp) / len(mp), 4),
                "mean_bytes": round(sum(len(b) for b in self.items) / len(self.items)),
                "synthetic": self.hw is not None,
                "skipped": [{"name": n, "reason": r} for n, r in self.skipped]}


#: ``--format`` of synthetic sets -> (Pillow format, file suffix, save options): JPEG and lossy
#: WebP at quality 90, PNG at Pillow's default compression
FORMATS = {"jpeg": ("JPEG", "jpg", {"quality": JPEG_QUALITY}),
           "png": ("PNG", "png", {}),
           "webp": ("WEBP", "webp", {"quality": JPEG_QUALITY})}


def synthetic_set(size: str, count: int, quality: int = JPEG_QUALITY,
                  fmt: str = "jpeg") -> ImageSet:
    """``count`` different mosaics (seeds 0..count-1) at ``size`` (see ``parse_size``), encoded as
    ``fmt`` (``FORMATS``; ``quality`` for JPEG and WebP). The label is the size's, with
    ``-<fmt>`` appended for a format other than JPEG (``1080p``, ``1080p-png``)."""
    label, hw = parse_size(size)
    if fmt not in FORMATS:
        raise ValueError(f"--format: expected {', '.join(FORMATS)}, got {fmt!r}")
    _need_photo_packages()
    pil_fmt, suffix, opts = FORMATS[fmt]
    if "quality" in opts:
        opts = {**opts, "quality": quality}
    items = tuple(encode(mosaic(hw, seed=i), pil_fmt, **opts) for i in range(count))
    if fmt != "jpeg":
        label = f"{label}-{fmt}"
    return ImageSet(label, items, tuple(f"mosaic_{label}_{i}.{suffix}" for i in range(count)), hw)


def why_unusable(data: bytes, proc: "Processor | None" = None) -> str | None:
    """Why an encoded file cannot be benchmarked, or None. It must go through ``proc`` (default:
    qwen2-vl on the reference backend, the path every backend's output equals: header, plan,
    decode, pixels) and decode fully with Pillow (what the decode floor runs)."""
    from PIL import Image  # deferred: heavy
    try:
        (proc or Processor("qwen2-vl", backend="reference"))([data])
        with Image.open(io.BytesIO(data)) as im:
            im.load()
    except ImageError as e:
        return e.reason
    except Exception as e:  # noqa: BLE001 (any decoder's refusal: the file is reported, not run)
        return f"{type(e).__name__}: {e}"
    return None


def folder_set(folder: str | os.PathLike, count: int | None = None,
               pipeline: "Pipeline | None" = None) -> ImageSet:
    """The image files of ``folder`` (by extension, sorted by name; the first ``count`` usable).

    Each file is run once through ``pipeline`` (default qwen2-vl) on the reference backend. A
    file that cannot be measured (see ``why_unusable``) is left out and listed in
    ``ImageSet.skipped`` with its reason; only a folder without one usable file raises.
    """
    p = Path(folder)
    if not p.is_dir():
        what = "a file" if p.exists() else "nothing"
        raise ValueError(f"--images: expected a directory of image files, found {what} at "
                         f"{str(folder)!r}")
    files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in _EXTENSIONS)
    if not files:
        raise ValueError(f"--images: expected image files ({', '.join(_EXTENSIONS)}) in "
                         f"{str(folder)!r}, found none")
    items: list[bytes] = []
    names: list[str] = []
    skipped: list[tuple[str, str]] = []
    check: "Processor | None" = None
    for f in files:
        if count is not None and len(items) == count:
            break
        try:
            data = f.read_bytes()
        except OSError as e:
            skipped.append((f.name, f"cannot read: {e.strerror or e}"))
            continue
        if check is None:
            check = Processor(pipeline or "qwen2-vl", backend="reference")
        why = why_unusable(data, check)
        if why is not None:
            skipped.append((f.name, why))
            continue
        items.append(data)
        names.append(f.name)
    if not items:
        listed = "; ".join(f"{n}: {r}" for n, r in skipped[:5])
        more = f" (and {len(skipped) - 5} more)" if len(skipped) > 5 else ""
        raise ValueError(f"--images: expected at least one usable image file in {str(folder)!r}, "
                         f"got {len(skipped)} that cannot be measured: {listed}{more}")
    return ImageSet(p.resolve().name or str(p), tuple(items), tuple(names),
                    skipped=tuple(skipped))
