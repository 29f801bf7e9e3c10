"""Decode cost is bounded by the limits, and damaged data is an ImageError on every backend
(issue 13, defects 4, 6 and 7).

- max_source_bytes: no more encoded bytes are read; a file grown past it is refused.
- Junk a decoder would walk in Python (JPEG zero padding, GIF stray bytes, PNG chunk floods) is
  refused before any decoder is handed the bytes.
- Truncated and corrupt JPEGs are ImageErrors on reference, torch (plain and fused decode),
  and dali; what the pure path (VLMPREP_DISABLE_KERNELS=1) still refuses is pinned too.
- Peak decode memory stays within ``decode_cost`` (the header's prediction) + a constant, in a
  child process, for the bombs and ordinary files; ``max_decode_bytes`` refuses from the header.
"""
from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np
import pytest
from _support.imgdata import crop, encode
from PIL import Image

import vlmprep
from vlmprep import kernels, ops
from vlmprep.errors import ImageError
from vlmprep.io import decode as D
from vlmprep.io.inputs import resolve

sys.path.insert(0, os.path.dirname(__file__))
import decode_mem_cases as M  # noqa: E402

WATCHDOG_S = 30  # a hang, not a speed claim


def _jpeg(rgb: np.ndarray, **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "JPEG", **kw)
    return buf.getvalue()


RGB = crop("astronaut", 256, 320)
GOOD = _jpeg(RGB, quality=90)


def _no_decoder(monkeypatch):
    """Make every decoder fail loudly: the check must refuse the bytes before one runs."""
    def boom(*a, **k):
        raise AssertionError("a decoder was handed the bytes")
    monkeypatch.setattr(Image, "open", boom)
    for name in ("_decode_jpeg_kernel", "_decode_jpeg_fast", "_decode_16bit"):
        monkeypatch.setattr(D, name, boom, raising=False)


# -- max_source_bytes -----------------------------------------------------------------------------

def test_source_bytes_limit_for_bytes_and_paths(tmp_path):
    data = encode(crop("chelsea", 60, 80), "png")
    op = ops.decode(max_source_bytes=len(data) - 1)
    with pytest.raises(ImageError, match=r"max_source_bytes.*got [\d,]+ bytes"):
        D.decode(resolve(data), op=op)
    path = tmp_path / "a.png"
    path.write_bytes(data)
    src = resolve(str(path))
    with pytest.raises(ImageError, match="max_source_bytes"):
        D.decode(src, op=op)
    assert D.decode(src, op=ops.decode(max_source_bytes=len(data))).shape == (60, 80, 3)
    # a FIFO swapped in after the probe is never read (it would block the worker)
    path.unlink()
    os.mkfifo(path)
    t = time.perf_counter()
    with pytest.raises(ImageError, match="FIFO|regular file"):
        D.decode(src)
    assert time.perf_counter() - t < WATCHDOG_S
    path.unlink()
    path.write_bytes(data)
    # a file that grew after its probe is refused (read no further than the limit + 1)
    with open(path, "ab") as f:
        f.write(b"\0" * 4096)
    with pytest.raises(ImageError, match="max_source_bytes"):
        D.decode(src, op=ops.decode(max_source_bytes=len(data) + 100))


def test_source_bytes_limit_through_the_processor():
    data = encode(crop("chelsea", 60, 80), "png")
    for backend in ("reference", "torch"):
        b = vlmprep.Processor("qwen2-vl", backend=backend, errors="skip",
                              max_source_bytes=len(data) - 1)([data, crop("chelsea", 30, 40)])
        assert list(b.errors) == [0] and "max_source_bytes" in str(b.errors[0])


# -- junk a decoder would walk in Python ----------------------------------------------------------

def test_jpeg_header_then_zero_padding_is_refused_before_decoding(monkeypatch):
    """Defect 4: Pillow skipped 20 MB of zeros a byte at a time (1.8 s; 2 GB: > 300 s)."""
    head = GOOD[:GOOD.index(b"\xff\xda")]  # every header up to the scan, no scan
    data = head + bytes(20 << 20)
    assert resolve(data).hw == (256, 320)  # the probe stops at the frame header
    _no_decoder(monkeypatch)
    t = time.perf_counter()
    with pytest.raises(ImageError, match="junk"):
        D.decode(resolve(data))
    assert time.perf_counter() - t < WATCHDOG_S


