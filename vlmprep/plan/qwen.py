"""Qwen2-VL / Qwen2.5-VL / Qwen3-VL geometry (``smart_resize``): one canvas, sides multiples of
``factor``, pixels within ``[min_pixels, max_pixels]``; and their video rule (below).

Reproduces transformers' float arithmetic operation for operation (Python ``round`` is
round-half-to-even; ``int()`` truncates), because one pixel of difference changes the token
count and the pixels.

    Given  qwen2-vl (factor 28) and a 1080x1920 (HxW) image
    Output one canvas 1092x1932, one box (the whole canvas), grid (1, 78, 138), 2691 tokens
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .. import ops
from ..errors import ImageError
from ..pipeline import Pipeline
from .plan import Sizing, count_embeddings, one_canvas, sizing_rule
from .video import (
    Clip,
    VideoOptions,
    VideoPlan,
    arange_indices_f32,
    check_budget,
    linspace_indices,
    linspace_indices_f32,
    video_rule,
)

if TYPE_CHECKING:
    from .video import VideoMetaLike

__all__ = ["smart_resize", "smart_resize_video", "smart_resize_qwen_vl_utils", "video_num_frames",
           "VIDEO_TOKEN", "VISION_START", "VISION_END"]


def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56,
                 max_pixels: int = 14 * 14 * 4 * 1280, max_aspect_ratio: float = 200.0
                 ) -> tuple[int, int]:
    """Qwen2-VL's resize rule -> ``(h, w)``, both multiples of ``factor``.

    Given 1080x1920, factor 28, pixels 3136..12,845,056 -> (1092, 1932).
    Given 10x2000 -> (28, 812): the floor branch's ``max(factor, .)`` clamp keeps h at 28.

    Steps (transformers ``models/qwen2_vl/image_processing_qwen2_vl.smart_resize``):
      1. aspect ratio ``max/min > max_aspect_ratio`` -> ImageError;
      2. round each side to the nearest multiple (half to even);
      3. too many pixels: scale by ``beta = sqrt(H*W/max)`` and floor, at least ``factor``;
      4. too few: scale by ``beta = sqrt(min/(H*W))`` and ceil.
    """
    if height < 1 or width < 1:
        raise ImageError(f"expected an image of at least 1x1 pixels, got {height}x{width} (HxW); "
                         f"the file or array is empty")
    if max(height, width) / min(height, width) > max_aspect_ratio:
        raise ImageError(
            f"expected an aspect ratio of at most {max_aspect_ratio:g} (this family's limit), got "
            f"{max(height, width) / min(height, width):.1f} for {height}x{width} (HxW); crop or pad "
            f"the image to a less extreme shape")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@sizing_rule("smart_resize")
def _smart_resize(op: ops.smart_resize, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    rhw = smart_resize(hw[0], hw[1], op.factor, op.min_pixels, op.max_pixels, op.max_aspect_ratio)
    return one_canvas(rhw, pipeline)


# -- video -------------------------------------------------------------------------------------
# The video rule of Qwen2-VL, Qwen2.5-VL and Qwen3-VL, per sampling (VideoOptions.sampling):
#
# "transformers" (default): Qwen2VLVideoProcessor / Qwen3VLVideoProcessor (transformers 5.24,
#   models/qwen2_vl/video_processing_qwen2_vl.py, models/qwen3_vl/video_processing_qwen3_vl.py)
#   and their processors' replace_video_token.
#   Sampling (do_sample_frames): Qwen2 n = floor(clamp(total / src_fps * fps, min_frames,
#   floor(min(max_frames, total) / 2) * 2, total) / 2) * 2, or round(num_frames / 2) * 2;
#   indices torch.arange(0, total, total / n).int() in float32, whose last index can reach
#   `total` (transformers then fails with IndexError: an ImageError here; vLLM clamps).
#   Qwen3 n = clamp(int(total / src_fps * fps), min_frames, max_frames, total) (unknown fps: 24),
#   or num_frames as given (no rounding, no clamp); indices np.linspace(0, total - 1, n).round().
#   do_sample_frames False (Qwen2-VL/2.5-VL checkpoints: they ship no video config, so
#   transformers reads preprocessor_config.json): every frame.
#   Resize: Qwen2 the image smart_resize per frame with the video min/max pixels; Qwen3 its video
#   smart_resize, whose budget counts round(frames / 2) * 2 * h * w and which scales sides below
#   the factor up first; both optionally capped (cap_pixels_per_frame). Frames are padded to a
#   multiple of temporal_patch_size with the last frame: grid (ceil(n / 2), h / p, w / p).
#   Tokens t*h*w / merge^2. Qwen2/2.5 placeholder: <|video_pad|> * tokens; Qwen3: per temporal
#   group "<{t:.1f} seconds><|vision_start|>" + <|video_pad|> * (h*w / merge^2) + "<|vision_end|>",
#   t the mean of the group's first and last frame times (index / fps; unknown fps: 24).
#   Qwen2.5-VL: second_per_grid_ts = temporal_patch_size / (n / total * src_fps) (unknown: 24).
# "qwen_vl_utils" (qwen_vl_utils 0.0.14, vision_process.py, then the processor with
#   do_sample_frames=False and, as Qwen3-VL's README passes it, do_resize=False; Qwen2's resize is
#   a no-op on those sizes): n = smart_nframes (FRAME_FACTOR 2, fps default 2.0, min/max frames
#   rounded to 2, 2 <= n <= total); indices torch.linspace(first, last, n).round() in float32
#   (absolute source frames; a start/end window is sampled inside itself); per-frame pixels
#   [128, 768] tokens' worth and at most total_pixels / n * 2 (total_pixels default 128000
#   tokens' * 0.9), floored at 1.05 * min; its smart_resize variant (starts from max(factor,
#   round(side)), no max(factor, .) on the floor branch). It ignores the checkpoint's pixels.
# "vllm" (vLLM 0.33 vllm/multimodal/video.py Qwen2VLVideoBackend / Qwen3VLVideoBackend, then the
#   HF processor on the sampled frames): fps only (num_frames ignored; default 2, capped at 30;
#   max_frames capped at 768); Qwen2 indices clamped to total - 1 (so a clip transformers fails
#   on gets n + 1 frames, the last repeated), unknown fps refused; Qwen3 as transformers.
#
# Differences that change tokens: Qwen2 transformers default takes every frame, vLLM samples 2 fps;
# qwen_vl_utils' per-frame pixels are ~768 tokens (transformers: the checkpoint's 12.8 M pixels for
# Qwen2, a 25.2 M-pixel clip budget for Qwen3); qwen_vl_utils' linspace keeps both ends (transformers
# Qwen2's arange does not reach the last frame); vLLM caps fps at 30.
VIDEO_TOKEN = "<|video_pad|>"
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"

#: Class defaults of ``max_video_tokens`` (transformers 5.24).
_MAX_VIDEO_TOKENS = {"qwen2-vl": 128000, "qwen2.5-vl": 128000, "qwen3-vl": 768}
#: qwen_vl_utils' constants (0.0.14).
_QVU_FPS, _QVU_MIN_TOKENS, _QVU_MAX_TOKENS, _QVU_SEQ_LEN = 2.0, 128, 768, 128000
#: vLLM 0.33's Qwen video loaders.
_VLLM_FPS, _VLLM_MAX_FPS, _VLLM_MAX_FRAMES = 2.0, 30.0, 768


def smart_resize_video(num_frames: int, height: int, width: int, temporal_factor: int = 2,
                       factor: int = 32, min_pixels: int = 128 * 32 * 32,
                       max_pixels: int = 768 * 32 * 32) -> tuple[int, int]:
    """Qwen3-VL's video resize -> ``(h, w)``, multiples of ``factor``; the pixel budget counts
    the frames (``round(num_frames / temporal_factor) * temporal_factor * h * w``).

    Given 20 frames of 720x1280, factor 32, pixels 4096..25,165,824 -> (704, 1248).

    Steps (transformers ``models/qwen3_vl/video_processing_qwen3_vl.smart_resize``): fewer than
    ``temporal_factor`` frames -> ImageError; a side below ``factor`` scales both up (truncated);
    aspect ratio above 200 -> ImageError; then the image rule with ``t_bar * h * w``.
    """
    if num_frames < temporal_factor:
        raise ImageError(f"video: expected at least {temporal_factor} sampled frames (Qwen3-VL's "
                         f"temporal patch), got {num_frames}; give a longer clip or num_frames >= "
                         f"{temporal_factor}")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise ImageError(f"video: expected frames with an aspect ratio of at most 200, got "
                         f"{max(height, width) / min(height, width):.1f} for {height}x{width} "
                         f"(HxW); crop or pad the video")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def smart_resize_qwen_vl_utils(height: int, width: int, factor: int, min_pixels: float,
                               max_pixels: float) -> tuple[int, int]:
    """qwen_vl_utils' ``smart_resize`` (0.0.14): starts from ``max(factor, round(side))`` and has
    no ``max(factor, .)`` on the floor branch. Given 10x2000, factor 28, 3136..12,845,056 ->
    (28, 1988) (transformers: (28, 812))."""
    if max(height, width) / min(height, width) > 200:
        raise ImageError(f"video: expected frames with an aspect ratio of at most 200, got "
                         f"{max(height, width) / min(height, width):.1f} for {height}x{width} "
                         f"(HxW); crop or pad the video")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    if h_bar < 1 or w_bar < 1:
        raise ImageError(f"video: expected frames that resize to at least {factor}x{factor}, got "
                         f"{height}x{width} -> {h_bar}x{w_bar} (qwen_vl_utils' resize); use "
                         f"sampling='transformers' or crop the video")
    return h_bar, w_bar


def _fail(expected: str, got: object, fix: str) -> ImageError:
    return ImageError(f"video: expected {expected}, got {got}; {fix}")


def video_num_frames(qwen3: bool, clip: Clip, opts: VideoOptions, tps: int) -> int:
    """How many frames the sampling of ``opts`` takes from ``clip`` (before temporal padding);
    raises ImageError where the reference raises."""
    total = clip.count
    if opts.sampling == "qwen_vl_utils":
        if opts.num_frames is not None:
            n = round(opts.num_frames / 2) * 2
        else:
            if clip.fps is None:
                raise _fail("a known source fps (qwen_vl_utils samples by fps)", "fps 0 (unknown)",
                            "pass num_frames= or Video(source_fps=...)")
            fps = opts.fps if opts.fps is not None else _QVU_FPS
            lo = math.ceil(opts.min_frames / 2) * 2
            hi = math.floor(min(opts.max_frames, total) / 2) * 2
            n = math.floor(min(min(max(total / clip.fps * fps, lo), hi), total) / 2) * 2
        if not 2 <= n <= total:
            raise _fail(f"2..{total} frames (qwen_vl_utils' smart_nframes)", n,
                        "give a longer clip or another fps / num_frames")
        return n
    if opts.sampling == "vllm":
        fps = min(opts.fps if opts.fps is not None else _VLLM_FPS, _VLLM_MAX_FPS)
        max_frames = min(opts.max_frames, _VLLM_MAX_FRAMES)
        if qwen3:
            src = clip.fps if clip.fps is not None else 24.0
            return min(max(int(total / src * fps), opts.min_frames), max_frames, total)
        if clip.fps is None:
            raise _fail("a known source fps (vLLM's Qwen2-VL loader refuses 0)", "fps 0 (unknown)",
                        "use sampling='transformers' with num_frames=")
        hi = math.floor(min(max_frames, total) / tps) * tps
        n = math.floor(min(max(total / clip.fps * fps, opts.min_frames), hi, total) / tps) * tps
        if n < 1:
            raise _fail(f"at least {tps} frames (vLLM's Qwen2-VL loader)", total,
                        "give a longer clip")
        return n
    if not opts.do_sample_frames:
        return total
    if opts.fps is not None and opts.num_frames is not None:
        raise _fail("fps or num_frames (transformers: mutually exclusive)",
                    f"fps={opts.fps}, num_frames={opts.num_frames}", "set the other to None")
    if qwen3:
        if opts.num_frames is not None:
            return opts.num_frames
        if opts.fps is None:
            return min(max(total, opts.min_frames), opts.max_frames)
        src = clip.fps if clip.fps is not None else 24.0
        return min(max(int(total / src * opts.fps), opts.min_frames), opts.max_frames, total)
    if opts.num_frames is not None:
        n = round(opts.num_frames / tps) * tps
    elif opts.fps is not None:
        if clip.fps is None:
            raise _fail("a known source fps (Qwen2VLVideoProcessor samples by fps)",
                        "fps 0 (unknown)", "pass num_frames= or Video(source_fps=...)")
        hi = math.floor(min(opts.max_frames, total) / tps) * tps
        n = math.floor(min(max(total / clip.fps * opts.fps, opts.min_frames), hi, total) / tps) * tps
    else:
        raise _fail("fps or num_frames with do_sample_frames=True (Qwen2VLVideoProcessor has "
                    "no default fps)", "neither", "pass fps= (e.g. 2.0) or num_frames=")
    if n > total:
        raise _fail(f"at most the clip's {total} frames", f"num_frames={n}",
                    "decrease num_frames or fps")
    if n < 1:
        raise _fail(f"at least {tps} sampled frames (Qwen2VLVideoProcessor)", f"num_frames={n}",
                    f"give a clip of >= {tps} frames or num_frames >= {tps}")
    return n


def _indices(qwen3: bool, clip: Clip, opts: VideoOptions, n: int) -> list[int]:
    """The sampled source frames (absolute), ``n`` of them (Qwen2 transformers: maybe n + 1)."""
    first, total = clip.first, clip.count
    if opts.sampling == "qwen_vl_utils":
        return linspace_indices_f32(first, first + total - 1, n)
    if opts.sampling == "transformers" and not opts.do_sample_frames:
        return list(range(first, first + total))
    if qwen3:
        return [first + i for i in linspace_indices(0, total - 1, n)]
    idx = arange_indices_f32(total, n)
    if opts.sampling == "vllm":
        idx = idx.clip(max=total - 1)
    elif int(idx[-1]) >= total:
        raise _fail(f"frame indices below {total}", f"index {int(idx[-1])} from transformers' "
                    f"float32 torch.arange(0, {total}, {total}/{n}) (Qwen2VLVideoProcessor fails "
                    f"with IndexError here)", "pick another fps / num_frames, or "
                    "sampling='vllm' (which clamps it)")
    return [first + int(i) for i in idx]


def _max_pixels(qwen3: bool, opts: VideoOptions, family: str, n: int, factor: int, tps: int
                ) -> int:
    """transformers' per-call max_pixels: the option, or its cap_pixels_per_frame form."""
    if not opts.cap_pixels_per_frame:
        return opts.max_pixels
    mvt = opts.max_video_tokens or _MAX_VIDEO_TOKENS[family]
    if qwen3:
        per_frame = max(min(mvt * factor * factor, opts.max_pixels // n), int(opts.min_pixels * 1.05))
        return per_frame * n
    total_pixels = int(mvt * factor * factor * 0.9)
    return max(min(opts.max_pixels, total_pixels * tps // n), int(opts.min_pixels * 1.05))


@video_rule("qwen2-vl", "qwen2.5-vl", "qwen3-vl")
def _qwen_video(pipeline: Pipeline, meta: "VideoMetaLike", opts: VideoOptions, clip: Clip,
                index: int) -> VideoPlan:
    family = opts.family or pipeline.name
    qwen3 = family == "qwen3-vl"
    pf = pipeline.patchify
    p, tps, merge = pf.patch_size, pf.temporal_patch_size, pf.merge_size
    factor = p * merge
    n = video_num_frames(qwen3, clip, opts, tps)
    check_budget(n, meta, clip.limits)
    idx = _indices(qwen3, clip, opts, n)
    n = len(idx)  # Qwen2's float32 arange may give one more (vllm sampling keeps it)
    h, w = meta.height, meta.width
    if opts.sampling == "qwen_vl_utils":
        lo = _QVU_MIN_TOKENS * factor * factor
        total_pixels = (opts.total_pixels if opts.total_pixels is not None
                        else _QVU_SEQ_LEN * factor * factor * 0.9)
        hi = max(min(_QVU_MAX_TOKENS * factor * factor, total_pixels / n * 2), int(lo * 1.05))
        rh, rw = smart_resize_qwen_vl_utils(h, w, factor, lo, hi)
    elif qwen3:
        rh, rw = smart_resize_video(n, h, w, tps, factor, opts.min_pixels,
                                    _max_pixels(True, opts, family, n, factor, tps))
    else:
        rh, rw = smart_resize(h, w, factor, opts.min_pixels,
                              _max_pixels(False, opts, family, n, factor, tps))
    pad = -n % tps
    gt, gh, gw = (n + pad) // tps, rh // p, rw // p
    check_budget(n, meta, clip.limits, gt * gh * gw, 3 * tps * p * p)
    idx += [idx[-1]] * pad
    frame_tokens = gh * gw // (merge * merge)
    tokens = gt * frame_tokens
    fps = clip.fps
    stamps: list[float] | None = None
    second_per_grid_ts: float | None = None
    if qwen3:
        # the processor's _calculate_timestamps: indices as it sees them (a trimmed clip for
        # transformers / vllm, absolute for qwen_vl_utils), padded, averaged per temporal group
        base = 0 if opts.sampling == "qwen_vl_utils" else clip.first
        secs = [(i - base) / (fps if fps is not None else 24) for i in idx]
        stamps = [(secs[k] + secs[k + tps - 1]) / 2 for k in range(0, len(secs), tps)]
        text = "".join(f"<{t:.1f} seconds>{VISION_START}{VIDEO_TOKEN * frame_tokens}{VISION_END}"
                       for t in stamps)
    else:
        text = VIDEO_TOKEN * tokens
        if family == "qwen2.5-vl":
            sampled_fps = n / clip.count * fps if fps is not None else 24.0
            second_per_grid_ts = tps / sampled_fps
    return VideoPlan(
        index=index, meta=meta, frame_indices=idx,
        timestamps=[i / fps for i in idx] if fps is not None else [],
        resized_hw=(rh, rw), grid_thw=[(gt, gh, gw)], num_patches=gt * gh * gw,
        num_tokens=tokens, num_embeddings=count_embeddings(text, VIDEO_TOKEN, tokens),
        placeholder=text, second_per_grid_ts=second_per_grid_ts, group_timestamps=stamps)
