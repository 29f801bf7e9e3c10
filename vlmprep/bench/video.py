"""``vlmprep bench --video``: clips/s and frames/s of one sampled video clip, vlmprep vs the
transformers video processor, with the decode timed apart.

The clip is written here, deterministically, from the photos scikit-image ships (a slow pan and
zoom over a mosaic, so consecutive frames differ): by default 10 s of 1280x720 at 30 fps, sampled
at 2 fps -> 20 frames, the Qwen2-VL checkpoint config (``Video(clip, fps=2.0)``). It is written
with OpenCV's ``VideoWriter``: this OpenCV's FFmpeg has no H.264 encoder (avc1 / H264 / X264 fail
to open, tests/video/conftest.py), so the codec is MPEG-4 Part 2 (``mp4v``) in MP4; ``--fourcc``
names another one this OpenCV writes.

Measured per thread count (torch, OpenCV and vlmprep's own threads, ``harness.thread_count``):

- ``vlmprep``: ``Processor(preset)([], videos=[Video(clip, fps=...)])`` on the encoded bytes, end
  to end (probe, plan, decode of the sampled frames only, resize, normalize, patchify, pack);
- ``decode``: ``vlmprep.io.video.decode_frames`` of the planned frames alone (the part both sides
  share);
- ``vlmprep rest``: the decoded frames -> rows (``backends.video.frames_to_rows``: resize,
  normalize, patchify), what the transformers processor is compared with;
- ``transformers``: the family's real video processor (``AutoVideoProcessor.from_pretrained`` on a
  folder holding the checkpoint's config) called on the SAME decoded frames (a ``(T, C, H, W)``
  uint8 tensor, its fastest input form), ``do_sample_frames=False`` (they are sampled already),
  ``return_tensors="pt"``; its outputs are checked equal in shape (and reported max abs
  difference) to vlmprep's.

The parts are timed in rounds (one call of each per round, ``repeat`` rounds after ``warmup``),
so a load change on a shared machine hits every part alike. Speedups: ``rest`` (transformers
processor / vlmprep rest) and ``end to end`` ((decode + transformers processor) / vlmprep end to
end): a transformers user decodes too, and the decode here is the same for both. Nothing is
asserted: it only measures.
"""
from __future__ import annotations

import gc
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

from . import env as bench_env
from .harness import _ms, _pct, thread_count

if TYPE_CHECKING:
    import numpy as np

    from ..pipeline import Pipeline

__all__ = ["VideoBenchConfig", "make_clip", "hf_video_processor", "run_video", "DEFINITIONS",
           "SCHEMA_VERSION", "FOURCC_DEFAULT"]

SCHEMA_VERSION = 1
#: The codec the clip is written with: this OpenCV has no H.264 encoder (module doc).
FOURCC_DEFAULT = "mp4v"

DEFINITIONS = {
    "clips_per_s": "clips / sum of timed latencies (one clip per call; warm-up excluded)",
    "frames_per_s": "sampled frames (the plan's frame_indices, temporal padding included) per "
                    "second: clips_per_s * frames per clip",
    "p50_ms": "median latency of one clip (p99: 99th percentile); the parts are timed in rounds "
              "(one call of each per round), so load changes hit them alike",
    "vlmprep": "Processor(preset)([], videos=[Video(clip bytes, fps=...)]): probe, plan, decode "
               "of the sampled frames, resize, normalize, patchify, pack",
    "decode": "vlmprep.io.video.decode_frames of the planned frames only (OpenCV/FFmpeg seeks)",
    "vlmprep_rest": "decoded (T, H, W, 3) uint8 frames -> the video's rows "
                    "(vlmprep.backends.video.frames_to_rows: resize, normalize, patchify)",
    "transformers": "the family's transformers video processor (AutoVideoProcessor from the "
                    "checkpoint config) on the same decoded frames as a (T, C, H, W) uint8 tensor",
    "speedup_rest": "transformers p50_ms / vlmprep_rest p50_ms",
    "speedup_end_to_end": "(decode p50_ms + transformers p50_ms) / vlmprep p50_ms",
    "cpu_cores_used": "process CPU time / wall time over the timed calls",
}


