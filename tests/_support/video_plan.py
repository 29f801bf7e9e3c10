"""``plan_video`` by family name, for tests: ``vlmprep.plan.video.plan_video`` takes a resolved
Pipeline and VideoOptions (the plan layer never reads the presets); this resolves a name (or fills
missing options) through ``vlmprep.presets`` the way the family's checkpoint does."""
from __future__ import annotations

from typing import Any

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
