"""Multi-page TIFF through ``vlmprep.Document`` (issue 31 item 1): each frame is one page at its
stored size, planned from its IFD tags (no frame decoded) and processed bit for bit as
``proc([that frame as a PIL image])`` (the oracle: the image path on Pillow's own frame, which
tests/families check against transformers). TIFFs are written by Pillow (save_all) in the
modes scans come in; the IFD loop is patched by hand into Pillow's output."""
from __future__ import annotations

import io
import struct

import numpy as np
import PIL.Image
import PIL.TiffImagePlugin
import pytest

import vlmprep
from vlmprep import Document, ImageError

FAMILIES = ["qwen2-vl", "internvl"]
SIZES = [(64, 48), (30, 90), (120, 37), (10, 10)]  # (W, H) per frame, as Pillow counts
MODES = ["RGB", "L", "P", "1"]


def _frames(seed: int = 0) -> list[PIL.Image.Image]:
    rng = np.random.default_rng(seed)
    out = []
    for (w, h), mode in zip(SIZES, MODES, strict=True):
        rgb = PIL.Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        out.append(rgb if mode == "RGB" else rgb.convert(mode))
    return out


def _tiff(frames, compression=None) -> bytes:
    buf = io.BytesIO()
    kw = {"compression": compression} if compression else {}
    frames[0].save(buf, format="TIFF", save_all=True, append_images=frames[1:], **kw)
    return buf.getvalue()


@pytest.fixture(scope="module")
def tiff4() -> bytes:
    return _tiff(_frames())


def _decoded(data: bytes) -> list[PIL.Image.Image]:
    im = PIL.Image.open(io.BytesIO(data))
    out = []
    for k in range(im.n_frames):
        im.seek(k)
        out.append(im.copy())
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_tiff_plan_from_tags_without_decoding(family, tiff4, monkeypatch):
    proc = vlmprep.Processor(family, backend="reference")

    def boom(self, *a, **k):
        raise AssertionError("a frame was decoded")
    monkeypatch.setattr(PIL.TiffImagePlugin.TiffImageFile, "load", boom)
    plan = proc.plan(documents=[Document(tiff4, pages=[3, 1, 0])])
    assert [p.source_hw for p in plan.images] == [(10, 10), (90, 30), (48, 64)]
    (dp,) = plan.documents
    assert dp.dpi is None and dp.pages == [3, 1, 0] and dp.fit == "as-is"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_tiff_pages_equal_the_frames_as_images(family, backend, tiff4):
    proc = vlmprep.Processor(family, backend=backend)
    frames = _decoded(tiff4)
    assert [f.mode for f in frames] == MODES
    got = proc(documents=[Document(tiff4)])
    want = proc(frames)
    assert np.array_equal(got.pixel_values.numpy(), want.pixel_values.numpy())
    assert got.cu_seqlens.tolist() == want.cu_seqlens.tolist()
    assert got.num_tokens == want.num_tokens == proc.plan(documents=[Document(tiff4)]).num_tokens
    parts = list(proc.stream(Document(tiff4, pages=[2, 3]), pages_per_batch=1))
    for part, k in zip(parts, [2, 3], strict=True):
        assert np.array_equal(part.pixel_values.numpy(), proc([frames[k]]).pixel_values.numpy())


def test_compressed_tiff_frames(tiff4):
    rgb = [f.convert("RGB") for f in _frames(1)]
    data = _tiff(rgb, compression="tiff_lzw")
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    got = proc(documents=[Document(data, pages=[1, 0])])
    want = proc([_decoded(data)[1], _decoded(data)[0]])
    assert np.array_equal(got.pixel_values.numpy(), want.pixel_values.numpy())


def test_tiff_page_limits_and_options(tiff4):
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc(documents=[Document(tiff4, max_pages=3), Document(tiff4, pages=[1, 9]),
                        Document(tiff4, dpi=200), Document(tiff4, max_pages=2)])
    errs = {k: str(e) for k, e in b.errors.items()}
    # max_pages + 1 frames walked: all 4 here (the count is exact), 3 of 4 for max_pages=2
    assert "at most 3 pages" in errs[0] and "4 selected of 4" in errs[0] and "range(3)" in errs[0]
    assert "document 1 page 9" in errs[2] and "4-page TIFF" in errs[2]
    assert "dpi=None for a TIFF" in errs[3]
    assert "document 3" in errs[4] and "more than 2 frames" in errs[4]
    assert sorted(errs) == [0, 2, 3, 4] and b.num_tokens[1] > 0
    ok = proc(documents=[Document(tiff4, max_pages=3, pages=range(3))])
    assert len(ok.num_tokens) == 3 and not ok.errors


def test_tiff_budget_drops_pages_only(tiff4):
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    per = proc.plan(documents=[Document(tiff4)]).num_tokens
    plan = proc.plan(documents=[Document(tiff4, max_tokens=per[0] + per[1])])
    (dp,) = plan.documents
    assert (dp.fit, dp.dpi, dp.pages, dp.dropped) == ("pages", None, [0, 1], [2, 3])


def _looped(data: bytes) -> bytes:
    """``data`` (a Pillow TIFF, little-endian) with its second IFD's next-IFD offset pointing
    back to the first IFD: a chain that never ends unless the reader notices."""
    assert data[:4] == b"II*\x00"
    first = struct.unpack_from("<I", data, 4)[0]
    n = struct.unpack_from("<H", data, first)[0]
    second = struct.unpack_from("<I", data, first + 2 + 12 * n)[0]
    m = struct.unpack_from("<H", data, second)[0]
    out = bytearray(data)
    struct.pack_into("<I", out, second + 2 + 12 * m, first)
    return bytes(out)


def test_ifd_loop_is_a_short_document_not_a_hang(tiff4):
    data = _looped(tiff4)
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    plan = proc.plan(documents=[Document(data)])
    assert [p.source_hw for p in plan.images] == [(48, 64), (90, 30)]
    b = proc(documents=[Document(data, pages=[0, 1, 2])])
    assert "document 0 page 2" in str(b.errors[2]) and "2-page TIFF" in str(b.errors[2])


def test_damaged_tiff_frame_is_its_page_error(tiff4):
    frames = [f.convert("RGB") for f in _frames(2)]
    data = bytearray(_tiff(frames, compression="tiff_lzw"))
    im = PIL.Image.open(io.BytesIO(bytes(data)))
    im.seek(2)
    off = im.tag_v2[273][0]  # StripOffsets of frame 2: scribble over its LZW data
    data[off:off + 40] = b"\xff" * 40
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc(documents=[Document(bytes(data))])
    assert b.num_tokens[0] > 0 and b.num_tokens[1] > 0 and b.num_tokens[3] > 0
    assert list(b.errors) == [2] and "document 0 page 2" in str(b.errors[2])
    assert "decoder error" in str(b.errors[2])


def test_not_a_document_names_both_forms():
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc(documents=[b"GIF89a nope"])
    assert "PDF" in str(b.errors[0]) and "TIFF" in str(b.errors[0])
    with pytest.raises(ImageError, match="TIFF"):
        vlmprep.Processor("qwen2-vl", backend="reference")(documents=[b"II*\x00" + b"\x00" * 4])
