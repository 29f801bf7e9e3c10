"""Video rows: a batch job's video sample -> its shard row, and video rows -> ``batch.videos``.

A video sample (``is_video``: its name has a video extension, or its first bytes are an MP4 /
MOV / MKV / WebM / AVI container: ``io.media``) is one row, ``modality="video"``, holding what
``Processor(...)(videos=[Video(data, fps=..., num_frames=...)])`` returns for it: the rows of
``batch.videos`` (Qwen: one ``(t, h, w)`` sequence of patches; tile families: one tile per
frame), its grid, tokens and placeholder, and in the ``video`` column the rest of its plan as
JSON (``plan_json``), so ``video_batch`` rebuilds the ``"video"`` PackedBatch bit for bit, its
``video_plans`` included (``to_hf()``'s ``second_per_grid_ts`` comes from them).

    Given  qwen2-vl, a 2 s 24 fps 320x240 clip, fps=2.0
    Output grid_thw [2, 18, 22], seqlens [792], num_tokens 198, orig_hw [240, 320],
           video '{"first_resize_hw":null,"frame_indices":[0,12,24,36],...}'

A bad video (a probe, plan or decode error; a family without a video rule) is an error row with
the reason, as a bad image is; every VideoLimits bound (bytes, frames, pixels, time) applies.
"""
from __future__ import annotations

import json
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import ImageError
from ..io.media import is_video_bytes
from ..pack import build_videos
from ..plan.video import VideoPlan
from .schema import host_words, make_row, row_layout, row_shape_of

if TYPE_CHECKING:
    import torch

    from ..pack import PackedBatch
    from ..pipeline import Pipeline
    from ..processor import Processor

__all__ = ["is_video", "video_row", "plan_json", "video_batch"]

# The plan fields the row's own columns do not hold (grid_thw, num_tokens, placeholder do).
_PLAN_KEYS = ("frame_indices", "timestamps", "resized_hw", "num_embeddings",
              "second_per_grid_ts", "group_timestamps", "first_resize_hw")


def is_video(sample: Any) -> bool:
    """Whether a sample goes the video path: the reader's name says video (``Sample.video``),
    or its bytes start as a video container does."""
    if getattr(sample, "video", False):
        return True
    data = getattr(sample, "data", None)
    return data is not None and is_video_bytes(data)


def plan_json(plan: VideoPlan) -> str:
    """The ``video`` column of a plan's row: its container metadata and ``_PLAN_KEYS``, as
    canonical JSON (the same bytes for the same plan: shards are byte-reproducible)."""
    meta = plan.meta
    names = [f.name for f in fields(meta)] if meta is not None else []  # type: ignore[arg-type]
    out: dict[str, Any] = {"meta": {n: getattr(meta, n) for n in names}}
    for k in _PLAN_KEYS:
        v = getattr(plan, k)
        out[k] = list(v) if isinstance(v, tuple) else v
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


def _error_row(sample: Any, p: "Processor", reason: str, hw: Sequence[int] = (0, 0)) -> dict:
    pipe = p.pipeline
    return make_row(sample, p.dtype, row_layout(pipe), row_shape_of(pipe), hw, error=reason,
                    modality="video")


