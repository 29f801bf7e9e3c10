"""``vlmprep bench --video``: clips/s and frames/s of one sampled video clip, vlmprep vs the
transformers video processor, with the decode timed apart.

The clip is written here, deterministically, from the photos scikit-image ships (a slow pan and
zoom over a mosaic, so consecutive frames differ): by default 10 s of 1280x720 at 30 fps, sampled
at 2 fps -> 20 frames (``Video(clip, fps=2.0)``). Both sides are built from one checkpoint
folder (``write_checkpoint``: the family's public image and video processor configs), Qwen2-VL's
by default; ``video_families()`` lists the families taken. The default
codec is H.264 (``avc1``), written with PyAV's libx264 at its defaults (a keyframe every 250
frames, 3 B-frames; preset veryfast, one encoder thread and, on AVX-512 CPUs, x264's AVX2
code, so the bytes are the same every time): this OpenCV's FFmpeg has no H.264 encoder (avc1 /
H264 / X264 fail to open, tests/video). ``--fourcc mp4v`` (or MJPG, ...) writes with OpenCV's ``VideoWriter`` instead.
The clip is written to a temporary file: both sides read it from its path, as their users do.

Measured per thread count (torch, OpenCV and vlmprep's own threads, ``timing.thread_count``):

- ``vlmprep``: ``Processor(preset)([], videos=[Video(path, fps=...)])``, end to end from the
  file (probe, plan, decode of the sampled frames only, resize, normalize, patchify, pack);
- ``decode``: ``vlmprep.io.video.decode_frames`` of the planned frames alone;
- ``vlmprep_rest``: the decoded frames -> rows (``backends.video.frames_to_rows``: resize,
  normalize, patchify), what the transformers processor is compared with;
- ``transformers``: the family's real video processor (``AutoVideoProcessor.from_pretrained`` on a
  folder holding the checkpoint's config) called on the SAME decoded frames (a ``(T, C, H, W)``
  uint8 tensor, its fastest input form), ``do_sample_frames=False`` (they are sampled already),
  ``return_tensors="pt"``; every key of its output is checked equal (dtype, shape, values)
  to vlmprep's ``to_hf()`` (``same_output``; the pixels' max abs difference is reported);
- ``transformers_file``: the same processor end to end from the file as its users call it
  (``processor(videos=[path], do_sample_frames=True, fps=...)``: its default video decoder,
  torchcodec, its own sampling), when torchcodec imports (without it transformers 5.x cannot
  decode a file: torchvision 0.26+ has no video decoder); checked to sample the same frames and
  give the same output as vlmprep end to end;
- ``output_write_floor``: writing the output's bytes once into a reused buffer
  (``kernels.stream_store``, when the kernels are loaded): no implementation writes its rows
  faster.

The parts are timed in rounds (one call of each per round, ``repeat`` rounds after ``warmup``),
so a load change on a shared machine hits every part alike. Speedups: ``rest`` (transformers
processor / vlmprep rest), ``end to end`` ((decode + transformers processor) / vlmprep end to
end: a transformers user decodes too, with vlmprep's decode counted for both) and ``file``
(transformers_file / vlmprep: each side with its own decoder and sampling, from the file). Nothing is
asserted: it only measures.
"""
from __future__ import annotations

import gc
import json
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from importlib import metadata
from typing import TYPE_CHECKING, Any, Callable

from .. import kernels, presets
from ..backends import video as vx
from ..processor import Processor
from . import env as bench_env
from .images import mosaic
from .timing import ms, pct, thread_count

if TYPE_CHECKING:
    import numpy as np

    from ..pipeline import Pipeline

__all__ = ["VideoBenchConfig", "make_clip", "video_families", "write_checkpoint",
           "hf_video_processor", "run_video", "DEFINITIONS",
           "SCHEMA_VERSION", "FOURCC_DEFAULT"]

