"""vlmprep as a transformers *video* processor's ``__call__`` (Qwen2-VL / Qwen2.5-VL / Qwen3-VL),
for the engine plugins: the video counterpart of ``hf_image_processor``.

``install_video(video_processor, image_processor, switch)`` gives a video processor of a class in
``SUPPORTED_VIDEO`` a ``__call__`` answered by vlmprep whenever ``switch()`` is true and the call
is what an engine sends: frames already sampled (``(T, H, W, 3)`` uint8 arrays, as a list or
vLLM's per-video nesting, ``do_sample_frames`` off), keywords equal to the config's, uint8 (vLLM's
``mm_device_do_normalize``) or float32 pixels. With nothing to sample, the sampling keywords
(``fps``, ``num_frames``: Qwen3-VL's processor passes them) change nothing; ``video_metadata`` is
returned as the processor returns it (``return_metadata``: Qwen3-VL's processor writes the
prompt's timestamps from it), made by transformers' own ``make_batched_metadata``. The plan: the
image processor's pipeline (the same rule, mean and std) with the video processor's own pixel
budget and temporal patch (``presets.video_options_from_config``, sampling off: the frames are
the engine's); ``match="torchvision"``, bit-exact with transformers' video processors (they run on
torchvision only). Any other call goes to the video processor itself (``STATS["fallback"]``).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .hf_image_processor import _count, _dtype, swap_call  # STATS: one count for image and video calls

__all__ = ["SUPPORTED_VIDEO", "install_video"]

#: transformers video processor class -> keywords vlmprep's form answers beyond the config's
#: values (``do_sample_frames``: only False is taken, ``_takes``; then fps / num_frames sample nothing)
_ANSWERED = frozenset({"return_metadata", "video_metadata", "do_sample_frames", "fps", "num_frames"})
SUPPORTED_VIDEO: dict[str, frozenset[str]] = {
    "Qwen2VLVideoProcessor": _ANSWERED,
    "Qwen3VLVideoProcessor": _ANSWERED,
}


def install_video(video_processor: Any, image_processor: Any, switch: Callable[[], bool]) -> bool:
    """Give ``video_processor`` vlmprep's ``__call__`` (a subclass overriding only it), planned
    from ``image_processor``'s config; True when its class is in ``SUPPORTED_VIDEO``."""
    video_processor.__dict__["_vlmprep_switch"] = switch
    video_processor.__dict__["_vlmprep_image_processor"] = image_processor
    return swap_call(video_processor, SUPPORTED_VIDEO, _call)


def _call(self: Any, videos: Any = None, *args: Any, **kwargs: Any) -> Any:
    real = super(type(self), self).__call__
    on = self.__dict__.get("_vlmprep_switch")
    dtype = (_dtype(self, kwargs, SUPPORTED_VIDEO[type(self).__name__])
             if on is not None and on() and not args and _takes(self, videos, kwargs) else None)
    batched = _batched(videos) if dtype is not None else None
    proc = _processor(self, dtype) if dtype is not None and batched is not None else None
    if proc is None or batched is None:
        _count("fallback")
        return real(videos, *args, **kwargs)
    frames, meta = batched
    out = proc(videos=frames).to_hf()
    if kwargs.get("return_metadata", getattr(self, "return_metadata", False)):
        out["video_metadata"] = meta(kwargs.get("video_metadata"))
    _count("vlmprep")
    return out


def _takes(vp: Any, videos: Any, kwargs: dict) -> bool:
    """Nothing to sample (``do_sample_frames`` off in the call or the config) and some videos."""
    if kwargs.get("do_sample_frames", getattr(vp, "do_sample_frames", False)):
        return False
    return isinstance(videos, (list, tuple)) and bool(videos)


def _batched(videos: Any) -> tuple[list, Callable[[Any], Any]] | None:
    """(the videos as transformers batches them: a list of (T, H, W, 3) uint8 arrays, and the
    metadata maker for them), or None for other inputs (frames as images, channels first,
    floats, paths: the processor itself takes those)."""
    import numpy as np  # deferred: only when an engine calls
    from transformers.video_utils import make_batched_metadata, make_batched_videos  # deferred: engines only
    try:
        frames: list[Any] = list(make_batched_videos(videos))
    except (ValueError, TypeError, IndexError):
        return None
    if not frames or not all(isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 4
                             and v.shape[-1] == 3 and v.shape[0] >= 1 and v.shape[1] not in (1, 3)
                             for v in frames):  # height 1 or 3: transformers reads channels first
        return None
    return frames, lambda meta: make_batched_metadata(frames, video_metadata=meta)


def _processor(vp: Any, dtype: str) -> Any:
    """The vlmprep Processor for this video processor's config, its image processor's pipeline
    and ``dtype``, made once; None when vlmprep does not reproduce that config."""
    cache = vp.__dict__.setdefault("_vlmprep_processors", {})
    if dtype not in cache:
        import vlmprep  # deferred: the integration layer loads the processor only when used
        ip = vp.__dict__.get("_vlmprep_image_processor")
        cfg = vp.to_dict()
        try:
            pipeline = vlmprep.presets.from_config(ip.to_dict())
            same = all(list(getattr(ip, k)) == list(cfg[k]) for k in ("image_mean", "image_std"))
            options = vlmprep.presets.video_options_from_config(pipeline, cfg) if same else None
            if options is not None:  # the engine's frames are the sampled ones (``_takes``)
                options = dataclasses.replace(options, do_sample_frames=False, fps=None, num_frames=None)
        except (ValueError, KeyError, TypeError, AttributeError):  # a config vlmprep does not reproduce
            options = None
        cache[dtype] = None if options is None else vlmprep.Processor(
            pipeline, match="torchvision", dtype=dtype, video_options=options)
    return cache[dtype]

