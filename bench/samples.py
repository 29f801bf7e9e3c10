"""Sample images built from photos that Python packages ship (no downloads).

A sample is a mosaic of several different real photos, resized to fill the target
size: one upsampled photo would make the JPEG unrealistically cheap to decode.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
from PIL import Image

SIZES = {"720p": (720, 1280), "1080p": (1080, 1920), "4k": (2160, 3840)}


def photos() -> list[np.ndarray]:
    """Real RGB photos, uint8 ``(H, W, 3)``: scikit-image's data folder and matplotlib's samples."""
    import matplotlib
    import skimage.data as d
    out = [d.astronaut(), d.chelsea(), d.coffee(), d.rocket(), d.hubble_deep_field(),
           d.retina(), d.motorcycle_left() if hasattr(d, "motorcycle_left") else d.immunohistochemistry()]
    hopper = os.path.join(matplotlib.get_data_path(), "sample_data", "grace_hopper.jpg")
    out.append(np.asarray(Image.open(hopper).convert("RGB")))
    return [np.ascontiguousarray(p[..., :3]) for p in out]


def mosaic(hw: tuple[int, int], seed: int = 0) -> np.ndarray:
    """uint8 ``(H, W, 3)``: a 2x3 grid of different photos (random crops), each resized to its cell."""
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
            out[ys[r]:ys[r + 1], xs[c]:xs[c + 1]] = np.asarray(cell.resize((w, h), Image.BICUBIC))
    return out


def encode(img: np.ndarray, fmt: str = "JPEG", **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, fmt, **kw)
    return buf.getvalue()


def write_samples(out_dir: str | os.PathLike) -> list[Path]:
    """Write the demo set: mosaics at 720p / 1080p in JPEG, PNG and WebP, plus odd sizes."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    specs = [("720p", "JPEG", {"quality": 90}), ("1080p", "JPEG", {"quality": 90}),
             ("1080p", "WEBP", {"quality": 85}), ("720p", "PNG", {})]
    for i, (size, fmt, kw) in enumerate(specs):
        p = out / f"mosaic_{size}_{i}.{fmt.lower()}"
        if not p.exists():
            p.write_bytes(encode(mosaic(SIZES[size], seed=i), fmt, **kw))
        paths.append(p)
    for i, hw in enumerate([(333, 777), (900, 17), (1200, 800)]):
        p = out / f"odd_{hw[0]}x{hw[1]}.jpg"
        if not p.exists():
            p.write_bytes(encode(mosaic(hw, seed=10 + i), "JPEG", quality=92))
        paths.append(p)
    return paths
