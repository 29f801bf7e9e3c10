"""The CUDA kernel's body on the host (tests/kernels/emulate_kernel.cc: one std::thread per CUDA
thread, a barrier per block for __syncthreads) against the CPU twin, every order and dtype, on
fresh random ragged batches: the kernel's index math is checked on machines without a GPU (the
gpu-marked tests run the real kernel where there is one). The twin is run on both of its CPU
paths: the band path (AVX-512 VBMI, where the CPU has it) and the row path."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _support.seed import SEED

ROOT = Path(__file__).resolve().parents[2]


def test_kernel_body_equals_twin(tmp_path):
    cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if cxx is None:
        if os.environ.get("VLMPREP_REQUIRE_KERNELS"):
            pytest.fail("VLMPREP_REQUIRE_KERNELS is set but there is no C++ compiler")
        pytest.skip("no C++ compiler")
    exe = tmp_path / "emulate_kernel"
    subprocess.run([cxx, "-std=c++20", "-O1", "-pthread", f"-I{ROOT / 'csrc' / 'include'}",
                    str(ROOT / "tests" / "kernels" / "emulate_kernel.cc"),
                    str(ROOT / "csrc" / "kernels" / "normalize_patchify_cpu.cc"),
                    str(ROOT / "csrc" / "kernels" / "normalize_patchify_bands.cc"), "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    for seed, isa in ((SEED, ""), (SEED + 1, "avx2")):  # "avx2": the row path
        env = dict(os.environ, VLMPREP_CPU_ISA=isa)
        r = subprocess.run([str(exe), str(seed)], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "OK: 0 mismatches" in r.stdout
