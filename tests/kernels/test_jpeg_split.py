"""The JPEG ops on two threads split one decode in two (csrc/kernels/decode_units.h): a second
libjpeg-turbo decoder skips to ``jpeg_split_row`` (entropy decoding the rows above, nothing
else) and decodes the rest. Checked here: the split happens where the rule says (and not on
progressive files, short images or outputs whose resize and stores fill a thread); the bytes on 2
and 3 threads equal 1 thread's and Pillow's for every op; damaged or cut files are declined
on 2 threads exactly when on 1, and accepted damage gives the same bytes."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from _support.imgdata import tiled
from PIL import Image


def _save(img: np.ndarray, **kw) -> bytes:
    b = io.BytesIO()
    Image.fromarray(img).save(b, "JPEG", **kw)
    return b.getvalue()


# (label, bytes, iMCU rows): large enough that 2 threads are used (>= 512 KiB decoded)
JPEGS = [
    ("4:2:0 q90", lambda: _save(tiled("astronaut", 613, 700), quality=90, subsampling=2), 16),
    ("4:2:2 q75", lambda: _save(tiled("coffee", 500, 811), quality=75, subsampling=1), 8),
    ("4:4:4 q95", lambda: _save(tiled("chelsea", 457, 640), quality=95, subsampling=0), 8),
    ("gray", lambda: _save(tiled("coffee", 900, 520)[..., 0], quality=85), 8),
    ("restart markers", lambda: _save(tiled("rocket", 520, 700), quality=80, restart_marker_rows=3), 16),
    ("tall narrow", lambda: _save(tiled("chelsea", 1500, 131), quality=88), 16),
]


def _pil(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.mark.parametrize("label,make,imcu", JPEGS, ids=[j[0] for j in JPEGS])
def test_split_row_follows_the_rule(jpeg, label, make, imcu):
    data = make()
    h, w = _pil(data).shape[:2]
    s = (h * 65 // 100) // imcu * imcu
    assert jpeg.jpeg_split_row(data) == s > 0  # a decode alone
    # the more the op writes beside the decode, the earlier the split (the first thread then
    # resizes and writes while the second decodes), and none when that work fills a thread
    splits = [jpeg.jpeg_split_row(data, h * w * k // 8, h * w * k * 3 // 8) for k in range(1, 9)]
    assert all(a >= b for a, b in zip(splits, splits[1:])), splits
    assert 0 < splits[1] < s and all(v % imcu == 0 for v in splits), splits
    assert jpeg.jpeg_split_row(data, h * w, h * w * 24) == 0  # float32 Qwen rows at 1x


def test_no_split_where_it_saves_nothing(jpeg):
    img = tiled("coffee", 600, 700)
    assert jpeg.jpeg_split_row(_save(img, quality=85, progressive=True)) == 0  # every scan first
    assert jpeg.jpeg_split_row(_save(img[:127], quality=85)) == 0  # under 8 iMCU rows of 16
    assert jpeg.jpeg_split_row(_save(img[:128], quality=85)) == 80
    assert jpeg.jpeg_split_row(b"GIF89a" + bytes(100)) == -1


def _poison(jpeg, flat: bytes, hw) -> None:
    """Fill this thread's kept decode buffer with another image's rows, so a unit that ran
    before its rows were decoded reads wrong pixels rather than the last call's right ones."""
    jpeg.set_num_threads(1)
    assert jpeg.decode_resize(flat, hw, [(0, 0, *hw)], [(8, 8)], "bilinear")[1] == ""


