"""``Sample``: one input image, video or PDF as a reader gives it (encoded bytes, or why not), and the
small helpers every reader shares (the image and video extensions, file-name text as UTF-8)."""
from __future__ import annotations

from dataclasses import dataclass

from ...io.media import DOCUMENT_EXTENSIONS, VIDEO_EXTENSIONS, is_video_name

__all__ = ["Sample", "IMAGE_EXTENSIONS", "VIDEO_EXTENSIONS", "media_extensions", "is_video_name",
           "safe_text"]

#: File extensions of images (folder default glob; the tar image member priority, in order).
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff")
# VIDEO_EXTENSIONS (io.media) come after the images in the folder glob and the tar member
# priority, for jobs whose family has a video rule.


def media_extensions(videos: bool) -> tuple[str, ...]:
    """The extensions a reader takes, in priority order: the images', the videos' when
    ``videos``, then the documents' (PDF: one row per page, for every family)."""
    return (IMAGE_EXTENSIONS + VIDEO_EXTENSIONS if videos else IMAGE_EXTENSIONS) + DOCUMENT_EXTENSIONS


@dataclass(frozen=True)
class Sample:
    """One input image or video, encoded: ``data`` (bytes, never decoded here) or ``error``
    (why not)."""
    id: str
    source: str
    data: bytes | None
    error: str | None = None
    # an error for a part of the input that could not be read (a damaged tar region or parquet
    # page): the job that meets one does not report complete
    damaged: bool = False
    # the name the data came under says video (a video extension): a bad file so named is a
    # video's error row, not an image's (rows.py also routes by the container's first bytes)
    video: bool = False

    def __repr__(self) -> str:
        what = f"{len(self.data)} bytes" if self.data is not None else f"error={self.error!r}"
        return (f"Sample(id={self.id!r}, source={self.source!r}, {what}"
                f"{', damaged' * self.damaged}{', video' * self.video})")


def safe_text(s: str) -> str:
    """A str that encodes as UTF-8: undecodable file-name bytes (surrogate escapes) as \\xNN."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