@dataclass
class VideoBenchConfig:
    """What ``run_video`` measures.

    Fields:
        preset: "qwen2-vl" (default), "qwen2.5-vl" or "qwen3-vl": the checkpoint config both
            sides use.
        width, height, source_fps, seconds: the clip written; fps: the sampling rate asked
            (``Video(clip, fps=fps)``; 20 frames for 10 s at 2 fps).
        fourcc: the OpenCV VideoWriter codec (``FOURCC_DEFAULT``).
        threads: thread counts (None: the libraries' defaults).
        repeat, warmup: timed and untimed calls per measurement.
        compare_hf: also run the transformers video processor.
        dtype: vlmprep's output dtype (float32 is the like-for-like one).
    """

    preset: str = "qwen2-vl"
    width: int = 1280
    height: int = 720
    source_fps: float = 30.0
    seconds: float = 10.0
    fps: float = 2.0
    fourcc: str = FOURCC_DEFAULT
    threads: list[int | None] = field(default_factory=lambda: [1, 2])
    repeat: int = 5
    warmup: int = 1
    compare_hf: bool = True
    dtype: str = "float32"


# -- the clip -----------------------------------------------------------------------------------
def _frames(width: int, height: int, n: int) -> "Any":
    """Yield ``n`` (H, W, 3) uint8 BGR frames: a window over a photo mosaic, zooming in by up to
    1.5x while its centre drifts (INTER_AREA), so every frame differs."""
    import cv2
    import numpy as np

    from .images import mosaic
    src = mosaic((height * 2, width * 2), seed=0)  # RGB, twice the output size
    sh, sw = src.shape[:2]
    bgr = np.ascontiguousarray(src[..., ::-1])
    for i in range(n):
        t = i / max(n - 1, 1)
        cw = sw / (1.0 + 0.5 * t)
        ch = cw * height / width
        cx = sw / 2 + (t - 0.5) * (sw - cw) * 0.8
        cy = sh / 2 + (0.5 - t) * (sh - ch) * 0.6
        x0, y0 = int(max(0, cx - cw / 2)), int(max(0, cy - ch / 2))
        crop = bgr[y0:y0 + int(ch), x0:x0 + int(cw)]
        yield cv2.resize(crop, (width, height), interpolation=cv2.INTER_AREA)


def make_clip(width: int = 1280, height: int = 720, fps: float = 30.0, seconds: float = 10.0,
              fourcc: str = FOURCC_DEFAULT) -> bytes:
    """The encoded bytes of a deterministic clip (module doc), written with OpenCV's
    VideoWriter into a temporary MP4 (AVI for MJPG), read back and deleted.

    Raises ValueError naming the fourcc when this OpenCV cannot write it."""
    import cv2
    n = max(1, int(round(fps * seconds)))
    ext = ".avi" if fourcc.upper() in ("MJPG", "XVID") else ".mp4"
    with tempfile.TemporaryDirectory(prefix="vlmprep-bench-") as d:
        path = os.path.join(d, "clip" + ext)
        code = cv2.VideoWriter_fourcc(*fourcc)  # type: ignore[attr-defined]
        w = cv2.VideoWriter(path, code, float(fps), (width, height))
        if not w.isOpened():
            raise ValueError(f"--video: expected a codec this OpenCV can write, got fourcc "
                             f"{fourcc!r} (this OpenCV has no H.264 encoder); use mp4v (the "
                             f"default) or MJPG")
        try:
            for f in _frames(width, height, n):
                w.write(f)
        finally:
            w.release()
        with open(path, "rb") as f:
            return f.read()


# -- transformers -------------------------------------------------------------------------------
def hf_video_processor(preset: str) -> Any:
    """The real transformers video processor of ``preset``'s checkpoint: ``AutoVideoProcessor.
    from_pretrained`` on a temporary folder holding the config the public checkpoint ships
    (Qwen2-VL: its preprocessor_config.json only, which transformers reads for video too)."""
    try:
        import transformers
    except ImportError as e:
        raise ValueError(f"--video compares with the transformers video processor: pip install "
                         f"transformers, or pass --no-compare ({e})") from None
    from ..presets import qwen as preset_qwen
    configs = preset_qwen.video_configs()
    if preset not in configs:
        raise ValueError(f"--video: expected a Qwen preset with a checkpoint video config, one of "
                         f"{sorted(configs)}, got {preset!r}")
    cfg = configs[preset]
    with tempfile.TemporaryDirectory(prefix="vlmprep-bench-") as d:
        name = ("video_preprocessor_config.json" if "video_processor_type" in cfg
                else "preprocessor_config.json")
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            json.dump(cfg, f)
        return transformers.AutoVideoProcessor.from_pretrained(d)