SCHEMA_VERSION = 2
#: The codec the clip is written with: H.264 through PyAV (this OpenCV has no H.264 encoder).
FOURCC_DEFAULT = "avc1"
#: fourccs written with PyAV's encoders (FFmpeg names) rather than OpenCV's VideoWriter.
PYAV_CODECS = {"avc1": "libx264", "h264": "libx264"}

DEFINITIONS = {
    "clips_per_s": "clips / sum of timed latencies (one clip per call; warm-up excluded)",
    "frames_per_s": "sampled frames (the plan's frame_indices, temporal padding included) per "
                    "second: clips_per_s * frames per clip",
    "p50_ms": "median latency of one clip (p99: 99th percentile); the parts are timed in rounds "
              "(one call of each per round), so load changes hit them alike",
    "vlmprep": "Processor(preset)([], videos=[Video(clip path, fps=...)]): probe, plan, decode "
               "of the sampled frames, resize, normalize, patchify, pack",
    "decode": "vlmprep.io.video.decode_frames of the planned frames only (config.decoder; "
              "OpenCV: sequential grab() or seek, whichever decodes fewer frames)",
    "vlmprep_rest": "decoded (T, H, W, 3) uint8 frames -> the video's rows "
                    "(vlmprep.backends.video.frames_to_rows: resize, normalize, patchify)",
    "transformers": "the family's transformers video processor (AutoVideoProcessor from the "
                    "checkpoint config) on the same decoded frames as a (T, C, H, W) uint8 tensor",
    "transformers_file": "the same transformers processor end to end from the clip's path, as its "
                         "users call it: processor(videos=[path], do_sample_frames=True, fps=...) "
                         "with its default decoder (torchcodec, FFmpeg threads chosen by FFmpeg) and "
                         "its own sampling; only when torchcodec imports",
    "output_write_floor": "writing the output's bytes once into a reused buffer "
                          "(config.output_write_floor): the least any implementation spends on it",
    "speedup_rest": "transformers p50_ms / vlmprep_rest p50_ms (speedup_rest_min: min_ms)",
    "speedup_end_to_end": "(decode p50_ms + transformers p50_ms) / vlmprep p50_ms",
    "speedup_file": "transformers_file p50_ms / vlmprep p50_ms: both end to end from the file "
                    "(speedup_file_min: min_ms)",
    "file_same_frame_indices": "transformers_file sampled the plan's frame_indices",
    "same_output": "every key of the transformers output (decoded frames) equals vlmprep's "
                   "to_hf() key: dtype, shape and values (float32 only)",
    "file_same_output": "every key of transformers_file's output equals vlmprep's end to end "
                        "to_hf() key (float32 only)",
    "same_run_bound_ms": "decode p50_ms + vlmprep_rest p50_ms of the same run: the decode of the "
                         "needed frames plus the rest, nothing between them",
    "end_to_end_vs_bound": "vlmprep p50_ms / same_run_bound_ms (issue 29's target: <= 1.2)",
    "load_average_before": "os.getloadavg() before the thread count's rounds (after: _after)",
    "cpu_cores_used": "process CPU time / wall time over the timed calls",
}


