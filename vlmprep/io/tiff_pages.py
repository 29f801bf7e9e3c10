"""Multi-page TIFF as a document (issue 31): each frame (IFD) is one page, used at its stored
size (a TIFF holds pixels: there is no dpi to render at).

``frame_sizes`` walks the IFD chain once, reading each frame's size from its tags (no strip or
tile decoded), at most ``limit`` frames: a hostile file can chain millions of tiny IFDs, and
Pillow's own ``n_frames`` would walk them all. Pillow ends the chain at an IFD it has seen
before, so a loop is a short document, not a hang. ``render_frame`` decodes one frame with
Pillow and hands it to the image path as the PIL image it is (``Source("pil")``), so a page
equals ``proc([that frame])`` bit for bit: the same mode conversions, and no EXIF orientation
applied (transformers applies none to a PIL image).

    Given  a 3-frame TIFF of 64x48, 30x90, 10x10 px   frame_sizes -> [(48, 64), (90, 30), (10, 10)]
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from ..errors import ImageError

__all__ = ["is_tiff", "TiffPage", "frame_sizes", "render_frame", "MAX_TIFF_FRAMES"]

_MAGICS = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")  # classic and BigTIFF, both byte orders
#: Most IFDs walked whatever ``pages=`` asks (~2 s of tag reading on the slowest CPU measured):
#: a page past it is refused as out of range.
MAX_TIFF_FRAMES = 100_000


def is_tiff(data: bytes) -> bool:
    """Whether ``data`` starts as a TIFF (classic or BigTIFF, either byte order)."""
    return data[:4] in _MAGICS


@dataclass(frozen=True)
class TiffPage:
    """What ``render_frame`` needs: the file's bytes (shared by its pages) and one frame."""

    data: bytes = field(repr=False)
    frame: int


def _open(data: bytes) -> Any:
    import PIL.Image  # deferred: as every decoder
    try:
        return PIL.Image.open(io.BytesIO(data), formats=["TIFF"])
    except PIL.Image.DecompressionBombError as e:
        raise ImageError(f"expected a TIFF whose first page fits Pillow's pixel limit, got "
                         f"{e}; split the file or shrink its first page") from e
    except Exception as e:  # noqa: BLE001 (a damaged file: this document's error)
        raise ImageError(f"expected a readable TIFF, got one Pillow cannot open ({type(e).__name__}:"
                         f" {e}); repair or re-export it") from e


def frame_sizes(data: bytes, limit: int) -> tuple[list[tuple[int, int]], bool]:
    """The ``(H, W)`` of frames ``0..`` of a TIFF, at most ``limit`` (IFD tags only) ->
    (sizes, whether more frames follow the last one read)."""
    im = _open(data)
    sizes: list[tuple[int, int]] = []
    try:
        while len(sizes) < limit:
            if sizes:
                try:
                    im.seek(len(sizes))
                except EOFError:  # the chain's end (or a loop Pillow cut)
                    return sizes, False
            w, h = im.size
            sizes.append((int(h), int(w)))
        try:
            im.seek(len(sizes))
        except EOFError:
            return sizes, False
        return sizes, True
    except Exception as e:  # noqa: BLE001 (a damaged IFD: the document's error, not the batch's)
        raise ImageError(f"expected a TIFF whose frames can be read, got {type(e).__name__} at "
                         f"frame {len(sizes)} ({e}); repair the file") from e
    finally:
        im.close()


def render_frame(page: TiffPage) -> Any:
    """Frame ``page.frame`` decoded -> a PIL image owning its pixels (the file closed)."""
    im = _open(page.data)
    try:
        im.seek(page.frame)
        im.load()
        return im.copy()
    except ImageError:
        raise
    except Exception as e:  # noqa: BLE001 (a damaged frame: this page's error)
        raise ImageError(f"expected a TIFF frame Pillow can decode, got {type(e).__name__} ({e}); "
                         f"repair the file or leave the page out with pages=") from e
    finally:
        im.close()
