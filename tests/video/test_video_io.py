"""vlmprep.io.video: metadata vs what was written, decoded frames vs the oracles (OpenCV's
sequential read, transformers' opencv reader, the frames written for lossless codecs), frame
sequences, animations, rotation, and bad or hostile videos isolated as ImageErrors."""
from __future__ import annotations

import io
import os

import numpy as np
import pytest
from _support.figures import record
from _support.guarded import describe, run_isolated
from _support.videos import VIDEO_SPECS, VideoCase
from PIL import Image

from vlmprep.errors import ImageError
from vlmprep.io.video import Video, VideoLimits, VideoMeta, as_video
from vlmprep.io.video import decode_frames as _decode_frames
from vlmprep.io.video import probe_video as _probe_video
from vlmprep.io.video.pyav import available as pyav_available
from vlmprep.io.video.tcodec import available as torchcodec_available

cv2 = pytest.importorskip("cv2")


def probe_video(video, limits=None, decoder="opencv"):
    """The OpenCV path, whatever is installed (torchcodec has its own tests below)."""
    return _probe_video(video, limits, decoder=decoder)


def decode_frames(video, indices, limits=None, seek=True, decoder="opencv"):
    return _decode_frames(video, indices, limits, seek=seek, decoder=decoder)


def cv2_sequential(path) -> np.ndarray:
    """The oracle: every frame by OpenCV's plain sequential read, BGR -> RGB (as transformers'
    read_video_opencv does)."""
    cap = cv2.VideoCapture(str(path))
    out = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        out.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    cap.release()
    return np.stack(out)


@pytest.fixture
def decodable(video_case: VideoCase) -> VideoCase:
    """The case, or a skip when this OpenCV's FFmpeg decodes none of its frames (AV1 here: it has
    no software AV1 decoder; test_undecodable_codec checks the ImageError then)."""
    cap = cv2.VideoCapture(str(video_case.path))
    ok = cap.grab()
    cap.release()
    if not ok:
        pytest.skip(f"this OpenCV's FFmpeg cannot decode {video_case.name}")
    return video_case


def sample(n: int) -> list[int]:
    """Indices that exercise seeks (far apart, backwards), near frames, repeats and the last frame."""
    idx = [n - 1, 0, n // 2, n // 2, 1, n - 2, n // 3] + list(range(0, n, max(1, n // 6)))
    return [i for i in idx if 0 <= i < n]


# -- metadata -------------------------------------------------------------------------------------

def test_probe_matches_what_was_written(decodable: VideoCase):
    video_case = decodable
    t, h, w = video_case.frames.shape[:3]
    for src in (video_case.path, str(video_case.path), video_case.data, memoryview(video_case.data)):
        m = probe_video(src)
        assert (m.total_num_frames, m.height, m.width) == (t, h, w)
        assert m.fps == pytest.approx(video_case.fps, rel=1e-6)
        assert m.duration == pytest.approx(t / video_case.fps, rel=1e-6)
        assert m.container == video_case.container and m.rotation == 0 and m.codec
    assert probe_video(Video(video_case.path, fps=2.0)) == probe_video(video_case.data)


@pytest.mark.hf
def test_probe_matches_transformers_opencv_reader(decodable: VideoCase):
    video_case = decodable
    vu = pytest.importorskip("transformers.video_utils")
    frames, md = vu.load_video(str(video_case.path), backend="opencv", num_frames=6)
    m = probe_video(video_case.path)
    assert (m.total_num_frames, m.fps, m.duration, m.height, m.width) == \
        (md.total_num_frames, md.fps, md.duration, md.height, md.width)
    # and the frames at transformers' sampled indices are transformers' frames, bit for bit
    got = decode_frames(video_case.path, [int(i) for i in md.frames_indices])
    np.testing.assert_array_equal(got, np.asarray(frames))


# -- frames ---------------------------------------------------------------------------------------

def test_decode_equals_sequential_read(decodable: VideoCase):
    video_case = decodable
    oracle = cv2_sequential(video_case.path)
    assert oracle.shape == video_case.frames.shape
    idx = sample(len(oracle))
    for src, seek in ((video_case.path, True), (video_case.data, True), (video_case.path, False)):
        got = decode_frames(src, idx, seek=seek)
        assert got.shape == (len(idx), *oracle.shape[1:]) and got.dtype == np.uint8 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, oracle[idx])
    # what the codec did to the frames written (the truth): lossless is exact
    d = np.abs(got.astype(np.int16) - video_case.frames[idx].astype(np.int16))
    record("video decode vs frames written (levels)",
           f"{video_case.name:10s} {video_case.fourcc}: max {int(d.max()):3d}, mean {d.mean():.2f}")
    if video_case.lossless:
        assert not d.any()
    else:
        assert d.mean() < 8  # a lossy codec at its defaults, not another frame


