"""Sample images built from photos that Python packages ship (no downloads).

A sample is a mosaic of several different real photos, resized to fill the target
size: one upsampled photo would make the JPEG unrealistically cheap to decode.
The mosaic code lives in the package (``vlmprep.bench.images``, used by ``vlmprep bench``);
this module keeps the demo's sample set.
"""
from __future__ import annotations

import os
from pathlib import Path

from vlmprep.bench.images import SIZES, encode, mosaic, photos

__all__ = ["SIZES", "photos", "mosaic", "encode", "write_samples"]


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
