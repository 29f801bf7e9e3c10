"""Harness (c): the compiled ops' Python entry points (vlmprep.kernels) with arbitrary
arguments: sizes and parameters inside and just outside their valid ranges, odd dtypes,
strides and devices, images flush against an unmapped page (an over-read faults), offsets
near INT64_MAX, damaged JPEG bytes.

Guarantee: no crash (SIGSEGV, abort, heap corruption); a refusal is a clean Python exception
(RuntimeError / ValueError / TypeError / OverflowError / IndexError) and the output buffer's
neighbours are untouched; an accepted resize has the asked shape.

    .venv/bin/python fuzz/fuzz_kernels.py fuzz/corpus/kernels fuzz/seeds/kernels -max_total_time=60
"""
from __future__ import annotations

import os
import sys

import _common  # noqa: F401  (sys.path)

sys.path.insert(0, os.path.join(_common.ROOT, "tests"))  # tests/_support/guarded.py

CLEAN = (RuntimeError, ValueError, TypeError, OverflowError, IndexError)
FILTERS = ("bilinear", "bicubic", "lanczos", "nearest", "", "BICUBIC")
ORDERS = ("merge_grouped", "raster", "naflex", "tiles", "", "nope")
EDGE = (0, -1, 1, 2, 3, 7, 8, 13, 14, 16, 28, 2**28, 2**28 + 1, 2**31 - 1, 2**31, 2**32 + 3,
        2**63 - 1, -2**63)
_JPEG: list[bytes] = []


def _jpeg() -> bytes:
    if not _JPEG:
        import io

        import numpy as np
        from PIL import Image
        rng = np.random.default_rng(0)
        img = (rng.random((37, 53, 3)) * 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=80)
        _JPEG.append(buf.getvalue())
    return _JPEG[0]


def _side(fdp, small: int = 300) -> int:
    """Mostly a small valid side; sometimes an edge value just inside / outside the range."""
    if fdp.ConsumeIntInRange(0, 9) == 0:
        return EDGE[fdp.ConsumeIntInRange(0, len(EDGE) - 1)]
    return fdp.ConsumeIntInRange(1, small)


def _out_hw(fdp) -> tuple[int, int]:
    h, w = _side(fdp, 200), _side(fdp, 200)
    # a huge side only next to another large one: the product is then far beyond any
    # allocation (a clean refusal), never a legitimate 1 x 2^28 (800 MB) output to write
    if max(h, w) > 4096 and min(h, w) < 65536:
        h = w = max(h, w)
    return h, w


def _image(fdp):
    import numpy as np
    import torch
    from _support.guarded import guarded_copy, guarded_view
    h, w = fdp.ConsumeIntInRange(0, 70), fdp.ConsumeIntInRange(0, 70)
    kind = fdp.ConsumeIntInRange(0, 9)
    px = np.frombuffer(fdp.ConsumeBytes(h * w * 3).ljust(h * w * 3, b"\x80"), np.uint8).reshape(h, w, 3)
    if kind <= 4:   # the page-end buffer: an over-read past the last pixel faults
        return torch.from_numpy(guarded_copy(px, "end" if kind < 4 else "start"))
    if kind == 5 and h and w:  # rows further apart than their pixels (a crop of a canvas)
        return torch.from_numpy(guarded_view(px, w * 3 + fdp.ConsumeIntInRange(0, 9)))
    if kind == 6:
        return torch.from_numpy(px.copy()).permute(2, 0, 1)  # CHW: wrong layout
    if kind == 7:
        return torch.from_numpy(px.astype(np.float32))
    if kind == 8:
        return torch.from_numpy(px.copy())[:, ::2]  # pixel stride 6
    return torch.from_numpy(px.copy())


def _lut(fdp, dtype):
    import torch
    if dtype == torch.uint8:
        return None if fdp.ConsumeBool() else torch.zeros((3, 256), dtype=torch.float32)
    k = fdp.ConsumeIntInRange(0, 5)
    if k == 0:
        return None
    if k == 1:
        return torch.zeros((3, 255), dtype=dtype)
    if k == 2:
        return torch.zeros((3, 256), dtype=torch.float64)
    return torch.linspace(-1, 1, 768, dtype=torch.float32).to(dtype).reshape(3, 256)


def _out(fdp, need: int):
    """An output tensor with guard zones: the op may write only inside ``out``."""
    import torch
    dtype = (torch.float32, torch.bfloat16, torch.uint8, torch.float16)[fdp.ConsumeIntInRange(0, 3)]
    n = max(0, min(need + fdp.ConsumeIntInRange(-64, 64), 1 << 24))
    backing = torch.full((n + 256,), 7, dtype=dtype)
    return backing, backing[128:128 + n]


def _guard_intact(backing, n) -> None:
    assert bool((backing[:128] == 7).all()) and bool((backing[128 + n:] == 7).all()), \
        "the op wrote outside out (into the guard zones around it)"