@dataclass
class VideoBenchConfig:
    """What ``run_video`` measures.

    Fields:
        preset: a ``video_families()`` name ("qwen2-vl", the default, "qwen2.5-vl", "qwen3-vl",
            "glm4v", "internvl", "llava-onevision", "smolvlm"): the checkpoint both sides are
            built from (``write_checkpoint``).
        width, height, source_fps, seconds: the clip written; fps: the sampling rate asked
            (``Video(clip, fps=fps)``; 20 frames for 10 s at 2 fps).
        fourcc: the codec (``FOURCC_DEFAULT``: H.264 through PyAV; others through OpenCV).
        threads: thread counts (None: the libraries' defaults).
        repeat, warmup: timed and untimed calls per measurement.
        compare_hf: also run the transformers video processor.
        dtype: vlmprep's output dtype (float32 is the like-for-like one).
        decoder: vlmprep's video decoder (``Processor(video_decoder=...)``; "auto": torchcodec
            when it imports, else OpenCV).
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
    decoder: str = "auto"


# -- the clip -----------------------------------------------------------------------------------
def _frames(width: int, height: int, n: int) -> "Any":
    """Yield ``n`` (H, W, 3) uint8 BGR frames: a window over a photo mosaic, zooming in by up to
    1.5x while its centre drifts (INTER_AREA), so every frame differs."""
    import cv2  # deferred: optional
    import numpy as np  # deferred: heavy
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
    """The encoded bytes of a deterministic clip (module doc): H.264 (``avc1``) through PyAV's
    libx264 at its default GOP into MP4, any other fourcc through OpenCV's VideoWriter into a
    temporary MP4 (AVI for MJPG / XVID), read back and deleted.

    Raises ValueError naming the fourcc when it cannot be written here."""
    n = max(1, int(round(fps * seconds)))
    with tempfile.TemporaryDirectory(prefix="vlmprep-bench-") as d:
        if fourcc.lower() in PYAV_CODECS:
            path = os.path.join(d, "clip.mp4")
            _write_pyav(path, PYAV_CODECS[fourcc.lower()], width, height, fps, n)
        else:
            path = os.path.join(d, "clip" + (".avi" if fourcc.upper() in ("MJPG", "XVID") else ".mp4"))
            _write_cv2(path, fourcc, width, height, fps, n)
        with open(path, "rb") as f:
            return f.read()


def _write_pyav(path: str, codec: str, width: int, height: int, fps: float, n: int) -> None:
    try:
        import av  # deferred: optional
    except ImportError:
        raise ValueError("--video: fourcc 'avc1' (H.264, the default) is written with PyAV: pip "
                         "install av, or pass --fourcc mp4v (OpenCV's MPEG-4 Part 2)") from None
    with av.open(path, "w") as out:
        st: Any = out.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))  # a VideoStream
        st.width, st.height, st.pix_fmt = width, height, "yuv420p"
        # x264's defaults (keyint 250, 3 B-frames) at preset veryfast; one encoder thread, set on
        # the codec context (PyAV's own threading otherwise wins over a "threads" option): with
        # more, the bytes differed between runs on a loaded machine (the clip must not)
        st.options = {"preset": "veryfast", **_x264_isa_cap()}
        st.codec_context.thread_count = 1
        st.codec_context.thread_type = "NONE"
        for f in _frames(width, height, n):
            frame = av.VideoFrame.from_ndarray(f[..., ::-1].copy(), format="rgb24")
            for pkt in st.encode(frame):
                out.mux(pkt)
        for pkt in st.encode():
            out.mux(pkt)


def _x264_isa_cap() -> dict[str, str]:
    """``{"x264-params": "asm=AVX2"}`` on an x86-64 Linux CPU with AVX-512, else ``{}``.

    x264's AVX-512 code made different bytes from the same frames from one process to the next
    once OpenCV was imported (measured: a 96x64 clip in 6 processes x 3 encodes, 3 different
    outputs; 160x96 varied too; 128x64 and 1280x720 were stable), so the clip was not
    repeatable. Forced to its AVX2 code: 1 output. x264 does not intersect "asm" with the CPU's
    flags, hence the check."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return {}
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return {"x264-params": "asm=AVX2"} if {"avx512f", "avx2"} <= flags else {}
    except OSError:
        pass
    return {}


def _write_cv2(path: str, fourcc: str, width: int, height: int, fps: float, n: int) -> None:
    import cv2  # deferred: optional
    code = cv2.VideoWriter_fourcc(*fourcc)  # type: ignore[attr-defined]
    w = cv2.VideoWriter(path, code, float(fps), (width, height))
    if not w.isOpened():
        raise ValueError(f"--video: expected a codec this OpenCV can write (or avc1, through PyAV), "
                         f"got fourcc {fourcc!r}; use avc1 (the default), mp4v or MJPG")
    try:
        for f in _frames(width, height, n):
            w.write(f)
    finally:
        w.release()