def video_row(p: "Processor", sample: Any, fps: float | None, num_frames: int | None
              ) -> tuple[dict, BaseException | None]:
    """``sample`` (a video sample with data) -> (its row, the unexpected exception that made it
    an error row, else None). ``p`` skips bad items (``errors="skip"``). Never raises for a
    per-item cause."""
    from ..io.video import Video  # deferred: imports numpy and the decoders; image jobs never need it
    try:
        item = Video(sample.data, fps=fps, num_frames=num_frames)
        videos, plans = p.prepare_videos([item])
    except (ImageError, ValueError) as e:  # bad options; a family without a video rule
        return _error_row(sample, p, e.reason if isinstance(e, ImageError) else str(e)), None
    plan = plans[0]
    meta = plan.meta
    hw = (meta.height, meta.width) if meta is not None else (0, 0)
    if plan.error is not None:
        return _error_row(sample, p, plan.error.reason, hw), None
    pipe = p.pipeline
    layout, shape = row_layout(pipe), row_shape_of(pipe)
    got = [3, *plan.resized_hw] if layout == "tiles" else shape
    if got != shape:  # a shard holds one row shape (its safetensors pixel_values is one tensor)
        return _error_row(sample, p, f"expected video frames of {shape} (the job's image tiles: "
                                     f"a shard holds one row shape), got {got}; fix: process this "
                                     f"video with a Processor whose video size equals its tile "
                                     f"size", hw), None
    try:
        batch = p.execute_videos(videos, plans)
    except Exception as e:  # noqa: BLE001 (the video's own row; the caller re-raises when all fail)
        return _error_row(sample, p, f"{type(e).__name__}: {e}", hw), e
    if batch.errors:
        return _error_row(sample, p, batch.errors[0].reason, hw), None
    grid = [int(v) for g in batch.grid_thw.tolist() for v in g]
    return make_row(sample, p.dtype, layout, shape, hw, grid=grid, seqlens=list(batch.seqlens),
                    num_tokens=batch.num_tokens[0], placeholder=batch.placeholders[0],
                    pixel_values=bytes(host_words(batch.pixel_values, p.dtype)),
                    modality="video", video=plan_json(plan)), None


def _bad(what: str, got: str, fix: str) -> ValueError:
    return ValueError(f"batch_from_rows: {what} expected {got}; {fix}")


def _plan_of(r: dict, j: int) -> VideoPlan:
    """Row ``r`` (an ok video row, the ``j``-th video) -> its VideoPlan; ValueError when its
    ``video`` column does not parse or disagrees with its grid."""
    from ..io.video import VideoMeta  # deferred: as in video_row
    damaged = "the row is damaged; rerun the job for this sample"
    try:
        d = json.loads(r["video"])
        meta = VideoMeta(**d["meta"])
        extra = {k: d[k] for k in _PLAN_KEYS}
    except (TypeError, ValueError, KeyError) as e:
        raise _bad(f"row {r['id']!r} video:", f"the JSON of its plan (keys meta, "
                   f"{', '.join(_PLAN_KEYS)}), got {type(e).__name__}: {str(e)[:120]}",
                   damaged) from None
    for k in ("resized_hw", "first_resize_hw"):
        if extra[k] is not None:
            extra[k] = tuple(int(v) for v in extra[k])
    grid = [int(v) for v in r["grid_thw"]]
    triples = [tuple(grid[i:i + 3]) for i in range(0, len(grid), 3)]
    return VideoPlan(index=j, meta=meta, grid_thw=triples,  # type: ignore[arg-type]
                     num_patches=sum(int(n) for n in r["seqlens"]),
                     num_tokens=int(r["num_tokens"]), placeholder=str(r["placeholder"]), **extra)


def video_batch(rows: Sequence[dict], pipeline: "Pipeline", pv: "torch.Tensor") -> "PackedBatch":
    """The ``"video"`` PackedBatch (``batch.videos``) of video ``rows`` whose good rows'
    ``pixel_values`` are ``pv`` (in order; the caller checked their sizes): what
    ``Processor(errors="skip")(videos=...)`` returns for the same videos; an error row is a
    skipped video (``errors[j]``: an ImageError with the row's reason and source)."""
    plans: list[VideoPlan] = []
    errors: dict[int, ImageError] = {}
    for j, r in enumerate(rows):
        if r["status"] != "ok":
            err = ImageError(str(r["error"]), index=j, source=r["source"], item="video")
            errors[j] = err
            plans.append(VideoPlan(index=j, error=err))
        else:
            plans.append(_plan_of(r, j))
    return build_videos(pv, plans, errors, pipeline, row_layout(pipeline))
