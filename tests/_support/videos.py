"""Small test videos built from package photos, with the truth of what was written.

Every video is a slow pan and zoom over a real photo (skimage.data), so consecutive frames differ
and a wrong frame index shows. Each builder returns a ``VideoCase``: the file, the frames written
(``(T, H, W, 3)`` uint8 RGB) and the fps, so tests compare against what went in, not against the
code under test. Files are built once per session, lazily (a test pays for the videos it uses).

What this OpenCV (5.0, FFmpeg avcodec 62) can write, probed with ``cv2.VideoWriter``: mp4v in
.mp4 / .mov / .mkv, MJPG and XVID in .avi, VP8 and VP9 in .webm, FFV1 (lossless) in .mkv. It has
no H.264, HEVC or AV1 encoder (avc1/H264/X264, hev1/HEVC, av01/AV01 fail to open): those cases
are written with PyAV (libx264 / libx265 with B-frames, SVT-AV1) when it is importable, else
skipped with that reason. GIF and WebP animations are written with Pillow.
"""
from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

#: name -> (fourcc, extension, fps, (width, height), seconds, photo)
VIDEO_SPECS: dict[str, tuple[str, str, float, tuple[int, int], float, str]] = {
    "mp4v_mp4": ("mp4v", ".mp4", 24.0, (320, 240), 2.0, "astronaut"),
    "mp4v_mov": ("mp4v", ".mov", 30.0, (160, 120), 1.0, "coffee"),
    "mp4v_mkv": ("mp4v", ".mkv", 10.0, (160, 120), 6.0, "chelsea"),
    "mjpg_avi": ("MJPG", ".avi", 10.0, (160, 120), 3.0, "astronaut"),
    "xvid_avi": ("XVID", ".avi", 30.0, (640, 360), 1.0, "coffee"),
    "vp80_webm": ("VP80", ".webm", 10.0, (320, 240), 2.0, "chelsea"),
    "vp90_webm": ("VP90", ".webm", 24.0, (160, 120), 1.0, "astronaut"),
    "ffv1_mkv": ("FFV1", ".mkv", 10.0, (160, 120), 2.0, "coffee"),
    "h264_mp4": ("avc1", ".mp4", 24.0, (320, 240), 1.0, "astronaut"),
    "hevc_mp4": ("hev1", ".mp4", 24.0, (320, 240), 1.0, "astronaut"),
    "av1_mkv": ("av01", ".mkv", 24.0, (320, 240), 1.0, "astronaut"),
}
#: Cases whose codec is lossless: decoded frames equal the written ones exactly.
LOSSLESS = frozenset({"ffv1_mkv"})


@dataclass(frozen=True)
class VideoCase:
    """One written video: ``frames`` is what went in, ``(T, H, W, 3)`` uint8 RGB."""

    name: str
    path: Path
    frames: np.ndarray
    fps: float
    fourcc: str
    container: str
    lossless: bool
    durations_ms: tuple[int, ...] = ()  # animations: each frame's duration

    @property
    def data(self) -> bytes:
        return self.path.read_bytes()


@functools.lru_cache(maxsize=None)
def _photo(name: str) -> np.ndarray:
    import skimage.data as d
    return np.ascontiguousarray(getattr(d, name)()[..., :3])


def pan_zoom(photo: str, n: int, wh: tuple[int, int]) -> np.ndarray:
    """``n`` frames ``(n, H, W, 3)`` uint8 RGB: a window of the photo with the output's aspect,
    zooming in by up to 1.4x while its centre drifts, resized with INTER_AREA."""
    import cv2
    src = _photo(photo)
    sh, sw = src.shape[:2]
    w, h = wh
    out = np.empty((n, h, w, 3), np.uint8)
    base = min(sw, sh * w / h)  # widest window of the output's aspect
    for i in range(n):
        t = i / max(n - 1, 1)
        cw = base / (1.0 + 0.4 * t)
        ch = cw * h / w
        cx = sw / 2 + (t - 0.5) * (sw - cw) * 0.8
        cy = sh / 2 + (0.5 - t) * (sh - ch) * 0.6
        x0, y0 = int(round(cx - cw / 2)), int(round(cy - ch / 2))
        x0, y0 = min(max(x0, 0), sw - int(cw)), min(max(y0, 0), sh - int(ch))
        crop = src[y0:y0 + int(ch), x0:x0 + int(cw)]
        out[i] = cv2.resize(crop, (w, h), interpolation=cv2.INTER_AREA)
    return out


