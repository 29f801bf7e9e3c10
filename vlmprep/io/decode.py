"""Decode a validated Source to uint8 RGB ``(H, W, 3)`` with the semantics API.md settles.

- encoded inputs: first frame, EXIF orientation applied (as transformers' load_image);
- transparency (alpha band, palette or tRNS) composited on white, other modes converted
  as Pillow converts them (as transformers' ``convert_to_rgb``);
- 16-bit samples scaled to 8 bits as ``round(v / 257)`` (Pillow would clip or truncate);
- truncated or corrupt data is an ImageError, never a silently partial image.

Bounds (issue 13). At most ``max_source_bytes`` encoded bytes are read. Before any decoder sees
the bytes, ``check_structure`` walks what a decoder would walk in Python before the image data
(JPEG segments to the first scan, PNG chunks, GIF blocks to the first frame) within fixed work
budgets, and refuses a JPEG without image data or EOI, or with far too little image data for its
size. Peak memory is predicted from the header by ``decode_cost`` (checked against
``max_decode_bytes``): conversions run in strips of rows into the one output array, so a decode
holds the decoder's image, the output, and a strip.
"""
from __future__ import annotations

import io
import struct
import sys
import warnings
import zlib
from typing import TYPE_CHECKING

from .. import kernels
from ..errors import ImageError
from ..ops import DEFAULT_MAX_DECODE_BYTES, DEFAULT_MAX_SOURCE_BYTES
from . import warm
from .files import read_image_file
from .inputs import Source, encoded_buffer
from .probe import jpeg_frame

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

    from .. import ops
    from .probe import ProbeResult

__all__ = ["decode", "read_bytes", "encoded_bytes", "to_rgb", "orient", "check_structure", "decode_cost",
           "check_decode_cost", "jpeg_declined"]

# PIL transpose method per EXIF orientation (same table as PIL.ImageOps.exif_transpose).
_ORIENT_OPS = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE",
               6: "ROTATE_270", 7: "TRANSVERSE", 8: "ROTATE_90"}
_STRIP = 1 << 18  # pixels converted at a time: a strip's temporaries stay under ~5 MiB
# Scans per JPEG: libjpeg's progressive scripts use ~10, mozjpeg's fewer than 70; each scan is a
# pass over the image (1,000 scans of 14 bytes each cost 5 s on a 4 Mpx image), so this bounds
# the decode time by the pixel limit.
_MAX_JPEG_SCANS = 128
_HUFFMAN_SOF = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7))
_MAX_GIF_STEPS = 1 << 20  # GIF blocks and sub-blocks before the first frame (Pillow: a step each)
_PNG_CHUNKS_FIXED, _PNG_BYTES_PER_CHUNK = 65536, 4096  # chunk budget: 65,536 + 1 per 4 KiB
_TRUNCATED = "the file is truncated or corrupt: re-encode or re-download it"


def read_bytes(src: Source, max_bytes: int = DEFAULT_MAX_SOURCE_BYTES) -> bytes:
    """The encoded bytes of an ``"encoded"`` Source (reads the file for a path), at most
    ``max_bytes`` of them: more is an ImageError (a path reads at most ``max_bytes + 1``, and
    only from a regular file: ``files.read_image_file``)."""
    item = src.item
    try:
        if isinstance(item, (bytes, bytearray, memoryview)):
            buf = encoded_buffer(item, max_bytes)
            return buf if isinstance(buf, bytes) else bytes(buf)
        return read_image_file(item, max_bytes)  # a regular file only (never blocks)
    except ImageError as e:
        raise e.at(source=src.desc) from e.__cause__


# -- structure checks before any decoder -----------------------------------------------------------