def test_seek_every_far_frame(videos):
    """Every frame reached by a seek (gap >= SEEK_MIN_GAP) equals the sequential read's."""
    case = videos.get("mp4v_mkv")  # 60 frames, keyframe every 12
    oracle = cv2_sequential(case.path)
    for i in range(len(oracle)):
        np.testing.assert_array_equal(decode_frames(case.path, [i]), oracle[i:i + 1])
    idx = list(range(len(oracle) - 1, -1, -1))
    np.testing.assert_array_equal(decode_frames(case.data, idx), oracle[idx])


def test_plan_reads_counts_decoded_frames():
    """Seek only where it decodes fewer frames (keyframes known), else the gap rule."""
    from vlmprep.io.video.opencv import SEEK_MIN_GAP, plan_reads
    dense = list(range(0, 300, 15))  # 2 fps of a 30 fps clip
    assert not any(plan_reads(dense, [0, 250]))  # x264's 250-frame GOP: one sequential pass
    # a seek restarts at the keyframe at or before target - SEEK_BACK: 250 for 285 (35 frames
    # decoded, + SEEK_COST) against 284 grabbed; for 260 it is keyframe 0 (a seek saves nothing)
    assert plan_reads([0, 285], [0, 250]) == [False, True]
    assert plan_reads([0, 260], [0, 250]) == [False, False]
    assert plan_reads([0, 285], list(range(0, 300, 12))) == [False, True]
    assert not any(plan_reads(dense, list(range(0, 300, 12))))  # 15 apart: grabbing is cheaper
    # keyframes unknown (MKV, WebM, AVI, or an MP4 without stss): the SEEK_MIN_GAP rule
    assert plan_reads([0, SEEK_MIN_GAP + 1, SEEK_MIN_GAP + 2], None) == [False, True, False]
    assert plan_reads([0, 100], [0, 50], seek=False) == [False, False]


def test_long_gop_h264_sampled_frames_equal_sequential_read(tmp_path):
    """An H.264 clip with x264's default GOP (the bench's writer): its sync samples are read from
    the MP4 index, and dense (one sequential pass) and sparse (seeks) samples equal the
    sequential read, from a path and from bytes."""
    pytest.importorskip("av")
    from vlmprep.bench.video import make_clip
    from vlmprep.io.video import mp4
    data = make_clip(96, 64, 30.0, 10.0)  # 300 frames
    assert mp4.sync_samples(data) == [0, 250]
    path = tmp_path / "gop250.mp4"
    path.write_bytes(data)
    oracle = cv2_sequential(path)
    assert len(oracle) == 300
    for idx in (list(range(0, 300, 15)), [3, 255, 299], [299, 0, 260, 260]):
        for src, seek in ((path, True), (data, True), (path, False)):
            np.testing.assert_array_equal(decode_frames(src, idx, seek=seek), oracle[idx])


