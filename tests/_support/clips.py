"""Small real clips for the batch job, loader and cache tests (videos wherever images go): written
with OpenCV's VideoWriter through ``_support.videos.write_cv2`` (pan and zoom over a package
photo), tiny so that decoding them costs milliseconds, plus the broken files a batch must turn
into error rows."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _support.videos import pan_zoom, write_cv2

#: name -> (fourcc, frames, fps, (width, height), photo): two containers, two codecs.
CLIPS = {
    "pan.mp4": ("mp4v", 24, 12.0, (160, 120), "astronaut"),
    "zoom.mkv": ("mp4v", 20, 10.0, (128, 96), "chelsea"),
}


def make_clips(root: Path) -> dict[str, Path]:
    """Write ``CLIPS`` and two bad files into ``root`` -> {name: path}; ``garbage.mp4`` (random
    bytes named .mp4) and ``cut.mp4`` (pan.mp4 cut at 40%: no index) fail as videos."""
    root.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, (fourcc, n, fps, wh, photo) in CLIPS.items():
        why = write_cv2(root / name, pan_zoom(photo, n, wh), fps, fourcc)
        if why:
            pytest.skip(why)
        out[name] = root / name
    data = out["pan.mp4"].read_bytes()
    (root / "cut.mp4").write_bytes(data[: len(data) * 2 // 5])
    rng = np.random.default_rng(29)
    (root / "garbage.mp4").write_bytes(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    out["cut.mp4"] = root / "cut.mp4"
    out["garbage.mp4"] = root / "garbage.mp4"
    return out