def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def check_structure(data: bytes, hdr: "ProbeResult") -> None:
    """Refuse, before a decoder sees them, bytes that would make a decoder walk unbounded junk in
    Python or that cannot hold the image the header declares. Raises ImageError.

    JPEG: segments to the first scan within the probe's bounds; an EOI marker after the scan
    (a file cut short has none; libjpeg would invent one); at most ``_MAX_JPEG_SCANS`` scans;
    and at least 1 bit of Huffman data per
    8x8 block of every component, halved for margin (no Huffman-coded block takes less: a flat
    image with optimized tables takes 2 bits; arithmetic coding is not checked).
    PNG: the chunk count (Pillow reads each chunk in Python); every chunk inside the file (OpenCV
    allocates a chunk's declared length before reading it). GIF: the blocks before the first
    frame (Pillow reads junk there a byte at a time). TIFF: no more strip/tile offsets than the
    layout has strips/tiles (Pillow makes a Python tile of each). WebP and BMP are parsed in C.
    What this cannot see: damage inside the compressed data (bit errors, zeroed bytes, a cut
    file with an EOI appended). libjpeg reports those as warnings, which the kernels' JPEG
    decoder turns into errors (``decode``); Pillow and torchvision ignore them.
    """
    if hdr.format == "jpeg":
        _check_jpeg(data, hdr)
    elif hdr.format == "png":
        _check_png(data)
    elif hdr.format == "gif":
        _check_gif(data)
    elif hdr.format == "tiff":
        _check_tiff(data, hdr)


def _check_jpeg(data: bytes, hdr: "ProbeResult") -> None:
    marker, h, w, sampling, scan = jpeg_frame(data)
    eoi = data.rfind(b"\xff\xd9", scan)
    if eoi < 0:
        raise ImageError(f"expected a JPEG end marker (EOI) after the image data at byte {scan:,}; "
                         f"none in the {len(data) - scan:,} bytes after it; {_TRUNCATED}")
    scans = 1 + _count_sos(data, scan, eoi)
    if scans > _MAX_JPEG_SCANS:
        raise ImageError(f"expected at most {_MAX_JPEG_SCANS} JPEG scans, got {scans:,}; each scan "
                         f"costs a pass over the whole image (libjpeg-turbo's djpeg -maxscans "
                         f"exists for this); the file is corrupt or hostile: re-encode it")
    hmax = max((s[0] for s in sampling), default=0)
    vmax = max((s[1] for s in sampling), default=0)
    if marker not in _HUFFMAN_SOF or not hmax or not vmax or not h or not w:
        return  # arithmetic coding, or a frame libjpeg refuses itself
    # libjpeg's component size: ceil(side * factor / max factor), in 8x8 blocks
    blocks = sum(_cdiv(_cdiv(w * sh, hmax), 8) * _cdiv(_cdiv(h * sv, vmax), 8) for sh, sv in sampling)
    need = blocks // 16
    if eoi - scan < need:
        raise ImageError(f"expected at least {need:,} bytes of JPEG image data for {w}x{h} pixels "
                         f"(WxH; {blocks:,} blocks of 1 bit or more), got {eoi - scan:,}; "
                         f"{_TRUNCATED}")


def _count_sos(data: bytes, start: int, end: int) -> int:
    """SOS markers (0xFF 0xDA) in ``data[start:end]``; 0xFF is stuffed in scan data, so these are
    markers only. numpy's two compares take 0.08 ms on a 1080p JPEG, ``bytes.count`` 0.5."""
    import numpy as np
    if end - start < 2:
        return 0
    v = np.frombuffer(data, np.uint8, end - start, start)
    return int(np.count_nonzero((v[:-1] == 0xFF) & (v[1:] == 0xDA)))


_PNG_MAX_CHUNK = (1 << 31) - 1  # the PNG spec's largest chunk length


def _png_chunks(data: bytes):
    """Yield ``(pos, length, type)`` of each PNG chunk header after the signature, up to and
    including IEND (or the end of the data)."""
    pos, size = 8, len(data)
    while pos + 8 <= size:
        length, ctype = struct.unpack_from(">L4s", data, pos)
        yield pos, length, ctype
        if ctype == b"IEND":
            return
        pos += 12 + length


