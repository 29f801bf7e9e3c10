"""Just enough of the MP4/MOV box structure to tell a variable frame rate video track from its
header (the sample durations in stts), so that OpenCV is not asked to seek in one: FFmpeg maps a
frame number to a time with the average rate, which lands on the wrong frame when rates vary."""
from __future__ import annotations

import struct
from typing import Any, Iterator

__all__ = ["video_track_is_vfr"]

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


def _vfr_track(moov: bytes, start: int, end: int) -> bool | None:
    """True/False for the first video track's stts under ``[start, end)``; None if none found."""
    handler = None
    stts = None
    todo = [(start, end)]
    while todo:
        s, e = todo.pop()
        for body, stop, kind in _boxes(moov, s, e):
            if kind in _CONTAINERS[1:]:
                todo.append((body, stop))
            elif kind == b"hdlr" and body + 12 <= stop:
                handler = moov[body + 8:body + 12]
            elif kind == b"stts" and body + 8 <= stop:
                stts = (body, stop)
    if handler != b"vide" or stts is None:
        return None
    body, stop = stts
    n = min(struct.unpack_from(">I", moov, body + 4)[0], (stop - body - 8) // 8)
    runs = [struct.unpack_from(">II", moov, body + 8 + 8 * i) for i in range(n)]
    if len(runs) > 1 and runs[-1][0] == 1:
        runs.pop()  # a last sample of its own duration (muxers often shorten it)
    return len({delta for _, delta in runs}) > 1


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