def _offset(fdp, need: int) -> int:
    k = fdp.ConsumeIntInRange(0, 9)
    if k == 0:
        return EDGE[fdp.ConsumeIntInRange(0, len(EDGE) - 1)]
    if k == 1:
        return 2**63 - 1 - fdp.ConsumeIntInRange(0, 1 << 20)
    return fdp.ConsumeIntInRange(0, 64) if k > 5 else 0


def _params(fdp):
    order = ORDERS[fdp.ConsumeIntInRange(0, len(ORDERS) - 1)]
    def edge() -> int:
        return EDGE[fdp.ConsumeIntInRange(0, len(EDGE) - 1)]
    patch_size = (14, 16, 1, 2, 28)[fdp.ConsumeIntInRange(0, 4)] if fdp.ConsumeIntInRange(0, 7) else edge()
    merge_size = fdp.ConsumeIntInRange(1, 3) if fdp.ConsumeIntInRange(0, 7) else edge()
    temporal_patch_size = fdp.ConsumeIntInRange(1, 2) if fdp.ConsumeIntInRange(0, 7) else edge()
    return order, patch_size, merge_size, temporal_patch_size


def _need(h: int, w: int, temporal: int) -> int:
    if not (0 < h < 4096 and 0 < w < 4096 and 0 < temporal < 8):
        return 1024
    return h * w * 3 * temporal


def test_one_input(data: bytes) -> None:
    import atheris
    import torch

    from vlmprep import kernels as k
    fdp = atheris.FuzzedDataProvider(data)
    op = fdp.ConsumeIntInRange(0, 5)
    try:
        if op == 0:
            img = _image(fdp)
            h, w = _out_hw(fdp)
            f = FILTERS[fdp.ConsumeIntInRange(0, len(FILTERS) - 1)]
            out = k.resize(img, (h, w), f)
            assert tuple(out.shape) == (h, w, 3) and out.dtype == torch.uint8, (out.shape, h, w)
        elif op in (1, 2):
            img = _image(fdp)
            h, w = _out_hw(fdp)
            order, patch, merge, temporal = _params(fdp)
            backing, out = _out(fdp, _need(h, w, temporal))
            lut = _lut(fdp, out.dtype)
            off = _offset(fdp, out.numel())
            f = FILTERS[fdp.ConsumeIntInRange(0, 2)]
            try:
                if op == 1:
                    k.resize_normalize_patchify(img, (h, w), f, lut, out, off, order, patch, merge, temporal)
                else:
                    data_b = bytearray(_jpeg())
                    for _ in range(fdp.ConsumeIntInRange(0, 8)):  # damage a few bytes
                        if data_b:
                            data_b[fdp.ConsumeIntInRange(0, len(data_b) - 1)] = fdp.ConsumeIntInRange(0, 255)
                    cut = fdp.ConsumeIntInRange(0, len(data_b))
                    src = (37, 53) if fdp.ConsumeIntInRange(0, 3) else (_side(fdp), _side(fdp))
                    k.decode_resize_normalize_patchify(bytes(data_b[:cut] if fdp.ConsumeBool() else data_b),
                                                       src, (h, w), f, lut, out, off, order, patch,
                                                       merge, temporal)
            finally:
                _guard_intact(backing, out.numel())
        elif op == 3:
            n_img = fdp.ConsumeIntInRange(0, 3)
            imgs = [_image(fdp) for _ in range(n_img)]
            order, patch, merge, temporal = _params(fdp)
            need = sum(_need(int(i.shape[0]), int(i.shape[1]), temporal) for i in imgs if i.dim() == 3)
            backing, out = _out(fdp, need)
            lut = _lut(fdp, out.dtype)
            offs = [_offset(fdp, out.numel()) for _ in range(n_img + (1 if fdp.ConsumeIntInRange(0, 9) == 0 else 0))]
            try:
                k.normalize_patchify(imgs, lut, out, offs, order, patch, merge, temporal)
            finally:
                _guard_intact(backing, out.numel())
        elif op == 4:
            data_b = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 4096)) if fdp.ConsumeBool() else _jpeg()
            src = (37, 53) if fdp.ConsumeBool() else (_side(fdp), _side(fdp))
            out = k.decode_jpeg(data_b, src)
            assert tuple(out.shape) == (src[0], src[1], 3), (out.shape, src)
        else:
            shape = [fdp.ConsumeIntInRange(0, 64) for _ in range(fdp.ConsumeIntInRange(0, 3))]
            dt = (torch.float32, torch.uint8, torch.bfloat16)[fdp.ConsumeIntInRange(0, 2)]
            t = k.empty(shape, dt)
            assert tuple(t.shape) == tuple(shape) and t.dtype == dt
    except CLEAN:
        return


if __name__ == "__main__":
    import vlmprep.kernels as k
    if not k.available():
        sys.exit(f"fuzz_kernels: the compiled kernels are not available: {k.why_unavailable()}")
    _common.main(test_one_input, instrument=("vlmprep.kernels",),
                 funcs=(test_one_input, _image, _out_hw, _side, _lut, _out, _offset, _params, _need))