def write_cv2(path: Path, frames: np.ndarray, fps: float, fourcc: str) -> str | None:
    """Write RGB frames with cv2.VideoWriter -> None, or why it cannot (writer did not open)."""
    import cv2
    h, w = frames.shape[1:3]
    wr = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, (w, h))
    if not wr.isOpened():
        wr.release()
        if path.exists():
            path.unlink()
        return f"this OpenCV's FFmpeg cannot write {fourcc} into {path.suffix}"
    for f in frames:
        wr.write(np.ascontiguousarray(f[..., ::-1]))
    wr.release()
    if not path.exists() or path.stat().st_size == 0:
        return f"cv2.VideoWriter({fourcc}, {path.suffix}) wrote nothing"
    return None


#: fourcc -> the PyAV (FFmpeg) encoder used when OpenCV cannot write it (PyAV's wheels carry
#: libx264, libx265 and SVT-AV1); H.264 and HEVC with B-frames, so decode order != display order.
_PYAV_ENCODERS = {"avc1": "libx264", "hev1": "libx265", "av01": "libsvtav1"}


def write_pyav(path: Path, frames: np.ndarray, fps: float, codec: str) -> str | None:
    """Write RGB frames with PyAV -> None, or why not (PyAV not importable, no such encoder)."""
    try:
        import av
    except ImportError:
        return "PyAV is not installed (pip install av to test this codec)"
    from fractions import Fraction
    try:
        with av.open(str(path), "w") as out:
            st = out.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
            st.width, st.height = frames.shape[2], frames.shape[1]
            st.pix_fmt = "yuv420p"
            if codec == "libx264":
                st.options = {"bf": "3", "g": "12", "preset": "veryfast"}
            elif codec == "libx265":
                st.options = {"x265-params": "bframes=3:keyint=12:log-level=error"}
            elif codec == "libsvtav1":
                st.options = {"preset": "12", "g": "12"}
            for f in frames:
                for pkt in st.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")):
                    out.mux(pkt)
            for pkt in st.encode():
                out.mux(pkt)
    except Exception as e:  # noqa: BLE001 (an encoder missing from this PyAV build)
        if path.exists():
            path.unlink()
        return f"PyAV cannot write {codec} ({type(e).__name__}: {e})"
    return None


