"""Containers through NVIDIA DALI's video decoder (``fn.decoders.video``): ``decoder="dali"``.

Names: ``"dali:cpu"`` (DALI's CPU backend: its own libavcodec; VP8, VP9, MJPEG), ``"dali:cuda"`` /
``"dali:cuda:N"`` (the mixed backend on GPU N: NVDEC, also H.264, HEVC, AV1, MPEG-4 Part 2), and
``"dali"``: the mixed backend on GPU 0 when DALI sees a GPU, else the CPU one. ``resolve`` turns a
name into its canonical form (``"dali:cpu"`` / ``"dali:cuda:N"``) or refuses it.

One small pipeline per (backend, GPU) and thread, built once and cached: two external sources
(the encoded file's bytes and the wanted frame indices) into ``fn.decoders.video(frames=...,
pad_mode="none")``, batch 1. The metadata (and every limit) comes from ``probe_video`` first
(OpenCV's FFmpeg): DALI has no metadata-only read. DALI does not report a frame it fails to
read (its output keeps whatever bytes the buffer held; zeros in our tests), so the stream's
packets are counted up to the last wanted frame before DALI runs (``check_packets``: a
truncated file is an ImageError). A packet FFmpeg rejects raises (an ImageError); a frame that
fails later inside the decoder without an error is not detected: use ``decoder="opencv"`` for
untrusted files that must fail loudly. DALI indexes the frames by presentation
order, so frame n is the n-th displayed frame for constant and variable rate streams alike.
DALI does not apply the container's display rotation: it is applied here (``VideoMeta.rotation``).
The mixed backend's frames are copied to host memory: ``decode_frames`` returns numpy and the
video execution (``backends/video.py``) resizes on the CPU.

Time bound: a DALI run cannot be interrupted, so the wanted frames are decoded in runs of at most
``CHUNK`` frames and the deadline is checked before each run; a video may overrun its
``timeout_s`` by one run (each run opens the in-memory file and indexes its packets again).
"""
from __future__ import annotations

import functools
import re
import threading
import time
from typing import Any, Sequence

import numpy as np

from ...errors import ImageError
from .sources import DeadlineStream, positions, timed_out
from .types import VideoMeta

__all__ = ["available", "gpu_count", "resolve", "nvdec_for", "codec_family", "check_packets", "read_frames",
           "CHUNK", "CPU_CODECS", "MIXED_CODECS"]

#: Frames decoded per DALI run (the deadline is checked between runs; DALI's own output buffer
#: holds at most this many frames besides the result).
CHUNK = 32
#: Codec families each DALI backend decodes (DALI 2.4's ``fn.decoders.video`` documentation).
CPU_CODECS = frozenset({"vp8", "vp9", "mjpeg"})
MIXED_CODECS = CPU_CODECS | {"h264", "hevc", "av1", "mpeg4"}
#: FFmpeg / OpenCV codec tags (``VideoMeta.codec``) -> codec family.
_TAGS = {
    "vp8": ("VP80", "VP8", "vp08"), "vp9": ("VP90", "VP9", "vp09"),
    "mjpeg": ("MJPG", "AVRn", "dmb1", "jpeg", "mjpa", "mjpb", "MJPEG"),
    "h264": ("avc1", "avc3", "H264", "h264", "X264", "x264"),
    "hevc": ("hev1", "hvc1", "HEVC", "hevc", "H265", "h265"),
    "av1": ("av01", "AV01", "av1"),
    "mpeg4": ("mp4v", "MP4V", "FMP4", "XVID", "xvid", "DIVX", "divx", "DX50", "mpeg4"),
}
_FAMILY = {tag.lower(): fam for fam, tags in _TAGS.items() for tag in tags}
_NAMES = {"vp8": "VP8", "vp9": "VP9", "mjpeg": "MJPEG", "h264": "H.264", "hevc": "HEVC",
          "av1": "AV1", "mpeg4": "MPEG-4 Part 2"}