# -- transformers -------------------------------------------------------------------------------
def video_families() -> list[str]:
    """The names ``--video --preset`` takes: every video family that declares its checkpoint's
    video config (``presets.video_checkpoint``), SmolVLM2's as ``smolvlm``."""
    out = []
    for f, spec in presets.video_families().items():
        if spec.config is not None:
            out.append(VIDEO_NAMES.get(f, f))
    return sorted(out)


#: a video family's name in the bench where its family key is another family's pipeline name
VIDEO_NAMES = {"idefics3": "smolvlm"}


def _family(name: str) -> str:
    """A ``video_families()`` name -> its ``presets.video_families()`` key."""
    names = video_families()
    if name not in names:
        raise ValueError(f"--video: expected --preset one of {names} (the video families whose "
                         f"checkpoint video config both sides read), got {name!r}")
    return {v: k for k, v in VIDEO_NAMES.items()}.get(name, name)


def write_checkpoint(name: str, folder: str) -> str:
    """Write video family ``name``'s public checkpoint configs into ``folder`` as the hub
    checkpoint holds them: ``preprocessor_config.json`` (the image config) and
    ``video_preprocessor_config.json``; Qwen2-VL / Qwen2.5-VL ship no video config, and
    transformers reads their image config for video too. -> ``folder``."""
    from .hf import checkpoint_config  # deferred: the image bench's checkpoint files
    image_name, video_cfg = presets.video_checkpoint(_family(name))
    files = ({"preprocessor_config.json": checkpoint_config(image_name),
              "video_preprocessor_config.json": video_cfg}
             if "video_processor_type" in video_cfg else {"preprocessor_config.json": video_cfg})
    for fname, cfg in files.items():
        with open(os.path.join(folder, fname), "w", encoding="utf-8") as f:
            json.dump(cfg, f)
    return folder


def hf_video_processor(family_or_folder: str) -> Any:
    """The real transformers video processor of a checkpoint folder (``write_checkpoint``), or of
    a ``video_families()`` name's public checkpoint (written to a temporary folder):
    ``AutoVideoProcessor.from_pretrained``, as its users build it."""
    try:
        import transformers  # deferred: optional, heavy
    except ImportError as e:
        raise ValueError(f"--video compares with the transformers video processor: pip install "
                         f"transformers, or pass --no-compare ({e})") from None
    if os.path.isdir(family_or_folder):
        return transformers.AutoVideoProcessor.from_pretrained(family_or_folder)
    with tempfile.TemporaryDirectory(prefix="vlmprep-bench-") as d:
        return transformers.AutoVideoProcessor.from_pretrained(write_checkpoint(family_or_folder, d))


