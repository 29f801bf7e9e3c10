"""Every kernel entry point with its inputs and outputs flush against an unmapped page
(tests/_support/guarded.py), on every instruction-set path, over the sizes where vector loads
and stores meet a row's or a buffer's end. Run by test_guard_pages.py in a child process
(``python -c "from tests.kernels._guard_sweep import main; main('resize')"``): an over-read or
over-write kills the child with SIGSEGV, and the last "case" line it printed names the call.
Results are also checked against the oracles (Pillow, tests/kernels/oracle.py), so a path that
stays in bounds by computing something else fails too. Exit status 1: wrong bytes (listed).
"""
from __future__ import annotations

import io
import os
import sys

import numpy as np
import torch
from PIL import Image

from tests._support.guarded import guarded, guarded_copy, guarded_view
from tests.kernels.oracle import group_rows, rows

ISAS = ("native", "avx2", "scalar")  # VLMPREP_CPU_ISA, read by the kernels at every call
FILTERS = ("bilinear", "bicubic", "lanczos")
PIL_FILTER = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
DTYPES = {"float32": (np.float32, torch.float32), "bfloat16": (np.uint16, torch.bfloat16),
          "uint8": (np.uint8, torch.uint8)}
# order, patch, merge, temporal (the families' and small odd ones: rows of 6 to 96 bytes)
ORDERS = [("merge_grouped", 14, 2, 2), ("merge_grouped", 2, 2, 3), ("merge_grouped", 16, 1, 1),
           ("raster", 16, 1, 1), ("raster", 3, 1, 1), ("naflex", 16, 1, 1), ("naflex", 5, 1, 1)]

_failures: list[str] = []
_cases = 0


def _isa(isa: str) -> None:
    if isa == "native":
        os.environ.pop("VLMPREP_CPU_ISA", None)
    else:
        os.environ["VLMPREP_CPU_ISA"] = isa


def _case(text: str) -> None:
    global _cases
    _cases += 1
    print("case", text, flush=True)  # the last line before a crash names the call


def _expect(ok: bool, text: str) -> None:
    if not ok:
        _failures.append(text)
        print("WRONG", text, flush=True)


def _rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def _inputs(img: np.ndarray):
    """The placements of one (h, w, 3) source: flush against the page after it, right after the
    page before it, and a crop (row stride 3w + 7 bytes) whose last row ends at the page."""
    yield "end", torch.from_numpy(guarded_copy(img, "end"))
    yield "start", torch.from_numpy(guarded_copy(img, "start"))
    h, w, _ = img.shape
    yield "crop", torch.from_numpy(guarded_view(img, 3 * w + 7, "end"))


def _out(n: int, dtype: str, where: str) -> torch.Tensor:
    """n output elements of dtype, flush against a guard page, poisoned (0xAB bytes)."""
    np_t, t = DTYPES[dtype]
    a = guarded((n,), np_t, where)
    a.view(np.uint8)[...] = 0xAB
    return torch.from_numpy(a).view(t)


def _pil_resize(img: np.ndarray, hw, f: str) -> np.ndarray:
    return np.asarray(Image.fromarray(img).resize((hw[1], hw[0]), PIL_FILTER[f]))


def _lut(dtype: str):
    if dtype == "uint8":
        return None, None
    t = torch.from_numpy(_rng().standard_normal((3, 256)).astype(np.float32) * 3).to(DTYPES[dtype][1])
    return t, t.float().numpy()


def _want(img: np.ndarray, lut_np, order, P, m, T, dtype) -> torch.Tensor:
    return torch.from_numpy(rows(img, lut_np, order, P, m, T)).to(DTYPES[dtype][1])


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


# ----------------------------------------------------------------------------------- resize

