"""Constants and helpers shared by the presets (each reads a transformers
``preprocessor_config.json``): defined here once, imported by every family file."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

from ..ops import PIL_RESAMPLE, Op, normalize

if TYPE_CHECKING:
    from ..pipeline import Pipeline
    from ..plan.video import VideoOptions

__all__ = ["HALF", "need", "config_interpolation", "config_normalize", "config_hw", "config_types",
           "normalize_steps", "video_options_from_config"]

# OpenAI CLIP's mean / std are the normalize op's defaults: ops.CLIP_MEAN / ops.CLIP_STD.
#: mean = std = 0.5 per channel (SigLIP, SigLIP2, Gemma 3, Idefics3, Qwen3-VL, LLaVA-OneVision,
#: and the transformers class default of Mllama).
HALF = (0.5, 0.5, 0.5)

_RESAMPLE_NAMES = {v: k for k, v in PIL_RESAMPLE.items()}


def need(cfg: Mapping[str, Any], key: str, default: Any) -> Any:
    v = cfg.get(key, default)
    return default if v is None else v


def config_interpolation(cfg: Mapping[str, Any], default: str) -> str:
    """``resample`` (PIL int, or a name) -> our interpolation name."""
    r = cfg.get("resample", None)
    if r is None:
        return default
    if isinstance(r, str) and r.lower() in PIL_RESAMPLE:
        return r.lower()
    if r in _RESAMPLE_NAMES:
        return _RESAMPLE_NAMES[r]
    raise ValueError(f"preprocessor_config: resample expected one of {sorted(_RESAMPLE_NAMES)} "
                     f"(PIL codes) or {sorted(PIL_RESAMPLE)}, got {r!r}")


def config_normalize(cfg: Mapping[str, Any], mean: tuple, std: tuple
                     ) -> tuple[tuple, tuple, float, bool]:
    """-> (mean, std, rescale, do_normalize_at_all) with transformers' flag semantics.

    ``do_rescale=false`` means rescale 1; ``do_normalize=false`` means mean 0, std 1;
    both false means no normalize op at all (the uint8-like float output).
    """
    do_rescale = bool(need(cfg, "do_rescale", True))
    do_norm = bool(need(cfg, "do_normalize", True))
    rescale = float(need(cfg, "rescale_factor", 1 / 255)) if do_rescale else 1.0
    m = tuple(need(cfg, "image_mean", mean)) if do_norm else (0.0, 0.0, 0.0)
    s = tuple(need(cfg, "image_std", std)) if do_norm else (1.0, 1.0, 1.0)
    return m, s, rescale, do_rescale or do_norm


def config_hw(cfg: Mapping[str, Any], key: str, default: tuple[int, int]) -> tuple[int, int]:
    """``size`` / ``crop_size`` as ``{"height", "width"}``, a bare int, or absent -> ``(h, w)``."""
    v = cfg.get(key)
    if v is None:
        return default
    if isinstance(v, int) and not isinstance(v, bool):
        return v, v
    if isinstance(v, Mapping) and "height" in v and "width" in v:
        return int(v["height"]), int(v["width"])
    raise ValueError(f"preprocessor_config: {key!r} expected {{'height': h, 'width': w}} or an int, "
                     f"got {v!r}")


def config_types(name: str) -> tuple[str, ...]:
    """A transformers image-processor class name in its 4.x and 5.x spellings."""
    return (name, name + "Fast", name + "Pil")


def normalize_steps(rescale: float, mean: tuple, std: tuple, do_normalize: bool) -> list[Op]:
    """``[ops.normalize(...)]``, or no op when the config turns off both rescale and normalize
    (``config_normalize``'s fourth value)."""
    return [normalize(rescale=rescale, mean=mean, std=std)] if do_normalize else []


def video_options_from_config(pipeline: "Pipeline", cfg: Mapping[str, Any],
                              read: "Callable[[Mapping[str, Any]], VideoOptions] | None") -> "VideoOptions | None":
    """The VideoOptions of a checkpoint's video processor config (``video_preprocessor_config.json``,
    or, where the checkpoint has none or is a 4.x one, ``preprocessor_config.json``), read by the
    family's preset (``read``: its ``FAMILY.video_from_config``, which ``presets.video_reader``
    finds for the presets of its ``FAMILY.videos``); None for a pipeline without video (``read``
    None). ``vlmprep.presets.video_options_from_config`` passes the reader.

    The video pixels are executed with the pipeline's normalize and interpolation (every public
    checkpoint's video config repeats its image config's): a video config that says otherwise is
    refused (expected / got / fix) rather than silently ignored.
    """
    if read is None:
        return None
    norm = pipeline.normalize
    if norm is not None and ("image_mean" in cfg or "image_std" in cfg):
        mean, std, rescale, _ = config_normalize(cfg, norm.mean, norm.std)
        got = (tuple(float(v) for v in mean), tuple(float(v) for v in std), float(rescale))
        want = (tuple(float(v) for v in norm.mean), tuple(float(v) for v in norm.std),
                float(norm.rescale))
        if got != want:
            raise ValueError(f"video_preprocessor_config: expected the image config's mean / std / "
                             f"rescale {want} (vlmprep runs videos with the pipeline's normalize), "
                             f"got {got}; process videos with a Pipeline built for them")
    interp = getattr(pipeline.sizing, "interpolation", None)
    if interp is not None and cfg.get("resample") is not None:
        got_i = config_interpolation(cfg, interp)
        if got_i != interp:
            raise ValueError(f"video_preprocessor_config: expected resample {interp!r} (the image "
                             f"config's; vlmprep runs videos with it), got {got_i!r}; process "
                             f"videos with a Pipeline built for them")
    return read(cfg)
