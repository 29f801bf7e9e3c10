"""Video plans: which source frames, what per-frame size, which grid, how many tokens, decided from
container metadata only (no frame decoded).

    Given  qwen2-vl, a 10 s 30 fps 1280x720 clip, ``Video(path, fps=2.0)``
    Output frame_indices [0, 15, 30, ..., 285] (20), resized_hw (728, 1288), grid_thw
           [(10, 52, 92)], 11960 tokens, placeholder "<|video_pad|>" * 11960

This module holds the shared types (``VideoOptions``, ``VideoPlan``), the samplers several families
share (bit-exact ports of the index arithmetic of transformers, qwen_vl_utils and vLLM), the
metadata and budget checks, and ``plan_video``, which dispatches to the family's rule
(``VIDEO_RULES``, filled by ``@video_rule`` in each family's plan module, e.g. ``plan/qwen.py``).
Checkpoint defaults live with the family's preset (``presets/qwen.py``) and are reached through
``vlmprep.presets.video_defaults(family)``.

Hostile metadata (zero frames, NaN / negative / absurd fps or duration, absurd frame counts,
frames above the pixel limit, more sampled frames or output bytes than the limits allow) gives a
plan whose ``error`` is an ImageError (expected / got / fix); nothing is allocated before the
counts are checked (a frame list is built only once its length is known to be bounded).

``VideoMeta`` is ``vlmprep.io.video.VideoMeta``; this module reads only its fields
(``VideoMetaLike``), so any object with them plans (tests use synthetic ones).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..errors import ImageError

if TYPE_CHECKING:
    import numpy as np

    from ..io.video.types import VideoLimits
    from ..pipeline import Pipeline

__all__ = ["VideoMetaLike", "VideoItemLike", "VideoOptions", "VideoPlan", "Clip", "VideoRule",
           "VIDEO_RULES", "SAMPLINGS", "video_rule",
           "plan_video", "check_meta", "check_budget", "known_fps", "clip_window",
           "uniform_indices", "linspace_indices", "linspace_indices_f32", "arange_indices_f32",
           "MAX_SOURCE_FPS", "MAX_SAMPLED_FRAMES"]

#: Frame sampling rules a ``VideoOptions`` may name: ``"transformers"`` (the model's transformers
#: video processor; the default), ``"qwen_vl_utils"`` (Qwen's own ``process_vision_info``:
#: ``smart_nframes`` + a total-pixel budget), ``"vllm"`` (vLLM's video loader for the family).
SAMPLINGS = ("transformers", "qwen_vl_utils", "vllm")

#: A requested sampling rate above this is refused (the decoder's default ``max_fps``).
MAX_SOURCE_FPS = 1000.0
#: Frames one video may sample (decode) at most, whatever the options say.
MAX_SAMPLED_FRAMES = 1 << 16


class VideoMetaLike(Protocol):
    """What a plan reads of ``vlmprep.io.video.VideoMeta`` (transformers' ``VideoMetadata``
    names). ``fps`` 0.0 means unknown (no container rate, e.g. frames without ``source_fps``);
    ``height`` / ``width`` are the decoded frame's size."""

    @property
    def total_num_frames(self) -> int: ...
    @property
    def fps(self) -> float: ...
    @property
    def duration(self) -> float: ...
    @property
    def height(self) -> int: ...
    @property
    def width(self) -> int: ...


class VideoItemLike(Protocol):
    """The per-item sampling options of ``vlmprep.Video`` (None: the checkpoint's)."""

    @property
    def fps(self) -> float | None: ...
    @property
    def num_frames(self) -> int | None: ...
    @property
    def start(self) -> float | None: ...
    @property
    def end(self) -> float | None: ...


def _short(v: Any) -> str:
    """``repr(v)`` with long strings / lists cut (a placeholder can be ~10^6 characters)."""
    if isinstance(v, str) and len(v) > 40:
        return f"{v[:40]!r}... ({len(v)} chars)"
    if isinstance(v, list) and len(v) > 8:
        return f"[{', '.join(repr(x) for x in v[:8])}, ... ({len(v)} items)]"
    return repr(v)


def _fail(what: str, expected: str, got: Any, fix: str) -> ImageError:
    return ImageError(f"{what}: expected {expected}, got {got if isinstance(got, str) else repr(got)}"
                      f"; {fix}")


