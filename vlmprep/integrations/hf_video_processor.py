"""vlmprep as a transformers *video* processor's ``__call__`` (Qwen2-VL / Qwen2.5-VL), for the
engine plugins: the video counterpart of ``hf_image_processor``.

``install_video(video_processor, image_processor, switch)`` gives a video processor of a class in
``SUPPORTED_VIDEO`` a ``__call__`` answered by vlmprep whenever ``switch()`` is true and the call
is what an engine sends: frames already sampled (a list of ``(T, H, W, 3)`` uint8 arrays,
``do_sample_frames`` off), keywords equal to the config's, uint8 (vLLM's
``mm_device_do_normalize``) or float32 pixels; ``video_metadata`` / ``return_metadata`` are
passed through as the processor does when it samples nothing. The plan: the image processor's
pipeline (the same rule, mean and std) with the video processor's own pixel budget and temporal
patch (``presets.video_options_from_config``); ``match="torchvision"``, bit-exact with
transformers' video processors (they run on torchvision only). Any other call goes to the video
processor itself (``STATS["fallback"]``).
"""
from __future__ import annotations

from typing import Any, Callable

from .hf_image_processor import _count, _dtype, swap_call  # STATS: one count for image and video calls

__all__ = ["SUPPORTED_VIDEO", "install_video"]

#: transformers video processor class -> keywords vlmprep's form answers beyond the config's
#: values. Qwen3VLVideoProcessor (timestamps, its own frame budget) is not reproduced here yet.
SUPPORTED_VIDEO: dict[str, frozenset[str]] = {
    "Qwen2VLVideoProcessor": frozenset({"return_metadata", "video_metadata"}),
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
    proc = _processor(self, dtype) if dtype is not None else None
    if proc is None:
        _count("fallback")
        return real(videos, *args, **kwargs)
    out = proc(videos=list(videos)).to_hf()
    if kwargs.get("return_metadata"):
        out["video_metadata"] = kwargs.get("video_metadata")
    _count("vlmprep")
    return out


def _takes(vp: Any, videos: Any, kwargs: dict) -> bool:
    """Frames already sampled: a list of (T, H, W, 3) uint8 arrays, nothing to sample, metadata
    (when given) one per video."""
    import numpy as np  # deferred: only when an engine calls
    if not isinstance(videos, (list, tuple)) or not videos:
        return False
    if not all(isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim == 4 and v.shape[-1] == 3
               for v in videos):
        return False
    if kwargs.get("do_sample_frames", getattr(vp, "do_sample_frames", False)):
        return False
    meta = kwargs.get("video_metadata")
    return meta is None or (isinstance(meta, (list, tuple)) and len(meta) == len(videos))


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
        except (ValueError, KeyError, TypeError, AttributeError):  # a config vlmprep does not reproduce
            options = None
        cache[dtype] = None if options is None else vlmprep.Processor(
            pipeline, match="torchvision", dtype=dtype, video_options=options)
    return cache[dtype]

