"""``kernels.cpu_paths()`` (``vlmprep info``, the bench JSON) names the path each CPU kernel
takes, from the CPU's features (oracle: the kernel's flags in /proc/cpuinfo, as the kernels'
own __builtin_cpu_supports checks see them) capped by VLMPREP_CPU_ISA at the moment of the call."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo to check the CPU's features against")
    line = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
    return set(line.split(":", 1)[-1].split())


def _expected(isa: str) -> tuple[str, str]:
    flags, arch = _cpu_flags(), platform.machine()
    if isa == "scalar":
        return "scalar", "scalar"
    if arch in ("aarch64", "arm64"):
        return "neon", "scalar"
    avx512 = isa == "native" and {"avx512f", "avx512bw", "avx512vl", "avx512vbmi"} <= flags
    resize = ("avx512-vnni" if avx512 and "avx512_vnni" in flags else
              "avx2" if "avx2" in flags else "scalar")
    return resize, ("avx512-vbmi, float32 patch rows avx2" if avx512 else
                    "avx2" if "avx2" in flags else "scalar")


def test_paths_follow_the_cpu_and_the_cap(kernels, isa):
    got = kernels.cpu_paths()
    want = _expected(isa)
    assert (got["resize"], got["normalize_patchify"]) == want, (isa, got)
    assert got["cap"] == (None if isa == "native" else isa)
    assert kernels.summary()["cpu_paths"] == got


def test_info_prints_the_paths(kernels):
    out = subprocess.run([sys.executable, "-m", "vlmprep.cli.main", "info"], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "VLMPREP_CPU_ISA": "scalar"},
                         check=True).stdout
    assert "cpu paths: resize scalar, normalize_patchify scalar (capped by VLMPREP_CPU_ISA=scalar)" in out