def test_gif_stray_bytes_before_the_frame_are_refused(monkeypatch):
    gif = encode(crop("chelsea", 20, 30), "gif")
    frame = gif.index(b",", 13 + 3 * 256)  # the image descriptor after the global palette
    data = gif[:frame] + b"\x01" * ((1 << 20) + 10) + gif[frame:]  # 1 MiB of stray bytes
    with Image.open(io.BytesIO(data)) as im:
        assert im.size == (30, 20)  # Pillow walks it (a Python step per byte)
    _no_decoder(monkeypatch)
    with pytest.raises(ImageError, match="first GIF frame"):
        D.decode(resolve(data))


def test_png_chunk_flood_is_refused_and_many_idat_chunks_are_not(monkeypatch):
    png = encode(crop("chelsea", 40, 50), "png")
    idat = png.index(b"IDAT") - 4
    empty = struct.pack(">L", 0) + b"abCd" + struct.pack(">L", zlib.crc32(b"abCd"))
    flood = png[:idat] + empty * 200_000 + png[idat:]
    # a valid file with one IDAT chunk per 64 bytes decodes (Pillow's pixels)
    body = png[idat + 8:idat + 8 + struct.unpack(">L", png[idat:idat + 4])[0]]
    pieces = [body[k:k + 64] for k in range(0, len(body), 64)]
    many = png[:idat] + b"".join(struct.pack(">L", len(p)) + b"IDAT" + p
                                 + struct.pack(">L", zlib.crc32(b"IDAT" + p)) for p in pieces) \
        + png[png.index(b"IEND") - 4:]
    assert np.array_equal(D.decode(resolve(many)),
                          np.asarray(Image.open(io.BytesIO(png)).convert("RGB")))
    _no_decoder(monkeypatch)
    with pytest.raises(ImageError, match="PNG chunks"):
        D.decode(resolve(flood))


# -- truncated and corrupt JPEGs ------------------------------------------------------------------