def test_variable_frame_rate_mp4(videos, vfr_video):
    """A VFR track (stts with 3 rates) is detected from its header and read without seeks: every
    frame equals the sequential read's (OpenCV's seek, by the average rate, misses 44..47 here)."""
    import io as _io

    from vlmprep.io.video.mp4 import video_track_is_vfr
    path, case, deltas = vfr_video
    data = path.read_bytes()
    assert video_track_is_vfr(_io.BytesIO(data), len(data))
    for name in ("mp4v_mp4", "mp4v_mov"):
        d = videos.get(name).data
        assert not video_track_is_vfr(_io.BytesIO(d), len(d))
    m = probe_video(path)
    assert (m.total_num_frames, m.fps, m.duration) == (48, 24.0, 2.0)  # the average rate
    oracle = cv2_sequential(path)
    np.testing.assert_array_equal(oracle, cv2_sequential(case.path))  # same frames, other times
    for i in (47, 44, 20, 33):
        np.testing.assert_array_equal(decode_frames(data, [i]), oracle[i:i + 1])
    idx = sample(48)
    np.testing.assert_array_equal(decode_frames(path, idx), oracle[idx])


def test_undecodable_codec(videos):
    """A stream OpenCV's FFmpeg opens but cannot decode is an ImageError that says what to do."""
    case = videos.get("av1_mkv")
    cap = cv2.VideoCapture(str(case.path))
    if cap.grab():
        pytest.skip("this OpenCV decodes AV1")
    m = probe_video(case.path)  # the container is fine
    assert (m.total_num_frames, m.height, m.width) == case.frames.shape[:3]
    with pytest.raises(ImageError, match="decoded none.*torchcodec"):
        decode_frames(case.path, [0])


def test_skipped_encoders_are_named(videos):
    """Cases whose encoder this OpenCV lacks skip with the reason (decoding them is FFmpeg's job)."""
    for name in ("h264_mp4", "hevc_mp4", "av1_mkv"):
        try:
            videos.get(name)
        except pytest.skip.Exception as e:
            assert "cannot write" in str(e)
    assert set(VIDEO_SPECS) >= {"h264_mp4", "mp4v_mp4"}