@dataclass(frozen=True)
class VideoOptions:
    """The checkpoint's ``video_preprocessor_config.json`` values that decide a video's geometry,
    plus the sampling rule. Build a family's defaults with ``vlmprep.presets.video_defaults(family)``.

    Fields (transformers' names):
        fps: frames per second to sample (``do_sample_frames``); exclusive with ``num_frames``.
        num_frames: frames to sample (``do_sample_frames``); exclusive with ``fps``.
        min_frames / max_frames: clamps of fps sampling.
        min_pixels / max_pixels: per-frame ``size.shortest_edge`` / ``size.longest_edge``
            (Qwen3-VL: the budget of the whole clip, frames included).
        do_sample_frames: False: every frame of the clip (transformers' processor given the frames).
        sampling: one of ``SAMPLINGS``.
        cap_pixels_per_frame: transformers' opt-in per-frame cap (qwen-vl-utils-like); off by
            default in transformers 5.24.
        max_video_tokens: the cap's token budget; None: the family's class default.
        total_pixels: ``sampling="qwen_vl_utils"``'s total budget; None: its default
            (``MODEL_SEQ_LEN`` 128000 tokens' pixels * 0.9).
        family: the video rule (``VIDEO_RULES`` key); "": the pipeline's name. ``"qwen2.5-vl"``
            is the qwen2-vl pipeline with Qwen2.5-VL's processor (``second_per_grid_ts``).
    """

    fps: float | None = None
    num_frames: int | None = None
    min_frames: int = 4
    max_frames: int = 768
    min_pixels: int = 3136
    max_pixels: int = 12_845_056
    do_sample_frames: bool = False
    sampling: str = "transformers"
    cap_pixels_per_frame: bool = False
    max_video_tokens: int | None = None
    total_pixels: int | None = None
    family: str = ""

    def __post_init__(self) -> None:
        where = "VideoOptions"
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"{where}: sampling expected one of {SAMPLINGS}, got {self.sampling!r}")
        if self.fps is not None and not (isinstance(self.fps, (int, float)) and not isinstance(
                self.fps, bool) and math.isfinite(self.fps) and self.fps > 0):
            raise ValueError(f"{where}: fps expected a finite number > 0 or None, got {self.fps!r}")
        for name in ("num_frames", "max_video_tokens", "total_pixels"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{where}: {name} expected an int >= 1 or None, got {v!r}")
        for name in ("min_frames", "max_frames", "min_pixels", "max_pixels"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{where}: {name} expected an int >= 1, got {v!r}")

    def for_item(self, item: VideoItemLike | None) -> "VideoOptions":
        """These options with a ``vlmprep.Video``'s own ``fps`` / ``num_frames`` (either turns
        sampling on and replaces the other, as ``processor(videos=..., do_sample_frames=True,
        fps=f, num_frames=None)`` does); raises ImageError for bad or conflicting values."""
        if item is None:
            return self
        fps, n = getattr(item, "fps", None), getattr(item, "num_frames", None)
        if fps is not None and n is not None:
            raise _fail("Video sampling", "fps or num_frames (transformers: mutually exclusive)",
                        f"fps={fps}, num_frames={n}", "pass only one")
        if fps is not None:
            if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not (
                    math.isfinite(fps) and 0 < fps <= MAX_SOURCE_FPS):
                raise _fail("Video fps", f"a finite number in (0, {MAX_SOURCE_FPS:g}]", fps,
                            "pass e.g. Video(src, fps=2.0)")
            return replace(self, fps=float(fps), num_frames=None, do_sample_frames=True)
        if n is not None:
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SAMPLED_FRAMES:
                raise _fail("Video num_frames", f"an int in [1, {MAX_SAMPLED_FRAMES}]", n,
                            "pass e.g. Video(src, num_frames=16)")
            return replace(self, num_frames=n, fps=None, do_sample_frames=True)
        return self


@dataclass(repr=False)
class VideoPlan:
    """Geometry of one input video (ImagePlan's names where they mean the same).

    Fields:
        index: position in the input list.
        meta: the metadata planned from (``VideoMeta``), or None.
        frame_indices: the source frames to decode, in order, after padding to a multiple of the
            temporal patch (the last frame repeated, as the processor's patchify does).
        timestamps: seconds of each entry of ``frame_indices`` in the source (index / fps);
            empty when the fps is unknown.
        resized_hw: ``(h, w)`` of every frame after the family's resize.
        grid_thw: one ``(t, h, w)`` patch grid per ViT sequence (Qwen: one, t = frames / 2).
        num_patches: sum of ``t*h*w``.
        num_tokens: LLM video tokens (the processor's ``num_video_tokens``; 0 on error).
        num_embeddings: embedding rows an engine expects (the video tokens in ``placeholder``).
        placeholder: the exact string the processor puts in place of the video token.
        second_per_grid_ts: Qwen2.5-VL: seconds one temporal patch spans (``temporal_patch_size /
            sampled fps``; to_hf's ``second_per_grid_ts``); None for other families.
        group_timestamps: Qwen3-VL: the seconds its processor writes into the prompt, one per
            temporal group (vLLM's ``timestamps``; not a to_hf key); None for other families.
        first_resize_hw: SmolVLM: ``(h, w)`` of its first resize (the longest edge capped at
            4096), before the one to ``resized_hw``; None for other families.
        error: the ImageError of a video that cannot be planned, else None.
    """

    index: int
    meta: VideoMetaLike | None = None
    frame_indices: list[int] = field(default_factory=list)
    timestamps: list[float] = field(default_factory=list)
    resized_hw: tuple[int, int] = (0, 0)
    grid_thw: list[tuple[int, int, int]] = field(default_factory=list)
    num_patches: int = 0
    num_tokens: int = 0
    num_embeddings: int = 0
    placeholder: str = ""
    second_per_grid_ts: float | None = None
    group_timestamps: list[float] | None = None
    first_resize_hw: tuple[int, int] | None = None
    error: ImageError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def num_frames(self) -> int:
        """Frames after temporal padding (``len(frame_indices)``)."""
        return len(self.frame_indices)

    def __repr__(self) -> str:
        parts = [f"{f.name}={_short(getattr(self, f.name))}" for f in fields(self)
                 if f.name not in _FAMILY_FIELDS or getattr(self, f.name) is not None]
        return f"VideoPlan({', '.join(parts)})"


#: VideoPlan's per-family fields (None for the families without them; left out of its repr then).
_FAMILY_FIELDS = ("second_per_grid_ts", "group_timestamps", "first_resize_hw")


@dataclass(frozen=True)
class Clip:
    """The part of the source a rule samples from: ``count`` frames from ``first`` (a
    ``Video``'s start / end, else the whole video); ``fps`` the source rate, None if unknown;
    ``limits`` the bounds ``plan_video`` was given (pass them to ``check_budget``)."""

    first: int
    count: int
    fps: float | None
    limits: Any = None


#: A video rule: ``rule(pipeline, meta, options, clip, index) -> VideoPlan``.
VideoRule = Callable[["Pipeline", VideoMetaLike, VideoOptions, Clip, int], VideoPlan]

#: family -> its video rule (filled by ``@video_rule``). A family's checkpoint defaults and the
#: preset it plans with are declared in its preset module (``FAMILY.videos``) and looked up there:
#: ``vlmprep.presets.video_defaults(family)``, ``vlmprep.presets.video_pipeline(family)``.
VIDEO_RULES: dict[str, VideoRule] = {}


def video_rule(*families: str) -> Callable[[VideoRule], VideoRule]:
    """Decorator: register the video rule of ``families`` (the family's preset module declares
    which preset plans its videos: ``FamilySpec.videos``)."""
    def deco(fn: VideoRule) -> VideoRule:
        for f in families:
            VIDEO_RULES[f] = fn
        return fn
    return deco


# -- metadata and budgets ----------------------------------------------------------------------
def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _limits(limits: Any) -> "VideoLimits":
    from ..io.video.types import limits_of  # deferred: imports numpy; plans need no video module
    return limits_of(limits)


def check_meta(meta: VideoMetaLike, limits: Any = None) -> None:
    """Raise ImageError unless ``meta`` is a plannable video under ``limits`` (a
    ``vlmprep.io.video.VideoLimits``, an ``ops.decode`` (its per-frame pixels, the video defaults
    otherwise) or None: the defaults; the same bounds the decoder applies): 1..max_frames frames,
    frames of 1x1..max_source_pixels pixels, fps finite in [0, max_fps] (0: unknown), duration
    finite in [0, max_seconds] (or None)."""
    lim = _limits(limits)
    n = getattr(meta, "total_num_frames", None)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise _fail("video", "at least 1 frame", n, "the file declares no frames (empty or "
                    "truncated): re-encode it")
    if n > lim.max_frames:
        raise _fail("video", f"at most {lim.max_frames:,} frames (max_frames)", n, "the declared "
                    "frame count is absurd (corrupt header): re-encode or cut the video")
    h, w = getattr(meta, "height", None), getattr(meta, "width", None)
    if not (isinstance(h, int) and isinstance(w, int)) or h < 1 or w < 1:
        raise _fail("video", "frames of at least 1x1 pixels", f"{h}x{w} (HxW)",
                    "the file declares no picture size: re-encode it")
    if h * w > lim.max_source_pixels:
        raise _fail("video", f"frames of at most {lim.max_source_pixels:,} pixels",
                    f"{h}x{w} = {h * w:,}", "downscale the video or raise max_source_pixels= if "
                    "it is trusted")
    fps: Any = getattr(meta, "fps", None)
    if not _num(fps) or not (math.isfinite(fps) and 0 <= fps <= lim.max_fps):
        raise _fail("video fps", f"a finite rate in [0, {lim.max_fps:g}] (0: unknown)", fps,
                    "the container's frame rate is corrupt: re-encode the video")
    d: Any = getattr(meta, "duration", None)
    if d is not None and (not _num(d) or not (math.isfinite(d) and 0 <= d <= lim.max_seconds)):
        raise _fail("video duration", f"finite seconds in [0, {lim.max_seconds:g}]", d,
                    "the container's duration is corrupt: re-encode the video")


def known_fps(meta: VideoMetaLike) -> float | None:
    """The source fps, or None when the metadata says 0 (unknown)."""
    fps = float(meta.fps)
    return fps if fps > 0 else None


def clip_window(meta: VideoMetaLike, start: float | None, end: float | None) -> Clip:
    """The frames of ``[start, end]`` seconds, as qwen_vl_utils' ``calculate_video_frame_range``
    computes them (start rounded up, end down, both clamped to the video); the whole video when
    both are None. Needs a known fps for a window."""
    fps = known_fps(meta)
    total = meta.total_num_frames
    if start is None and end is None:
        return Clip(0, total, fps)
    for name, v in (("start", start), ("end", end)):
        if v is not None and (not _num(v) or not math.isfinite(v) or v < 0):
            raise _fail(f"Video {name}", "finite seconds >= 0", v, f"pass {name}=<seconds>")
    if fps is None:
        raise _fail("Video start/end", "a video with a known fps (seconds to frames)",
                    "fps 0 (unknown)", "pass Video(source_fps=...) or drop start/end")
    max_duration = total / fps
    first = math.ceil(max(0.0, min(start, max_duration)) * fps) if start is not None else 0
    last = (min(math.floor(max(0.0, min(end, max_duration)) * fps), total - 1)
            if end is not None else total - 1)
    if first >= last:
        raise _fail("Video start/end", "a window of at least 2 frames",
                    f"frames {first}..{last} of {total} (start={start}, end={end})",
                    "widen the window or check it is inside the video")
    return Clip(first, last - first + 1, fps)


def check_budget(num_frames: int, meta: VideoMetaLike, limits: Any = None, num_patches: int = 0,
                 patch_dim: int = 0) -> None:
    """Raise ImageError when a plan would decode or output more than ``limits`` allow (see
    ``check_meta``): at most MAX_SAMPLED_FRAMES frames; the decoded frames (``num_frames * H * W``
    pixels) and the output (``num_patches * patch_dim / 3`` pixels) each within
    ``max_total_pixels``. Called with the counts before any list or string of that size exists."""
    lim = _limits(limits)
    fix = "sample fewer frames (Video(src, fps=...) or num_frames=...)"
    if num_frames > MAX_SAMPLED_FRAMES:
        raise _fail("video", f"at most {MAX_SAMPLED_FRAMES:,} sampled frames", num_frames, fix)
    decoded = num_frames * meta.height * meta.width
    if decoded > lim.max_total_pixels:
        raise _fail("video", f"sampled frames of at most max_total_pixels="
                    f"{lim.max_total_pixels:,} pixels in all", f"{num_frames} frames of "
                    f"{meta.height}x{meta.width} = {decoded:,}", fix + ", or raise "
                    "max_total_pixels if the input is trusted")
    out = num_patches * patch_dim // 3
    if out > lim.max_total_pixels:
        raise _fail("video", f"an output of at most max_total_pixels={lim.max_total_pixels:,} "
                    f"pixels", f"{num_patches:,} patches x {patch_dim // 3} = {out:,}",
                    fix + " or lower max_pixels")


# -- samplers (bit-exact ports; each returns a list of source frame indices) --------------------
def uniform_indices(total: int, n: int) -> list[int]:
    """transformers' ``default_sample_indices_fn``: ``arange(n) * total // n``."""
    return [i * total // n for i in range(n)]


def linspace_indices(first: int, last: int, n: int) -> list[int]:
    """``np.linspace(first, last, n).round().astype(int)`` (float64, round half to even):
    Qwen3-VL's sampler in transformers and vLLM."""
    import numpy as np
    return [int(v) for v in np.linspace(first, last, n).round().astype(np.int64)]


def linspace_indices_f32(first: int, last: int, n: int) -> list[int]:
    """``torch.linspace(first, last, n).round().long()`` in float32 (qwen_vl_utils' sampler):
    torch's kernel, the first half counted up from ``first``, the second down from ``last``."""
    import numpy as np
    if n == 1:
        return [first]
    s, e = np.float32(first), np.float32(last)
    step = np.float32((e - s) / np.float32(n - 1))
    i = np.arange(n)
    vals = np.where(i < n // 2, s + step * i.astype(np.float32),
                    e - step * (n - 1 - i).astype(np.float32)).astype(np.float32)
    return [int(v) for v in np.rint(vals).astype(np.int64)]


def arange_indices_f32(total: int, n: int) -> "np.ndarray":
    """``torch.arange(0, total, total / n).int()`` (Qwen2-VL's sampler in transformers): length
    ``ceil(total / step)`` computed in float64, values ``float32(i * step)`` truncated. The float32
    rounding can make the last index == ``total`` (and the length n + 1), e.g. total 17, n 14."""
    import numpy as np
    step = total / n
    size = math.ceil(total / step)
    return np.asarray(np.arange(size, dtype=np.float64) * step, dtype=np.float32).astype(np.int64)


# -- dispatch ----------------------------------------------------------------------------------
def plan_video(pipeline: "Pipeline", video_meta: VideoMetaLike, options: VideoOptions,
               per_item: VideoItemLike | None = None, index: int = 0, limits: Any = None
               ) -> VideoPlan:
    """Plan one video from its metadata: the family's frame sampling, per-frame resize, grid,
    tokens and placeholder. Never raises for a bad video: the plan's ``error`` says why.

    ``pipeline``: the Pipeline (its name picks the rule unless ``options.family`` does);
    ``options``: its VideoOptions. For a family's checkpoint, resolve both through the presets:
    ``plan_video(presets.video_pipeline(f), meta, presets.video_defaults(f))`` (``f``:
    ``"qwen2-vl"``, ``"qwen2.5-vl"``, ``"qwen3-vl"``, ...). ``per_item``: a ``vlmprep.Video``
    (its fps / num_frames / start / end). ``limits``: a ``vlmprep.io.video.VideoLimits`` (the
    decoder's bounds; None: the defaults with the pipeline's ``decode.max_source_pixels``).
    Raises TypeError for a family name or missing options, ValueError for a family without rule.
    """
    if isinstance(pipeline, str):
        raise TypeError(f"plan_video: expected a Pipeline and its VideoOptions, got the family name "
                        f"{pipeline!r}; resolve it first: plan_video(vlmprep.presets.video_pipeline"
                        f"({pipeline!r}), meta, vlmprep.presets.video_defaults({pipeline!r}), ...)")
    if not isinstance(options, VideoOptions):
        raise TypeError(f"plan_video: expected options: a VideoOptions, got "
                        f"{type(options).__name__}; pass vlmprep.presets.video_defaults(family) "
                        f"(the checkpoint's) or your own VideoOptions(family=...)")
    family = options.family or pipeline.name
    rule = VIDEO_RULES.get(family)
    if rule is None:
        raise ValueError(f"plan_video: expected a family with a video rule, one of "
                         f"{sorted(VIDEO_RULES)}, got {family!r}; pass options=VideoOptions("
                         f"family=...) for a custom pipeline")
    try:
        opts = options.for_item(per_item)
        lim = _limits(limits if limits is not None else pipeline["decode"])
        check_meta(video_meta, lim)
        clip = replace(clip_window(video_meta, getattr(per_item, "start", None),
                                   getattr(per_item, "end", None)), limits=lim)
        return rule(pipeline, video_meta, opts, clip, index)
    except ImageError as e:
        return VideoPlan(index=index, meta=video_meta, error=e.at(index=index, item="video"))
