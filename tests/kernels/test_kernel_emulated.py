"""The CUDA kernel's body on the host (tests/kernels/emulate_kernel.cc: one std::thread per CUDA
thread, a barrier per block for __syncthreads) against the CPU twin, every order and dtype, on
fresh random ragged batches, each written once at an aligned output (the kernel's 4-element
vector path where a block's rows allow it) and once one element off (the scalar path): the
kernel's index math is checked on machines without a GPU (the gpu-marked tests run the real
kernel where there is one). The twin is run on both of its CPU paths: the band path (AVX-512
VBMI, where the CPU has it) and the row path (AVX2 patch rows, and plain C++). A deliberately
broken copy of the body, one per column path, must be caught."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from _support.seed import SEED

ROOT = Path(__file__).resolve().parents[2]
BODY = ROOT / "csrc" / "kernels" / "normalize_patchify_kernel.cuh"

#: One index bug per column path: (the line as it is, the broken line).
BUGS = {
    "vector": ("column_offset(p, s, tiles, j + q, &off[q], &lb[q]);",
               "column_offset(p, s, tiles, j + (q ^ 1), &off[q], &lb[q]);"),
    "scalar": ("load_source(src + row_base[k] + off);",
               "load_source(src + row_base[k] + off + (k == 1));"),
}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """-> build(body=None) -> path of an emulate_kernel executable (the twin compiled once)."""
    cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if cxx is None:
        if os.environ.get("VLMPREP_REQUIRE_KERNELS"):
            pytest.fail("VLMPREP_REQUIRE_KERNELS is set but there is no C++ compiler")
        pytest.skip("no C++ compiler")
    tmp = tmp_path_factory.mktemp("emulate")
    flags = ["-std=c++20", "-O1", "-pthread", f"-I{ROOT / 'csrc' / 'include'}"]
    objs = []
    for name in ("normalize_patchify_cpu.cc", "normalize_patchify_bands.cc", "normalize_patchify_avx2.cc"):
        obj = tmp / (name + ".o")
        subprocess.run([cxx, *flags, "-c", str(ROOT / "csrc" / "kernels" / name), "-o", str(obj)],
                       check=True, capture_output=True, text=True)
        objs.append(str(obj))

    def _build(body: Path | None = None) -> Path:
        exe = tmp / f"emulate_{body.stem if body else 'kernel'}"
        extra = [f'-DVLMPREP_KERNEL_BODY="{body}"'] if body else []
        subprocess.run([cxx, *flags, *extra, str(ROOT / "tests" / "kernels" / "emulate_kernel.cc"),
                        *objs, "-o", str(exe)], check=True, capture_output=True, text=True)
        return exe
    return _build


def _run(exe: Path, seed: int, isa: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, VLMPREP_CPU_ISA=isa)
    return subprocess.run([str(exe), str(seed)], capture_output=True, text=True, timeout=120, env=env)


def test_kernel_body_equals_twin(build):
    exe = build()
    # "avx2": the twin's row path with its AVX2 patch rows; "scalar": the row path in plain C++
    for seed, isa in ((SEED, ""), (SEED + 1, "avx2"), (SEED + 2, "scalar")):
        r = _run(exe, seed, isa)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "OK: 0 mismatches" in r.stdout
        vector, scalar = map(int, re.search(r"blocks: vector (\d+) scalar (\d+)", r.stdout).groups())
        assert vector > 0 and scalar > 0, r.stdout  # both column paths were compared


@pytest.mark.parametrize("path", sorted(BUGS))
def test_an_index_bug_in_either_column_path_is_caught(build, tmp_path, path):
    good, bad = BUGS[path]
    text = BODY.read_text()
    assert text.count(good) == 1, f"the {path} path's line changed: update BUGS"
    broken = tmp_path / f"broken_{path}.cuh"
    # The copy includes the package header by its include path, so it may live anywhere.
    broken.write_text(text.replace(good, bad))
    r = _run(build(broken), SEED)
    assert r.returncode == 1 and "FAIL:" in r.stdout, r.stdout
    shifts = set(re.findall(r"MISMATCH .* shift (\d)", r.stdout))
    # The vector path runs only on the aligned output (shift 0); the scalar one on both.
    assert shifts == ({"0"} if path == "vector" else {"0", "1"}), r.stdout