# -- timing -------------------------------------------------------------------------------------
def _stats(lat: list[float], cpu: float) -> dict:
    wall = sum(lat)
    return {"p50_ms": ms(pct(lat, 50)), "p99_ms": ms(pct(lat, 99)),
            "mean_ms": ms(wall / len(lat)), "min_ms": ms(min(lat)),
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
    log = log or (lambda msg: None)
    t0 = time.perf_counter()
    clip = make_clip(cfg.width, cfg.height, cfg.source_fps, cfg.seconds, cfg.fourcc)
    log(f"clip: {cfg.width}x{cfg.height} {cfg.seconds:g} s at {cfg.source_fps:g} fps, "
        f"{cfg.fourcc}, {len(clip) / 1e6:.1f} MB, written in {time.perf_counter() - t0:.1f} s")
    with tempfile.TemporaryDirectory(prefix="vlmprep-bench-") as d:
        path = os.path.join(d, "clip.avi" if cfg.fourcc.upper() in ("MJPG", "XVID") else "clip.mp4")
        with open(path, "wb") as f:
            f.write(clip)
        return _measure(cfg, path, len(clip), write_checkpoint(cfg.preset, d), log)


def _hf_file_backend() -> str | None:
    """transformers' default video decoder ("torchcodec <version>") when it can run here, else
    None."""
    from ..io.video import tcodec  # deferred: imports numpy
    if not tcodec.available():
        return None
    try:
        return f"torchcodec {metadata.version('torchcodec')}"
    except metadata.PackageNotFoundError:  # imported from a path without its dist-info
        return "torchcodec"


def _write_floor(shape: tuple[int, ...], dtype: str) -> tuple[Callable[[], Any], str]:
    """A call that writes an output of ``shape`` once into a reused buffer, and what it uses."""
    import torch  # deferred: heavy
    tdt = getattr(torch, dtype)
    if kernels.available() and hasattr(kernels, "stream_store"):
        buf = kernels.empty(shape, tdt)
        return (lambda: kernels.stream_store(buf)), "kernels.stream_store (non-temporal stores)"
    buf = torch.empty(shape, dtype=tdt)
    return (lambda: buf.fill_(0)), "torch fill_"


@dataclass
class _Subject:
    """What ``_measure`` times: the clip file, its plan, and the processors of both sides."""

    cfg: VideoBenchConfig
    path: str
    pipe: "Pipeline"
    item: Any       # the Video
    proc: Any       # vlmprep's Processor
    plan: Any       # the video's plan
    hf_proc: Any    # the transformers video processor, or None
    hf_backend: str | None  # transformers' decoder from the file, or None


def _measure(cfg: VideoBenchConfig, path: str, nbytes: int, checkpoint: str,
             log: Callable[[str], None]) -> dict:
    import torch  # noqa: F401  # deferred: heavy; loaded first, so machine() sees CUDA devices

    from ..io.video import Video, probe_video  # deferred: imports numpy
    # both sides are built from the same checkpoint folder, as their users build them
    proc = Processor.from_pretrained(checkpoint, dtype=cfg.dtype, video_decoder=cfg.decoder)
    pipe: "Pipeline" = proc.pipeline
    item = Video(path, fps=cfg.fps)
    plan = proc.plan(videos=[item]).videos[0]
    if plan.error is not None:
        raise plan.error
    meta = probe_video(item, proc.video_limits, decoder=proc.video_decoder)
    hf_proc = hf_video_processor(checkpoint) if cfg.compare_hf else None
    hf_backend = _hf_file_backend() if hf_proc is not None else None
    sub = _Subject(cfg, path, pipe, item, proc, plan, hf_proc, hf_backend)
    out_shape = vx.row_shape(pipe, plan)
    floor_call, floor_how = _write_floor(out_shape, cfg.dtype)
    result = _new_result(sub, meta, nbytes, out_shape, floor_how)
    if hf_proc is not None and hf_backend is None:
        log("transformers end to end from the file skipped: its default video decoder, "
            "torchcodec, does not import here (pip install torchcodec)")
    calls = _calls(sub, floor_call)
    steps, step = len(cfg.threads) * len(calls), 0
    for n in cfg.threads:
        result["results"].append(_thread_row(sub, calls, n, log, step, steps))
        step += len(calls)
    return result


def _new_result(sub: _Subject, meta: Any, nbytes: int, out_shape: tuple[int, ...],
                floor_how: str) -> dict:
    """The result dict before anything is timed: where, the clip, the config, no results."""
    from ..io.video.decode import resolve_decoder  # deferred: imports numpy
    cfg, plan, proc, hf_proc = sub.cfg, sub.plan, sub.proc, sub.hf_proc
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "vlmprep bench --video",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": bench_env.machine(),
        "versions": bench_env.versions(),
        "kernels": kernels.summary(),
        "preset": {"name": sub.pipe.name, "family": cfg.preset,
                   "video_options": _options(proc.video_options)},
        "clip": {"width": cfg.width, "height": cfg.height, "source_fps": cfg.source_fps,
                 "seconds": cfg.seconds, "fourcc": cfg.fourcc, "bytes": nbytes,
                 "codec_probed": meta.codec, "container": meta.container,
                 "keyframes": _keyframes(sub.path), "total_num_frames": meta.total_num_frames,
                 "sampling_fps": cfg.fps, "sampled_frames": len(plan.frame_indices),
                 "frame_indices": list(plan.frame_indices), "resized_hw": list(plan.resized_hw),
                 "grid_thw": [list(g) for g in plan.grid_thw], "num_tokens": plan.num_tokens,
                 "output_shape": list(out_shape)},
        "config": {"threads": [t if t is not None else "default" for t in cfg.threads],
                   "repeat": cfg.repeat, "warmup": cfg.warmup, "dtype": cfg.dtype,
                   "decoder": resolve_decoder(proc.video_decoder),
                   "compare": ["hf"] if cfg.compare_hf else [],
                   "hf_file_decoder": sub.hf_backend, "output_write_floor": floor_how},
        "hf_class": type(hf_proc).__name__ if hf_proc is not None else None,
        "results": [],
        "definitions": DEFINITIONS,
    }