def _resize_sizes():
    """(H, W) -> [(h, w)]: 1x1, 1xN, Nx1, 17x9 / 9x17, widths 1..80, widths whose rows are near
    16/32/64/128/192 bytes, upscales, downscales by 4 and 6 and by more than 8 (where AVX-512
    declines)."""
    srcs = [(1, 1), (1, 2), (2, 1), (1, 80), (80, 1), (9, 17), (17, 9), (4, 700), (5, 1000), (700, 3)]
    srcs += [(3, w) for w in range(1, 81)]
    srcs += [(2, b // 3 + d) for b in (16, 32, 64, 128, 192, 256) for d in (-1, 0, 1, 2)]
    out = {}
    for H, W in srcs:
        # W // 4, W // 6: the horizontal pass's unrolled 8-13 tap pairs (bicubic, lanczos)
        outs = {(H, max(1, W // 9)), (H, max(1, W // 4)), (H, max(1, W // 6)), (H, 2 * W + 1),
                (max(1, H // 9), W), (H + 3, W), (1, 1),
                (H, 1), (2 * H, 3 * W), (H, max(1, W - 1))}
        out[(H, W)] = sorted(outs - {(H, W)})
    return out


def _oracle(match: str):
    """The resize a match reproduces: Pillow's, or torchvision's (``_tv_resize``)."""
    return _pil_resize if match == "pillow" else _tv_resize


def _filters(match: str) -> tuple[str, ...]:
    """The filters a match has an oracle for (torch's antialiased uint8 lanczos: torch >= 2.14)."""
    if match == "pillow" or hasattr(torch._C._nn, "_upsample_lanczos2d_aa"):
        return FILTERS
    return ("bilinear", "bicubic")


def sweep_resize(match: str = "pillow") -> None:
    from vlmprep import kernels
    rng = _rng()
    op = "resize" if match == "pillow" else f"resize {match}"
    for k, ((H, W), outs) in enumerate(_resize_sizes().items()):
        img = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
        for f in _filters(match):
            wants = {hw: _oracle(match)(img, hw, f) for hw in outs}
            for where, src in _inputs(img):
                for isa in ISAS:
                    _isa(isa)
                    kernels.set_num_threads(1 + k % 2)
                    for hw in outs:
                        _case(f"{op} {H}x{W} -> {hw[0]}x{hw[1]} {f} input at the {where} {isa}")
                        got = kernels.resize(src, hw, f, match=match).numpy()
                        _expect(np.array_equal(got, wants[hw]), f"{op} {H}x{W} -> {hw} {f} {where} {isa}")


# ------------------------------------------------------------------------ normalize_patchify

def _np_sizes(order, P, m):
    if order == "tiles":
        return [(1, 1), (17, 9), (9, 17), (1, 80), (80, 1)] + [(2, w) for w in range(1, 81, 3)] \
            + [(3, b // 3 + d) for b in (64, 128, 192) for d in (-1, 0, 1)]
    q = P * m
    return [(q * a, q * b) for a in (1, 2, 3) for b in (1, 2, 3, 5)]


def sweep_normalize_patchify() -> None:
    from vlmprep import kernels
    rng = _rng()
    k = 0
    for order, P, m, T in ORDERS + [("tiles", 14, 1, 1)]:
        for dtype in DTYPES:
            lut, lut_np = _lut(dtype)
            for h, w in _np_sizes(order, P, m):
                k += 1
                # Two images: the second is last in the output, so its rows meet the page.
                imgs = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(2)]
                want = torch.cat([_want(i, lut_np, order, P, m, T, dtype) for i in imgs])
                n0 = len(rows(imgs[0], None, order, P, m, T))
                for where in ("end", "start", "crop"):
                    srcs = [dict(_inputs(i))[where] for i in imgs]
                    for isa in ISAS:
                        _isa(isa)
                        kernels.set_num_threads(1 + k % 2)
                        out = _out(want.numel(), dtype, "start" if where == "start" else "end")
                        _case(f"normalize_patchify {h}x{w} {order} P{P} m{m} T{T} {dtype} input and "
                              f"output at the {where} {isa}")
                        kernels.normalize_patchify(srcs, lut, out, [0, n0], order, P, m, T)
                        _expect(_same(out, want), f"normalize_patchify {h}x{w} {order} P{P} m{m} T{T} "
                                                  f"{dtype} {where} {isa}")
    _sweep_groups(rng)
    _sweep_streamed(rng)


def _sweep_streamed(rng: np.random.Generator) -> None:
    """float32 outputs over the 8 MiB streaming threshold (the AVX2 rows store them straight
    from registers): the input and the output flush against a page, a still image and a
    temporal group, every path."""
    from vlmprep import kernels
    lut, lut_np = _lut("float32")
    for order, P, m, T, group in (("merge_grouped", 14, 2, 2, False), ("merge_grouped", 16, 2, 2, False),
                                  ("raster", 14, 1, 1, False), ("merge_grouped", 14, 2, 2, True)):
        q = P * m
        shape = (T, q * 30, q * 30, 3) if group else (q * 30, q * 30, 3)
        img = rng.integers(0, 256, shape, dtype=np.uint8)
        want = torch.from_numpy(group_rows(img, lut_np, P, m) if group
                                else rows(img, lut_np, order, P, m, T)).float()
        for where, src in (_groups(img) if group else _inputs(img)):
            for isa in ISAS:
                _isa(isa)
                out = _out(want.numel(), "float32", "start" if where == "start" else "end")
                _case(f"normalize_patchify streamed {shape} {order} P{P} at the {where} {isa}")
                kernels.normalize_patchify([src], lut, out, [0], order, P, m, T)
                _expect(_same(out, want), f"normalize_patchify streamed {shape} {order} P{P} {where} {isa}")


def _groups(frames: np.ndarray):
    """A (T, h, w, 3) temporal group flush against a guard page: at its end (the last frame's last
    row), at its start, and as a view whose rows and frames are further apart than they span."""
    yield "end", torch.from_numpy(guarded_copy(frames, "end"))
    yield "start", torch.from_numpy(guarded_copy(frames, "start"))
    T, h, w, _ = frames.shape
    wide = guarded((T, h + 1, w + 3, 3), np.uint8, "end")[:, 1:, 3:]
    wide[...] = frames
    yield "crop", torch.from_numpy(wide)


def _sweep_groups(rng: np.random.Generator) -> None:
    """normalize_patchify and resize_normalize_patchify of a video's temporal groups (frame t to
    slot t), every path; each result against the oracle."""
    from vlmprep import kernels
    for P, m, T in ((14, 2, 2), (16, 2, 2), (2, 2, 3), (8, 1, 2)):
        for dtype in DTYPES:
            lut, lut_np = _lut(dtype)
            for h, w in _np_sizes("merge_grouped", P, m)[::2]:
                frames = rng.integers(0, 256, (T, h, w, 3), dtype=np.uint8)
                want = torch.from_numpy(group_rows(frames, lut_np, P, m)).to(DTYPES[dtype][1])
                for where, src in _groups(frames):
                    for isa in ISAS:
                        _isa(isa)
                        out = _out(want.numel(), dtype, "start" if where == "start" else "end")
                        _case(f"normalize_patchify group {T}x{h}x{w} P{P} m{m} {dtype} at the {where} {isa}")
                        kernels.normalize_patchify([src], lut, out, [0], "merge_grouped", P, m, T)
                        _expect(_same(out, want), f"normalize_patchify group {T}x{h}x{w} P{P} {dtype} "
                                                  f"{where} {isa}")


# ----------------------------------------------------------------- resize_normalize_patchify

def sweep_resize_normalize_patchify(match: str = "pillow") -> None:
    from vlmprep import kernels
    rng = _rng()
    op = "resize_normalize_patchify" if match == "pillow" else f"resize_normalize_patchify {match}"
    filters = _filters(match)
    srcs = [(1, 1), (1, 37), (37, 1), (9, 17), (17, 9), (5, 200), (200, 5), (3, 80), (40, 61)]
    k = 0
    for H, W in srcs:
        img = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
        for j, (order, P, m, T) in enumerate(ORDERS):
            q = P * m
            for a, b in ((1, 1), (1, 3), (2, 1), (3, 5)):
                k += 1
                hw = (q * a, q * b)
                if hw == (H, W):
                    continue
                f = filters[k % len(filters)]
                dtype = list(DTYPES)[(k + j) % 3]
                lut, lut_np = _lut(dtype)
                want = _want(_oracle(match)(img, hw, f), lut_np, order, P, m, T, dtype)
                for where, src in _inputs(img):
                    for isa in ISAS:
                        _isa(isa)
                        kernels.set_num_threads(1 + k % 2)
                        out = _out(want.numel(), dtype, "start" if where == "start" else "end")
                        _case(f"{op} {H}x{W} -> {hw[0]}x{hw[1]} {f} {order} P{P} "
                              f"m{m} T{T} {dtype} input and output at the {where} {isa}")
                        kernels.resize_normalize_patchify(src, hw, f, lut, out, 0, order, P, m, T, match=match)
                        _expect(_same(out, want), f"{op} {H}x{W} -> {hw} {f} "
                                                  f"{order} P{P} {dtype} {where} {isa}")
    for H, W in srcs[::2]:  # a video's temporal group of two frames, Qwen2-VL's order
        frames = rng.integers(0, 256, (2, H, W, 3), dtype=np.uint8)
        for a, b in ((1, 1), (2, 3)):
            k += 1
            hw, f, dtype = (28 * a, 28 * b), filters[k % len(filters)], list(DTYPES)[k % 3]
            lut, lut_np = _lut(dtype)
            resized = np.stack([_oracle(match)(fr, hw, f) for fr in frames])
            want = torch.from_numpy(group_rows(resized, lut_np, 14, 2)).to(DTYPES[dtype][1])
            for where, src in _groups(frames):
                for isa in ISAS:
                    _isa(isa)
                    kernels.set_num_threads(1 + k % 2)
                    out = _out(want.numel(), dtype, "start" if where == "start" else "end")
                    _case(f"{op} group 2x{H}x{W} -> {hw} {f} {dtype} at the {where} {isa}")
                    kernels.resize_normalize_patchify(src, hw, f, lut, out, 0, "merge_grouped", 14, 2, 2,
                                                      match=match)
                    _expect(_same(out, want), f"{op} group 2x{H}x{W} -> {hw} {f} {dtype} {where} {isa}")


# ------------------------------------------------------------------------------------ JPEG

def _jpegs():
    """(label, bytes): sizes 1x1 to 33x65 over subsamplings, gray, progressive, restarts."""
    rng = _rng()
    out = []
    for h, w in ((1, 1), (1, 17), (17, 1), (9, 17), (16, 16), (33, 65), (8, 64)):
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        img = (img // 32 * 32).astype(np.uint8)  # some structure, so the scans are not all noise
        for sub in (0, 1, 2):
            b = io.BytesIO()
            Image.fromarray(img).save(b, "JPEG", quality=90, subsampling=sub)
            out.append((f"{h}x{w} s{sub}", b.getvalue()))
        b = io.BytesIO()
        Image.fromarray(img).convert("L").save(b, "JPEG", quality=90)
        out.append((f"{h}x{w} gray", b.getvalue()))
        b = io.BytesIO()
        Image.fromarray(img).save(b, "JPEG", quality=80, progressive=True)
        out.append((f"{h}x{w} progressive", b.getvalue()))
    b = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (40, 44, 3), dtype=np.uint8)).save(
        b, "JPEG", quality=80, restart_marker_rows=1)
    out.append(("40x44 restart markers", b.getvalue()))
    return out


def _guarded_bytes(data: bytes, where: str) -> torch.Tensor:
    return torch.from_numpy(guarded_copy(np.frombuffer(data, dtype=np.uint8), where))


def sweep_jpeg() -> None:
    from vlmprep import kernels
    if not kernels.jpeg_available():
        print("SKIP: built without libjpeg-turbo", flush=True)
        return
    ops = torch.ops.vlmprep
    for k, (label, data) in enumerate(_jpegs()):
        pix = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        H, W = pix.shape[:2]
        order, P, m, T = ORDERS[k % len(ORDERS)]
        q = P * m
        hw = (q, 2 * q)
        dtype = list(DTYPES)[k % 3]
        lut, lut_np = _lut(dtype)
        f = FILTERS[k % 3]
        want = _want(_pil_resize(pix, hw, f), lut_np, order, P, m, T, dtype)
        for where in ("end", "start"):
            src = _guarded_bytes(data, where)
            _case(f"decode_jpeg {label} data at the {where}")
            _expect(np.array_equal(ops.decode_jpeg(src, H, W).numpy(), pix), f"decode_jpeg {label} {where}")
            for isa in ISAS:
                _isa(isa)
                for threads in (1, 2):
                    out = _out(want.numel(), dtype, where)
                    _case(f"decode_resize_normalize_patchify {label} -> {hw} {f} {order} P{P} {dtype} data "
                          f"and output at the {where} {isa} {threads} threads")
                    ops.decode_resize_normalize_patchify(src, H, W, hw[0], hw[1], f, lut, out, 0, order,
                                                         P, m, T, threads)
                    _expect(_same(out, want), f"decode_resize_normalize_patchify {label} {where} {isa}")
            # decode_resize: the canvases of a crop and of the whole image (InternVL's shape)
            top, left = H // 3, W // 4
            boxes = [(top, left, H - top, W - left), (0, 0, H, W)]
            sizes = [(max(1, (H - top) * 2), max(1, (W - left) // 2 + 1)), (q, q)]
            canv = [_pil_resize(np.ascontiguousarray(pix[t:t + h, x:x + w]), hw2, f)
                    for (t, x, h, w), hw2 in zip(boxes, sizes)]
            for isa in ISAS:
                _isa(isa)
                for threads in (1, 2):
                    _case(f"decode_resize {label} boxes {boxes} -> {sizes} {f} data at the {where} "
                          f"{isa} {threads} threads")
                    got = ops.decode_resize(src, H, W, [v for b in boxes for v in b],
                                            [v for hw2 in sizes for v in hw2], f, threads)
                    _expect(len(got) == 2 and all(np.array_equal(g.numpy(), c) for g, c in zip(got, canv)),
                            f"decode_resize {label} {where} {isa} {threads}")
        # Cut short at many points, flush against the page: declined with a reason, no fault.
        for cut in sorted({1, 2, 3, 4, 10, 20, len(data) // 3, len(data) // 2, len(data) - 2, len(data) - 1}):
            if not 0 < cut < len(data):
                continue
            src = _guarded_bytes(data[:cut], "end")
            _case(f"decode_jpeg {label} cut at {cut} of {len(data)} bytes, at the end")
            try:
                ops.decode_jpeg(src, H, W)
            except RuntimeError:
                pass  # declined: the caller decodes with Pillow (which reports the damage)
            out = _out(want.numel(), dtype, "end")
            _case(f"decode_resize_normalize_patchify {label} cut at {cut}")
            try:
                ops.decode_resize_normalize_patchify(src, H, W, hw[0], hw[1], f, lut, out, 0, order, P,
                                                     m, T, 2)
            except RuntimeError:
                pass
            _case(f"decode_resize {label} cut at {cut}")
            try:
                ops.decode_resize(src, H, W, [0, 0, H, W], [q, q], f, 2)
            except RuntimeError:
                pass


def sweep_jpeg_split() -> None:
    """A JPEG large enough for the two-thread split (a second decoder skips to the split row),
    whole and cut, flush against either page."""
    from vlmprep import kernels
    if not kernels.jpeg_available():
        print("SKIP: built without libjpeg-turbo", flush=True)
        return
    ops = torch.ops.vlmprep
    rng = _rng()
    img = (rng.integers(0, 256, (300, 640, 3), dtype=np.uint8) // 16 * 16).astype(np.uint8)
    for sub in (0, 2):
        b = io.BytesIO()
        Image.fromarray(img).save(b, "JPEG", quality=90, subsampling=sub)
        data = b.getvalue()
        assert kernels.jpeg_split_row(data) > 0
        pix = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        want = _pil_resize(pix, (150, 300), "bilinear")  # under half the pixels: split
        assert kernels.jpeg_split_row(data, 150 * 300, 150 * 300 * 3) > 0
        for where in ("end", "start"):
            src = _guarded_bytes(data, where)
            _case(f"decode_jpeg 300x640 s{sub} on 2 threads, data at the {where}")
            _expect(np.array_equal(ops.decode_jpeg(src, 300, 640, 2).numpy(), pix), f"split decode s{sub} {where}")
            _case(f"decode_resize 300x640 s{sub} -> 150x300 on 2 threads, data at the {where}")
            got = ops.decode_resize(src, 300, 640, [0, 0, 300, 640], [150, 300], "bilinear", 2)
            _expect(np.array_equal(got[0].numpy(), want), f"split decode_resize s{sub} {where}")
        for cut in (len(data) // 5, len(data) // 2, len(data) * 4 // 5, len(data) - 1):
            src = _guarded_bytes(data[:cut], "end")
            _case(f"decode_jpeg 300x640 s{sub} cut at {cut} of {len(data)} on 2 threads")
            try:
                ops.decode_jpeg(src, 300, 640, 2)
            except RuntimeError:
                pass  # declined


def sweep_stream_store() -> None:
    """The output-write floor's streamed stores: every byte set, none outside, for sizes around
    a 64-byte line and buffers flush against either guard page."""
    ops = torch.ops.vlmprep
    for isa in ISAS:
        _isa(isa)
        for n in (*range(1, 70), 127, 128, 129, 191, 4095, 4096, 4097, 65536 + 63):
            for where in ("end", "start"):
                out = _out(n, "uint8", where)
                _case(f"stream_store {n} bytes at the {where} {isa}")
                ops.stream_store(out, 0x5C)
                _expect(bool((out == 0x5C).all()), f"stream_store {n} {where} {isa}")


# ------------------------------------------------------- the torchvision match (all entry points)

def _tv_resize(img: np.ndarray, hw, f: str) -> np.ndarray:
    """torchvision's antialiased uint8 resize, the variant's oracle (channels-last: see
    test_resize_torchvision._tv)."""
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as tvF
    mode = {"bilinear": InterpolationMode.BILINEAR, "bicubic": InterpolationMode.BICUBIC,
            "lanczos": InterpolationMode.LANCZOS}[f]
    chw = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)
    return tvF.resize(chw, list(hw), interpolation=mode, antialias=True).permute(1, 2, 0).contiguous().numpy()


def sweep_resize_torchvision() -> None:
    """match="torchvision" through resize and resize_normalize_patchify (the Pillow sweeps with
    torchvision's oracle) and the JPEG ops: the same passes as Pillow's with other weights (other
    window starts at the borders), and the AVX2 int16 passes."""
    from vlmprep import kernels
    try:
        from torchvision.transforms.v2.functional._geometry import _do_native_uint8_resize_on_cpu  # noqa: F401
    except ImportError:
        print("SKIP: no torchvision", flush=True)
        return
    sweep_resize("torchvision")
    sweep_resize_normalize_patchify("torchvision")
    tv_filters = _filters("torchvision")
    if not kernels.jpeg_available():
        print("SKIP: the JPEG ops (built without libjpeg-turbo)", flush=True)
        return
    ops = torch.ops.vlmprep
    for k, (label, data) in enumerate(_jpegs()[::2]):
        pix = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        H, W = pix.shape[:2]
        order, P, m, T = ORDERS[k % len(ORDERS)]
        q = P * m
        hw = (q, 2 * q)
        dtype = list(DTYPES)[k % 3]
        lut, lut_np = _lut(dtype)
        f = tv_filters[k % len(tv_filters)]
        want = _want(_tv_resize(pix, hw, f), lut_np, order, P, m, T, dtype)
        canv = _tv_resize(pix, (q, q + 1), f)
        for where in ("end", "start"):
            src = _guarded_bytes(data, where)
            for isa in ISAS:
                _isa(isa)
                for threads in (1, 2):
                    out = _out(want.numel(), dtype, where)
                    _case(f"decode_resize_normalize_patchify torchvision {label} -> {hw} {f} {order} P{P} "
                          f"{dtype} data and output at the {where} {isa} {threads} threads")
                    ops.decode_resize_normalize_patchify(src, H, W, hw[0], hw[1], f, lut, out, 0, order,
                                                         P, m, T, threads, "torchvision")
                    _expect(_same(out, want), f"decode_resize_normalize_patchify torchvision {label} {where} {isa}")
                    _case(f"decode_resize torchvision {label} -> {q}x{q + 1} {f} data at the {where} {isa} "
                          f"{threads} threads")
                    got = ops.decode_resize(src, H, W, [0, 0, H, W], [q, q + 1], f, threads, "torchvision")
                    _expect(np.array_equal(got[0].numpy(), canv), f"decode_resize torchvision {label} {where} {isa}")


SWEEPS = {"resize": sweep_resize, "resize_torchvision": sweep_resize_torchvision,
          "normalize_patchify": sweep_normalize_patchify,
          "resize_normalize_patchify": sweep_resize_normalize_patchify, "jpeg": sweep_jpeg,
          "jpeg_split": sweep_jpeg_split,
          "stream_store": sweep_stream_store}


def main(name: str) -> None:
    from vlmprep import kernels
    if not kernels.available():
        print(f"SKIP: kernels not available: {kernels.why_unavailable()}", flush=True)
        sys.exit(0)
    SWEEPS[name]()
    print(f"done: {_cases} calls, {len(_failures)} wrong", flush=True)
    sys.exit(1 if _failures else 0)


if __name__ == "__main__":
    main(sys.argv[1])