def test_rotation_applied(videos, rotated_videos):
    base = videos.get("mp4v_mp4")
    idx = [0, 17, 47]
    plain = decode_frames(base.path, idx)
    for deg, path in rotated_videos.items():
        m = probe_video(path)
        assert m.rotation == deg
        assert (m.height, m.width) == ((320, 240) if deg in (90, 270) else (240, 320))
        got = decode_frames(path, idx)
        np.testing.assert_array_equal(got, cv2_sequential(path)[idx])
        # clockwise by `deg` for display, as ffmpeg's autorotate turns a 'rotate=deg' stream
        np.testing.assert_array_equal(got, np.rot90(plain, -deg // 90, axes=(1, 2)))


# -- animations -------------------------------------------------------------------------------------

def test_animation_frames_and_timing(animation_case: VideoCase):
    case = animation_case
    n = len(case.frames)
    m = probe_video(case.path)
    assert (m.total_num_frames, m.height, m.width, m.container) == (n, 120, 160, case.container)
    idx = sample(n)
    got = decode_frames(case.data, idx)
    np.testing.assert_array_equal(got, case.frames[idx])  # GIF on a 216-colour palette, lossless WebP
    if case.container == "gif":  # FFmpeg reads GIFs too: same frames, and it times them
        np.testing.assert_array_equal(decode_frames(case.path, list(range(n))), cv2_sequential(case.path))
        cap = cv2.VideoCapture(str(case.path))
        pts = []
        while cap.grab():
            pts.append(cap.get(cv2.CAP_PROP_POS_MSEC))
        cap.release()
        ffmpeg_ms = pts[-1] + case.durations_ms[-1]  # the last frame's start + its delay (non-zero)
        assert m.duration * 1000 == pytest.approx(ffmpeg_ms)
        assert m.fps == pytest.approx(n / (ffmpeg_ms / 1000))
    else:
        assert m.duration * 1000 == pytest.approx(sum(case.durations_ms))


def test_gif_without_delay_lasts_100ms(videos):
    case = videos.get("gif_vfr")  # frame 1 was written with duration 0
    assert case.durations_ms[1] == 0
    assert probe_video(case.path).duration == pytest.approx((sum(case.durations_ms) + 100) / 1000)


# -- frame sequences ----------------------------------------------------------------------------------

def test_frame_sequences(videos):
    import torch
    frames = videos.get("ffv1_mkv").frames  # (20, 120, 160, 3)
    idx = [19, 0, 5, 5, 12]
    want = frames[idx]
    pil = [Image.fromarray(f) for f in frames]
    png = []
    for im in pil[:6]:
        b = io.BytesIO()
        im.save(b, format="PNG")
        png.append(b.getvalue())
    tchw = torch.from_numpy(np.ascontiguousarray(frames.transpose(0, 3, 1, 2)))
    for src in (frames, tchw, pil, list(frames), [t for t in tchw]):
        v = Video(src, source_fps=10.0)
        m = probe_video(v)
        assert m == VideoMeta(20, 10.0, 2.0, 120, 160, 0, "", "frames")
        np.testing.assert_array_equal(decode_frames(v, idx), want)
    np.testing.assert_array_equal(decode_frames(png, [5, 0]), frames[[5, 0]])
    m = probe_video(frames)  # no source_fps: fps unknown, as transformers' VideoMetadata(fps=None)
    assert (m.fps, m.duration) == (0.0, 0.0) and m.to_hf()["fps"] is None
    assert m.to_hf() == {"total_num_frames": 20, "fps": None, "duration": None, "height": 120, "width": 160}


@pytest.mark.parametrize("bad, needle", [
    (np.zeros((4, 3, 8, 8), np.uint8), "TCHW"),
    (np.zeros((4, 8, 8, 3), np.float32), "dtype float32"),
    (np.zeros((0, 8, 8, 3), np.uint8), "at least one frame"),
    (np.zeros((8, 8, 3), np.uint8), "shape (8, 8, 3)"),
    ([], "empty list"),
    ([np.zeros((8, 8, 3), np.uint8), np.zeros((8, 9, 3), np.uint8)], "at frame 1"),
    ([np.zeros((8, 8, 3), np.uint8), b"not an image"], "frame 1 of the list"),
    ({"frames": 1}, "expected a video"),
    ("https://example.com/clip.mp4", "URL"),
])
def test_bad_frame_sequences(bad, needle):
    with pytest.raises(ImageError) as e:
        probe_video(bad)
    assert needle in str(e.value) and "expected" in str(e.value)


def test_video_options_validated():
    assert as_video("a.mp4") == Video("a.mp4") and as_video(Video("a.mp4", fps=2)).fps == 2
    for kw, needle in (({"fps": 0}, "fps"), ({"num_frames": 0}, "num_frames"), ({"start": -1.0}, "start"),
                       ({"start": 3.0, "end": 2.0}, "end > start"), ({"fps": float("nan")}, "fps")):
        with pytest.raises(ImageError, match="expected"):
            Video("a.mp4", **kw)
        assert needle  # the match above names the field's rule


# -- bad and hostile --------------------------------------------------------------------------------

#: name -> (fails at "probe" or "decode", words of the reason)
BAD = {
    "garbage.mp4": ("probe", "could not read"),
    "empty_file.mp4": ("probe", "could not read"),
    "truncated.mp4": ("probe", "could not read"),
    "truncated.avi": ("decode", "stream ended"),
    "huge_size.avi": ("decode", "expected"),
    "absurd_count.avi": ("probe", "max_frames"),
    "overcount.avi": ("probe", "frames declared in"),
    "absurd_rate.avi": ("probe", "max_seconds"),
    "zero_frames.avi": ("probe", "0 frames"),
    "raw.avi": ("decode", "uncompressed"),
    "raw_huge.avi": ("probe", "max_source_pixels"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_hostile_files_are_image_errors(bad_videos, name):
    bad = bad_videos[name]
    stage, words = BAD[name]
    for src in (bad.path, bad.path.read_bytes()):
        with pytest.raises(ImageError) as e:
            m = probe_video(src)
            assert stage == "decode", f"{bad.what}: probe passed: {m}"
            decode_frames(src, list(range(m.total_num_frames)))
        msg = str(e.value)
        assert words in msg and "expected" in msg, msg
        if not isinstance(src, bytes):
            assert str(bad.path) in msg  # the item is named
        else:
            assert f"bytes[{len(src)}]" in msg


def test_limits(videos):
    case = videos.get("mjpg_avi")  # 30 frames of 120x160
    with pytest.raises(ImageError, match="max_source_pixels"):
        probe_video(case.path, VideoLimits(max_source_pixels=120 * 160 - 1))
    lim = VideoLimits(max_total_pixels=4 * 120 * 160)
    assert probe_video(case.path, lim).total_num_frames == 30
    assert decode_frames(case.path, [0, 1, 2, 3], lim).shape == (4, 120, 160, 3)
    with pytest.raises(ImageError, match="max_total_pixels"):
        decode_frames(case.path, [0, 1, 2, 3, 4], lim)
    with pytest.raises(ImageError, match="max_source_bytes"):
        probe_video(case.path, VideoLimits(max_source_bytes=1000))
    with pytest.raises(ImageError, match=r"encoded video of at most 1,000 bytes \(VideoLimits.max_source_bytes"):
        probe_video(case.data, VideoLimits(max_source_bytes=1000))
    with pytest.raises(ImageError, match="max_frames"):
        probe_video(case.path, VideoLimits(max_frames=29))
    with pytest.raises(ImageError, match="max_fps"):
        probe_video(case.path, VideoLimits(max_fps=9.5))
    with pytest.raises(ImageError, match=r"0\.\.29"):
        decode_frames(case.path, [30])
    with pytest.raises(ImageError, match="at least one frame index"):
        decode_frames(case.path, [])
    from vlmprep import ops
    with pytest.raises(ImageError, match="max_source_pixels"):
        probe_video(case.path, ops.decode(max_source_pixels=100))
    with pytest.raises(ValueError, match="VideoLimits"):
        VideoLimits(timeout_s=0)


def test_time_bound(videos):
    case = videos.get("xvid_avi")
    for src in (case.path, case.data):
        with pytest.raises(ImageError, match="timeout_s"):
            decode_frames(src, [29], VideoLimits(timeout_s=1e-9))
    case = videos.get("gif")
    with pytest.raises(ImageError, match="timeout_s"):
        decode_frames(case.path, [11], VideoLimits(timeout_s=1e-9))
    png = io.BytesIO()
    Image.fromarray(case.frames[0]).save(png, format="PNG")
    with pytest.raises(ImageError, match="timeout_s"):
        decode_frames([png.getvalue()] * 3, [2], VideoLimits(timeout_s=1e-9))


def test_special_files_never_block(tmp_path):
    """A FIFO named .mp4 would block any open(): refused from its stat, in a child process
    bounded by a timeout so that a regression fails instead of hanging the suite."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this OS")
    fifo = tmp_path / "clip.mp4"
    os.mkfifo(fifo)
    code = ("from vlmprep.io.video import probe_video, decode_frames\n"
            "from vlmprep.errors import ImageError\n"
            f"for f in (probe_video, lambda p: decode_frames(p, [0])):\n"
            f"    try:\n        f({str(fifo)!r})\n    except ImageError as e:\n        print('OK', e)\n")
    proc = run_isolated(code, timeout=120)
    assert proc.returncode == 0 and proc.stdout.count("OK") == 2 and "FIFO" in proc.stdout, describe(proc)
    with pytest.raises(ImageError, match="expected a video file at this path, found a directory"):
        probe_video(tmp_path)


def test_bytes_leave_no_temp_files(videos, tmp_path, monkeypatch):
    import tempfile
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for name in ("mp4v_mp4", "gif", "webp"):
        case = videos.get(name)
        probe_video(case.data)
        decode_frames(case.data, [0, 3])
    assert list(tmp_path.iterdir()) == []


# -- torchcodec (transformers' default decoder), when importable -------------------------------------

needs_torchcodec = pytest.mark.skipif(not torchcodec_available(), reason="torchcodec is not importable")


@needs_torchcodec
@pytest.mark.hf
def test_torchcodec_equals_transformers_default(video_case: VideoCase):
    """decoder="torchcodec" (and "auto" with it installed) gives transformers' fetch_videos frames
    and metadata; the frames also equal the OpenCV path's (measured on every case here)."""
    vu = pytest.importorskip("transformers.video_utils")
    frames, md = vu.load_video(str(video_case.path), backend="torchcodec")
    frames = np.asarray(frames).transpose(0, 2, 3, 1)  # torchcodec's reader gives TCHW
    for src in (video_case.path, video_case.data):
        m = _probe_video(src, decoder="torchcodec")
        assert (m.total_num_frames, m.fps, m.duration, m.height, m.width) == \
            (md.total_num_frames, md.fps, md.duration, md.height, md.width)
        idx = sample(m.total_num_frames)
        got = _decode_frames(src, idx, decoder="torchcodec")
        np.testing.assert_array_equal(got, frames[idx])
    assert _probe_video(video_case.path) == m  # auto
    cap = cv2.VideoCapture(str(video_case.path))
    if cap.grab():  # OpenCV's FFmpeg decodes it (not AV1 here): the same frames
        np.testing.assert_array_equal(decode_frames(video_case.path, idx), got)
    cap.release()


@needs_torchcodec
def test_torchcodec_vfr(vfr_video):
    path = vfr_video[0]
    oracle = cv2_sequential(path)
    idx = sample(48)
    np.testing.assert_array_equal(_decode_frames(path, idx, decoder="torchcodec"), oracle[idx])


@needs_torchcodec
def test_torchcodec_rotation(videos, rotated_videos):
    plain = _decode_frames(videos.get("mp4v_mp4").path, [0, 47], decoder="torchcodec")
    for deg, path in rotated_videos.items():
        assert _probe_video(path, decoder="torchcodec").rotation == deg
        np.testing.assert_array_equal(_decode_frames(path, [0, 47], decoder="torchcodec"),
                                      np.rot90(plain, -deg // 90, axes=(1, 2)))


@needs_torchcodec
@pytest.mark.parametrize("name", sorted(BAD))
def test_torchcodec_hostile(bad_videos, name):
    """Every bad file is an ImageError or (torchcodec counts the frames the file really holds)
    exactly the frames it holds (OpenCV's read of them, or those written for raw.avi, which
    OpenCV cannot read safely); never another exception."""
    bad = bad_videos[name]
    path = bad.path
    try:
        m = _probe_video(path, decoder="torchcodec")
        got = _decode_frames(path, list(range(m.total_num_frames)), decoder="torchcodec")
    except ImageError as e:
        assert "expected" in str(e) and str(path) in str(e)
        return
    want = bad.frames if bad.frames is not None else cv2_sequential(path)[: len(got)]
    np.testing.assert_array_equal(got, want)


# -- PyAV (decoder="pyav": one pass, non-reference frames between samples skipped) ---------------

needs_pyav = pytest.mark.skipif(not pyav_available(), reason="PyAV is not importable")


@needs_pyav
def test_pyav_equals_sequential_read(decodable: VideoCase):
    """Every clip OpenCV decodes (H.264 / HEVC with B-frames included: their non-reference
    frames are skipped in MP4): PyAV's frames equal OpenCV's sequential read, skipping or not."""
    oracle = cv2_sequential(decodable.path)
    idx = sample(len(oracle))
    for src, seek in ((decodable.path, True), (decodable.data, True), (decodable.path, False)):
        got = decode_frames(src, idx, seek=seek, decoder="pyav")
        assert got.dtype == np.uint8 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, oracle[idx])
    assert probe_video(decodable.path, decoder="pyav") == probe_video(decodable.path)


@needs_pyav
def test_pyav_long_gop_threads_rotation_vfr(videos, rotated_videos, vfr_video):
    from vlmprep.bench.video import make_clip
    from vlmprep.kernels.threads import local_threads
    data = make_clip(96, 64, 30.0, 10.0)  # x264's GOP: keyframes 0 and 250, B-frames
    ref = decode_frames(data, list(range(300)))
    for idx in (list(range(0, 300, 15)), [299, 3, 255, 255]):
        for n in (1, 2):  # frame threads keep the skip per packet
            with local_threads(n):
                np.testing.assert_array_equal(decode_frames(data, idx, decoder="pyav"), ref[idx])
    for path in rotated_videos.values():  # turned after the decode, as OpenCV turns them
        np.testing.assert_array_equal(decode_frames(path, [0, 17, 47], decoder="pyav"),
                                      cv2_sequential(path)[[0, 17, 47]])
    path, case, _ = vfr_video  # unequal durations: indexed by order, nothing skipped
    np.testing.assert_array_equal(decode_frames(path, [0, 5, 11], decoder="pyav"),
                                  cv2_sequential(path)[[0, 5, 11]])


@needs_pyav
@pytest.mark.parametrize("name", sorted(BAD))
def test_pyav_hostile(bad_videos, name):
    """A bad file is an ImageError naming it (the probe is OpenCV's: the same refusals), or
    exactly the frames it holds (OpenCV's read of them, or those written for raw.avi, which
    OpenCV cannot read safely and PyAV reads); never another exception."""
    bad = bad_videos[name]
    try:
        m = probe_video(bad.path, decoder="pyav")
        got = decode_frames(bad.path, list(range(m.total_num_frames)), decoder="pyav")
    except ImageError as e:
        assert "expected" in str(e) and str(bad.path) in str(e)
        return
    want = bad.frames if bad.frames is not None else cv2_sequential(bad.path)[: len(got)]
    np.testing.assert_array_equal(got, want)


@needs_pyav
def test_pyav_time_bound(videos):
    case = videos.get("h264_mp4") if "h264_mp4" in VIDEO_SPECS else videos.get("xvid_avi")
    with pytest.raises(ImageError, match="timeout_s"):
        decode_frames(case.data, [len(case.frames) - 1], VideoLimits(timeout_s=1e-9), decoder="pyav")


def test_decoder_names():
    with pytest.raises(ValueError, match="decoder"):
        _probe_video(b"", decoder="pyAV")


@needs_torchcodec
def test_torchcodec_time_bound(videos):
    case = videos.get("xvid_avi")
    for src in (case.path, case.data):
        with pytest.raises(ImageError, match="timeout_s"):
            _decode_frames(src, [29], VideoLimits(timeout_s=1e-9), decoder="torchcodec")


@pytest.mark.parametrize("ffmpeg, usable", [(None, False), (7, True)])
def test_torchcodec_without_ffmpeg_is_not_picked(ffmpeg, usable, monkeypatch):
    """torchcodec >= 0.16 imports without FFmpeg (``ffmpeg_major_version`` None; met on a fresh
    machine without the FFmpeg libraries) and then fails on every video: "auto" must not pick it
    and decoder="torchcodec" must say what is missing (transformers' is_torchcodec_usable too)."""
    import sys
    import types

    from vlmprep.io.video import tcodec
    from vlmprep.io.video.decode import resolve_decoder
    fake = types.ModuleType("torchcodec")
    fake.ffmpeg_major_version = ffmpeg  # type: ignore[attr-defined]
    decoders = types.ModuleType("torchcodec.decoders")
    decoders.VideoDecoder = object  # type: ignore[attr-defined]
    fake.decoders = decoders  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchcodec", fake)
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", decoders)
    tcodec.available.cache_clear()
    try:
        assert tcodec.available() is usable
        assert resolve_decoder("auto") == ("torchcodec" if usable else "opencv")
        if not usable:
            with pytest.raises(ValueError, match="expected torchcodec importable .with its FFmpeg"):
                resolve_decoder("torchcodec")
    finally:
        tcodec.available.cache_clear()
