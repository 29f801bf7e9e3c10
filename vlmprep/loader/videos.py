"""The DataLoader's video samples: which items are videos, their header-only token counts, and
how a batch of images and videos is split into the Processor's two lists and put back.

A batch keeps its samples in stream order; the Processor takes images and videos as two lists
(``proc(images, videos=videos)``), so a batch's images are ``batch``'s items and its videos
``batch.videos``' items, each in stream order::

    Given  samples [img0, clip0, img1] (positions 0, 1, 2)
    Output by_kind -> images [0, 2], videos [1]; batch.errors[1] is sample 2's,
           batch.videos.errors[0] sample 1's
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import ImageError
from ..io.media import is_video_bytes, is_video_name
from ..pack import build, build_videos, execution_pipeline
from ..plan import ImagePlan
from ..plan.grid import row_length
from ..plan.video import VideoPlan
from .batching import Sample

if TYPE_CHECKING:
    from ..pack import PackedBatch
    from ..processor import Processor

__all__ = ["is_video_item", "as_video", "by_kind", "video_tokens", "empty_images",
           "error_part"]


def is_video_item(item: Any) -> bool:
    """A ``vlmprep.Video``, a path with a video extension (``io.media.VIDEO_EXTENSIONS``), or
    bytes that start as an MP4 / MOV / MKV / WebM / AVI container."""
    mod = sys.modules.get("vlmprep.io.video.types")  # a Video exists only once it is imported
    if mod is not None and isinstance(item, mod.Video):
        return True
    if isinstance(item, (str, os.PathLike)):
        name = os.fspath(item)
        return isinstance(name, str) and is_video_name(name)
    if isinstance(item, (bytes, bytearray, memoryview)):
        return is_video_bytes(item)
    return False


def as_video(item: Any) -> Any:
    """``item`` as a ``vlmprep.Video`` (a bare path or bytes: the checkpoint's sampling), what
    the cache keys a video by."""
    from ..io.video import as_video as wrap  # deferred: the video package imports numpy, OpenCV
    return wrap(item)


def by_kind(samples: Sequence[Sample], positions: Sequence[int]) -> tuple[list[int], list[int]]:
    """``positions`` split into (images, videos), each in order."""
    images = [k for k in positions if not samples[k].video]
    videos = [k for k in positions if samples[k].video]
    return images, videos


def video_tokens(proc: "Processor", item: Any) -> int:
    """The video's LLM tokens from its container metadata (no frame decoded); 0 when it cannot
    be planned (its batch then raises or skips it, naming the sample)."""
    try:
        return int(proc.plan(videos=[item]).videos[0].num_tokens)
    except ImageError:
        return 0


def empty_images(proc: "Processor") -> "PackedBatch":
    """The image batch of no image (what ``proc([])`` gives), in ``proc``'s row form: the image
    side of a video's part of a batch."""
    import torch
    rows_pipe = execution_pipeline(proc.pipeline, proc.row_form)
    order = proc.pipeline.patchify.order
    shape = ((0, 3, *proc.pipeline.tile_hw) if order == "tiles"  # type: ignore[misc]
             else (0, row_length(rows_pipe.patchify)))
    pv = torch.empty(shape, dtype=getattr(torch, proc.dtype), device=proc.device)
    return build(pv, [], {}, proc.pipeline, proc.row_form)


def error_part(proc: "Processor", err: ImageError, video: bool) -> "PackedBatch":
    """One skipped sample's part of a batch: an image batch of one skipped image, or no image
    and a video batch of one skipped video."""
    import torch
    images = empty_images(proc)
    if not video:
        return build(images.pixel_values, [ImagePlan(index=0, source_hw=(0, 0), error=err)],
                     {0: err}, proc.pipeline, proc.row_form)
    pipe = proc.pipeline
    tiles = pipe.patchify.order == "tiles"
    shape = (0, 3, *pipe.tile_hw) if tiles else (0, row_length(pipe.patchify))  # type: ignore[misc]
    pv = torch.empty(shape, dtype=getattr(torch, proc.dtype), device=proc.device)
    vids = build_videos(pv, [VideoPlan(index=0, error=err)], {0: err}, pipe,
                        "tiles" if tiles else "patches")
    return replace(images, videos=vids)
