"""probe reads a header, not an image: byte counts instead of timings.

A full decode must read every byte of the file; these tests count the bytes
probe pulls from a path or a file object and require far less than the file
(< 64 KiB), including when large metadata (a camera EXIF block, an ICC
profile, WebP EXIF stored after the image data) has to be skipped.
"""
from __future__ import annotations

import io
import struct
import zlib

import pytest
import skimage.data
from matplotlib import cbook
from PIL import Image, ImageOps

from vlmprep.io.probe import png as probe_png
from vlmprep.io.probe import probe
from vlmprep.io.probe import reader as probe_reader

BUDGET = 64 * 1024


class CountingFile(io.RawIOBase):
    """A binary file object that counts the bytes and calls of ``read``."""

    def __init__(self, raw):
        self._raw = raw
        self.bytes_read = 0
        self.reads = 0

    def read(self, n=-1):
        data = self._raw.read(n)
        self.bytes_read += len(data)
        self.reads += 1
        return data

    def seek(self, offset, whence=io.SEEK_SET):
        return self._raw.seek(offset, whence)

    def tell(self):
        return self._raw.tell()

    def fileno(self):
        return self._raw.fileno()

    def readable(self):
        return True

    def seekable(self):
        return True

    def close(self):
        self._raw.close()
        super().close()


