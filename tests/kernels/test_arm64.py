"""The CPU kernels on aarch64 (issue 28 item 3), bit for bit, under qemu-user.

tests/kernels/arm64_driver.cc is built once with ``aarch64-linux-gnu-g++ -static`` against the
kernels' sources (csrc/sources.json's torch_ext cpu list without csrc/torch/) and run by
``qemu-aarch64`` over one batch of cases per path: NEON (VLMPREP_CPU_ISA unset) and scalar
(VLMPREP_CPU_ISA=scalar), side by side. Oracles: Pillow's ``Image.resize`` on the host for the
Pillow-match resize; the host's compiled kernels (x86) for the torchvision-match resize,
normalize_patchify and resize_normalize_patchify. Every buffer the driver hands a kernel lies
flush against a PROT_NONE page (at its end, or at its start: both modes run), so a read or write
outside it faults under qemu.

Skips when the cross compiler or qemu is missing (apt: g++-aarch64-linux-gnu qemu-user), except
under VLMPREP_REQUIRE_ARM64=1 (``make test-arm64``), where that is a failure. Times under qemu
say nothing about NEON's speed: none are measured here.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from _support import figures
from _support.imgdata import crop, tiled
from _support.seed import SEED
from PIL import Image

pytestmark = pytest.mark.arm64

ROOT = Path(__file__).resolve().parents[2]
CXX, QEMU = "aarch64-linux-gnu-g++", "qemu-aarch64"
PIL_FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
FILTERS = list(PIL_FILTERS)
PATHS = {"neon": None, "scalar": "scalar"}  # the driver's path name -> VLMPREP_CPU_ISA
WATCHDOG_S = 600  # a hang, not a speed bound


def _tools() -> str | None:
    missing = [t for t in (CXX, QEMU) if shutil.which(t) is None]
    return None if not missing else (f"{' and '.join(missing)} not on PATH "
                                     f"(apt: g++-aarch64-linux-gnu qemu-user)")


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    """The driver, built for aarch64 (static: qemu-aarch64 runs it without a sysroot)."""
    reason = _tools()
    if reason:
        if os.environ.get("VLMPREP_REQUIRE_ARM64"):
            pytest.fail(f"VLMPREP_REQUIRE_ARM64 is set but {reason}")
        pytest.skip(reason)
    sources = [s for s in json.loads((ROOT / "csrc/sources.json").read_text())["torch_ext"]["cpu"]
               if not s.startswith("csrc/torch/")]
    out = tmp_path_factory.mktemp("arm64") / "arm64_driver"
    cmd = [CXX, "-std=c++20", "-O3", "-static", "-pthread", "-Icsrc/include", "-Icsrc/kernels",
           "tests/kernels/arm64_driver.cc", *sources, "-o", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=WATCHDOG_S)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-4000:]}"
    return out


@dataclass
class Batch:
    """Cases for one driver run: the input blob, the command lines, each case's expected
    output bytes (None: no oracle here) and a label for failures."""
    blob: bytearray = field(default_factory=bytearray)
    lines: list[str] = field(default_factory=list)
    want: list[bytes | None] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)

    def put(self, a) -> int:
        off = len(self.blob)
        self.blob += np.ascontiguousarray(a).tobytes()
        return off

    def add(self, line: str, want: bytes | None, label: str) -> None:
        self.lines.append(line)
        self.want.append(want)
        self.labels.append(label)
        self.ops.append(line.split()[0])


def _image(rng, h: int, w: int, photo: bool) -> np.ndarray:
    """(h, w, 3) uint8: noise, or a crop of a real photo (mirror-tiled past its size)."""
    if not photo:
        return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    name = "astronaut" if rng.random() < 0.5 else "chelsea"  # 512x512, 300x451
    if h > 300 or w > 451:
        return np.array(tiled(name, h, w))
    return np.array(crop(name, h, w, int(rng.integers(0, 301 - h)), int(rng.integers(0, 452 - w))))


def _resize_sizes(rng) -> list[tuple[int, int, int, int]]:
    """(in_h, in_w, out_h, out_w): every width 1..40 (up, down, same), tall and narrow, wide
    and flat, upscales, downscales by up to ~20x, one axis only."""
    sizes = []
    for w in range(1, 41):
        h = int(rng.integers(1, 13))
        sizes += [(h, w, int(rng.integers(1, 25)), int(rng.integers(1, 61))),  # up or down
                  (h + 8, w, h, max(1, w // 2 + int(rng.integers(0, 2)))),    # down both
                  (h, w, h, int(rng.integers(1, 81))),                        # width only
                  (w, h, int(rng.integers(1, 81)), h)]                        # height only
    for _ in range(40):  # anything from 1 to 200 a side, then the sides' ratios up to ~20
        h, w = int(rng.integers(1, 201)), int(rng.integers(1, 201))
        sizes.append((h, w, max(1, int(h * rng.uniform(0.05, 3))), max(1, int(w * rng.uniform(0.05, 3)))))
    sizes += [(300, 3, 50, 7), (400, 1, 20, 2), (257, 5, 513, 9), (3, 300, 7, 50), (1, 400, 2, 20),
              (5, 257, 9, 513), (1, 1, 1, 1), (1, 1, 9, 13), (17, 9, 17, 9), (9, 17, 9, 40),
              (17, 23, 61, 97), (23, 17, 97, 61), (40, 40, 181, 77),
              (400, 600, 20, 30), (600, 400, 30, 20), (480, 512, 24, 26), (333, 451, 17, 23), (1000, 800, 50, 40),
              (512, 512, 224, 224), (300, 451, 28, 336), (300, 451, 336, 28), (64, 640, 64, 33)]
    return sizes


def _resize_cases(b: Batch, rng, host) -> None:
    for i, (h, w, oh, ow) in enumerate(_resize_sizes(rng)):  # every size: 3 filters, 2 guard modes
        img = _image(rng, h, w, photo=i % 2 == 1 and h >= 8 and w >= 8)
        off = b.put(img)
        for f in FILTERS:
            want = np.asarray(Image.fromarray(img).resize((ow, oh), PIL_FILTERS[f])).tobytes()
            for guard in ("end", "start"):
                pad = int(rng.integers(1, 9)) if i % 3 == 0 else 0
                b.add(f"resize {guard} 1 pillow {f} {off} {h} {w} {pad} {oh} {ow}", want,
                      f"resize pillow {f} {h}x{w} -> {oh}x{ow} pad {pad} {guard}")
    # Two threads (the kernels split only outputs over ~256 KiB per thread) and both guard modes.
    for i, (h, w, oh, ow) in enumerate([(512, 512, 400, 600), (300, 451, 480, 640), (1024, 900, 410, 440)]):
        f = FILTERS[i % 3]
        img = _image(rng, h, w, photo=True)
        want = np.asarray(Image.fromarray(img).resize((ow, oh), PIL_FILTERS[f])).tobytes()
        off = b.put(img)
        for guard in ("end", "start"):
            b.add(f"resize {guard} 2 pillow {f} {off} {h} {w} 0 {oh} {ow}", want,
                  f"resize pillow {f} {h}x{w} -> {oh}x{ow} 2 threads {guard}")
    # The torchvision match (scalar passes on aarch64): the host kernels are its oracle.
    for i, (h, w, oh, ow) in enumerate([(37, 41, 19, 83), (120, 7, 33, 20), (300, 451, 26, 40),
                                        (9, 17, 9, 40), (64, 64, 64, 31), (200, 260, 224, 224)]):
        f = FILTERS[i % 3]
        img = _image(rng, h, w, photo=i % 2 == 0)
        want = None
        if host is not None:
            import torch
            want = host.resize(torch.from_numpy(img), (oh, ow), f, match="torchvision").numpy().tobytes()
        b.add(f"resize {('end', 'start')[i % 2]} 1 torchvision {f} {b.put(img)} {h} {w} 0 {oh} {ow}", want,
              f"resize torchvision {f} {h}x{w} -> {oh}x{ow}")


DSIZE = {"float32": 4, "bfloat16": 2, "uint8": 1}
DTYPES = tuple(DSIZE)
ORDERS = [("merge_grouped", 14, 2, 2), ("merge_grouped", 16, 2, 1), ("raster", 16, 1, 1), ("naflex", 16, 1, 1),
          ("raster", 14, 1, 1), ("naflex", 14, 1, 1)]


def _lut(b: Batch, rng, dtype: str):
    """(lut tensor or None, its blob offset or -1)."""
    if dtype == "uint8":
        return None, -1
    import torch
    lut = torch.from_numpy(rng.standard_normal((3, 256)).astype(np.float32)).to(getattr(torch, dtype))
    return lut, b.put(lut.contiguous().view(torch.uint8).numpy())


def _np_cases(b: Batch, rng, host) -> None:
    import torch
    k = 0
    for order, P, m, T in ORDERS + [("tiles", 1, 1, 1)]:
        for dtype in DTYPES:
            for threads in (1, 2):
                lut, lut_off = _lut(b, rng, dtype)
                q = P * m
                imgs = []
                for _ in range(2):  # a batch of two, back to back in the output
                    if threads == 2:  # big enough for the kernel to start the second thread
                        h, w = _sides(rng, q, MIN_THREADED_BYTES // (3 * T * DSIZE[dtype]) // 2)
                    elif order == "tiles":
                        h, w = int(rng.integers(1, 40)), int(rng.integers(1, 40))
                    else:
                        h, w = q * int(rng.integers(1, 4)), q * int(rng.integers(1, 5))
                    imgs.append(_image(rng, h, w, photo=bool(rng.random() < 0.5)))
                pads = [0 if (k + j) % 2 else int(rng.integers(1, 7)) for j in range(2)]
                want = None
                if host is not None:
                    ts = [torch.from_numpy(i) for i in imgs]
                    n = [_elements(i.shape[0], i.shape[1], order, P, m, T) for i in imgs]
                    out = torch.zeros(sum(n), dtype=getattr(torch, dtype))
                    host.normalize_patchify(ts, lut, out, [0, n[0]], order, P, m, T)
                    want = out.view(torch.uint8).numpy().tobytes()
                samples = " ".join(f"{b.put(i)} {i.shape[0]} {i.shape[1]} {p}" for i, p in zip(imgs, pads))
                b.add(f"np {('end', 'start')[k % 2]} {threads} {order} {dtype} {P} {m} {T} {lut_off} 2 {samples}",
                      want, f"normalize_patchify {order} P{P} m{m} T{T} {dtype} "
                            f"{[i.shape[:2] for i in imgs]} threads {threads}")
                k += 1


# cpu_threads.h: a second thread from 512 KiB of output (normalize_patchify) or resized image (fused)
MIN_THREADED_BYTES = 600_000


def _sides(rng, q: int, pixels: int) -> tuple[int, int]:
    """Random multiples of q with at least `pixels` pixels."""
    h = q * int(rng.integers(4, 12))
    return h, q * -(-pixels // (h * q))


def _elements(h: int, w: int, order: str, P: int, m: int, T: int) -> int:
    if order == "tiles":
        return 3 * h * w
    return (h // P) * (w // P) * 3 * P * P * (T if order == "merge_grouped" else 1)


def _fused_cases(b: Batch, rng, host) -> None:
    import torch
    k = 0
    for order, P, m, T in ORDERS:
        for dtype in DTYPES:
            for f in FILTERS:
                q = P * m
                threads = 2 if k % 3 == 0 else 1
                oh, ow = _sides(rng, q, MIN_THREADED_BYTES // 3) if threads == 2 else \
                    (q * int(rng.integers(1, 5)), q * int(rng.integers(1, 5)))
                h, w = int(rng.integers(1, 3 * oh)), int(rng.integers(1, 3 * ow))
                if k % 7 == 1 and threads == 1:  # a large downscale
                    h, w = oh * int(rng.integers(8, 21)), ow * int(rng.integers(8, 21))
                img = _image(rng, h, w, photo=k % 2 == 0)
                lut, lut_off = _lut(b, rng, dtype)
                pad = 0 if k % 4 else 3
                want = None
                if host is not None:
                    out = torch.zeros(_elements(oh, ow, order, P, m, T), dtype=getattr(torch, dtype))
                    host.resize_normalize_patchify(torch.from_numpy(img), (oh, ow), f, lut, out, 0, order, P, m, T)
                    want = out.view(torch.uint8).numpy().tobytes()
                b.add(f"fused {('end', 'start')[k % 2]} {threads} pillow {f} {b.put(img)} {h} {w} {pad} {oh} {ow} "
                      f"{order} {dtype} {P} {m} {T} {lut_off}", want,
                      f"resize_normalize_patchify {f} {h}x{w} -> {oh}x{ow} {order} P{P} m{m} T{T} {dtype} "
                      f"threads {threads}")
                k += 1


@pytest.fixture(scope="module")
def host():
    """The host's compiled kernels (the oracle of the non-Pillow cases), or None."""
    from vlmprep import kernels
    reason = kernels.why_unavailable()
    if reason is not None and os.environ.get("VLMPREP_REQUIRE_KERNELS"):
        pytest.fail(f"VLMPREP_REQUIRE_KERNELS is set but the kernels did not load: {reason}")
    return kernels if reason is None else None