_NAME_RE = re.compile(r"^dali(?::(cpu|cuda)(?::(\d+))?)?$")


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether nvidia.dali imports (checked once per process)."""
    try:
        import nvidia.dali  # noqa: F401
    except Exception:  # noqa: BLE001 (not installed, or its libraries are missing)
        return False
    return True


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """CUDA devices DALI sees (0 without a GPU or driver)."""
    try:
        from nvidia.dali import backend
        b: Any = backend  # a compiled module: nothing for a type checker
        return int(b.GetCUDADeviceCount())
    except Exception:  # noqa: BLE001 (no driver: DALI raises instead of saying 0)
        return 0


def resolve(name: str) -> str:
    """``"dali"`` / ``"dali:cpu"`` / ``"dali:cuda[:N]"`` -> ``"dali:cpu"`` or ``"dali:cuda:N"``;
    ValueError when DALI is not importable or the GPU asked for is not there."""
    m = _NAME_RE.match(name)
    if m is None:
        raise ValueError(f"decoder: expected 'dali', 'dali:cpu', 'dali:cuda' or 'dali:cuda:N', got "
                         f"{name!r}; pass decoder='dali'")
    if not available():
        raise ValueError(f"decoder={name!r}: expected nvidia.dali importable, it is not; pip install "
                         f"nvidia-dali-cuda130 (or the wheel for your CUDA), or pass decoder='opencv'")
    kind, dev = m.group(1), m.group(2)
    if kind is None:
        return "dali:cuda:0" if gpu_count() > 0 else "dali:cpu"
    if kind == "cpu":
        if dev is not None:
            raise ValueError(f"decoder={name!r}: expected 'dali:cpu' without a device number; pass "
                             f"decoder='dali:cpu'")
        return "dali:cpu"
    n, have = int(dev or 0), gpu_count()
    if n >= have:
        raise ValueError(f"decoder={name!r}: expected CUDA GPU {n} for DALI's mixed (NVDEC) video "
                         f"decoder, DALI sees {have} GPU(s); pass decoder='dali:cpu' (VP8, VP9, MJPEG) "
                         f"or decoder='opencv'")
    return f"dali:cuda:{n}"


def nvdec_for(device: str) -> str | None:
    """``"dali:cuda:N"`` for a torch device ``"cuda"`` / ``"cuda:N"`` when DALI imports and sees
    that GPU, else None (the Processor's ``video_decoder="auto"`` on backend "dali")."""
    kind, _, n = device.partition(":")
    if kind != "cuda" or not available() or int(n or 0) >= gpu_count():
        return None
    return f"dali:cuda:{int(n or 0)}"


def codec_family(tag: str) -> str:
    """A ``VideoMeta.codec`` tag -> "vp8", "vp9", "mjpeg", "h264", "hevc", "av1", "mpeg4", or ""."""
    return _FAMILY.get(tag.strip().lower(), "")


def check_packets(cap: Any, stream: DeadlineStream, meta: VideoMeta, last: int, timeout_s: float) -> None:
    """Raise ImageError unless the stream holds packets up to frame ``last``: DALI skips a frame
    it cannot read without an error (its output then holds whatever the buffer held), so a
    truncated file is found first by demuxing (OpenCV's raw mode: packets, nothing decoded;
    one packet per frame, as DALI's own frame index counts them). ``cap``: an opened capture."""
    import cv2
    if not cap.set(cv2.CAP_PROP_FORMAT, -1):
        return  # no raw mode in this OpenCV build: DALI's own frame count is all there is
    n = 0
    while n <= last:
        if stream.expired or time.monotonic() > stream.deadline:
            raise timed_out(f"be read up to frame {last}", timeout_s)
        if not cap.grab():
            break
        n += 1
    if n <= last:
        if stream.expired:
            raise timed_out(f"be read up to frame {last}", timeout_s)
        raise ImageError(f"expected frame {last} of the {meta.total_num_frames} frames the container "
                         f"declares, but the stream ended after {n} frames; the file is truncated or its "
                         f"header lies: re-encode or re-download it")


def _check_codec(meta: VideoMeta, name: str) -> None:
    fam = codec_family(meta.codec)
    cpu = name == "dali:cpu"
    if fam in (CPU_CODECS if cpu else MIXED_CODECS):
        return
    what = _NAMES.get(fam, f"codec {meta.codec or '(unknown)'!r}")
    if cpu and fam in MIXED_CODECS:
        raise ImageError(f"expected a VP8, VP9 or MJPEG stream for DALI's CPU video decoder "
                         f"(decoder='dali:cpu'), got {what}; {what} needs DALI's mixed backend (a GPU: "
                         f"decoder='dali:cuda') or decoder='opencv'")
    have = "VP8, VP9, MJPEG" if cpu else "VP8, VP9, MJPEG, H.264, HEVC, AV1, MPEG-4 Part 2"
    raise ImageError(f"expected a stream DALI's {'CPU' if cpu else 'mixed (NVDEC)'} video decoder "
                     f"decodes ({have}), got {what}; pass decoder='opencv' or re-encode the video "
                     f"(e.g. H.264 or VP9)")


class _Pipes(threading.local):
    def __init__(self) -> None:
        self.pipes: dict[str, Any] = {}


_LOCAL = _Pipes()


def _pipeline(name: str) -> Any:
    """The cached pipeline of ``name`` for this thread (built on first use)."""
    pipe = _LOCAL.pipes.get(name)
    if pipe is not None:
        return pipe
    from nvidia.dali import fn, pipeline_def
    from nvidia.dali import types as dali_types
    types: Any = dali_types  # DALI makes its type enums at import: nothing for a type checker
    define: Any = pipeline_def  # its stubs lack exec_dynamic
    gpu = name != "dali:cpu"
    device_id = int(name.rsplit(":", 1)[1]) if gpu else None

    # prefetch depth 1: one run at a time, fed and read synchronously (docs/reference: DALI.md)
    @define(batch_size=1, num_threads=1, device_id=device_id, prefetch_queue_depth=1, exec_dynamic=True)
    def video() -> Any:
        # no_copy: the run is synchronous, so the file's bytes are not copied a second time
        enc = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1, no_copy=True)
        idx = fn.external_source(name="frames", dtype=types.INT32, ndim=1)
        return fn.decoders.video(enc, device="mixed" if gpu else "cpu", frames=idx, pad_mode="none")

    pipe = video()
    pipe.build()
    _LOCAL.pipes[name] = pipe
    return pipe


