"""Encoded video sources: the container from the first bytes, and a bounded, time-limited stream.

A path is stat'ed and opened only as a regular file within ``max_source_bytes``
(``vlmprep.io.files.open_image_file``); bytes are read from memory. Either way the decoder reads
through ``DeadlineStream``, which ends the stream (EOF) once the item's time is up, so FFmpeg
stops at its next read instead of running on: no temp file is ever written.
"""
from __future__ import annotations

import io
import os
import time
from typing import Any

from ...errors import ImageError
from ..files import open_image_file
from ..inputs import encoded_buffer, is_ndarray, is_torch_tensor
from ..media import sniff_container  # one container sniffer, shared with the routers (io.media)

__all__ = ["DeadlineStream", "sniff_container", "is_encoded", "open_stream", "head_bytes", "timed_out",
           "positions"]

_ENCODED = (bytes, bytearray, memoryview)


def is_encoded(source: Any) -> bool:
    """Whether ``source`` is a video file (path or bytes), not decoded frames."""
    return isinstance(source, (*_ENCODED, str, os.PathLike))


class DeadlineStream(io.BufferedIOBase):
    """A seekable binary stream over bytes or an open file that reads as EOF past ``deadline``
    (``time.monotonic()``); ``expired`` says whether that happened."""

    def __init__(self, raw: Any, deadline: float):
        super().__init__()
        self._raw = raw
        self.deadline = deadline
        self.expired = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def _late(self) -> bool:
        if time.monotonic() > self.deadline:
            self.expired = True
        return self.expired

    def read(self, size: int | None = -1) -> bytes:
        if self._late():
            return b""
        return self._raw.read(-1 if size is None else size)

    def read1(self, size: int = -1) -> bytes:
        return self.read(size)

    def readinto(self, b: Any) -> int:
        if self._late():
            return 0
        return self._raw.readinto(b)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()

    def fork(self) -> "DeadlineStream":
        """Another reader of the same bytes with its own position and the same deadline (one per
        decoding thread; the caller closes it before this one). Bytes in memory are shared, not
        copied; a file is read by offset (``os.pread``) through its one descriptor."""
        raw = self._raw
        if isinstance(raw, io.BytesIO):
            return DeadlineStream(_ViewReader(raw.getbuffer()), self.deadline)
        return DeadlineStream(io.BufferedReader(_PositionalReader(raw.fileno()), 1 << 16),
                              self.deadline)


class _ViewReader(io.RawIOBase):
    """A read-only seekable stream over a memoryview (no copy of the bytes)."""

    def __init__(self, view: memoryview):
        super().__init__()
        self._view, self._pos = view, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = max(0, min(len(b), len(self._view) - self._pos))
        b[:n] = self._view[self._pos:self._pos + n]
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, len(self._view))[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        self._view.release()  # the BytesIO may be resized again once every view is gone
        super().close()


class _PositionalReader(io.RawIOBase):
    """A seekable stream over an open file descriptor read by offset (``os.pread``): readers of
    one descriptor in several threads do not move each other's position. Not closing it leaves
    the descriptor to its owner."""

    def __init__(self, fd: int):
        super().__init__()
        self._fd, self._pos = fd, 0
        self._size = os.fstat(fd).st_size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = os.pread(self._fd, len(b), self._pos)
        b[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._size)[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos


def open_stream(source: Any, max_bytes: int, deadline: float) -> tuple[DeadlineStream, bytes]:
    """Path or bytes -> (a DeadlineStream at offset 0, its first 64 bytes). Raises ImageError
    (missing or special file, too large). The caller closes the stream."""
    try:
        if isinstance(source, _ENCODED):
            raw: Any = io.BytesIO(encoded_buffer(source, max_bytes))
        else:
            raw = io.BufferedReader(open_image_file(source, max_bytes), 1 << 16)
    except ImageError as e:  # the image checks' words, said of a video
        reason = (e.reason.replace("an image file", "a video file").replace("an encoded image", "an encoded video")
                  .replace("decode.max_source_bytes", "VideoLimits.max_source_bytes")
                  .replace("a smaller image", "a smaller video"))
        raise ImageError(reason, index=e.index, source=e.source) from (e.__cause__ or e)
    head = raw.read(64)
    raw.seek(0)
    return DeadlineStream(raw, deadline), head


def head_bytes(source: Any, max_bytes: int) -> bytes:
    """The first 64 bytes of a path or bytes (same checks as ``open_stream``)."""
    stream, head = open_stream(source, max_bytes, float("inf"))
    stream.close()
    return head


def positions(indices: Any) -> dict[int, list[int]]:
    """``{frame index: [positions in indices]}``: each distinct frame is decoded once and copied
    to every position that asks for it (the readers' shared bookkeeping)."""
    where: dict[int, list[int]] = {}
    for k, i in enumerate(indices):
        where.setdefault(int(i), []).append(k)
    return where


def timed_out(what: str, timeout_s: float) -> ImageError:
    return ImageError(f"expected the video to {what} within {timeout_s:g} s (VideoLimits.timeout_s), "
                      f"it took longer; the file is huge, damaged or hostile: re-encode it, sample fewer "
                      f"frames, or raise timeout_s if it is trusted")


def kind_of(source: Any) -> str:
    """"encoded", "array", "tensor" or "images" (a list/tuple of frames); else ImageError."""
    if is_encoded(source):
        if isinstance(source, str) and "://" in source[:32]:
            raise ImageError("expected a local video file path or its bytes, got a URL; vlmprep never "
                             "downloads by itself: fetch the file first and pass its bytes")
        return "encoded"
    if is_ndarray(source):
        return "array"
    if is_torch_tensor(source):
        return "tensor"
    if isinstance(source, (list, tuple)):
        return "images"
    raise ImageError(f"expected a video: a path, bytes, a (T, H, W, 3) uint8 array, a (T, 3, H, W) uint8 "
                     f"tensor or a list of images, got {type(source).__module__}.{type(source).__name__}; "
                     f"pass one of those (wrapped in vlmprep.Video to give options)")
