"""GOP-parallel decode (issue 29 item 2): with PyAV and more than one thread, a constant-rate
H.264 MP4's sampled frames are decoded one run of GOPs per thread (``pyav.read_frames_split``),
each thread seeking to its keyframes with its own reader. The oracle is OpenCV's sequential
decode of every frame (which tests/video checks against transformers' decoders): the split
decode must give the same frames bit for bit, in any order, with repeats. Clips are written
here by PyAV's libx264 with a short GOP and B-frames (closed GOPs: x264's default)."""
from __future__ import annotations

import io
from fractions import Fraction

import numpy as np
import pytest

from vlmprep.io.video import decode_frames, probe_video
from vlmprep.io.video import pyav as pyav_mod
from vlmprep.kernels import local_threads

av = pytest.importorskip("av")


def _h264(n: int = 96, gop: int = 12, w: int = 96, h: int = 64, codec: str = "libx264") -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(3)
    base = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    with av.open(buf, "w", format="mp4") as out:
        st = out.add_stream(codec, rate=Fraction(25))
        st.width, st.height, st.pix_fmt = w, h, "yuv420p"
        st.codec_context.gop_size = gop
        st.codec_context.thread_count = 1
        st.codec_context.options = {"bf": "3", "sc_threshold": "0"}  # fixed GOPs, B-frames
        for k in range(n):
            img = np.roll(base, 3 * k, axis=1)  # motion: P/B frames carry real differences
            img[: 8, : 8] = k  # and each frame is unlike the others
            for pkt in st.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(pkt)
        for pkt in st.encode():
            out.mux(pkt)
    return buf.getvalue()


@pytest.fixture(scope="module")
def clip() -> bytes:
    return _h264()


def test_gop_runs_balance_by_frames_to_decode():
    # costs (keyframe to last wanted frame): 6, 16, 31 -> 31 alone, 6 + 16 together
    assert pyav_mod.gop_runs([5, 40, 45, 90], [0, 30, 60], 2) == [[(60, [90])],
                                                                  [(0, [5]), (30, [40, 45])]]
    assert pyav_mod.gop_runs([1, 2], [0, 30], 4) == [[(0, [1, 2])]]  # one GOP: one run
    runs = pyav_mod.gop_runs(list(range(0, 96, 5)), list(range(0, 96, 12)), 3)
    assert len(runs) == 3 and sorted(k for r in runs for k, _ in r) == list(range(0, 96, 12))


@pytest.mark.parametrize("threads", [2, 3])
def test_split_decode_equals_the_sequential_decode(clip, threads, monkeypatch, tmp_path):
    ref = decode_frames(clip, list(range(96)), decoder="opencv")
    calls = []
    real = pyav_mod.read_frames_split
    monkeypatch.setattr(pyav_mod, "read_frames_split",
                        lambda *a, **k: calls.append(a[5]) or real(*a, **k))
    path = tmp_path / "clip.mp4"
    path.write_bytes(clip)
    for src in (clip, str(path)):
        for idx in ([0, 13, 30, 47, 60, 95], [95, 3, 3, 50, 49, 12, 11], list(range(0, 96, 4))):
            with local_threads(threads):
                got = decode_frames(src, idx, decoder="pyav")
            np.testing.assert_array_equal(got, ref[idx])
    assert calls == [threads] * 6  # the split path ran each time (with `threads` runs)


def test_one_gop_is_the_one_pass(clip, monkeypatch):
    monkeypatch.setattr(pyav_mod, "read_frames_split", lambda *a, **k: pytest.fail("split"))
    ref = decode_frames(clip, list(range(96)), decoder="opencv")
    with local_threads(2):
        np.testing.assert_array_equal(decode_frames(clip, [1, 5, 9], decoder="pyav"), ref[[1, 5, 9]])


def test_one_thread_seeks_over_unwanted_gops(clip, monkeypatch):
    """One thread: one run, GOP by GOP in order; the GOPs between 1 and 90 are never decoded."""
    seen = []
    real = pyav_mod._decode_run
    monkeypatch.setattr(pyav_mod, "_decode_run", lambda *a, **k: seen.append(a[2]) or real(*a, **k))
    ref = decode_frames(clip, list(range(96)), decoder="opencv")
    with local_threads(1):
        np.testing.assert_array_equal(decode_frames(clip, [90, 1, 50], decoder="pyav"),
                                      ref[[90, 1, 50]])
    assert seen == [[(0, [1]), (48, [50]), (84, [90])]]


def test_frames_the_split_misses_are_decoded_in_one_pass(clip, monkeypatch):
    """A frame a thread could not place (here: every run's results dropped) is decoded by the
    one-pass reader, not lost."""
    real = pyav_mod._decode_run
    monkeypatch.setattr(pyav_mod, "_decode_run", lambda *a, **k: real(*a, **k) - {30, 95})
    ref = decode_frames(clip, list(range(96)), decoder="opencv")
    with local_threads(2):
        got = decode_frames(clip, [95, 30, 2, 61, 30], decoder="pyav")
    np.testing.assert_array_equal(got, ref[[95, 30, 2, 61, 30]])


def test_hevc_is_not_split(monkeypatch):
    try:
        data = _h264(n=40, gop=8, codec="libx265")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no HEVC encoder in this PyAV ({e})")
    monkeypatch.setattr(pyav_mod, "read_frames_split", lambda *a, **k: pytest.fail("split"))
    ref = decode_frames(data, list(range(probe_video(data).total_num_frames)), decoder="opencv")
    with local_threads(2):
        np.testing.assert_array_equal(decode_frames(data, [1, 20, 33], decoder="pyav"),
                                      ref[[1, 20, 33]])


def test_auto_takes_the_gop_split_opencv_does_not(clip, monkeypatch):
    """decoder="auto" without torchcodec: OpenCV's metadata, PyAV's GOP-by-GOP frames (the same
    bits); decoder="opencv" asked by name stays OpenCV's."""
    from vlmprep.io.video import tcodec
    if tcodec.available():
        pytest.skip("torchcodec installed: auto is torchcodec")
    calls = []
    real = pyav_mod.read_frames_split
    monkeypatch.setattr(pyav_mod, "read_frames_split",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    idx = [70, 2, 33, 33, 90]
    want = decode_frames(clip, idx, decoder="opencv")
    assert calls == []
    with local_threads(2):
        np.testing.assert_array_equal(decode_frames(clip, idx), want)
    assert calls == [1]


def test_auto_on_a_codec_it_does_not_split_leaves_opencvs_reader_alone(monkeypatch):
    """MPEG-4 Part 2 (OpenCV VideoWriter's usual codec) in an MP4 of several GOPs: "auto" asks
    PyAV for the codec on a fork of the stream, never moving the stream OpenCV's open capture
    reads (it did once: OpenCV then saw the stream end after 2 frames)."""
    data = _h264(n=48, gop=8, codec="mpeg4")
    monkeypatch.setattr(pyav_mod, "read_frames_split", lambda *a, **k: pytest.fail("split"))
    ref = decode_frames(data, list(range(48)), decoder="opencv")
    with local_threads(2):
        np.testing.assert_array_equal(decode_frames(data, [3, 20, 47, 9]), ref[[3, 20, 47, 9]])
