"""The CUDA kernel as nvcc compiles it (machines without a GPU check what the compiler made of
it): for sm_80 and sm_90, ptxas reports no spills and at most 64 registers per thread (4 blocks
of 256 threads fit an SM's 64K registers); where cuobjdump is found, the SASS reads source bytes
through the read-only path (LDG...CONSTANT, no generic LD) and the float32 kernel has 16-byte
stores (its vector path). The kernel's results are checked by test_kernel_emulated.py (host)
and the gpu-marked tests / bench/gpu_check.py (device)."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHS = ("80", "90")


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "bin", name)):
            return os.path.join(home, "bin", name)
    # triton ships one (the CUDA toolkit here has no cuobjdump)
    hits = glob.glob(os.path.join(os.path.dirname(pytest.__file__), "..", "triton", "backends", "nvidia",
                                  "bin", name))
    return hits[0] if hits else None


def _tool_env() -> dict:
    """The environment for the CUDA tools: without LD_PRELOAD, which `make sanitize` sets to
    libasan for the Python process (nvcc's stages are not ASan builds and segfault under it)."""
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    nvcc = _tool("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc here")
    obj = tmp_path_factory.mktemp("nvcc") / "normalize_patchify.o"
    gencode = [a for arch in ARCHS for a in ("-gencode", f"arch=compute_{arch},code=sm_{arch}")]
    r = subprocess.run([nvcc, "-std=c++20", "-O3", f"-I{ROOT / 'csrc' / 'include'}", "-Xptxas", "-v",
                        *gencode, "-c", str(ROOT / "csrc" / "kernels" / "normalize_patchify.cu"),
                        "-o", str(obj)], capture_output=True, text=True, timeout=300, env=_tool_env())
    assert r.returncode == 0, r.stderr[-3000:]
    return obj, r.stdout + r.stderr


def test_no_spills_and_registers_leave_four_blocks_per_sm(compiled):
    _, log = compiled
    # ptxas, per kernel: "Compiling entry function '<name>' for 'sm_90'", then its stack / spill
    # line and its "Used N registers" line.
    chunks = log.split("Compiling entry function '")[1:]
    assert len(chunks) == 3 * len(ARCHS), log  # float32, bfloat16, uint8 per arch
    for chunk in chunks:
        name, arch = re.match(r"(\w+)' for 'sm_(\d+)'", chunk).groups()
        spill = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", chunk)
        regs = re.search(r"Used (\d+) registers", chunk)
        assert spill and regs, chunk
        assert spill.groups() == ("0", "0", "0"), (name, arch, spill.group(0))
        assert int(regs.group(1)) <= 64, (name, arch, regs.group(0))


def test_sass_reads_through_the_read_only_path_and_stores_16_bytes(compiled):
    obj, _ = compiled
    tool = _tool("cuobjdump")
    if tool is None:
        pytest.skip("no cuobjdump here")
    sass = subprocess.run([tool, "-sass", "-arch", "sm_90", str(obj)], capture_output=True, text=True,
                          timeout=120, env=_tool_env()).stdout
    funcs = dict(re.findall(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", sass, re.S))
    assert len(funcs) == 3, list(funcs)
    for name, body in funcs.items():
        assert "LDG.E.U8.CONSTANT" in body and " LD.E.U8 " not in body, name  # __ldg, not generic
    (f32,) = [body for name, body in funcs.items() if "IfLb1" in name]
    assert "STG.E.128" in f32  # the vector path: 4 float32 per store
