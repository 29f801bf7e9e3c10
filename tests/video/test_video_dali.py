"""decode_frames(..., decoder="dali"): NVIDIA DALI's video decoder (vlmprep/io/video/dali.py).

The oracle is OpenCV's FFmpeg (``decoder="opencv"``, the frames every other video test checks
against the frames written). DALI's CPU backend decodes the same frames (checked: each DALI frame
is nearest to the OpenCV frame of the same index) but converts YUV to RGB its own way, so the
levels differ: measured on these clips, mean 1.4 (VP8), 1.9 (VP9), 1.6 (MJPEG) levels, max 15 / 40 /
39. The bounds below (mean <= 2.5, max <= 48) state that. The mixed (NVDEC) backend needs a GPU:
those tests skip here with that reason.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from _support.videos import mp4_rotated, pan_zoom

import vlmprep
from vlmprep.errors import ImageError
from vlmprep.io.video import Video, VideoMeta, dali, decode_frames, probe_video
from vlmprep.io.video.decode import resolve_decoder

pytestmark = pytest.mark.skipif(not dali.available(), reason="nvidia.dali is not importable")
NO_GPU = "DALI sees no CUDA GPU: the mixed (NVDEC) backend cannot run here"
needs_gpu = pytest.mark.skipif(dali.available() and dali.gpu_count() == 0, reason=NO_GPU)
#: DALI's CPU YUV->RGB vs OpenCV's swscale, in uint8 levels (measured; module docstring)
MEAN_BOUND, MAX_BOUND = 2.5, 48
CPU_CASES = ["vp80_webm", "vp90_webm", "mjpg_avi"]


def _indices(n: int) -> list[int]:
    """Seeked / sampled frames: unsorted, a repeat, the last frame."""
    return [n - 1, 0, n // 2, n // 2, 3, n // 3]


def _assert_levels(got: np.ndarray, ref: np.ndarray) -> None:
    assert got.shape == ref.shape and got.dtype == np.uint8
    d = np.abs(got.astype(np.int16) - ref.astype(np.int16))
    assert d.mean() <= MEAN_BOUND and d.max() <= MAX_BOUND, (d.mean(), d.max())


def _assert_same_frames(got: np.ndarray, ref: np.ndarray) -> None:
    """Each decoded frame is nearest to the reference frame of its own index (not a neighbour)."""
    dist = np.array([[np.abs(g.astype(np.int16) - r).mean() for r in ref] for g in got])
    for i in range(len(got)):
        same = [j for j in range(len(ref)) if np.array_equal(ref[j], ref[i])]
        assert int(dist[i].argmin()) in same, dist[i]


def test_decoder_names():
    cpu_only = dali.gpu_count() == 0
    assert resolve_decoder("dali") == ("dali:cpu" if cpu_only else "dali:cuda:0")
    assert resolve_decoder("dali:cpu") == "dali:cpu"
    for bad in ("dali:gpu", "dali:cpu:0", "dalí", "dali:cuda:x"):
        with pytest.raises(ValueError, match="decoder"):
            resolve_decoder(bad)
    if cpu_only:
        with pytest.raises(ValueError, match="dali:cpu"):
            resolve_decoder("dali:cuda")
        with pytest.raises(ValueError, match="sees 0 GPU"):
            vlmprep.Processor("qwen2-vl", video_decoder="dali:cuda:0")
    assert vlmprep.Processor("qwen2-vl", video_decoder="dali").video_decoder == "dali"
    assert vlmprep.Processor("qwen2-vl").video_decoder == "auto"  # cpu: auto as before
    assert vlmprep.Processor("qwen2-vl", backend="dali").video_decoder == "auto"  # dali on the CPU too
    assert dali.nvdec_for("cpu") is None
    assert dali.nvdec_for("cuda:0") == (None if cpu_only else "dali:cuda:0")


@pytest.mark.parametrize("name", CPU_CASES)
def test_frames_equal_opencv_levels(name, videos):
    clip = videos.get(name)
    meta = probe_video(clip.path, decoder="dali:cpu")
    assert meta == probe_video(clip.path, decoder="opencv")  # OpenCV's metadata, same limits
    idx = _indices(meta.total_num_frames)
    got = decode_frames(clip.path, idx, decoder="dali:cpu")
    ref = decode_frames(clip.path, idx, decoder="opencv")
    assert got.flags.c_contiguous
    _assert_levels(got, ref)
    _assert_same_frames(got, ref)
    assert np.array_equal(got[2], got[3])  # a repeated index is the same frame
    assert np.array_equal(decode_frames(clip.data, idx, decoder="dali:cpu"), got)  # bytes == path


def test_runs_of_chunk_frames_and_pipeline_reuse(videos, monkeypatch):
    """Frames decoded in several DALI runs (the deadline is checked between them) are the same
    bits as in one run, and as a second call through the cached pipeline."""
    clip = videos.get("mjpg_avi")
    idx = list(range(0, 30, 2))[::-1]
    one = decode_frames(clip.path, idx, decoder="dali:cpu")
    monkeypatch.setattr(dali, "CHUNK", 4)
    assert np.array_equal(decode_frames(clip.path, idx, decoder="dali:cpu"), one)


def test_deadline_checked_between_runs(videos):
    clip = videos.get("vp90_webm")
    meta = probe_video(clip.path)
    out = np.empty((2, meta.height, meta.width, 3), np.uint8)
    with pytest.raises(ImageError, match="timeout_s"):
        dali.read_frames(clip.data, "dali:cpu", meta, [0, 1], out, time.monotonic() - 1.0, 5.0)


def test_rotation_applied(tmp_path, videos):
    """DALI does not apply the display matrix; decode_frames does, as OpenCV does (MJPEG in MP4)."""
    av = pytest.importorskip("av")
    frames = pan_zoom("astronaut", 6, (64, 48))
    base = tmp_path / "mj.mp4"
    with av.open(str(base), "w") as out:
        st = out.add_stream("mjpeg", rate=12)
        st.width, st.height, st.pix_fmt = 64, 48, "yuvj420p"
        for f in frames:
            for pkt in st.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                out.mux(pkt)
        for pkt in st.encode():
            out.mux(pkt)
    for deg in (0, 90, 180, 270):
        data = mp4_rotated(base.read_bytes(), deg) if deg else base.read_bytes()
        assert probe_video(data, decoder="dali").rotation == deg
        got = decode_frames(data, [0, 4], decoder="dali:cpu")
        ref = decode_frames(data, [0, 4], decoder="opencv")
        _assert_levels(got, ref)


@pytest.mark.parametrize("name,fix", [("mp4v_mp4", "mixed backend"), ("h264_mp4", "mixed backend"),
                                      ("ffv1_mkv", "decoder='opencv'")])
def test_codec_the_cpu_backend_lacks_is_refused(name, fix, videos):
    clip = videos.get(name)
    with pytest.raises(ImageError) as e:
        decode_frames(clip.path, [0, 1], decoder="dali:cpu")
    msg = str(e.value)
    assert fix in msg and "decoder='opencv'" in msg and clip.path.name in msg, msg
    assert msg.count("expected") >= 1


def test_bad_input_isolated(videos, bad_videos):
    good = videos.get("vp80_webm")
    before = decode_frames(good.path, [1, 7], decoder="dali:cpu")
    # the AVI cut in half declares 30 frames (OpenCV's probe passes): DALI finds fewer
    with pytest.raises(ImageError, match="truncated") as e:
        decode_frames(bad_videos["truncated.avi"].path, [0, 25], decoder="dali:cpu")
    assert "truncated.avi" in str(e.value)
    # bytes DALI cannot open at all (a header OpenCV would refuse first): DALI's own failure
    meta = VideoMeta(total_num_frames=10, fps=10.0, duration=1.0, height=240, width=320,
                     codec="VP80", container="webm")
    out = np.empty((1, 240, 320, 3), np.uint8)
    junk = np.random.default_rng(19).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    with pytest.raises(ImageError, match="decoder='opencv'"):
        dali.read_frames(junk, "dali:cpu", meta, [0], out, time.monotonic() + 30, 30.0)
    # a packet FFmpeg rejects mid-stream (frame 10's JPEG data wiped): DALI's failure, named
    avi = bytearray(videos.get("mjpg_avi").data)
    soi = [i for i in range(len(avi) - 1) if avi[i] == 0xFF and avi[i + 1] == 0xD8]
    avi[soi[10]:soi[10] + 2000] = bytes(2000)
    with pytest.raises(ImageError, match="an MJPEG stream that DALI's CPU decoder reads, it failed"):
        decode_frames(bytes(avi), [9, 10, 11], decoder="dali:cpu")
    for bad in ("garbage.mp4", "zero_frames.avi", "absurd_count.avi"):  # refused before DALI runs
        with pytest.raises(ImageError):
            decode_frames(bad_videos[bad].path, [0], decoder="dali:cpu")
    assert np.array_equal(decode_frames(good.path, [1, 7], decoder="dali:cpu"), before)


def test_processor_same_batch_as_opencv(videos):
    """qwen2-vl, 2 fps from a VP8 clip: the same plan, tokens and grids as decoder='opencv'; the
    pixels are exactly the frame-sequence path's on DALI's frames, and within the decoder levels
    of OpenCV's (uint8 rows: the resized frames)."""
    clip = videos.get("vp80_webm")
    item = Video(clip.path, fps=2.0)
    by = {d: vlmprep.Processor("qwen2-vl", video_decoder=d)(videos=[item]).videos
          for d in ("dali:cpu", "opencv")}
    a, b = by["dali:cpu"], by["opencv"]
    assert a.grid_thw.tolist() == b.grid_thw.tolist() and a.num_tokens == b.num_tokens
    assert a.cu_seqlens.tolist() == b.cu_seqlens.tolist() and a.pixel_values.shape == b.pixel_values.shape
    meta = probe_video(clip.path)
    every = decode_frames(clip.path, range(meta.total_num_frames), decoder="dali:cpu")
    seq = vlmprep.Processor("qwen2-vl")(videos=[Video(every, fps=2.0, source_fps=meta.fps)]).videos
    assert torch.equal(a.pixel_values, seq.pixel_values)
    if dali.gpu_count() == 0:  # plain "dali" is the CPU backend here
        plain = vlmprep.Processor("qwen2-vl", video_decoder="dali")(videos=[item]).videos
        assert torch.equal(plain.pixel_values, a.pixel_values)
    u8 = {d: vlmprep.Processor("qwen2-vl", dtype="uint8", video_decoder=d)(videos=[item]).videos.pixel_values
          for d in ("dali:cpu", "opencv")}
    _assert_levels(u8["dali:cpu"].numpy(), u8["opencv"].numpy())


