"""Which input is a video or a PDF document, by its name or its first bytes, without importing the
video decoders (``io.video`` imports numpy, OpenCV and the rest) or the PDF renderer: what batch
readers, the batch rows and the DataLoader route by.

    Given  "clips/a.MP4", b"\\x00\\x00\\x00\\x18ftypisom...", b"\\xff\\xd8\\xff\\xe0..." (a JPEG)
    Output is_video_name -> True; sniff_container -> "mp4"; is_video_bytes -> True, False
    Given  "scans/a.PDF", b"%PDF-1.7\n..."   Output is_document_name, is_document_bytes -> True
"""
from __future__ import annotations

from typing import Any

__all__ = ["VIDEO_EXTENSIONS", "VIDEO_CONTAINERS", "DOCUMENT_EXTENSIONS", "sniff_container",
           "is_video_name", "is_video_bytes", "is_document_name", "is_document_bytes"]

#: File extensions of video files. GIF and animated WebP are not here: as images they are their
#: first frame (an image job has always read them so); ``vlmprep.Video`` takes them as videos.
VIDEO_EXTENSIONS = ("mp4", "mkv", "webm", "avi", "mov")
#: ``sniff_container`` names of video files (the same set, by content).
VIDEO_CONTAINERS = ("mp4", "mov", "mkv", "webm", "avi")
#: File extensions of documents (``vlmprep.Document``: each page an image item).
DOCUMENT_EXTENSIONS = ("pdf",)
_PDF_MAGIC = b"%PDF-"
_PDF_WINDOW = 1024  # PDF readers accept junk before the header within the first KiB (io.document)


def sniff_container(head: bytes) -> str:
    """The container from a file's first bytes: mp4, mov, mkv, webm, avi, gif, webp, or ""."""
    if head[4:8] == b"ftyp":
        return "mov" if head[8:12] == b"qt  " else "mp4"
    if head[4:8] in (b"moov", b"mdat", b"wide", b"free"):
        return "mov"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm" if b"webm" in head[:64] else "mkv"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "avi"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    return ""


def is_video_name(name: str) -> bool:
    """Whether a file or member name ends in one of ``VIDEO_EXTENSIONS`` (any case)."""
    return "." in name and name.rpartition(".")[2].lower() in VIDEO_EXTENSIONS


def is_video_bytes(data: Any) -> bool:
    """Whether encoded bytes (bytes, bytearray, memoryview) start as a video container does."""
    try:
        head = bytes(memoryview(data)[:64])
    except (TypeError, ValueError):  # not a buffer, or a released one
        return False
    return sniff_container(head) in VIDEO_CONTAINERS


def is_document_name(name: str) -> bool:
    """Whether a file or member name ends in one of ``DOCUMENT_EXTENSIONS`` (any case)."""
    return "." in name and name.rpartition(".")[2].lower() in DOCUMENT_EXTENSIONS


def is_document_bytes(data: Any) -> bool:
    """Whether encoded bytes hold ``%PDF-`` in their first KiB, as a PDF reader finds it."""
    try:
        head = bytes(memoryview(data)[:_PDF_WINDOW])
    except (TypeError, ValueError):  # not a buffer, or a released one
        return False
    return _PDF_MAGIC in head