def _damaged() -> dict[str, bytes]:
    n = len(GOOD)
    zeroed = bytearray(GOOD)
    zeroed[n // 2:n - 2] = bytes(n - 2 - n // 2)  # a download that stopped: zeros, EOI kept
    huge = bytearray(_jpeg(crop("chelsea", 16, 16), quality=50))
    sof = huge.index(b"\xff\xc0")
    huge[sof + 5:sof + 9] = struct.pack(">HH", 13000, 13000)  # 632 bytes claiming 13000x13000
    return {"cut_with_eoi": GOOD[:n // 2] + b"\xff\xd9", "zeroed_scan": bytes(zeroed),
            "cut": GOOD[:n * 2 // 3], "no_scan": GOOD[:GOOD.index(b"\xff\xda")] + b"\xff\xd9",
            "claims_13000x13000": bytes(huge)}


DAMAGED = _damaged()
# What the pure path (no kernels) refuses: structure and size; not damage inside the scan.
PURE_REFUSES = ("cut", "no_scan", "claims_13000x13000")


def _backends():
    out = ["reference", "torch"]
    try:
        import nvidia.dali  # noqa: F401
        out.append("dali")
    except ImportError:
        pass
    return out


@pytest.mark.parametrize("backend", _backends())
def test_damaged_jpegs_are_image_errors_on_every_backend(backend):
    """Defect 6: Pillow (and DALI's and torchvision's libjpeg) decoded these "successfully"."""
    refused = list(DAMAGED) if kernels.jpeg_available() else list(PURE_REFUSES)
    names = list(DAMAGED)
    proc = vlmprep.Processor("qwen2-vl", backend=backend, errors="skip")
    t = time.perf_counter()
    b = proc([crop("chelsea", 50, 60)] + [DAMAGED[k] for k in names] + [GOOD])
    assert time.perf_counter() - t < WATCHDOG_S
    assert sorted(b.errors) == sorted(1 + names.index(k) for k in refused), b.errors
    assert all("truncated or corrupt" in str(e) for e in b.errors.values())
    ref = vlmprep.Processor("qwen2-vl", backend=backend)([crop("chelsea", 50, 60), GOOD])
    got = b.pixel_values.float()
    assert got.shape == ref.pixel_values.shape  # the good images' rows, bit-exact below
    assert np.array_equal(got.numpy(), ref.pixel_values.float().numpy())


@pytest.mark.skipif(not kernels.jpeg_available(), reason="the kernels' JPEG decoder is not built")
def test_damaged_jpegs_on_the_fused_decode_path(monkeypatch):
    """The torch backend's deferred JPEG decode (two threads or more): a decline for damaged
    data is the ImageError, not a fall back to Pillow, which accepts it."""
    calls = []
    real = kernels.decode_resize_normalize_patchify

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(kernels, "decode_resize_normalize_patchify", spy)
    proc = vlmprep.Processor("qwen2-vl", backend="torch", errors="skip")
    kernels.set_num_threads(2)  # the deferred decode needs two threads or more
    try:
        b = proc([DAMAGED[k] for k in DAMAGED] + [GOOD])
        ref = vlmprep.Processor("qwen2-vl", backend="torch")([GOOD])
    finally:
        kernels.set_num_threads(None)
    assert calls  # the fused path ran
    assert sorted(b.errors) == list(range(len(DAMAGED)))
    assert np.array_equal(b.pixel_values.float().numpy(), ref.pixel_values.float().numpy())


def test_pure_path_refuses_what_it_can_see():
    """VLMPREP_DISABLE_KERNELS=1: the structural checks alone (truncation without EOI, no scan,
    far too little data for the size) on reference and torch."""
    code = ("import sys; sys.path.insert(0, %r); import vlmprep, test_decode_bounds as T\n"
            "from vlmprep import kernels; assert not kernels.available()\n"
            "for be in ('reference', 'torch'):\n"
            "    b = vlmprep.Processor('qwen2-vl', backend=be, errors='skip')("
            "[T.DAMAGED[k] for k in T.PURE_REFUSES] + [T.GOOD])\n"
            "    assert sorted(b.errors) == list(range(len(T.PURE_REFUSES))), b.errors\n"
            "print('ok')\n") % os.path.dirname(__file__)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, VLMPREP_DISABLE_KERNELS="1",
               PYTHONPATH=os.pathsep.join([root, os.path.join(root, "tests")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300, cwd=root)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


@pytest.mark.parametrize("kind", ["flat_optimized", "flat_progressive", "flat_gray_444",
                                  "one_pixel", "wide_strip_q1"])
def test_tiny_valid_jpegs_are_not_refused(kind):
    """The size check only refuses what cannot be valid: flat images compress to ~2 bits a block."""
    flat = np.full((600, 800, 3), (120, 130, 140), np.uint8)
    data = {"flat_optimized": lambda: _jpeg(flat, optimize=True, quality=50),
            "flat_progressive": lambda: _jpeg(flat, progressive=True, optimize=True),
            "flat_gray_444": lambda: _jpeg(flat[..., 0].copy(), quality=10),
            "one_pixel": lambda: _jpeg(flat[:1, :1].copy()),
            "wide_strip_q1": lambda: _jpeg(flat[:9, :2000].copy(), quality=1)}[kind]()
    out = D.decode(resolve(data))
    with Image.open(io.BytesIO(data)) as im:
        assert np.array_equal(out, np.asarray(im.convert("RGB")))


# -- memory ---------------------------------------------------------------------------------------

def test_default_decode_budget_admits_every_header_under_the_pixel_limit():
    from vlmprep.io.probe import ProbeResult
    side = int(ops.DEFAULT_MAX_SOURCE_PIXELS ** 0.5)
    worst = 0
    for fmt, mode, ch, depth, prog, anim in [
            ("png", "RGBA", 4, 16, False, False), ("png", "LA", 2, 16, False, True),
            ("jpeg", "CMYK", 4, 8, True, False), ("webp", "RGBA", 4, 8, False, True),
            ("gif", "P", 4, 8, False, False), ("tiff", "RGB", 3, 16, False, True)]:
        for orientation in (1, 6):
            h = ProbeResult(fmt, side, side, orientation, ch, depth, mode, False, anim, prog)
            worst = max(worst, D.decode_cost(h))
    assert worst <= ops.DEFAULT_MAX_DECODE_BYTES


def test_max_decode_bytes_refuses_from_the_header():
    """Defect 7: a 35-byte GIF declaring a 13000x13000 screen decoded 169 M pixels (8.1 s, 1.6 GB)."""
    bomb = M.gif_screen_bomb(13000)
    hdr = resolve(bomb).header
    cost = D.decode_cost(hdr)
    assert cost == 13000 * 13000 * 4  # palette image (1) + output (3)
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip",
                             max_decode_bytes=256 << 20)
    t = time.perf_counter()
    b = proc([bomb, crop("chelsea", 30, 40)])
    assert time.perf_counter() - t < WATCHDOG_S
    assert list(b.errors) == [0]
    assert "max_decode_bytes" in str(b.errors[0]) and f"{cost:,}" in str(b.errors[0])
    from vlmprep.plan import plan_image
    with pytest.raises(ImageError, match="max_decode_bytes"):
        plan_image(proc.pipeline, resolve(bomb).hw, header=hdr)
    assert plan_image(proc.pipeline, resolve(bomb).hw).ok  # without a header: nothing to check


# case -> side for the child-process meter (outputs of 36-48 MB: the per-pixel terms dominate)
MEM_CASES = {"gif_screen_bomb": 4000, "png16_rgba": 3000, "jpeg_rgb": 4000, "jpeg_cmyk": 3000,
             "png_palette_trns": 4000, "png_text_flood": 1000}
CONSTANT = 16 << 20  # a strip's temporaries and allocator slack


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
@pytest.mark.parametrize("name", list(MEM_CASES))
def test_peak_decode_memory_within_the_prediction(name):
    """Defect 7: 16-bit RGBA cost ~39 bytes a pixel (uint32 copies), a transparent palette PNG
    ~22, a CMYK JPEG ~14; a PNG's text chunks added up to 64 MiB whatever its size (Pillow
    inflates them while decoding); now the header's prediction (4-16 a pixel) bounds the peak."""
    with tempfile.TemporaryDirectory() as tmp:
        m = M.measure(name, MEM_CASES[name], tmp)
    assert m["growth"] <= m["predicted"] + CONSTANT, m
    assert m["predicted"] <= 16 * m["output"] / 3


def _tiff_strips(n_offsets: int) -> bytes:
    """A 1x1 uncompressed RGB TIFF whose StripOffsets/StripByteCounts list ``n_offsets`` strips
    (its layout has one)."""
    entries = []
    pixel_at = 8
    arrays_at = 16
    ifd_at = arrays_at + 8 * n_offsets

    def e(tag, typ, num, value):
        entries.append(struct.pack("<HHLL", tag, typ, num, value))
    e(256, 4, 1, 1)
    e(257, 4, 1, 1)
    e(258, 3, 1, 8)
    e(259, 3, 1, 1)
    e(262, 3, 1, 2)
    e(273, 4, n_offsets, arrays_at if n_offsets > 1 else pixel_at)
    e(277, 3, 1, 3)
    e(278, 4, 1, 1)
    e(279, 4, n_offsets, arrays_at + 4 * n_offsets if n_offsets > 1 else 3)
    arrays = struct.pack(f"<{n_offsets}L", *[pixel_at] * n_offsets) + \
        struct.pack(f"<{n_offsets}L", *[3] * n_offsets) if n_offsets > 1 else b"\0" * 8
    ifd = struct.pack("<H", len(entries)) + b"".join(entries) + b"\0\0\0\0"
    return b"II*\x00" + struct.pack("<L", ifd_at) + b"\x10\x20\x30\x00" + b"\0" * 4 + arrays + ifd


def test_tiff_strip_offsets_beyond_its_layout_are_refused(monkeypatch):
    """Pillow makes a Python tile of every offset: 1M offsets (a 7 MiB file of a 1x1 image) take
    0.46 s, so a 256 MiB file ~17 s of one worker, whatever the pixel count."""
    good = _tiff_strips(1)
    with Image.open(io.BytesIO(good)) as im:
        assert np.array_equal(D.decode(resolve(good)), np.asarray(im.convert("RGB")))
    _no_decoder(monkeypatch)
    with pytest.raises(ImageError, match=r"at most 1 strip offsets .* got 200,000"):
        D.decode(resolve(_tiff_strips(200_000)))


def test_jpeg_scan_floods_are_refused(monkeypatch):
    """Each scan is a pass over the whole image: 1,000 copies of a 14-byte refinement scan made a
    2000x2000 progressive JPEG of 87 KB take Pillow 5.2 s (a 179 Mpx one: minutes)."""
    prog = encode(crop("astronaut", 64, 80), "jpeg_progressive")
    first = prog.index(b"\xff\xda")
    last = prog.rindex(b"\xff\xda")
    eoi = prog.rindex(b"\xff\xd9")
    assert 5 < 1 + prog.count(b"\xff\xda", first + 2, eoi) <= D._MAX_JPEG_SCANS
    assert D.decode(resolve(prog)).shape == (64, 80, 3)  # an ordinary progressive file passes
    flood = prog[:eoi] + prog[last:eoi] * 300 + prog[eoi:]
    _no_decoder(monkeypatch)
    with pytest.raises(ImageError, match="at most 128 JPEG scans"):
        D.decode(resolve(flood))


def test_jpeg_scan_count_is_bytes_count():
    """The scan count (numpy, for speed) counts what ``bytes.count`` counts, at every edge."""
    rng = np.random.default_rng(7)
    for _ in range(3000):
        n = int(rng.integers(0, 40))
        data = bytes(rng.choice(np.array([0xFF, 0xDA, 0x00, 0xD9], np.uint8), n))
        a = int(rng.integers(0, n + 1))
        b = int(rng.integers(a, n + 1))
        assert D._count_sos(data, a, b) == data.count(b"\xff\xda", a, b), (data, a, b)
    prog = encode(crop("astronaut", 64, 80), "jpeg_progressive")
    assert D._count_sos(prog, 0, len(prog)) == prog.count(b"\xff\xda") > 5


@pytest.mark.skipif(not any(b == "dali" for b in _backends()), reason="nvidia-dali is not installed")
def test_dali_cpu_never_hands_hostile_exif_to_dalis_decoder():
    """A PNG whose eXIf IFD0 declares 65,535 entries (2 present) killed the process (SIGSEGV)
    inside DALI's decoder; the same block in a JPEG APP1 too is decoded by our path now. Run in
    a child process: a crash must fail this test, not end the session."""
    code = ("import sys; sys.path[:0] = [%r, %r]\n"
            "import hostile_corpus as hc, vlmprep, torch\n"
            "bad = hc.exif_payload('many_entries')\n"
            "items = [hc.png_with_exif(bad), hc.jpeg_with_exif(bad), hc.format_files()['png']]\n"
            "for one in items[:2]:  # alone, as the fuzzer found it\n"
            "    assert not vlmprep.Processor('qwen2-vl', backend='dali', errors='skip')([one]).errors\n"
            "got = vlmprep.Processor('qwen2-vl', backend='dali', errors='skip', dtype='uint8')(items)\n"
            "ref = vlmprep.Processor('qwen2-vl', backend='reference', errors='skip', dtype='uint8')(items)\n"
            "assert sorted(got.errors) == sorted(ref.errors), (got.errors, ref.errors)\n"
            "assert got.pixel_values.shape == ref.pixel_values.shape\n"
            "alone = vlmprep.Processor('qwen2-vl', backend='dali', dtype='uint8')(items[2:])\n"
            "n = alone.pixel_values.shape[0]\n"
            "assert torch.equal(got.pixel_values[-n:], alone.pixel_values)\n"
            "print('ok')\n") % (os.path.join(os.path.dirname(os.path.dirname(__file__)), "hostile"),
                                os.path.dirname(os.path.dirname(__file__)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.returncode, r.stderr[-3000:])


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">L", len(body)) + kind + body + struct.pack(">L", zlib.crc32(kind + body))


def _png_with_text(rgb: np.ndarray, chunks: list[bytes]) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "PNG")
    png = buf.getvalue()
    return png[:33] + b"".join(chunks) + png[33:]


def _raw_profile_exif(orientation: int) -> bytes:
    """ImageMagick's "Raw profile type exif" zTXt: hex of 'Exif\\0\\0' + a TIFF IFD."""
    tiff = b"II*\x00" + struct.pack("<LH", 8, 1) + struct.pack("<HHLHH", 0x0112, 3, 1, orientation, 0) \
        + b"\0\0\0\0"
    payload = b"Exif\x00\x00" + tiff
    text = b"\nexif\n%8d\n" % len(payload) + payload.hex().encode() + b"\n"
    return _png_chunk(b"zTXt", b"Raw profile type exif\x00\x00" + zlib.compress(text))


def _xmp_itxt(orientation: int) -> bytes:
    xmp = (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/'
           b'22-rdf-syntax-ns#"><rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" '
           b'tiff:Orientation="%d"/></rdf:RDF></x:xmpmeta>' % orientation)
    return _png_chunk(b"iTXt", b"XML:com.adobe.xmp\x00\x00\x00\x00\x00" + xmp)


@pytest.mark.parametrize("where", ["raw_exif_ztxt", "xmp_itxt", "plain_text"])
@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_png_text_chunks_left_out_at_decode_keep_the_orientation(where, orientation):
    """The decode leaves a PNG's text chunks out (Pillow inflates up to 64 MiB of them); the
    orientation they carry comes from the probe: the pixels equal Pillow + exif_transpose."""
    from PIL import ImageOps
    rgb = crop("astronaut", 24, 40)
    chunk = {"raw_exif_ztxt": _raw_profile_exif, "xmp_itxt": _xmp_itxt,
             "plain_text": lambda o: _png_chunk(b"tEXt", b"Comment\x00orientation %d" % o)}[where]
    data = _png_with_text(rgb, [chunk(orientation), _png_chunk(b"tEXt", b"Title\x00x")])
    with Image.open(io.BytesIO(data)) as img:
        img.load()
        want = np.asarray(ImageOps.exif_transpose(img).convert("RGB"))
    if where == "plain_text":
        assert want.shape == rgb.shape  # no orientation in a plain comment
    else:
        assert orientation == 1 or not np.array_equal(want, rgb)  # Pillow reads it: a real case
    got = D.decode(resolve(data))
    np.testing.assert_array_equal(got, want)
    assert D._png_without_text(data).count(b"zTXt") + D._png_without_text(data).count(b"tEXt") \
        + D._png_without_text(data).count(b"iTXt") == 0


_CHUNK_BOMB = (  # 95 bytes from the pipeline fuzzer: a 12x8 16-bit gray PNG whose last chunk
    # header declares 2,732,982,272 bytes; OpenCV (the 16-bit decoder) allocated it: 3.1 GB peak
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x0c\x00\x00\x00\x08\x10\x00\x00\x00\x00"
    b"\xb8\x1f\x9dn\x00\x00\x00&ImT\xc1\x08D\x1dA\x01\x01\x00\x00\x00\x82\xa0|\xe6\xd0\xc6v "
    b"\xa0\xe6\xa2\xe6\xa2\xe6\xa2\xe6\xa2\xe6\xa2\xe6\xa2\xe6\xa2\xe6\x1av \xa0\xe6\xa2\xe6\xa2"
    b"\xe6\xa2\xe6\x00\x00IEND\xaeB`\x82")


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_png_chunk_longer_than_the_file_is_refused_before_any_decoder(backend):
    """A chunk declaring more bytes than the file holds is a truncated file: refused by the
    structure check, so no decoder allocates what it declares (child process: peak RSS)."""
    code = ("import resource, sys, vlmprep\n"
            "p = vlmprep.Processor('qwen2-vl', backend=sys.argv[1], errors='skip')\n"
            "p([b'\\x89PNG'])  # imports and first-call allocations before the baseline\n"
            "r0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "b = p([bytes.fromhex(sys.argv[2])])\n"
            "grow = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - r0\n"
            "print(grow // 1024, '|', b.errors[0].reason if b.errors else 'accepted')\n")
    r = subprocess.run([sys.executable, "-c", code, backend, _CHUNK_BOMB.hex()], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    grow_mib, reason = r.stdout.strip().splitlines()[-1].split(" | ")
    assert "fit in the file" in reason and "2,732,982,272" in reason, reason
    assert int(grow_mib) < 64, f"peak grew {grow_mib} MiB"
    with pytest.raises(ImageError, match="fit in the file"):
        D.check_structure(_CHUNK_BOMB, resolve(_CHUNK_BOMB).header)