@pytest.fixture(scope="module")
def batch(host) -> Batch:
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    b = Batch()
    _resize_cases(b, rng, host)
    if host is not None:  # the driver runs these only where they can be checked
        _np_cases(b, rng, host)
        _fused_cases(b, rng, host)
    return b


@dataclass
class Run:
    path_line: str
    outputs: list[bytes]


@pytest.fixture(scope="module")
def runs(driver, batch, tmp_path_factory) -> dict[str, Run]:
    """The batch through the driver under qemu, once per path (both at once: one per core)."""
    d = tmp_path_factory.mktemp("arm64_io")
    blob = d / "in.bin"
    blob.write_bytes(bytes(batch.blob))
    cases = "\n".join(batch.lines) + "\n"

    def one(path: str) -> tuple[str, Run]:
        env = {k: v for k, v in os.environ.items() if k != "VLMPREP_CPU_ISA"}
        if PATHS[path]:
            env["VLMPREP_CPU_ISA"] = PATHS[path]
        out = d / f"out_{path}.bin"
        proc = subprocess.run([QEMU, str(driver), str(blob), str(out)], input=cases, env=env, text=True,
                              capture_output=True, timeout=WATCHDOG_S)
        lines = proc.stdout.splitlines()
        done = [ln for ln in lines if ln.startswith("ok ")]
        assert proc.returncode == 0, (
            f"{path}: exit {proc.returncode} (-11: SIGSEGV, an access outside a buffer) after {len(done)} of "
            f"{len(batch.lines)} cases; next: {batch.labels[len(done)] if len(done) < len(batch.lines) else '-'}\n"
            f"{proc.stderr[-2000:]}")
        assert len(done) == len(batch.lines), (path, len(done), len(batch.lines))
        data = out.read_bytes()
        outputs, at = [], 0
        for ln in done:
            n = int(ln.split()[1])
            outputs.append(data[at:at + n])
            at += n
        assert at == len(data), (path, at, len(data))
        return path, Run(lines[0], outputs)

    with ThreadPoolExecutor(len(PATHS)) as pool:
        return dict(pool.map(one, PATHS))