def _calls(sub: _Subject, floor_call: Callable[[], Any]) -> dict[str, Callable[[], Any]]:
    """The parts timed, by name: each a zero-argument call on the same clip."""
    import torch  # deferred: heavy

    from ..io.video import decode_frames  # deferred: imports numpy
    cfg, item, proc, plan, pipe, hf_proc = sub.cfg, sub.item, sub.proc, sub.plan, sub.pipe, sub.hf_proc
    path = sub.path
    wanted = sorted(set(plan.frame_indices))
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
        "output_write_floor": floor_call,
    }
    if hf_proc is not None:
        # the frames are the sampled ones already: the processor must not sample again
        calls["transformers"] = lambda: hf_proc(videos=[tchw], do_sample_frames=False,
                                                return_tensors="pt")
        if sub.hf_backend is not None:
            calls["transformers_file"] = lambda: hf_proc(videos=[path], do_sample_frames=True,
                                                         fps=cfg.fps, return_metadata=True,
                                                         return_tensors="pt")
    return calls


def _labels(hf_proc: Any) -> dict[str, str]:
    """The progress lines' name of each part."""
    return {"vlmprep": "vlmprep end to end", "decode": "decode",
            "vlmprep_rest": "vlmprep rest (after decode)",
            "output_write_floor": "output write floor",
            "transformers": f"transformers {type(hf_proc).__name__} (decoded frames)",
            "transformers_file": f"transformers {type(hf_proc).__name__} from the file"}


def _thread_row(sub: _Subject, calls: dict[str, Callable[[], Any]], n: int | None,
                log: Callable[[str], None], step: int, steps: int) -> dict:
    """Every part timed in rounds at ``n`` threads -> the result row (progress steps from
    ``step + 1`` of ``steps``)."""
    import torch  # deferred: heavy
    labels = _labels(sub.hf_proc)
    n_frames = len(sub.plan.frame_indices)
    with thread_count(n) as eff:
        r: dict[str, Any] = {"threads": n if n is not None else "default", **eff,
                             "load_average_before": _load()}
        stats, last = _time_rounds(calls, sub.cfg.repeat, sub.cfg.warmup)
        r["load_average_after"] = _load()
        for name, row in stats.items():
            r[name] = _with_frames(row, n_frames)
            step += 1
            log(f"[{step}/{steps}] threads={r['threads']} {labels[name]}: "
                f"{row['clips_per_s']:.3f} clips/s, {row['p50_ms']:.0f} ms per clip")
        mine = last["vlmprep"].videos.pixel_values
        r["output_shape"] = list(mine.shape)
        r["rest_equals_end_to_end"] = bool(torch.equal(last["vlmprep_rest"], mine))
        if sub.hf_proc is not None:
            _compare(r, last, mine, sub.cfg.dtype, sub.plan.frame_indices)
        r["decode_share_of_vlmprep"] = round(r["decode"]["p50_ms"] / r["vlmprep"]["p50_ms"], 3)
        bound = r["decode"]["p50_ms"] + r["vlmprep_rest"]["p50_ms"]
        r["same_run_bound_ms"] = round(bound, 2)
        r["end_to_end_vs_bound"] = round(r["vlmprep"]["p50_ms"] / bound, 3)
        del last, mine
        gc.collect()
    return r


