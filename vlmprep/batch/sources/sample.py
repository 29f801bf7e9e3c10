"""``Sample``: one input image as a reader gives it (encoded bytes, or why not), and the small
helpers every reader shares (the image extensions, file-name text as UTF-8)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Sample", "IMAGE_EXTENSIONS", "safe_text"]

#: File extensions of images (folder default glob; the tar image member priority, in order).
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff")


@dataclass(frozen=True)
class Sample:
    """One input image, encoded: ``data`` (bytes, never decoded here) or ``error`` (why not)."""
    id: str
    source: str
    data: bytes | None
    error: str | None = None
    # an error for a part of the input that could not be read (a damaged tar region or parquet
    # page): the job that meets one does not report complete
    damaged: bool = False

    def __repr__(self) -> str:
        what = f"{len(self.data)} bytes" if self.data is not None else f"error={self.error!r}"
        return f"Sample(id={self.id!r}, source={self.source!r}, {what}{', damaged' * self.damaged})"


def safe_text(s: str) -> str:
    """A str that encodes as UTF-8: undecodable file-name bytes (surrogate escapes) as \\xNN."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
