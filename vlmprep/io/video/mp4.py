"""Just enough of the MP4/MOV box structure to read two facts about the video track from its
header: whether its frame rate varies (the sample durations in stts), so that OpenCV is not asked
to seek in one (FFmpeg maps a frame number to a time with the average rate, which lands on the
wrong frame when rates vary), and where its keyframes are (the sync samples in stss), so that
the decoder seeks only where a seek skips decoding (``opencv.read_frames``)."""
from __future__ import annotations

import io
import struct
from typing import Any, Iterator

__all__ = ["video_track_is_vfr", "sync_samples"]

_CONTAINERS = (b"trak", b"mdia", b"minf", b"stbl")
_MAX_MOOV = 256 << 20  # a moov larger than this is not read (seek stays allowed)


def _boxes(b: bytes, start: int, end: int) -> Iterator[tuple[int, int, bytes]]:
    """(body offset, body end, type) of the boxes in ``b[start:end]``; stops at a malformed one."""
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack_from(">I4s", b, pos)
        head = 8
        if size == 1 and pos + 16 <= end:
            size, head = struct.unpack_from(">Q", b, pos + 8)[0], 16
        elif size == 0:
            size = end - pos
        if size < head or pos + size > end:
            return
        yield pos + head, pos + size, kind
        pos += size


def _find_moov(stream: Any, size: int) -> bytes | None:
    pos = 0
    while pos + 8 <= size:
        stream.seek(pos)
        hdr = stream.read(16)
        if len(hdr) < 8:
            return None
        box, kind = struct.unpack_from(">I4s", hdr)
        head = 8
        if box == 1 and len(hdr) == 16:
            box, head = struct.unpack_from(">Q", hdr, 8)[0], 16
        elif box == 0:
            box = size - pos
        if box < head:
            return None
        if kind == b"moov":
            if box > _MAX_MOOV:
                return None
            stream.seek(pos + head)
            return stream.read(box - head)
        pos += box
    return None


def _video_boxes(moov: bytes, start: int, end: int) -> dict[bytes, tuple[int, int]] | None:
    """The stts / stss boxes (body, end) of the track under ``[start, end)`` if it is a video
    track, else None."""
    handler = None
    found: dict[bytes, tuple[int, int]] = {}
    todo = [(start, end)]
    while todo:
        s, e = todo.pop()
        for body, stop, kind in _boxes(moov, s, e):
            if kind in _CONTAINERS[1:]:
                todo.append((body, stop))
            elif kind == b"hdlr" and body + 12 <= stop:
                handler = moov[body + 8:body + 12]
            elif kind in (b"stts", b"stss") and body + 8 <= stop:
                found[kind] = (body, stop)
    return found if handler == b"vide" else None


def _vfr_track(moov: bytes, start: int, end: int) -> bool | None:
    """True/False for the video track's stts under ``[start, end)``; None if none found."""
    found = _video_boxes(moov, start, end)
    if found is None or b"stts" not in found:
        return None
    body, stop = found[b"stts"]
    n = min(struct.unpack_from(">I", moov, body + 4)[0], (stop - body - 8) // 8)
    runs = [struct.unpack_from(">II", moov, body + 8 + 8 * i) for i in range(n)]
    if len(runs) > 1 and runs[-1][0] == 1:
        runs.pop()  # a last sample of its own duration (muxers often shorten it)
    return len({delta for _, delta in runs}) > 1


#: At most this many sync samples are read (a longer table: every frame a keyframe, in effect).
_MAX_SYNC = 1 << 20


def sync_samples(data: bytes) -> list[int] | None:
    """0-based frame numbers of the first video track's keyframes (its stss box) in the MP4/MOV
    file ``data``; None when there is no such table (no moov, no video track, or no stss: then
    every sample is a keyframe, as the format says) or it cannot be read."""
    return keyframes(io.BytesIO(data), len(data))


def keyframes(stream: Any, size: int) -> list[int] | None:
    """``sync_samples`` of a seekable stream of ``size`` bytes; the stream is left at offset 0."""
    try:
        moov = _find_moov(stream, size)
        if not moov:
            return None
        for body, stop, kind in _boxes(moov, 0, len(moov)):
            if kind != b"trak":
                continue
            found = _video_boxes(moov, body, stop)
            if found is None:
                continue
            if b"stss" not in found:
                return None
            b, e = found[b"stss"]
            n = min(struct.unpack_from(">I", moov, b + 4)[0], (e - b - 8) // 4, _MAX_SYNC)
            return [struct.unpack_from(">I", moov, b + 8 + 4 * i)[0] - 1 for i in range(n)]
        return None
    except (struct.error, OSError, ValueError):
        return None
    finally:
        stream.seek(0)


def video_track_is_vfr(stream: Any, size: int) -> bool:
    """Whether the MP4/MOV's first video track declares unequal sample durations (the last
    sample's own duration may differ: muxers often shorten it). False when unsure; the stream is
    left at offset 0."""
    try:
        moov = _find_moov(stream, size)
        if not moov:
            return False
        for body, stop, kind in _boxes(moov, 0, len(moov)):
            if kind == b"trak":
                got = _vfr_track(moov, body, stop)
                if got is not None:
                    return got
        return False
    except (struct.error, OSError, ValueError):
        return False
    finally:
        stream.seek(0)
