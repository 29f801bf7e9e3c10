"""``ProbeResult``: what the probe learns from a file header."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What ``probe`` learns from a file header.

    Attributes:
        format: ``"jpeg"``, ``"png"``, ``"webp"``, ``"bmp"``, ``"gif"`` or ``"tiff"``.
        width, height: pixel size as stored in the file, before orientation.
        orientation: EXIF orientation 1..8 (1 when absent or invalid).
        channels: samples per decoded pixel, alpha included when ``has_alpha``:
            1 gray, 2 gray+alpha, 3 RGB/YCbCr/Lab, 4 RGBA or CMYK/YCCK.  Palette
            images count their palette entries (3, or 4 with transparency).
        bit_depth: bits per stored sample (palette images: bits per index);
            e.g. 8, 16 for 16-bit PNG/TIFF, 1/2/4 for low-depth PNG/BMP,
            12 for 12-bit JPEG.  16/24/32-bit BMPs and GIFs report 8.
        mode_hint: the Pillow mode the file opens as (``"RGB"``, ``"RGBA"``,
            ``"L"``, ``"LA"``, ``"P"``, ``"1"``, ``"I;16"``, ``"CMYK"``...),
            except ``"YCCK"`` for Adobe YCCK JPEGs (Pillow says ``"CMYK"``).
        has_alpha: an alpha channel or a transparency key is declared before the
            image data: PNG alpha or tRNS (a palette tRNS only if some entry is
            not opaque), GIF transparency of the first frame, WebP alpha as
            libwebp reports it, BMP alpha bitfields, TIFF alpha extra samples.
        animated: more than one frame, when known cheaply: APNG (acTL), WebP
            (two ANMF chunks), multi-page TIFF.  Always False for GIF (counting
            GIF frames means reading all image data) and for JPEG/BMP.
        progressive: JPEG progressive frame (SOF2/6/10/14); False otherwise.
    """

    format: str
    width: int
    height: int
    orientation: int
    channels: int
    bit_depth: int
    mode_hint: str
    has_alpha: bool
    animated: bool
    progressive: bool

    @property
    def size_hw(self) -> tuple[int, int]:
        """``(height, width)`` after applying the orientation (sides swap for 5..8)."""
        if self.orientation >= 5:
            return self.width, self.height
        return self.height, self.width

    @property
    def pixels(self) -> int:
        """``width * height``."""
        return self.width * self.height
