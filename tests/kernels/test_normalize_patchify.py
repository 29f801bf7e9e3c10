"""normalize_patchify's CPU twin (and the CUDA kernel, gpu-marked) against the numpy oracle:
bit-exact, every order and dtype, random ragged batches (fresh data each run; replay with
VLMPREP_TEST_SEED), output poisoned first so an unwritten element shows. The twin's two CPU
paths both run: the band path (AVX-512 VBMI: merge_grouped and raster; the row path where the
CPU lacks it) and the row path, with its AVX2 patch rows (``VLMPREP_CPU_ISA=avx2``) and in plain C++
(``VLMPREP_CPU_ISA=scalar``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from _support.devices import devices
from _support.seed import SEED

from tests.kernels.oracle import rows

ORDERS = {  # order -> (patch_size, merge_size, temporal_patch_size) as the families use them
    "merge_grouped": [(14, 2, 2), (16, 2, 2), (14, 1, 1), (2, 2, 3)],
    "raster": [(16, 1, 1), (3, 1, 1)],
    "naflex": [(16, 1, 1), (5, 1, 1)],
    "tiles": [(14, 1, 1)],
}
CASES = [(lay, *cfg) for lay, cfgs in ORDERS.items() for cfg in cfgs]
DTYPES = [torch.float32, torch.bfloat16, torch.uint8]
POISON = {torch.float32: float("nan"), torch.bfloat16: float("nan"), torch.uint8: 0xAB}


def _batch(rng, order, P, m, n):
    """n uint8 images (some are crops of a larger canvas: row stride > 3w) of legal sizes."""
    q = P * (m if order == "merge_grouped" else 1)
    out = []
    for _ in range(n):
        h = int(rng.integers(1, 5)) * q if order != "tiles" else int(rng.integers(1, 40))
        w = int(rng.integers(1, 5)) * q if order != "tiles" else int(rng.integers(1, 40))
        canvas = rng.integers(0, 256, (h + 3, w + 5, 3), dtype=np.uint8)
        y0, x0 = int(rng.integers(0, 4)), int(rng.integers(0, 6))
        out.append(canvas[y0:y0 + h, x0:x0 + w])  # a view: row stride 3 * (w + 5)
    return out


def _lut(rng, dtype):
    if dtype == torch.uint8:
        return None
    t = torch.from_numpy(rng.standard_normal((3, 256)).astype(np.float32) * 3)
    return t.to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s bit patterns, for a bit-exact comparison (a NaN poison never equals anything)."""
    return t.view({torch.uint8: torch.uint8, torch.bfloat16: torch.int16}.get(t.dtype, torch.int32))


def _oracle(imgs, lut, order, P, m, T, dtype):
    lut_np = None if lut is None else lut.float().numpy()
    flat = np.concatenate([rows(i, lut_np, order, P, m, T) for i in imgs])
    return torch.from_numpy(flat).to(dtype)  # lut values are exact in dtype: no rounding here


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("order,P,m,T", CASES)
def test_matches_oracle(kernels, cpu_path, order, P, m, T, dtype, device):
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    imgs = _batch(rng, order, P, m, int(rng.integers(1, 6)))
    lut = _lut(rng, dtype)
    want = _oracle(imgs, lut, order, P, m, T, dtype)
    for threads in (1, 2):
        kernels.set_num_threads(threads)
        try:
            out = torch.full((want.numel(),), POISON[dtype], dtype=dtype, device=device)
            ts = [torch.from_numpy(i).to(device) if device != "cpu" else torch.from_numpy(i) for i in imgs]
            offs = np.cumsum([0] + [len(rows(i, None, order, P, m, T)) for i in imgs])[:-1]
            kernels.normalize_patchify(ts, None if lut is None else lut.to(device), out,
                                       offs.tolist(), order, P, m, T)
        finally:
            kernels.set_num_threads(None)
        got = out.cpu()
        # Bit-exact: compare the bit patterns (NaN poison never equals anything).
        assert torch.equal(_bits(got), _bits(want)), \
            f"seed {SEED}, threads {threads}, {cpu_path} path"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_batch_streamed_and_threaded(kernels, cpu_path, dtype):
    """Three 1092x1932 Qwen2-VL images (32,292 rows; >= 32 MiB of output in every dtype, so
    the rows are streamed out with non-temporal stores), on 1 and 2 threads, equal the oracle."""
    rng = np.random.default_rng(SEED)
    imgs = [rng.integers(0, 256, (1092, 1932, 3), dtype=np.uint8) for _ in range(3)]
    lut = _lut(rng, dtype)
    want = _oracle(imgs, lut, "merge_grouped", 14, 2, 2, dtype)
    for threads in (1, 2):
        kernels.set_num_threads(threads)
        out = torch.full((want.numel(),), POISON[dtype], dtype=dtype)
        kernels.normalize_patchify([torch.from_numpy(i) for i in imgs], lut, out,
                                   [k * 10764 * 1176 for k in range(3)], "merge_grouped", 14, 2, 2)
        kernels.set_num_threads(None)
        assert torch.equal(out.view(torch.uint8), want.view(torch.uint8)), \
            f"seed {SEED}, {threads} threads, {cpu_path} path"


