"""Video fixtures (tests/_support/videos.py holds them with the clip builders, so test modules
import helpers from ``_support.videos``, never from a module named ``conftest``: several test
folders have a conftest.py and the name would resolve to whichever was imported last)."""
from _support.videos import (  # noqa: F401
    animation_case,
    bad_videos,
    rotated_videos,
    vfr_video,
    video_case,
    videos,
)
