"""``plan_video`` by family name, for tests: ``vlmprep.plan.video.plan_video`` takes a resolved
Pipeline and VideoOptions (the plan layer never reads the presets); this resolves a name (or fills
missing options) through ``vlmprep.presets`` the way the family's checkpoint does."""
from __future__ import annotations

from typing import Any

import numpy as np

from vlmprep import presets
from vlmprep.pipeline import Pipeline
from vlmprep.plan.video import VideoOptions, VideoPlan, plan_video


def plan_video_of(pipeline_or_family: Pipeline | str, video_meta: Any,
                  options: VideoOptions | None = None, per_item: Any = None, index: int = 0,
                  limits: Any = None) -> VideoPlan:
    """``plan_video`` where ``pipeline_or_family`` may be a video family name (``"qwen2.5-vl"``:
    the pipeline of its declared preset; ``options.family``, when set, names the family) and
    ``options`` None (the family's checkpoint defaults, ``presets.video_defaults``)."""
    if isinstance(pipeline_or_family, str):
        family = options.family if options is not None and options.family else pipeline_or_family
        pipeline = presets.video_pipeline(family)
    else:
        pipeline = pipeline_or_family
        family = options.family if options is not None and options.family else pipeline.name
    if options is None:
        options = presets.video_defaults(family)
    return plan_video(pipeline, video_meta, options, per_item=per_item, index=index,
                      limits=limits)


def frames_of(total: int, h: int, w: int) -> np.ndarray:
    """(total, h, w, 3) uint8; frame k is flat with R = k % 256, G = k // 256 (its index shows
    in the processor's pixels: ``pixel_frames`` reads it back)."""
    f = np.zeros((total, h, w, 3), np.uint8)
    k = np.arange(total)
    f[..., 0] = (k % 256)[:, None, None]
    f[..., 1] = (k // 256)[:, None, None]
    return f


def pixel_frames(out, proc, tps: int = 2) -> list[int]:
    """The source frame of each temporal slice of a Qwen-layout ``pixel_values_videos``
    (``frames_of``'s encoding, undone through the video processor's mean and std)."""
    vp = proc.video_processor
    p = vp.patch_size
    t, gh, gw = (int(v) for v in out["video_grid_thw"][0])
    rows = out["pixel_values_videos"][:: gh * gw].double().numpy()  # each group's first patch
    assert len(rows) == t
    got = []
    for row in rows:
        for k in range(tps):
            r, gr = ((row[(c * tps + k) * p * p] * vp.image_std[c] + vp.image_mean[c]) * 255
                     for c in (0, 1))
            got.append(int(round(r)) + 256 * int(round(gr)))
    return got