# -- timing -------------------------------------------------------------------------------------
def _stats(lat: list[float], cpu: float) -> dict:
    wall = sum(lat)
    return {"p50_ms": _ms(_pct(lat, 50)), "p99_ms": _ms(_pct(lat, 99)),
            "mean_ms": _ms(wall / len(lat)), "min_ms": _ms(min(lat)),
            "clips_per_s": round(len(lat) / wall, 3),
            "cpu_cores_used": round(cpu / wall, 2) if wall > 0 else None}


def _time_rounds(calls: dict[str, Callable[[], Any]], repeat: int, warmup: int
                 ) -> tuple[dict[str, dict], dict[str, Any]]:
    """Time every call ``repeat`` times in rounds (one call of each part per round, in order),
    after ``warmup`` untimed rounds: on a shared machine a load change then hits every part
    alike instead of one part's whole series. -> (stats per name, last output per name)."""
    out: dict[str, Any] = {}
    for _ in range(warmup):
        for name, call in calls.items():
            out[name] = call()
    gc.collect()
    lat: dict[str, list[float]] = {k: [] for k in calls}
    cpu: dict[str, float] = dict.fromkeys(calls, 0.0)
    for _ in range(repeat):
        for name, call in calls.items():
            out[name] = None  # the previous output is freed first, as in a user's loop
            c0, t0 = time.process_time(), time.perf_counter()
            out[name] = call()
            lat[name].append(time.perf_counter() - t0)
            cpu[name] += time.process_time() - c0
    return {k: _stats(v, cpu[k]) for k, v in lat.items()}, out


def _with_frames(row: dict, frames: int) -> dict:
    row["frames_per_s"] = round(row["clips_per_s"] * frames, 2)
    return row