class VideoFactory:
    """Builds each named video once, in a session folder."""

    def __init__(self, root: Path):
        self.root = root
        self._cases: dict[str, VideoCase | str] = {}

    def get(self, name: str) -> VideoCase:
        """The case, or ``pytest.skip`` with the reason it cannot be written here."""
        if name not in self._cases:
            self._cases[name] = self._build(name)
        got = self._cases[name]
        if isinstance(got, str):
            pytest.skip(got)
        return got

    def _build(self, name: str) -> VideoCase | str:
        if name in VIDEO_SPECS:
            fourcc, ext, fps, wh, seconds, photo = VIDEO_SPECS[name]
            frames = pan_zoom(photo, int(round(fps * seconds)), wh)
            path = self.root / f"{name}{ext}"
            why = write_cv2(path, frames, fps, fourcc)
            if why and fourcc in _PYAV_ENCODERS:
                why2 = write_pyav(path, frames, fps, _PYAV_ENCODERS[fourcc])
                if why2:
                    return f"{why}; {why2}"
                why = None
            if why:
                return why
            frames.setflags(write=False)
            return VideoCase(name, path, frames, fps, fourcc, ext[1:], name in LOSSLESS)
        if name in ("gif", "gif_vfr", "webp"):
            return self._animation(name)
        raise KeyError(name)

    def _animation(self, name: str) -> VideoCase:
        """Animated GIF (a 216-colour web palette, so the decoded frames are exact) or lossless
        WebP with Pillow. ``gif_vfr`` has frames of unequal durations (variable frame rate)."""
        from PIL import Image
        n = 12
        frames = pan_zoom("chelsea", n, (160, 120))
        if name.startswith("gif"):
            frames = ((frames.astype(np.int32) + 25) // 51 * 51).astype(np.uint8)  # 6 levels each
        durations = [100] * n if name != "gif_vfr" else [40, 0, 120, 200, 40, 80, 80, 300, 40, 40, 100, 120]
        ims = [Image.fromarray(f) for f in frames]
        ext = ".gif" if name.startswith("gif") else ".webp"
        path = self.root / f"{name}{ext}"
        kw = {"lossless": True, "quality": 100, "method": 0} if ext == ".webp" else {}
        ims[0].save(path, save_all=True, append_images=ims[1:], duration=durations, loop=0, **kw)
        frames.setflags(write=False)
        fps = n / (sum(durations) / 1000.0)
        return VideoCase(name, path, frames, fps, "GIF" if ext == ".gif" else "WEBP", ext[1:], True,
                         tuple(durations))


@pytest.fixture(scope="session")
def videos(tmp_path_factory) -> VideoFactory:
    """``videos.get(name)`` -> VideoCase (names: VIDEO_SPECS, "gif", "gif_vfr", "webp")."""
    return VideoFactory(tmp_path_factory.mktemp("videos"))


@pytest.fixture(params=sorted(VIDEO_SPECS))
def video_case(request, videos) -> VideoCase:
    """Each container/codec this OpenCV writes (the others skip, saying which encoder is missing)."""
    return videos.get(request.param)


@pytest.fixture(params=["gif", "gif_vfr", "webp"])
def animation_case(request, videos) -> VideoCase:
    return videos.get(request.param)


# -- bad and hostile videos -------------------------------------------------------------------

def _avi_patch(data: bytes, *, frames: int | None = None, wh: tuple[int, int] | None = None,
               rate: tuple[int, int] | None = None) -> bytes:
    """An AVI with its declared frame count (avih + strh), size (avih + strf) or rate (strh
    scale/rate) replaced; the frames themselves are untouched."""
    b = bytearray(data)
    avih, strh, strf = b.find(b"avih") + 8, b.find(b"strh") + 8, b.find(b"strf") + 8
    if frames is not None:
        struct.pack_into("<I", b, avih + 16, frames)   # dwTotalFrames
        struct.pack_into("<I", b, strh + 32, frames)   # dwLength
    if wh is not None:
        struct.pack_into("<II", b, avih + 32, *wh)     # dwWidth, dwHeight
        struct.pack_into("<ii", b, strf + 4, *wh)      # biWidth, biHeight
    if rate is not None:
        struct.pack_into("<II", b, strh + 20, *rate)   # dwScale, dwRate (fps = rate / scale)
        struct.pack_into("<I", b, avih, min(0xFFFFFFFF, max(1, int(1e6 * rate[0] / max(rate[1], 1)))))  # us/frame
    return bytes(b)


def raw_avi(frames: np.ndarray, fps: int, declare_wh: tuple[int, int] | None = None) -> bytes:
    """An uncompressed (BI_RGB, bottom-up BGR) AVI of ``frames``, written by hand (OpenCV's writer
    has no raw codec). FFmpeg takes a raw stream's size from the header alone, so
    ``declare_wh`` makes a file that declares any frame size while holding small frames."""
    t, h, w = frames.shape[:3]
    dw, dh = declare_wh or (w, h)
    stride = (w * 3 + 3) & ~3
    chunks = []
    for f in frames:
        rows = np.zeros((h, stride), np.uint8)
        rows[:, : w * 3] = f[::-1, :, ::-1].reshape(h, w * 3)
        chunks.append(rows.tobytes())

    def chunk(tag: bytes, body: bytes) -> bytes:
        return tag + struct.pack("<I", len(body)) + body + (b"\0" if len(body) & 1 else b"")

    def lst(kind: bytes, body: bytes) -> bytes:
        return chunk(b"LIST", kind + body)

    size = stride * h
    avih = struct.pack("<10I4I", 1_000_000 // fps, size * fps, 0, 0x10, t, 0, 1, size, dw, dh, 0, 0, 0, 0)
    strh = struct.pack("<4s4sIHHIIIIIIIIhhhh", b"vids", b"\0\0\0\0", 0, 0, 0, 0, 1, fps, 0, t, size,
                       0xFFFFFFFF, 0, 0, 0, dw, dh)
    strf = struct.pack("<IiiHHIIiiII", 40, dw, dh, 1, 24, 0, size, 0, 0, 0, 0)
    hdrl = lst(b"hdrl", chunk(b"avih", avih) + lst(b"strl", chunk(b"strh", strh) + chunk(b"strf", strf)))
    movi_body = b"".join(chunk(b"00db", c) for c in chunks)
    idx, off = [], 4
    for c in chunks:
        idx.append(struct.pack("<4sIII", b"00db", 0x10, off, len(c)))
        off += 8 + len(c) + (len(c) & 1)
    body = b"AVI " + hdrl + lst(b"movi", movi_body) + chunk(b"idx1", b"".join(idx))
    return b"RIFF" + struct.pack("<I", len(body)) + body


def mp4_rotated(data: bytes, degrees: int) -> bytes:
    """An MP4/MOV with its video track's display matrix (tkhd) set to rotate by ``degrees``
    (90, 180, 270: the matrices phones write), pixels untouched."""
    b = bytearray(data)
    box = b.find(b"tkhd") - 4
    one, minus = 0x10000, -0x10000 & 0xFFFFFFFF
    a, bb, c, d = {90: (0, one, minus, 0), 180: (minus, 0, 0, minus), 270: (0, minus, one, 0)}[degrees]
    off = box + (48 if b[box + 8] == 0 else 60)  # matrix offset for tkhd version 0 / 1
    struct.pack_into(">9I", b, off, a, bb, 0, c, d, 0, 0, 0, 0x40000000)
    return bytes(b)


def _boxes(b: bytes | bytearray, start: int, end: int):
    """(offset, size, type) of the MP4 boxes in ``b[start:end]``."""
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack_from(">I4s", b, pos)
        yield pos, size, kind
        pos += size


def mp4_vfr(data: bytes, deltas: list[int]) -> bytes:
    """The MP4 with its video track's sample durations (stts) replaced by ``deltas`` (one per
    frame, in the track's time scale): a variable frame rate stream of the same frames. The moov
    box (OpenCV writes it after mdat) grows; the boxes holding stts get their sizes fixed."""
    b = bytes(data)
    path = []
    start, end = 0, len(b)
    for want in (b"moov", b"trak", b"mdia", b"minf", b"stbl", b"stts"):
        for pos, size, kind in _boxes(b, start, end):
            if kind == want:
                path.append((pos, size))
                start, end = pos + 8, pos + size
                break
        else:
            raise ValueError(f"no {want!r} box")
    runs: list[list[int]] = []
    for d in deltas:
        if runs and runs[-1][1] == d:
            runs[-1][0] += 1
        else:
            runs.append([1, d])
    stts = struct.pack(">I4sII", 16 + 8 * len(runs), b"stts", 0, len(runs))
    stts += b"".join(struct.pack(">II", n, d) for n, d in runs)
    pos, size = path[-1]
    grow = len(stts) - size
    out = bytearray(b[:pos] + stts + b[pos + size:])
    for p, s in path[:-1]:
        struct.pack_into(">I", out, p, s + grow)
    return bytes(out)


@pytest.fixture(scope="session")
def vfr_video(videos, tmp_path_factory) -> tuple[Path, VideoCase, list[int]]:
    """(path, the mp4v_mp4 case it was made from, its per-frame durations in the 1/12288 s
    time base OpenCV writes at 24 fps): frames 0-15 at 24 fps, 16-31 at 16 fps, 32-47 at 48 fps,
    2 s in all as before (the muxer's edit list ends the track at 2 s: FFmpeg drops frames after)."""
    case = videos.get("mp4v_mp4")
    unit = 512  # OpenCV's mp4 muxer: time scale 12288, 512 per frame at 24 fps
    deltas = [unit] * 16 + [unit * 3 // 2] * 16 + [unit // 2] * 16
    p = tmp_path_factory.mktemp("vfr") / "vfr.mp4"
    p.write_bytes(mp4_vfr(case.data, deltas))
    return p, case, deltas


@dataclass(frozen=True)
class BadVideo:
    name: str
    path: Path
    what: str  # what is wrong, for test ids and messages
    frames: np.ndarray | None = None  # the frames it holds, where a decoder may read them


@pytest.fixture(scope="session")
def bad_videos(videos, tmp_path_factory) -> dict[str, BadVideo]:
    """Broken and hostile files: name -> BadVideo."""
    import cv2
    root = tmp_path_factory.mktemp("bad_videos")
    mp4 = videos.get("mp4v_mp4").data
    avi = videos.get("mjpg_avi").data
    rng = np.random.default_rng(19)
    out: dict[str, BadVideo] = {}

    def put(name: str, data: bytes, what: str, frames: np.ndarray | None = None) -> None:
        p = root / name
        p.write_bytes(data)
        out[name] = BadVideo(name, p, what, frames)

    put("garbage.mp4", rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(), "random bytes named .mp4")
    put("empty_file.mp4", b"", "a zero-byte file")
    put("truncated.mp4", mp4[: len(mp4) * 2 // 5], "an MP4 cut at 40% (no moov box)")
    put("truncated.avi", avi[: len(avi) // 2], "an AVI cut in half (declares 30 frames, holds ~15)")
    put("huge_size.avi", _avi_patch(avi, wh=(16000, 16000)), "an MJPG AVI declaring 16000x16000 frames")
    small = pan_zoom("astronaut", 3, (32, 24))
    put("raw.avi", raw_avi(small, 10), "a valid uncompressed AVI (OpenCV 5.0 corrupts its heap on it)",
        small)
    put("raw_huge.avi", raw_avi(small, 10, (16000, 16000)),
        "an uncompressed AVI declaring 16000x16000 frames (FFmpeg believes it)")
    put("absurd_count.avi", _avi_patch(avi, frames=0x7FFFFFF0), "an AVI declaring 2**31 frames")
    put("overcount.avi", _avi_patch(avi, frames=1_000_000), "an AVI declaring 1e6 frames in 68 kB")
    put("absurd_rate.avi", _avi_patch(avi, rate=(1_000_000, 1)), "an AVI declaring 1e-6 fps")
    p = root / "zero_frames.avi"  # a writer opened and closed without a frame
    wr = cv2.VideoWriter(str(p), cv2.VideoWriter_fourcc(*"MJPG"), 10, (160, 120))
    wr.release()
    out["zero_frames.avi"] = BadVideo("zero_frames.avi", p, "an AVI with headers and no frame")
    return out


@pytest.fixture(scope="session")
def rotated_videos(videos, tmp_path_factory) -> dict[int, Path]:
    """degrees -> the mp4v_mp4 video with that display rotation in its track header."""
    root = tmp_path_factory.mktemp("rotated")
    base = videos.get("mp4v_mp4").data
    out = {}
    for deg in (90, 180, 270):
        p = root / f"rot{deg}.mp4"
        p.write_bytes(mp4_rotated(base, deg))
        out[deg] = p
    return out