def _pixels(out: Any) -> Any:
    """A transformers video output's pixel tensor (SmolVLM's is ``pixel_values``)."""
    return out["pixel_values_videos" if "pixel_values_videos" in out else "pixel_values"]


def _same_keys(hf: Any, ours: dict) -> bool:
    """Every key of transformers' output is in ``ours`` (vlmprep's ``to_hf()``) with the same
    dtype, shape and values."""
    return set(hf.keys()) <= set(ours) and all(
        ours[k].dtype == hf[k].dtype and ours[k].shape == hf[k].shape and _torch_equal(ours[k], hf[k])
        for k in hf.keys())


def _compare(r: dict, last: dict, mine: "Any", dtype: str, indices: list[int]) -> None:
    """The transformers parts' outputs against vlmprep's, and the speedups (into ``r``).
    ``mine`` is vlmprep's rows; transformers' pixel tensor is compared in its own shape (a
    batch dim for the tile families)."""
    ours = dict(last["vlmprep"].to_hf())
    theirs = _pixels(last["transformers"])
    r["transformers_output_shape"] = list(theirs.shape)
    grid = last["transformers"].get("video_grid_thw")
    r["same_grid_thw"] = (grid.tolist() == last["vlmprep"].videos.grid_thw.tolist()
                          if grid is not None else None)
    if theirs.numel() == mine.numel() and dtype == "float32":
        r["max_abs_diff_vs_transformers"] = float((theirs.reshape(mine.shape) - mine).abs().max())
    r["same_output"] = dtype == "float32" and _same_keys(last["transformers"], ours)
    hf_ms, rest_ms = r["transformers"]["p50_ms"], r["vlmprep_rest"]["p50_ms"]
    r["speedup_rest"] = round(hf_ms / rest_ms, 2)
    r["speedup_end_to_end"] = round((r["decode"]["p50_ms"] + hf_ms) / r["vlmprep"]["p50_ms"], 2)
    r["speedup_rest_min"] = round(r["transformers"]["min_ms"] / r["vlmprep_rest"]["min_ms"], 2)
    if "transformers_file" in last:
        f = last["transformers_file"]
        got = [int(i) for i in f["video_metadata"][0].frames_indices]
        r["file_same_frame_indices"] = got == [int(i) for i in indices]
        r["file_same_output"] = bool(dtype == "float32" and _same_keys(
            {k: v for k, v in f.items() if k != "video_metadata"}, ours))
        r["speedup_file"] = round(r["transformers_file"]["p50_ms"] / r["vlmprep"]["p50_ms"], 2)
        r["speedup_file_min"] = round(r["transformers_file"]["min_ms"] / r["vlmprep"]["min_ms"], 2)


def _torch_equal(a: Any, b: Any) -> bool:
    import torch  # deferred: heavy
    return bool(torch.equal(a, b))


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not available on this platform
        return None


def _keyframes(path: str) -> list[int] | None:
    """The clip's keyframe (sync sample) numbers from its MP4 index, None without one."""
    from ..io.video import mp4  # deferred: imports numpy
    with open(path, "rb") as f:
        data = f.read()
    return mp4.sync_samples(data)


def _ordered(frames: "np.ndarray", wanted: list[int], indices: list[int]) -> "np.ndarray":
    """Decoded distinct frames (sorted ``wanted``) -> the plan's order (repeats copied)."""
    import numpy as np  # deferred: heavy
    where = {k: i for i, k in enumerate(wanted)}
    pick = np.asarray([where[k] for k in indices], dtype=np.int64)
    return np.ascontiguousarray(frames[pick])


def _options(opts: Any) -> dict | None:
    return asdict(opts) if opts is not None else None