def _check_png(data: bytes) -> None:
    budget = _PNG_CHUNKS_FIXED + len(data) // _PNG_BYTES_PER_CHUNK
    size = len(data)
    for n, (pos, length, ctype) in enumerate(_png_chunks(data), 1):
        if n > budget:
            raise ImageError(f"expected at most {budget:,} PNG chunks in {size:,} bytes, got more "
                             f"(at byte {pos:,}); the file is corrupt or hostile: re-encode it")
        if length > _PNG_MAX_CHUNK or pos + 12 + length > size:
            # a decoder may allocate the declared length first (OpenCV, for 16-bit PNGs: 3 GB
            # for a 95-byte file); a chunk that runs past the end is a truncated file anyway
            raise ImageError(f"expected PNG chunk {ctype!r} at byte {pos:,} to fit in the file "
                             f"({size - pos - 12:,} bytes left after its header), it declares "
                             f"{length:,}; {_TRUNCATED}")


def _png_without_text(data: bytes) -> bytes:
    """The PNG with its tEXt/zTXt/iTXt chunks left out (``data`` itself when it has none).

    Pillow inflates up to 64 MiB of text while it decodes, and pixels never depend on it: the
    orientation that text can carry (XMP, raw EXIF) is read by the probe, within its budget.
    Called after ``_check_png``, so the chunk walk is bounded. Other chunks keep their CRCs.
    """
    keep: list = []
    start = 0
    view = memoryview(data)
    for pos, length, ctype in _png_chunks(data):
        if ctype in (b"tEXt", b"zTXt", b"iTXt"):
            keep.append(view[start:pos])
            start = pos + 12 + length  # inside the data: _check_png passed
    if not keep:
        return data
    keep.append(view[start:])
    return b"".join(keep)


def _check_gif(data: bytes) -> None:
    size = len(data)
    if size < 13:
        return  # the probe saw the screen descriptor; Pillow reports the rest
    flags = data[10]
    pos = 13 + (3 << (flags & 7) + 1 if flags & 0x80 else 0)
    steps = 0
    while pos < size and steps < _MAX_GIF_STEPS:
        steps += 1
        kind = data[pos]
        if kind in (0x2C, 0x3B):  # ',' image descriptor, ';' trailer
            return
        if kind == 0x21:  # '!' extension: label, then sub-blocks ending with a zero length
            pos += 2
            while pos < size and steps < _MAX_GIF_STEPS:
                steps += 1
                n = data[pos]
                pos += 1 + n
                if not n:
                    break
        else:
            pos += 1  # Pillow skips stray bytes one at a time
    if steps >= _MAX_GIF_STEPS:
        raise ImageError(f"expected the first GIF frame within {_MAX_GIF_STEPS:,} blocks, got none "
                         f"(at byte {pos:,}); the file is corrupt or hostile: re-encode it")


