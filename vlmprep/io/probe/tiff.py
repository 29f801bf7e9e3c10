"""TIFF files: the first IFD (size, samples, photometric, orientation) and whether a second follows."""
from __future__ import annotations

from vlmprep.errors import ImageError

from .common import CORRUPT, check_size, norm_orientation
from .exif import TAG_ORIENTATION, TAG_XMP, orientation_tag, tiff_header, tiff_ifd, xmp_orientation
from .result import ProbeResult

_TIFF_WANTED = frozenset((256, 257, 258, 259, 262, TAG_ORIENTATION, 277, 338, 339, TAG_XMP))
_TIFF_COLOUR = {0: 1, 1: 1, 2: 3, 3: 3, 5: 4, 6: 3, 8: 3}  # photometric -> colour channels
_TIFF_MODES = {2: "RGB", 3: "P", 5: "CMYK", 6: "YCbCr", 8: "LAB"}


def probe_tiff(d) -> ProbeResult:
    endian, big, ifd = tiff_header(d, 0, d.size, allow_big=True)
    tags, next_ifd = tiff_ifd(d, 0, d.size, endian, big, ifd, _TIFF_WANTED)

    def first(tag, default=None):
        value = tags.get(tag)
        return value[0] if isinstance(value, tuple) and value else default

    width, height = first(256), first(257)
    if width is None or height is None:
        raise ImageError(
            "expected ImageWidth (256) and ImageLength (257) integer tags in the first TIFF IFD; "
            f"found {'neither' if width is height is None else 'only one'}; {CORRUPT}"
        )
    check_size("TIFF", width, height, "first IFD")
    bps = tags.get(258) if isinstance(tags.get(258), tuple) else (1,)
    photometric = 6 if first(259) == 6 else first(262, 0)  # old-style JPEG is YCbCr
    spp = first(277, 1)
    extra = tags.get(338) if isinstance(tags.get(338), tuple) else ()
    colour = _TIFF_COLOUR.get(photometric, max(spp - len(extra), 1))
    alpha = any(e in (1, 2) for e in extra) or (photometric == 2 and spp == 4 and 338 not in tags)
    mode = _tiff_mode(photometric, bps[0], first(339, 1), endian, alpha)
    orientation = orientation_tag(tags)
    if orientation is None and isinstance(tags.get(TAG_XMP), bytes):
        orientation = xmp_orientation(tags[TAG_XMP])
    return ProbeResult(
        "tiff", width, height, norm_orientation(orientation), colour + alpha, bps[0], mode,
        has_alpha=alpha, animated=0 < next_ifd < d.size, progressive=False,
    )


def _tiff_mode(photometric: int, bits: int, sample_format: int, endian: str, alpha: bool) -> str:
    """Best-effort Pillow mode for the first IFD (a digest of Pillow's OPEN_INFO)."""
    if photometric in (0, 1):
        if alpha:
            return "LA"
        if bits == 1:
            return "1"
        if bits in (12, 16):
            if sample_format == 2:
                return "I"
            return "I;16B" if endian == ">" and bits == 16 else "I;16"
        if bits == 32:
            return "F" if sample_format == 3 else "I"
        return "L"
    mode = _TIFF_MODES.get(photometric, "")
    if alpha and mode in ("RGB", "P"):
        mode += "A"
    return mode