def _reason(e: BaseException) -> str:
    """The informative line of a DALI error ('encountered: <this>' before its C++ context)."""
    text = str(e)
    if "encountered:" in text:
        text = text.split("encountered:", 1)[1]
    text = text.split("C++ context:", 1)[0]
    line = " ".join(text.split())
    return line[:300] or type(e).__name__


def _run(name: str, data: np.ndarray, part: list[int]) -> np.ndarray:
    pipe = _pipeline(name)
    try:
        pipe.feed_input("encoded", [data])
        pipe.feed_input("frames", [np.asarray(part, np.int32)])
        (out,) = pipe.run()
        if name != "dali:cpu":
            out = out.as_cpu()  # NVDEC frames to host: the video execution resizes on the CPU
        return np.asarray(out[0])
    except Exception:
        _LOCAL.pipes.pop(name, None)  # never reuse a pipeline whose run failed
        raise


def _rotate(frames: np.ndarray, meta: VideoMeta) -> np.ndarray:
    """DALI's frames as stored -> as displayed (``meta.rotation`` degrees clockwise)."""
    if not meta.rotation:
        return frames
    if meta.rotation in (90, 270) and frames.shape[1:3] == (meta.height, meta.width):
        return frames  # already turned (a decoder that applies the display matrix itself)
    return np.rot90(frames, k=-(meta.rotation // 90), axes=(1, 2))


def read_frames(data: bytes, name: str, meta: VideoMeta, indices: Sequence[int], out: np.ndarray,
                deadline: float, timeout_s: float) -> None:
    """Frames ``indices`` (any order, repeats allowed) of the encoded file ``data`` into ``out``
    ``(T, H, W, 3)`` uint8 RGB with DALI ``name`` (``resolve``'s form), in runs of ``CHUNK``
    distinct frames in ascending order. Raises ImageError for a codec the backend does not
    decode, a file DALI cannot read, a stream that ends before a wanted frame, a frame size other
    than the probed one, or past the deadline (checked before each run)."""
    _check_codec(meta, name)
    buf = np.frombuffer(data, np.uint8)
    where = positions(indices)
    wanted = sorted(where)
    h, w = meta.height, meta.width
    for lo in range(0, len(wanted), CHUNK):
        part = wanted[lo:lo + CHUNK]
        if time.monotonic() > deadline:
            raise timed_out(f"decode frames {wanted[0]}..{wanted[-1]}", timeout_s)
        try:
            got = _run(name, buf, part)
        except Exception as e:  # noqa: BLE001 (DALI raises RuntimeError for every bad input)
            raise _failed(e, part, meta, name) from e
        got = _rotate(got, meta)
        if got.shape != (len(part), h, w, 3) or got.dtype != np.uint8:
            raise ImageError(f"expected {len(part)} frames of {h}x{w} (HxW) uint8 as the container "
                             f"declares, DALI decoded {got.dtype} {tuple(got.shape)}; a stream whose size "
                             f"changes is not supported: re-encode it at one size")
        for j, i in enumerate(part):
            first, *rest = where[i]
            out[first] = got[j]
            for k in rest:
                out[k] = out[first]


def _failed(e: BaseException, part: list[int], meta: VideoMeta, name: str) -> ImageError:
    why = _reason(e)
    m = re.search(r"containing a ROI with (\d+) frames", why)
    if m:
        return ImageError(f"expected frame {max(part)} of the {meta.total_num_frames} frames the "
                          f"container declares, DALI found {m.group(1)} frames in the stream; the file "
                          f"is truncated or its header lies: re-encode or re-download it")
    what = _NAMES.get(codec_family(meta.codec), "video")
    a = "an" if what[0] in "AEFHILMNORSX" else "a"  # an MJPEG, an H.264, a VP9, a video
    return ImageError(f"expected {a} {what} stream that DALI's "
                      f"{'CPU' if name == 'dali:cpu' else 'mixed (NVDEC)'} decoder reads, it failed "
                      f"({why}); the file is truncated or corrupt: re-encode or re-download it, or pass "
                      f"decoder='opencv'")