def test_processor_isolates_refused_codec(videos):
    good, h263 = videos.get("vp90_webm"), videos.get("mp4v_mp4")
    proc = vlmprep.Processor("qwen2-vl", errors="skip", video_decoder="dali:cpu")
    v = proc(videos=[Video(good.path, fps=2.0), h263.path]).videos
    assert list(v.errors) == [1] and "mixed backend" in str(v.errors[1])
    assert str(v.errors[1]).startswith("video 1 ")
    alone = proc(videos=[Video(good.path, fps=2.0)]).videos
    assert torch.equal(v.pixel_values, alone.pixel_values)


@needs_gpu
def test_cuda_nvdec_h264(videos):
    clip = videos.get("h264_mp4")
    got = decode_frames(clip.path, [0, 5, 23, 5], decoder="dali:cuda")
    ref = decode_frames(clip.path, [0, 5, 23, 5], decoder="opencv")
    assert isinstance(got, np.ndarray)  # NVDEC frames copied to host
    _assert_levels(got, ref)
    _assert_same_frames(got, ref)


@needs_gpu
def test_cuda_processor_auto_picks_nvdec(videos):
    """backend="auto" on a GPU with DALI: the images on dali, video_decoder NVDEC on that GPU, the
    videos' pixels on torch's video lowering (dali has none: backend="dali" refuses videos)."""
    proc = vlmprep.Processor("qwen2-vl", device="cuda")
    assert proc.backend_name == "dali" and proc.video_decoder == "dali:cuda:0"
    assert vlmprep.Processor("qwen2-vl", backend="dali", device="cuda").video_decoder == "dali:cuda:0"
    clip = videos.get("vp90_webm")
    v = proc(videos=[Video(clip.path, fps=2.0)]).videos
    ref = vlmprep.Processor("qwen2-vl", backend="torch", device="cuda", video_decoder="opencv")(
        videos=[Video(clip.path, fps=2.0)]).videos
    assert v.grid_thw.tolist() == ref.grid_thw.tolist() and v.pixel_values.is_cuda
    with pytest.raises(ValueError, match="got backend='dali', which has no video lowering"):
        vlmprep.Processor("qwen2-vl", backend="dali", device="cuda")(videos=[Video(clip.path)])