def _check_tiff(data: bytes, hdr: "ProbeResult") -> None:
    """More strip/tile offsets than the first IFD's layout has strips/tiles is refused: Pillow
    builds a Python tile per offset (~300 bytes from 8 bytes of file) and decodes each alone."""
    endian = {b"II": "<", b"MM": ">"}.get(data[:2])
    if endian is None or len(data) < 16:
        return
    big = data[2:4] in (b"+\x00", b"\x00+")
    ifd = struct.unpack_from(endian + ("Q" if big else "L"), data, 8 if big else 4)[0]
    head, entry = (8, struct.Struct(endian + "HHQQ")) if big else (2, struct.Struct(endian + "HHLL"))
    if ifd + head > len(data):
        return
    n = struct.unpack_from(endian + ("Q" if big else "H"), data, ifd)[0]
    n = min(n, 0xFFFF, (len(data) - ifd - head) // entry.size)
    counts, first = {}, {}
    for i in range(n):
        tag, typ, num, value = entry.unpack_from(data, ifd + head + i * entry.size)
        if tag in counts:
            continue
        counts[tag] = num
        if typ == 3:  # SHORT: the value sits in the first 2 bytes of the field
            raw = struct.pack(endian + ("Q" if big else "L"), value)
            value = struct.unpack_from(endian + "H", raw)[0]
        first[tag] = value
    planes = first.get(277, 1) if first.get(284) == 2 else 1
    w, h = hdr.width, hdr.height
    for tag, allowed in ((273, _cdiv(h, min(first.get(278, h) or h, h)) * planes),
                         (324, _cdiv(w, max(first.get(322, w), 1)) * _cdiv(h, max(first.get(323, h), 1))
                          * planes)):
        got = counts.get(tag, 0)
        if got > max(allowed, 1):
            raise ImageError(f"expected at most {allowed:,} {'strip' if tag == 273 else 'tile'} "
                             f"offsets for this {w}x{h} (WxH) TIFF's layout, got {got:,}; the file "
                             f"is corrupt or hostile: re-encode it")


# -- memory ---------------------------------------------------------------------------------------

#: Bytes per pixel Pillow holds for an image of each mode (others: 4).
_PIL_BPP = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16B": 2, "I;16L": 2, "I;16N": 2}


def decode_cost(hdr: "ProbeResult") -> int:
    """Predicted peak bytes of decoding the image ``hdr`` describes, besides its encoded bytes:
    ``width * height`` x (the decoder's image + the 3-byte output [+ libjpeg's coefficients for
    progressive JPEGs, + the frame canvases of animations]), or output + oriented copy; a strip's
    temporaries (~5 MiB) come on top.  Per pixel: 4 (gray, palette, GIF), 7 (RGB, RGBA, CMYK
    through Pillow), 16 (16-bit RGBA: OpenCV holds two copies), at most 16 for any header.
    Measured against peak RSS in tests/io/test_decode_bounds.py.
    """
    if hdr.bit_depth == 16 and hdr.format in ("png", "tiff"):
        c = 4 if hdr.channels in (2, 4) else hdr.channels
        # OpenCV decodes to one uint16 array and swaps the channels into a second; then its
        # array and the output
        per_pixel = max(4 * c, 2 * c + 3)
    else:
        held = _PIL_BPP.get(hdr.mode_hint, 4)
        if hdr.format == "jpeg" and hdr.progressive:
            held += 2 * hdr.channels  # libjpeg keeps every coefficient (int16) of a multi-scan file
        if hdr.animated:
            held += 8  # the decoder's RGBA canvases of the animation
        per_pixel = held + 3
    per_pixel = max(per_pixel, 6 if hdr.orientation != 1 else 0)  # output + its oriented copy
    return hdr.width * hdr.height * per_pixel


def check_decode_cost(hdr: "ProbeResult | None", max_decode_bytes: int) -> None:
    """ImageError when ``decode_cost(hdr)`` is above ``max_decode_bytes`` (None: nothing to decode)."""
    if hdr is None:
        return
    cost = decode_cost(hdr)
    if cost > max_decode_bytes:
        raise ImageError(
            f"expected a decode of at most {max_decode_bytes:,} bytes (max_decode_bytes), got "
            f"{cost:,} predicted for this {hdr.width}x{hdr.height} (WxH) {hdr.format.upper()} "
            f"({hdr.mode_hint}, {hdr.bit_depth}-bit; rejected from the header, before decoding); "
            f"downscale the image or raise max_decode_bytes= if it is trusted")


# -- pixels ---------------------------------------------------------------------------------------

def orient(img: "Image.Image", orientation: int) -> "Image.Image":
    """Apply EXIF orientation 1..8 to a PIL image (1 and unknown values: unchanged)."""
    from PIL import Image
    op = _ORIENT_OPS.get(orientation)
    return img.transpose(getattr(Image.Transpose, op)) if op else img


def _orient_array(a: "np.ndarray", orientation: int) -> "np.ndarray":
    """``orient`` for a ``(H, W, C)`` array (the same pixels as Pillow's transposes)."""
    import numpy as np
    views = {2: lambda: a[:, ::-1], 3: lambda: a[::-1, ::-1], 4: lambda: a[::-1],
             5: lambda: a.transpose(1, 0, 2), 6: lambda: np.rot90(a, -1),
             7: lambda: a[::-1, ::-1].transpose(1, 0, 2), 8: lambda: np.rot90(a, 1)}
    view = views.get(orientation)
    return np.ascontiguousarray(view()) if view else a


def _rgb_part(part: "Image.Image", alpha: bool) -> "np.ndarray":
    """A strip of rows -> uint8 ``(h, W, 3)``, transparency composited on white."""
    import numpy as np
    from PIL import Image
    if alpha:
        rgba = part.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        part = Image.alpha_composite(white, rgba)
    return np.asarray(part.convert("RGB") if part.mode != "RGB" else part)


def to_rgb(img: "Image.Image") -> "np.ndarray":
    """PIL image of any mode -> uint8 ``(H, W, 3)``, transparency composited on white.

    Converted a strip of rows at a time into the output (every conversion here is per pixel),
    so the temporaries are a strip's, not the image's (an RGBA image converted whole held ~5
    copies of itself).
    """
    import numpy as np
    from PIL import Image
    w, h = img.size
    out = np.empty((h, w, 3), np.uint8)
    wide = img.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I")
    # 16-bit gray: Pillow's convert clips at 255 (a white photo); scale instead.
    alpha = not wide and ("A" in img.getbands() or img.info.get("transparency") is not None)
    rows = max(1, _STRIP // max(w, 1))
    for y in range(0, h, rows):
        y1 = min(h, y + rows)
        part = img.crop((0, y, w, y1)) if (y, y1) != (0, h) else img
        if wide:
            a = np.asarray(part).astype(np.uint32)
            part = Image.fromarray(((a + 128) // 257).clip(0, 255).astype(np.uint8), "L")
        out[y:y1] = _rgb_part(part, alpha)
    return out


def _decode_16bit(data: bytes) -> "np.ndarray":
    """16-bit PNG/TIFF -> uint8 ``(H, W, 3)`` (no orientation), samples round(v / 257),
    transparency composited on white.

    Pillow reads 16-bit RGB by dropping the low byte; OpenCV keeps all 16 bits. OpenCV's
    uint16 array is scaled a strip at a time into the output (no whole-image uint32 copies).
    """
    import numpy as np
    from PIL import Image
    cv2 = warm.cv2()  # loaded once, before any thread decodes (io/warm.py): never here
    if cv2 is None:
        raise ValueError("OpenCV (cv2) is not importable here; it reads 16-bit samples: pip "
                         "install opencv-python-headless")
    a = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)  # no EXIF rotation
    if a is None or a.dtype != np.uint16:
        raise ValueError("OpenCV could not read the 16-bit samples")
    h, w = a.shape[:2]
    c = 1 if a.ndim == 2 else a.shape[2]
    out = np.empty((h, w, 3), np.uint8)
    rows = max(1, _STRIP // max(w, 1))
    for y in range(0, h, rows):
        y1 = min(h, y + rows)
        s = ((a[y:y1].astype(np.uint32) + 128) // 257).astype(np.uint8)
        if c == 1:
            out[y:y1] = s[..., None]
        elif c == 2:
            out[y:y1] = _rgb_part(Image.fromarray(np.ascontiguousarray(s), "LA"), True)
        elif c == 3:
            out[y:y1] = s[..., ::-1]
        else:
            out[y:y1] = _rgb_part(Image.fromarray(np.ascontiguousarray(s[..., [2, 1, 0, 3]]),
                                                  "RGBA"), True)
    return out


def jpeg_declined(reason: str, src: Source) -> ImageError | None:
    """The ImageError for a JPEG the kernels' libjpeg decoder declined because of its data (a
    libjpeg error or warning: truncated, corrupt), or None when it declined for what the file
    is (colour space, a size other than the probe's): then Pillow decodes it."""
    if reason.startswith(("not a YCbCr", "the JPEG's size is not")):
        return None
    return ImageError(f"expected a complete, valid JPEG file, but libjpeg reports: {reason}; "
                      f"{_TRUNCATED}", source=src.desc)


def _decode_jpeg_kernel(data: bytes, src: Source) -> "np.ndarray | None":
    """8-bit YCbCr / gray JPEG -> uint8 ``(H, W, 3)`` with the kernels' libjpeg-turbo decoder
    (Pillow's pixels), which fails on libjpeg's warnings; None when not built or the file is
    not one it takes (then Pillow decodes it). Raises ImageError for damaged data."""
    hdr = src.header
    assert hdr is not None  # an "encoded" Source always carries its probe header
    if not kernels.jpeg_available():
        return None
    try:
        t = kernels.decode_jpeg(data, (hdr.height, hdr.width))
    except kernels.JpegDeclined as e:
        err = jpeg_declined(e.reason, src)
        if err is not None:
            raise err from e
        return None
    return _orient_array(t.numpy(), hdr.orientation)


def _decode_jpeg_fast(data: bytes) -> "np.ndarray | None":
    """8-bit YCbCr / gray JPEG -> uint8 ``(H, W, 3)`` with torchvision's libjpeg-turbo, EXIF
    orientation applied; None when it cannot, or when torchvision's image io is not loaded in
    this process (``warm.warm_decoders`` loads it where torchvision is): then Pillow decodes and
    reports errors.

    Same library and settings as Pillow's decoder (islow DCT, fancy upsampling), so the same
    pixels (tests/io/test_decode_fast.py), without Pillow's 4-byte RGB to 3-byte copy (~2x).
    """
    if "torchvision.io" not in sys.modules:  # loaded by warm.warm_decoders or not at all: a
        return None                          # first import in an image thread is not safe
    try:
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg
        with warnings.catch_warnings():  # torchvision 0.29 deprecates its image io (still here)
            warnings.simplefilter("ignore", DeprecationWarning)
            t = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                            mode=ImageReadMode.RGB, apply_exif_orientation=True)
    except Exception:  # CMYK, corrupt or truncated: Pillow's path decides
        return None
    return t.permute(1, 2, 0).numpy()  # decode_jpeg's CHW is a view of HWC memory


def _fast_still(hdr: "ProbeResult") -> bool:
    """Whether ``_decode_png_fast`` may decode this file: an opaque 8-bit RGB / gray PNG (no
    tRNS, no palette, not APNG); the rest keeps Pillow's compositing and conversions. Not WebP:
    torchvision's libwebp (a different build than Pillow's) decoded 2.8% of 37,867 mutated WebP
    files that Pillow refuses as corrupt (a silent decode of damaged data), so WebP stays with
    Pillow; the same mutation run on PNG through OpenCV found no disagreement."""
    return (hdr.format == "png" and hdr.bit_depth == 8 and not hdr.has_alpha
            and not hdr.animated and hdr.mode_hint in ("RGB", "L"))


def _decode_png_fast(data: bytes) -> "np.ndarray | None":
    """An opaque 8-bit RGB / gray PNG (``_fast_still``) -> uint8 ``(H, W, 3)`` with OpenCV's
    PNG decoder (RGB out, EXIF left to the caller), before orientation; None when it cannot
    (then Pillow decodes and reports errors). Lossless, so Pillow's pixels (neither applies
    gAMA), at ~0.8x Pillow's time. OpenCV's, not torchvision's: torchvision 0.29's libpng error
    path crashes the process (SIGSEGV) on a PNG whose IDAT CRC is wrong (tests/hostile)."""

    import numpy as np
    for pos, length, ctype in _png_chunks(data):  # bounded: _check_png passed
        # libpng only warns on an ancillary chunk's bad CRC where Pillow refuses the file:
        # left to Pillow, both backends give the same ImageError (critical chunks: libpng errs)
        if ctype[:1].islower() and zlib.crc32(data[pos + 4:pos + 8 + length]) != \
                struct.unpack_from(">L", data, pos + 8 + length)[0]:
            return None
    cv2 = warm.cv2()  # loaded once, before any thread decodes (io/warm.py): never here
    if cv2 is None:
        return None
    try:
        out = cv2.imdecode(np.frombuffer(data, np.uint8),
                           cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION)
    except Exception:  # too old (no IMREAD_COLOR_RGB), refused: Pillow decides
        return None
    return out if out is not None and out.ndim == 3 and out.shape[2] == 3 else None


def encoded_bytes(src: Source, op: "ops.decode | None" = None) -> bytes:
    """The bytes of an ``"encoded"`` Source, ready for any decoder: its predicted decode within
    ``op.max_decode_bytes``, at most ``op.max_source_bytes`` read, ``check_structure`` passed.
    Raises ImageError (with ``src.desc``)."""
    assert src.header is not None  # an "encoded" Source always carries its probe header
    warm.ensure()  # every decoder (kernels included) loaded before this thread runs one
    try:
        check_decode_cost(src.header, op.max_decode_bytes if op else DEFAULT_MAX_DECODE_BYTES)
        data = read_bytes(src, op.max_source_bytes if op else DEFAULT_MAX_SOURCE_BYTES)
        check_structure(data, src.header)
    except ImageError as e:
        raise e.at(source=src.desc) from e.__cause__
    return data


def _decode_encoded(src: Source, fast: bool, op: "ops.decode | None") -> "np.ndarray":
    from PIL import Image
    hdr = src.header
    assert hdr is not None
    data = encoded_bytes(src, op)
    if hdr.format == "jpeg" and hdr.bit_depth == 8 and hdr.mode_hint in ("RGB", "L"):
        out = _decode_jpeg_kernel(data, src)
        if out is None and fast:
            out = _decode_jpeg_fast(data)
        if out is not None and out.flags.c_contiguous:
            return out
    if hdr.bit_depth == 16 and hdr.format in ("png", "tiff"):
        out = _decode_16bit(data)
        del data
        return _orient_array(out, hdr.orientation)
    if hdr.format == "png":
        data = _png_without_text(data)
    if fast and _fast_still(hdr):
        out = _decode_png_fast(data)
        if out is not None:
            del data
            return _orient_array(out, hdr.orientation)  # the probe's, as Pillow reads it
    with Image.open(io.BytesIO(data)) as img:  # opens at frame 0: an animation gives its first
        img.load()  # raises on truncated data (Image.LOAD_TRUNCATED_IMAGES stays False)
        # what transformers' load_image applies (ImageOps.exif_transpose); Pillow has already
        # applied and removed a TIFF's own orientation while loading. A PNG's may live in the
        # text chunks left out above: the probe's, which the plan was made from.
        orientation = hdr.orientation if hdr.format == "png" else img.getexif().get(0x0112, 1)
        out = to_rgb(img)
    del data
    return _orient_array(out, orientation if isinstance(orientation, int) else 1)


def decode(src: Source, fast: bool = False, op: "ops.decode | None" = None) -> "np.ndarray":
    """Source -> uint8 ``(H, W, 3)`` RGB, C-contiguous; ``shape[:2] == src.hw``.

    ``fast``: without the kernels, decode 8-bit JPEGs with torchvision (same pixels as Pillow,
    about twice as fast), and opaque 8-bit PNGs with OpenCV's decoder (``_fast_still``).
    With the kernels' JPEG decoder built, it decodes those JPEGs on every path (Pillow's
    pixels) and is the judge of their data: libjpeg's warnings are errors. Pillow stays the
    decoder of everything else. ``op``: the decode op whose limits apply
    (``max_source_bytes``: encoded bytes read; ``max_decode_bytes``: predicted peak decode
    memory); None: the defaults.
    Raises ImageError (with the decoder's message as cause) for corrupt or truncated data.
    """
    import numpy as np
    warm.ensure()  # every decoder loaded before this thread runs one (io/warm.py)
    if src.kind == "array":
        return np.ascontiguousarray(src.item)
    if src.kind == "tensor":
        return np.ascontiguousarray(src.item.detach().cpu().permute(1, 2, 0).numpy())
    try:
        if src.kind == "pil":
            out = to_rgb(src.item)
        else:
            out = _decode_encoded(src, fast, op)
    except ImageError as e:
        raise e.at(source=src.desc) from e.__cause__
    except MemoryError:
        raise
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError, struct.error ...
        fmt = src.header.format.upper() if src.header else "image"
        raise ImageError(f"expected a complete, valid {fmt} file, but decoding failed "
                         f"({type(e).__name__}: {e}); the file is truncated or corrupt: re-encode "
                         f"or re-download it", source=src.desc) from e
    if out.shape[:2] != src.hw:
        raise ImageError(f"expected {src.hw[0]}x{src.hw[1]} (HxW) from the header, decoded "
                         f"{out.shape[0]}x{out.shape[1]}; the file's header lies: re-encode it",
                         source=src.desc)
    return out