@pytest.mark.parametrize("label,make,imcu", JPEGS, ids=[j[0] for j in JPEGS])
def test_two_threads_give_the_same_bytes(jpeg, label, make, imcu):
    data = make()
    pix = _pil(data)
    H, W = pix.shape[:2]
    assert jpeg.jpeg_split_row(data) > 0
    for threads in (1, 2, 3):
        assert np.array_equal(jpeg.decode_jpeg(data, (H, W), num_threads=threads).numpy(), pix), (label, threads)
    flat = _save(np.full((H, W, 3), 77, np.uint8), quality=90)
    lut = torch.randn(3, 256, generator=torch.Generator().manual_seed(1))
    # rows: a resize to half (split) and to 1.1x (one decoder), bands straddling the split
    for scale, split in ((0.5, True), (1.1, False)):
        h, w = (28 * max(1, round(v * scale / 28)) for v in (H, W))
        n = (h // 14) * (w // 14) * 3 * 14 * 14 * 2
        assert (jpeg.jpeg_split_row(data, h * w, n * 4) > 0) == split, (label, scale)
        outs = []
        for threads in (2, 1):
            _poison(jpeg, flat, (H, W))
            jpeg.set_num_threads(threads)
            out = torch.empty(n)
            assert jpeg.decode_resize_normalize_patchify(data, (H, W), (h, w), "bicubic", lut, out, 0,
                                                         "merge_grouped", 14, 2, 2) == ""
            outs.append(out)
        assert torch.equal(outs[0], outs[1]), (label, scale)
    # canvases: the whole image, a box across the split, a box below it (InternVL's shapes)
    sizes = [(H // 2, W // 2), (40, 60), (30, 20)]
    px = sum(a * b for a, b in sizes)
    s = jpeg.jpeg_split_row(data, px, 3 * px)
    assert s > 0, label
    boxes = [(0, 0, H, W), (max(0, s - 40), 3, min(80, H - max(0, s - 40)), W - 3), (s, 0, H - s, W // 2)]
    want = [np.asarray(Image.fromarray(np.ascontiguousarray(pix[t:t + bh, x:x + bw])).resize(
        (sw, sh), Image.Resampling.BICUBIC)) for (t, x, bh, bw), (sh, sw) in zip(boxes, sizes)]
    for threads in (2, 1):
        _poison(jpeg, flat, (H, W))
        jpeg.set_num_threads(threads)
        got, why = jpeg.decode_resize(data, (H, W), boxes, sizes, "bicubic")
        assert why == "" and all(np.array_equal(g.numpy(), x) for g, x in zip(got, want)), (label, threads)


def _damaged(data: bytes):
    """(label, bytes): bit errors at fractions of the scan data, cut files with and without an
    end marker."""
    sos = data.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    span = len(data) - 2 - start
    out = []
    for frac in (0.1, 0.4, 0.6, 0.75, 0.95):
        at = start + int(span * frac)
        for flip in (0x01, 0x5A, 0xFF):
            d = bytearray(data)
            d[at] ^= flip
            d[at + 7] ^= flip
            out.append((f"bits at {frac:.0%} ^{flip:#x}", bytes(d)))
        out.append((f"cut at {frac:.0%}", data[:at]))
        out.append((f"cut at {frac:.0%} + EOI", data[:at] + b"\xff\xd9"))
    out.append(("zeroed 60-70%", data[:start + int(span * 0.6)] + bytes(int(span * 0.1))
                + data[start + int(span * 0.7):]))
    return out


def test_damage_is_declined_alike_on_two_threads(jpeg):
    data = dict((j[0], j[1]) for j in JPEGS)["4:2:0 q90"]()
    H, W = _pil(data).shape[:2]
    assert jpeg.jpeg_split_row(data) > 0 and jpeg.jpeg_split_row(data, 300 * 340, 300 * 340 * 3) > 0
    declined = accepted = 0
    for label, d in _damaged(data):
        res = {}
        for threads in (1, 2):
            try:
                res[threads] = ("ok", jpeg.decode_jpeg(d, (H, W), num_threads=threads).numpy())
            except RuntimeError as e:
                res[threads] = ("declined", str(e).split(";")[0])
            jpeg.set_num_threads(threads)
            canv, why = jpeg.decode_resize(d, (H, W), [(0, 0, H, W)], [(300, 340)], "bilinear")
            res[(threads, "canvas")] = ("declined", why) if why else ("ok", canv[0].numpy())
        for key in ((1, 2), ((1, "canvas"), (2, "canvas"))):
            a, b = res[key[0]], res[key[1]]
            assert a[0] == b[0], (label, key, a[0], b[0], a[1] if a[0] == "declined" else b[1])
            if a[0] == "ok":
                assert np.array_equal(a[1], b[1]), (label, key)
        declined += res[1][0] == "declined"
        accepted += res[1][0] == "ok"
    assert declined >= 10 and accepted >= 5  # both outcomes reached (17 and 9 when written)