def mosaic_1080p() -> Image.Image:
    """1920x1080 mosaic of six real photos (3 x 2 tiles of 640x540)."""
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        photos = [Image.open(f).convert("RGB")]
    photos += [Image.fromarray(getattr(skimage.data, n)()).convert("RGB")
               for n in ("astronaut", "chelsea", "coffee", "camera", "rocket")]
    canvas = Image.new("RGB", (1920, 1080))
    for i, photo in enumerate(photos):
        canvas.paste(ImageOps.fit(photo, (640, 540), Image.LANCZOS), ((i % 3) * 640, (i // 3) * 540))
    return canvas


@pytest.fixture(scope="module")
def mosaic():
    return mosaic_1080p()


def _camera_exif(blob: int) -> bytes:
    """EXIF with Orientation 6 followed by a ``blob``-byte MakerNote, as cameras write."""
    entries = struct.pack("<HHL", 274, 3, 1) + struct.pack("<HH", 6, 0)
    entries += struct.pack("<HHLL", 37500, 7, blob, 8 + 2 + 24 + 4)
    tiff = b"II*\x00" + struct.pack("<L", 8) + struct.pack("<H", 2) + entries + struct.pack("<L", 0)
    return b"Exif\x00\x00" + tiff + bytes(blob)


@pytest.fixture(scope="module")
def files(mosaic, tmp_path_factory):
    """name -> (path, expected (width, height, orientation)) for 1080p files."""
    tmp = tmp_path_factory.mktemp("cost")
    icc = bytes(60000)  # skipped APP2 segment; content is irrelevant to probe
    specs = {
        "jpeg": ("JPEG", {"quality": 90}, 1),
        "jpeg-progressive": ("JPEG", {"quality": 90, "progressive": True}, 1),
        "jpeg-camera-exif-icc": ("JPEG", {"quality": 90, "exif": _camera_exif(60000), "icc_profile": icc}, 6),
        "png": ("PNG", {"icc_profile": icc}, 1),
        "webp-exif-after-image": ("WEBP", {"quality": 80, "exif": _camera_exif(100)}, 6),
        "tiff": ("TIFF", {"compression": "tiff_lzw"}, 1),
    }
    out = {}
    for name, (fmt, kw, orientation) in specs.items():
        path = tmp / f"{name}.{fmt.lower()}"
        mosaic.save(path, fmt, **kw)
        assert path.stat().st_size > 2 * BUDGET  # the budget is meaningful against the file size
        out[name] = path, (1920, 1080, orientation)
    return out


NAMES = ["jpeg", "jpeg-progressive", "jpeg-camera-exif-icc", "png", "webp-exif-after-image", "tiff"]


@pytest.mark.parametrize("name", NAMES)
def test_file_object_reads_only_a_prefix(files, name):
    path, expected = files[name]
    with CountingFile(open(path, "rb", buffering=0)) as f:
        r = probe(f)
        assert (r.width, r.height, r.orientation) == expected
        assert f.bytes_read < BUDGET, f"{name}: read {f.bytes_read} of {path.stat().st_size} bytes"
        assert f.reads <= 4, f"{name}: {f.reads} reads"
        assert f.tell() == 0  # position restored


@pytest.mark.parametrize("name", NAMES)
def test_path_reads_only_a_prefix(files, name, monkeypatch):
    opened = []

    from vlmprep.io.probe import reader
    real_open = reader.open_image_file

    def counting_open(*args, **kwargs):  # probe opens paths through files.open_image_file
        f = CountingFile(real_open(*args, **kwargs))
        opened.append(f)
        return f

    monkeypatch.setattr(reader, "open_image_file", counting_open)
    path, expected = files[name]
    r = probe(path)
    assert (r.width, r.height, r.orientation) == expected
    assert len(opened) == 1 and opened[0].closed
    assert opened[0].bytes_read < BUDGET, f"{name}: read {opened[0].bytes_read} bytes"


# --------------------------------------------------------------------------
# Work per probe is bounded in total, not only per segment (issue 13, defects 5 and 9)


def _png_with_text_chunks(n: int, inflated: int) -> bytes:
    """A 4x4 PNG whose header carries ``n`` zTXt XMP chunks, each inflating to ``inflated``."""
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), (9, 8, 7)).save(buf, "PNG")
    png = buf.getvalue()
    body = b"XML:com.adobe.xmp\x00\x00" + zlib.compress(b" " * inflated, 9)
    chunk = struct.pack(">L", len(body)) + b"zTXt" + body + struct.pack(">L", zlib.crc32(b"zTXt" + body))
    return png[:33] + chunk * n + png[33:]


def test_png_text_inflation_has_a_total_budget(monkeypatch):
    """1,000 zTXt chunks of 1 MiB each inflated 1 GiB in one probe before the total budget."""
    inflated = []
    real = zlib.decompressobj

    class Counting:
        def __init__(self, *a):
            self._d = real(*a)

        def decompress(self, data, max_length=0):
            out = self._d.decompress(data, max_length)
            inflated.append(len(out))
            return out

    monkeypatch.setattr(probe_png.zlib, "decompressobj", Counting)
    data = _png_with_text_chunks(1000, 1 << 20)
    assert len(data) < 1_100_000
    r = probe(data)
    assert (r.width, r.height) == (4, 4)  # Pillow refuses it (over 64 MiB of text in all)
    assert sum(inflated) <= probe_png.MAX_TEXT_TOTAL
    assert sum(inflated) >= 1 << 20  # the first chunks are still read (an XMP orientation counts)


def _jpeg_with_segments(n: int, junk: bytes = b"") -> bytes:
    """A 24x16 JPEG with ``n`` empty COM segments (each after ``junk``) before its frame header."""
    buf = io.BytesIO()
    Image.new("RGB", (24, 16), (200, 10, 10)).save(buf, "JPEG")
    data = buf.getvalue()
    sof = data.index(b"\xff\xc0")
    return data[:sof] + (junk + b"\xff\xfe\x00\x02") * n + data[sof:]


def test_jpeg_with_more_than_1024_segments_before_the_frame_is_probed_like_pillow():
    """Defect 9: a segment count of 1,024 called this valid file corrupt."""
    data = _jpeg_with_segments(3000)
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        assert im.size == (24, 16)
    r = probe(data)
    assert (r.width, r.height) == (24, 16)


def test_jpeg_junk_has_a_total_budget_not_one_per_gap():
    """Junk between segments counts against one budget per file, as each byte of it costs a decoder
    a Python step in Pillow; a file past it is refused before a decoder is handed it."""
    from vlmprep.errors import ImageError
    ok = _jpeg_with_segments(4, b"\x00" * 1000)
    assert probe(ok).width == 24
    bad = _jpeg_with_segments(40, b"\x00" * 4000)  # 160 KB junk in all, 4 KB per gap
    with pytest.raises(ImageError, match="frame header"):
        probe(bad)


def test_bytes_read_from_a_file_have_a_total_budget(tmp_path, monkeypatch):
    """The walk touches a block per segment: 65,536 long segments could read (and keep) 512 MiB."""
    from vlmprep.errors import ImageError
    body = b"\xff\xfe\xff\xff" + b"\0" * 65533  # one COM segment of the largest length
    jpeg = _jpeg_with_segments(0)
    sof = jpeg.index(b"\xff\xc0")
    few, many = tmp_path / "few.jpg", tmp_path / "many.jpg"
    few.write_bytes(jpeg[:sof] + body * 4 + jpeg[sof:])
    many.write_bytes(jpeg[:sof] + body * 64 + jpeg[sof:])
    monkeypatch.setattr(probe_reader, "MAX_READ", 256 * 1024)
    assert probe(str(few)).width == 24
    with pytest.raises(ImageError, match="within 262,144 bytes read"):
        probe(str(many))  # 64 blocks of 8 KiB = 512 KiB
    assert probe(many.read_bytes()).width == 24  # bytes are not copied block by block
