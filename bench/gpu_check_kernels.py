"""GPU check of the compiled normalize_patchify: the CUDA kernel against its CPU twin
(bit-exact, every order and dtype, a ragged batch) and its achieved bandwidth next to a
device-to-device copy of the same bytes in the same run (goal: >= 70% of the copy).
Called by bench/gpu_check.py; `--device cpu` runs the twin against itself (a dry run)."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from vlmprep import kernels

CASES = [("merge_grouped", 14, 2, 2), ("merge_grouped", 16, 2, 2), ("raster", 16, 1, 1),
         ("naflex", 16, 1, 1), ("tiles", 14, 1, 1)]


def elems(h: int, w: int, order: str, P: int, T: int) -> int:
    return 3 * h * w if order == "tiles" else (h // P) * (w // P) * 3 * T * P * P


def _run(imgs, lut, order, P, m, T, dtype, device):
    n = [elems(i.shape[0], i.shape[1], order, P, T) for i in imgs]
    out = torch.full((sum(n),), 0xAB if dtype == torch.uint8 else float("nan"), dtype=dtype,
                     device=device)
    kernels.normalize_patchify([i.to(device) for i in imgs],
                               None if lut is None else lut.to(device), out,
                               np.cumsum([0] + n)[:-1].tolist(), order, P, m, T)
    return out


def small_cases(device: str) -> bool:
    """A small ragged batch per order and dtype (odd sizes, 1-patch images), device vs twin: the
    case compute-sanitizer memcheck runs over (every block shape, little time under the tool)."""
    rng = np.random.default_rng(1)
    ok = True
    for order, P, m, T in CASES:
        q = P * (m if order == "merge_grouped" else 1)
        imgs = [torch.from_numpy(rng.integers(0, 256, (q * (k % 2 + 1), q * (k % 3 + 1), 3), dtype=np.uint8))
                for k in range(5)]
        for dtype in (torch.float32, torch.bfloat16, torch.uint8):
            lut = None if dtype == torch.uint8 else torch.randn(3, 256).to(dtype)
            got = _run(imgs, lut, order, P, m, T, dtype, device).cpu()
            want = _run(imgs, lut, order, P, m, T, dtype, "cpu")
            ok &= bool(torch.equal(got.view(torch.uint8), want.view(torch.uint8)))
    return ok


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def check(device: str, corrupt: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
          ) -> tuple[list[dict], bool]:
    """Every case against the twin (``corrupt`` is applied to the device output before the
    comparison: gpu_check's failure injection), then the bandwidth. -> (rows, all bit-exact)."""
    rows, ok = [], True
    if kernels.why_unavailable():
        return [{"check": "kernels", "result": f"not built: {kernels.why_unavailable()}"}], False
    rng = np.random.default_rng(0)
    for order, P, m, T in CASES:
        q = P * (m if order == "merge_grouped" else 1)
        imgs = [torch.from_numpy(rng.integers(0, 256, ((k % 3 + 1) * q * 3, (k % 4 + 1) * q * 2, 3),
                                              dtype=np.uint8)) for k in range(7)]
        for dtype in (torch.float32, torch.bfloat16, torch.uint8):
            lut = None if dtype == torch.uint8 else torch.randn(3, 256).to(dtype)
            got = corrupt(_run(imgs, lut, order, P, m, T, dtype, device)).cpu()
            want = _run(imgs, lut, order, P, m, T, dtype, "cpu")
            same = bool(torch.equal(got.view(torch.uint8), want.view(torch.uint8)))
            ok &= same
            rows.append({"check": f"kernel_vs_twin {order} P{P} {str(dtype)[6:]}",
                         "result": "bit-exact" if same else "MISMATCH"})
    # Strided crops made on the device (row stride > 3 * width): a crop sent from the host would
    # arrive contiguous (.to(device) packs it), so this is the only way the kernel sees one.
    for order, P, m, T in CASES:
        q = P * (m if order == "merge_grouped" else 1)
        big = torch.from_numpy(rng.integers(0, 256, (4 * q, 6 * q + 13, 3), dtype=np.uint8))
        crops_host = [big[: 2 * q, 5:5 + 3 * q], big[q:4 * q, 11:11 + 2 * q]]
        big_dev = big.to(device)
        crops_dev = [big_dev[: 2 * q, 5:5 + 3 * q], big_dev[q:4 * q, 11:11 + 2 * q]]
        lut = torch.randn(3, 256)
        n = [elems(c.shape[0], c.shape[1], order, P, T) for c in crops_host]
        offs = np.cumsum([0] + n)[:-1].tolist()
        got = torch.full((sum(n),), float("nan"), device=device)
        kernels.normalize_patchify(crops_dev, lut.to(device), got, offs, order, P, m, T)
        want = torch.full((sum(n),), float("nan"))
        kernels.normalize_patchify(crops_host, lut, want, offs, order, P, m, T)
        same = bool(torch.equal(corrupt(got).cpu().view(torch.uint8), want.view(torch.uint8)))
        ok &= same
        rows.append({"check": f"strided_crop_vs_twin {order} P{P} (row stride {big.stride(0)} > 3w)",
                     "result": "bit-exact" if same else "MISMATCH"})
    # Bandwidth: 8 resized 1080p Qwen2-VL images (1092x1932) -> float32 rows.
    imgs = [torch.randint(0, 256, (1092, 1932, 3), dtype=torch.uint8, device=device) for _ in range(8)]
    lut = torch.randn(3, 256, device=device)
    n = elems(1092, 1932, "merge_grouped", 14, 2)
    out = torch.empty(8 * n, device=device)
    offs = [k * n for k in range(8)]
    call = lambda: kernels.normalize_patchify(imgs, lut, out, offs, "merge_grouped", 14, 2, 2)  # noqa: E731
    src = torch.empty_like(out)
    copy = lambda: out.copy_(src)  # noqa: E731
    times = {}
    for name, fn in (("kernel", call), ("d2d_copy", copy)):
        fn()
        _sync(device)
        best = float("inf")
        for _ in range(20):
            _sync(device)
            t0 = torch.cuda.Event(enable_timing=True) if device.startswith("cuda") else None
            if t0 is not None:
                t1 = torch.cuda.Event(enable_timing=True)
                t0.record()
                fn()
                t1.record()
                torch.cuda.synchronize()
                best = min(best, t0.elapsed_time(t1) / 1000)
            else:
                import time
                s = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - s)
        times[name] = best
    written = out.numel() * 4
    read = sum(i.numel() for i in imgs)
    kernel_gbs = (written + read) / times["kernel"] / 1e9
    copy_gbs = 2 * written / times["d2d_copy"] / 1e9  # a copy reads and writes every byte
    frac = kernel_gbs / copy_gbs
    # The timed call's output is checked too (a fast wrong kernel must not pass): against the
    # twin. The copy timed last overwrote ``out``: one more kernel call first.
    call()
    _sync(device)
    want = torch.empty(out.numel())
    kernels.normalize_patchify([i.cpu() for i in imgs], lut.cpu(), want, offs, "merge_grouped", 14, 2, 2)
    same = bool(torch.equal(corrupt(out).cpu().view(torch.uint8), want.view(torch.uint8)))
    ok &= same
    rows.append({"check": "bandwidth run output vs twin", "result": "bit-exact" if same else "MISMATCH"})
    rows.append({"check": "bandwidth 8x1080p qwen2-vl f32",
                 "result": f"kernel {kernel_gbs:.0f} GB/s ({1000 * times['kernel']:.2f} ms), "
                           f"copy {copy_gbs:.0f} GB/s: {100 * frac:.0f}% (goal >= 70%)",
                 "kernel_ms": round(1000 * times["kernel"], 3), "kernel_GB_per_s": round(kernel_gbs, 1),
                 "copy_GB_per_s": round(copy_gbs, 1), "fraction_of_copy": round(frac, 3)})
    return rows, ok
