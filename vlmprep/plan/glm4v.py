"""GLM-4.1V geometry (``glm4v_resize``) and its video rule (``Glm4vVideoProcessor``).

GLM-4.1V's image resize is Qwen3-VL's video ``smart_resize`` (``qwen.smart_resize_video``, reused
here, not copied) called with ``num_frames = temporal_patch_size`` (2): the pixel budget counts
``2 * h * w``, and a side below the factor (28) scales the image up before rounding.

    Given glm4v (factor 28, pixels 12,544..9,633,792) and a 1080x1920 (HxW) image
    Output one canvas 1092x1932, grid (1, 78, 138), 2691 tokens, "<|image|>" * 2691

Videos (transformers 5.24 ``models/glm4v/video_processing_glm4v.py`` and
``processing_glm4v.py`` ``replace_video_token``):

- sampling (``do_sample_frames``, the checkpoint's default): ``duration = metadata.duration or
  round((total - 1) / fps) + 1``; up to ``max_duration`` (300 s):
  ``n = max(floor(duration * fps_req), 1)`` indices ``min(total - 1, ceil(i * fps / fps_req))``;
  longer: ``300 * fps_req`` indices ``min(total - 1, ceil(t * fps))`` for ``t`` in
  ``np.linspace(0, duration, 300 * fps_req)`` (every frame when that is not fewer than the
  clip's). Duplicates dropped (first seen kept), the last repeated when the count is odd. The
  processor ignores ``num_frames`` (refused here) and needs the source fps (unknown: refused, as
  transformers raises);
- resize: ``smart_resize_video(n, h, w, 2, 28, min_pixels, max_pixels)`` (the clip's budget,
  47,040,000 pixels in the checkpoint), n the sampled frames;
- grid ``(n / 2, h / 14, w / 14)``; tokens ``t * h * w / 4``;
- placeholder, per temporal group ``k``: ``"<|begin_of_image|>" + "<|image|>" * (h * w / 4) +
  "<|end_of_image|>" + str(int(ts[k]))``, ``ts`` every second sampled frame's ``index / fps``
  (the image token, not ``<|video|>``: the processor expands the prompt's one ``<|video|>``).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .. import ops
from ..errors import ImageError
from ..pipeline import Pipeline
from .plan import Sizing, count_embeddings, one_canvas, sizing_rule
from .qwen import smart_resize_video
from .video import Clip, VideoOptions, VideoPlan, check_budget, video_rule

if TYPE_CHECKING:
    from .video import VideoMetaLike

__all__ = ["glm4v_size", "glm4v_frame_indices", "IMAGE_TOKEN", "VIDEO_TOKEN", "BEGIN_OF_IMAGE",
           "END_OF_IMAGE", "MAX_DURATION"]

#: ``Glm4vProcessor``'s tokens (its tokenizer's ``image_token`` / ``video_token``).
IMAGE_TOKEN = "<|image|>"
VIDEO_TOKEN = "<|video|>"
BEGIN_OF_IMAGE = "<|begin_of_image|>"
END_OF_IMAGE = "<|end_of_image|>"
#: ``Glm4vVideoProcessor.max_duration``: longer clips are sampled at 300 * fps points.
MAX_DURATION = 300


def glm4v_size(height: int, width: int, factor: int = 28, min_pixels: int = 112 * 112,
               max_pixels: int = 28 * 28 * 2 * 6144, temporal_factor: int = 2) -> tuple[int, int]:
    """GLM-4.1V's image resize -> ``(h, w)``, multiples of ``factor``; transformers' ValueErrors
    (an aspect ratio above 200 after the upscale) are ImageErrors.

    Given 1x1 -> the 28x28 upscale, then the min branch (2*28*28 < 12,544) -> (84, 84).
    """
    if height < 1 or width < 1:
        raise ImageError(f"expected an image of at least 1x1 pixels, got {height}x{width} (HxW); "
                         f"the file or array is empty")
    try:
        return smart_resize_video(temporal_factor, height, width, temporal_factor, factor,
                                  min_pixels, max_pixels)
    except ImageError as e:
        raise ImageError(f"glm4v_resize: expected an aspect ratio of at most 200 (after scaling a "
                         f"side below {factor} up to {factor}), got {height}x{width} (HxW); crop "
                         f"or pad the image to a less extreme shape ({e})") from None


@sizing_rule("glm4v_resize")
def _glm4v_resize(op: ops.glm4v_resize, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    rhw = glm4v_size(hw[0], hw[1], op.factor, op.min_pixels, op.max_pixels, op.temporal_factor)
    return one_canvas(rhw, pipeline)


# -- video -------------------------------------------------------------------------------------
def _fail(expected: str, got: object, fix: str) -> ImageError:
    return ImageError(f"video: expected {expected}, got {got}; {fix}")


def glm4v_frame_indices(total: int, fps: float, duration: float | None, requested_fps: float,
                        max_duration: int = MAX_DURATION) -> list[int]:
    """``Glm4vVideoProcessor.sample_frames``: the sampled indices (0-based in the clip), without
    duplicates, the last repeated when their count is odd.

    Given 30 frames at 10 fps (3 s), 2 fps -> [0, 5, 10, 15, 20, 25].
    """
    import numpy as np  # deferred: plans of images need no numpy
    last = total - 1
    dur = duration or round(last / fps) + 1
    if dur <= max_duration:
        n = max(int(math.floor(dur * requested_fps)), 1)
        idx = [min(last, int(math.ceil(i * fps / requested_fps))) for i in range(n)]
    else:
        num = int(max_duration * requested_fps)
        if num >= total:
            idx = list(range(total))
        else:
            idx = [min(last, int(math.ceil(t * fps)))
                   for t in np.linspace(0, dur, num, endpoint=True)]
    uniq = list(dict.fromkeys(idx))
    if len(uniq) & 1:
        uniq.append(uniq[-1])
    return uniq


def _sampled(clip: Clip, meta: "VideoMetaLike", opts: VideoOptions) -> list[int]:
    """The sampled frames, 0-based in the clip (before the temporal padding)."""
    if opts.num_frames is not None:
        raise _fail("fps sampling (Glm4vVideoProcessor.sample_frames ignores num_frames and "
                    "samples at the fps)", f"num_frames={opts.num_frames}",
                    "pass Video(src, fps=...) or nothing (the checkpoint's 2 fps)")
    if not opts.do_sample_frames:
        return list(range(clip.count))
    if clip.fps is None:
        raise _fail("a known source fps (Glm4vVideoProcessor samples by fps and raises "
                    "without it)", "fps 0 (unknown)", "pass Video(source_fps=...)")
    whole = clip.first == 0 and clip.count == meta.total_num_frames
    duration = meta.duration if whole else clip.count / clip.fps
    # at most max(MAX_DURATION * fps + 1, total) indices before duplicates go: bounded
    return glm4v_frame_indices(clip.count, clip.fps, duration, opts.fps or 2.0)


@video_rule("glm4v")
def _glm4v_video(pipeline: Pipeline, meta: "VideoMetaLike", opts: VideoOptions, clip: Clip,
                 index: int) -> VideoPlan:
    pf = pipeline.patchify
    p, tps, merge = pf.patch_size, pf.temporal_patch_size, pf.merge_size
    idx = _sampled(clip, meta, opts)
    n = len(idx)
    check_budget(n, meta, clip.limits)
    if n < tps:
        raise _fail(f"at least {tps} frames (GLM-4.1V's temporal patch; transformers raises "
                    f"'t:{n} must be larger than temporal_factor')", f"{n} frame(s)",
                    "give a longer clip or sample frames (the checkpoint's fps)")
    rh, rw = smart_resize_video(n, meta.height, meta.width, tps, p * merge, opts.min_pixels,
                                opts.max_pixels)
    pad = -n % tps
    gt, gh, gw = (n + pad) // tps, rh // p, rw // p
    check_budget(n, meta, clip.limits, gt * gh * gw, 3 * tps * p * p)
    fps = clip.fps
    # replace_video_token: every second sampled frame's time (unknown fps: 24), as int seconds
    stamps = [i / (fps if fps is not None else 24) for i in idx][::2][:gt]
    stamps += [stamps[-1] if stamps else 0] * (gt - len(stamps))
    frame_tokens = gh * gw // (merge * merge)
    frame = IMAGE_TOKEN * frame_tokens
    text = "".join(f"{BEGIN_OF_IMAGE}{frame}{END_OF_IMAGE}{int(t)}" for t in stamps)
    frames = [clip.first + i for i in idx]
    frames += [frames[-1]] * pad
    tokens = gt * frame_tokens
    return VideoPlan(
        index=index, meta=meta, frame_indices=frames,
        timestamps=[i / fps for i in frames] if fps is not None else [],
        resized_hw=(rh, rw), grid_thw=[(gt, gh, gw)], num_patches=gt * gh * gw,
        num_tokens=tokens, num_embeddings=count_embeddings(text, IMAGE_TOKEN, tokens),
        placeholder=text)