@pytest.mark.parametrize("order,P,m,T", [("merge_grouped", 14, 2, 2), ("merge_grouped", 16, 2, 2),
                                         ("merge_grouped", 14, 2, 1), ("raster", 14, 1, 1),
                                         ("raster", 16, 1, 1)])
@pytest.mark.parametrize("shift", [0, 1, 4])
def test_large_float32_rows_streamed_from_registers(kernels, cpu_path, order, P, m, T, shift):
    """float32 rows over the streaming threshold, which the AVX2 row path stores non-temporally
    straight from registers when the output is 16-byte aligned (shift 0 and 4 elements) and
    through its staging copy otherwise (shift 1): every patch size and slot count that path
    takes, two images (the second offset by the first's rows), equal to the oracle with the
    elements before, between and after untouched."""
    rng = np.random.default_rng(SEED + 7)
    q = P * m
    imgs = [rng.integers(0, 256, (q * (896 // q + 1), q * (1008 // q + 1), 3), dtype=np.uint8),
            rng.integers(0, 256, (q * 3, q * 5, 3), dtype=np.uint8)]
    lut = _lut(rng, torch.float32)
    want = _oracle(imgs, lut, order, P, m, T, torch.float32)
    assert want.numel() * 4 >= 8 << 20  # streamed
    first = _oracle(imgs[:1], lut, order, P, m, T, torch.float32).numel()
    for threads in (1, 2):
        kernels.set_num_threads(threads)
        out = torch.full((want.numel() + shift + 3,), float("nan"))
        try:
            kernels.normalize_patchify([torch.from_numpy(i) for i in imgs], lut, out,
                                       [shift, shift + first], order, P, m, T)
        finally:
            kernels.set_num_threads(None)
        assert torch.equal(_bits(out[shift:shift + want.numel()]), _bits(want)), \
            f"seed {SEED}, {threads} threads, {cpu_path} path, shift {shift}"
        assert out[:shift].isnan().all() and out[shift + want.numel():].isnan().all()


@pytest.mark.parametrize("bad,match", [
    (lambda t: t[:, :, :2].contiguous(), "expected \\(h, w, 3\\) uint8"),
    (lambda t: t.float(), "expected \\(h, w, 3\\) uint8"),
    (lambda t: t[:20], "not multiples of patch_size"),
])
def test_bad_inputs_say_what_was_expected(kernels, bad, match):
    img = torch.zeros((28, 56, 3), dtype=torch.uint8)
    out = torch.empty(8 * 1176)
    with pytest.raises(RuntimeError, match=match):
        kernels.normalize_patchify([bad(img)], torch.zeros(3, 256), out, [0], "merge_grouped", 14, 2, 2)


def test_out_too_small_and_lut_mismatch(kernels):
    img = torch.zeros((28, 56, 3), dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="size out from the plan"):
        kernels.normalize_patchify([img], torch.zeros(3, 256), torch.empty(100), [0],
                                   "merge_grouped", 14, 2, 2)
    with pytest.raises(RuntimeError, match="lut: expected a contiguous \\(3, 256\\)"):
        kernels.normalize_patchify([img], torch.zeros(3, 256, dtype=torch.float64),
                                   torch.empty(8 * 1176), [0], "merge_grouped", 14, 2, 2)
    with pytest.raises(RuntimeError, match="order: expected"):
        kernels.normalize_patchify([img], torch.zeros(3, 256), torch.empty(8 * 1176), [0],
                                   "zigzag", 14, 2, 2)


def test_opcheck(kernels):
    """Schema, fake (meta) implementation and dispatch agree (torch.library.opcheck)."""
    img = torch.randint(0, 256, (28, 56, 3), dtype=torch.uint8)
    out = torch.empty(8 * 1176)
    torch.library.opcheck(torch.ops.vlmprep.normalize_patchify.default,
                          ([img], torch.randn(3, 256), out, [0], "merge_grouped", 14, 2, 2, 1))
    torch.library.opcheck(torch.ops.vlmprep.resize.default, (img, 30, 40, "bicubic", 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_tiles_streamed(kernels, cpu_path, dtype):
    """Nine 448x448 tiles cut from one canvas (InternVL at 1080p) plus a 333x337 one (planes
    that start and end mid-line): >= 8 MiB in every dtype, so streamed; equal to the oracle."""
    rng = np.random.default_rng(SEED)
    canvas = rng.integers(0, 256, (896, 1792, 3), dtype=np.uint8)
    imgs = [canvas[r * 448:(r + 1) * 448, c * 448:(c + 1) * 448] for r in range(2) for c in range(4)]
    imgs += [rng.integers(0, 256, (448, 448, 3), dtype=np.uint8),
             rng.integers(0, 256, (333, 337, 3), dtype=np.uint8)]
    lut = _lut(rng, dtype)
    want = _oracle(imgs, lut, "tiles", 14, 1, 1, dtype)
    offs = np.cumsum([0] + [3 * i.shape[0] * i.shape[1] for i in imgs])[:-1].tolist()
    for threads in (1, 2):
        kernels.set_num_threads(threads)
        out = torch.full((want.numel(),), POISON[dtype], dtype=dtype)
        kernels.normalize_patchify([torch.from_numpy(i) for i in imgs], lut, out, offs, "tiles", 14)
        kernels.set_num_threads(None)
        assert torch.equal(out.view(torch.uint8), want.view(torch.uint8)), \
            f"seed {SEED}, {threads} threads, {cpu_path} path"