def _check(batch: Batch, run: Run, op: str) -> tuple[int, int]:
    """(cases, bytes) of `op` compared; asserts every one equal, naming the first that is not."""
    bad, cases, nbytes = [], 0, 0
    for want, got, label, o in zip(batch.want, run.outputs, batch.labels, batch.ops):
        if o != op or want is None:
            continue
        cases += 1
        nbytes += len(want)
        if got != want:
            diff = (np.frombuffer(got, np.uint8) != np.frombuffer(want, np.uint8)).sum() if len(got) == len(want) \
                else f"size {len(got)} != {len(want)}"
            bad.append(f"{label}: {diff} bytes differ")
    assert not bad, f"{len(bad)} of {cases} wrong (seed {SEED}): " + "; ".join(bad[:10])
    return cases, nbytes


@pytest.mark.parametrize("path", list(PATHS))
def test_driver_reports_the_path_it_runs(runs, path):
    """The driver names the path by the kernels' own dispatch (cpu_paths.h): NEON really ran."""
    assert runs[path].path_line.startswith(f"path: resize={path} "), runs[path].path_line


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("op", ["resize", "np", "fused"])
def test_aarch64_outputs_equal_the_oracles(runs, batch, host, path, op):
    """resize: Pillow's bytes (and the host kernels' for the torchvision match); normalize_patchify
    and the fused op: the host kernels' bytes; on NEON and on the scalar path."""
    if op != "resize" and host is None:
        pytest.skip("the host kernels are not built: no oracle for normalize_patchify")
    cases, nbytes = _check(batch, runs[path], op)
    assert cases > 0
    figures.record("arm64 under qemu (cases, bytes compared)", f"{path} {op}: {cases} cases, {nbytes} bytes equal")


def test_a_wrong_output_is_caught(runs, batch):
    """The comparison is not vacuous: NEON's bilinear output differs from Pillow's bicubic."""
    i = next(j for j, ln in enumerate(batch.labels) if ln.startswith("resize pillow bilinear 512x512"))
    parts = batch.lines[i].split()
    off, h, w, oh, ow = int(parts[5]), int(parts[6]), int(parts[7]), int(parts[9]), int(parts[10])
    img = np.frombuffer(bytes(batch.blob[off:off + h * w * 3]), np.uint8).reshape(h, w, 3)
    other = np.asarray(Image.fromarray(img).resize((ow, oh), Image.BICUBIC)).tobytes()
    assert runs["neon"].outputs[i] == batch.want[i]
    assert runs["neon"].outputs[i] != other