def run_video(cfg: VideoBenchConfig, log: Callable[[str], None] | None = None) -> dict:
    """Measure ``cfg`` -> the result dict (``DEFINITIONS``; JSON-able)."""
    import torch

    from .. import kernels, presets
    from ..backends import video as vx
    from ..io.video import Video, decode_frames, probe_video
    from ..io.video.decode import resolve_decoder
    from ..processor import Processor
    log = log or (lambda msg: None)
    from ..plan.video import video_defaults
    # qwen2.5-vl is the qwen2-vl pipeline with Qwen2.5-VL's video options (second_per_grid_ts)
    pipe: "Pipeline" = presets.get("qwen2-vl" if cfg.preset == "qwen2.5-vl" else cfg.preset)
    t0 = time.perf_counter()
    clip = make_clip(cfg.width, cfg.height, cfg.source_fps, cfg.seconds, cfg.fourcc)
    log(f"clip: {cfg.width}x{cfg.height} {cfg.seconds:g} s at {cfg.source_fps:g} fps, "
        f"{cfg.fourcc}, {len(clip) / 1e6:.1f} MB, written in {time.perf_counter() - t0:.1f} s")
    item = Video(clip, fps=cfg.fps)
    proc = Processor(pipe, dtype=cfg.dtype, video_options=video_defaults(cfg.preset))
    plan = proc.plan(videos=[item]).videos[0]
    if plan.error is not None:
        raise plan.error
    meta = probe_video(item, proc.video_limits, decoder=proc.video_decoder)
    n_frames = len(plan.frame_indices)
    wanted = sorted(set(plan.frame_indices))
    hf_proc = hf_video_processor(cfg.preset) if cfg.compare_hf else None

    result: dict = {
        "schema_version": SCHEMA_VERSION,
        "tool": "vlmprep bench --video",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": bench_env.machine(),
        "versions": bench_env.versions(),
        "kernels": kernels.summary(),
        "preset": {"name": pipe.name, "video_options": _options(proc.video_options)},
        "clip": {"width": cfg.width, "height": cfg.height, "source_fps": cfg.source_fps,
                 "seconds": cfg.seconds, "fourcc": cfg.fourcc, "bytes": len(clip),
                 "codec_probed": meta.codec, "container": meta.container,
                 "total_num_frames": meta.total_num_frames, "sampling_fps": cfg.fps,
                 "sampled_frames": n_frames, "frame_indices": list(plan.frame_indices),
                 "resized_hw": list(plan.resized_hw), "grid_thw": [list(g) for g in plan.grid_thw],
                 "num_tokens": plan.num_tokens},
        "config": {"threads": [t if t is not None else "default" for t in cfg.threads],
                   "repeat": cfg.repeat, "warmup": cfg.warmup, "dtype": cfg.dtype,
                   "decoder": resolve_decoder(proc.video_decoder), "compare": ["hf"] if cfg.compare_hf else []},
        "hf_class": type(hf_proc).__name__ if hf_proc is not None else None,
        "results": [],
        "definitions": DEFINITIONS,
    }
    steps = len(cfg.threads) * (4 if cfg.compare_hf else 3)
    step = 0

    def progress(what: str, row: dict) -> None:
        nonlocal step
        step += 1
        log(f"[{step}/{steps}] {what}: {row['clips_per_s']:.3f} clips/s, {row['p50_ms']:.0f} ms "
            f"per clip")

    # the decoded frames both "rest" measurements start from (decoded once, outside the timing)
    ordered = _ordered(decode_frames(item, wanted, proc.video_limits, decoder=proc.video_decoder),
                       wanted, plan.frame_indices)
    thwc = torch.from_numpy(ordered)
    tchw = thwc.permute(0, 3, 1, 2)  # transformers' own input form: (T, C, H, W) uint8, as decoded
    calls: dict[str, Callable[[], Any]] = {
        "vlmprep": lambda: proc([], videos=[item]),
        "decode": lambda: decode_frames(item, wanted, proc.video_limits,
                                        decoder=proc.video_decoder),
        "vlmprep_rest": lambda: vx.frames_to_rows(thwc, plan, pipe, cfg.dtype),
    }
    if hf_proc is not None:
        # the frames are the sampled ones already: the processor must not sample again
        calls["transformers"] = lambda: hf_proc(videos=[tchw], do_sample_frames=False,
                                                return_tensors="pt")
    labels = {"vlmprep": "vlmprep end to end", "decode": "decode",
              "vlmprep_rest": "vlmprep rest (after decode)",
              "transformers": f"transformers {type(hf_proc).__name__}"}
    for n in cfg.threads:
        with thread_count(n) as eff:
            r: dict[str, Any] = {"threads": n if n is not None else "default", **eff}
            stats, last = _time_rounds(calls, cfg.repeat, cfg.warmup)
            for name, row in stats.items():
                r[name] = _with_frames(row, n_frames)
                progress(f"threads={r['threads']} {labels[name]}", row)
            mine = last["vlmprep"].videos.pixel_values
            r["output_shape"] = list(mine.shape)
            r["rest_equals_end_to_end"] = bool(torch.equal(last["vlmprep_rest"], mine))
            if hf_proc is not None:
                theirs = last["transformers"]["pixel_values_videos"]
                r["transformers_output_shape"] = list(theirs.shape)
                r["same_grid_thw"] = (last["transformers"]["video_grid_thw"].tolist()
                                      == last["vlmprep"].videos.grid_thw.tolist())
                if theirs.shape == mine.shape and cfg.dtype == "float32":
                    r["max_abs_diff_vs_transformers"] = float((theirs - mine).abs().max())
                hf_ms, rest_ms = r["transformers"]["p50_ms"], r["vlmprep_rest"]["p50_ms"]
                r["speedup_rest"] = round(hf_ms / rest_ms, 2)
                r["speedup_end_to_end"] = round((r["decode"]["p50_ms"] + hf_ms)
                                                / r["vlmprep"]["p50_ms"], 2)
            r["decode_share_of_vlmprep"] = round(r["decode"]["p50_ms"] / r["vlmprep"]["p50_ms"], 3)
            result["results"].append(r)
            del last, mine
            gc.collect()
    return result


def _ordered(frames: "np.ndarray", wanted: list[int], indices: list[int]) -> "np.ndarray":
    """Decoded distinct frames (sorted ``wanted``) -> the plan's order (repeats copied)."""
    import numpy as np
    where = {k: i for i, k in enumerate(wanted)}
    pick = np.asarray([where[k] for k in indices], dtype=np.int64)
    return np.ascontiguousarray(frames[pick])


def _options(opts: Any) -> dict | None:
    from dataclasses import asdict
    return asdict(opts) if opts is not None else None
