"""kernels.stream_store (the output-write floor of `vlmprep bench`): every byte of the buffer set,
on every instruction-set path, whatever the alignment; bad arguments refused."""
from __future__ import annotations

import pytest
import torch

from vlmprep import kernels

pytestmark = pytest.mark.skipif(not kernels.available(), reason="compiled kernels not built")


@pytest.mark.parametrize("isa", [None, "avx2", "scalar"])
@pytest.mark.parametrize("start, n", [(0, 0), (0, 1), (3, 61), (1, 64), (0, 128), (5, 4096 + 77),
                                      (64, 1 << 20)])
def test_every_byte_set_and_nothing_around(monkeypatch, isa, start, n):
    if isa:
        monkeypatch.setenv("VLMPREP_CPU_ISA", isa)
    buf = torch.full((start + n + 64,), 0xAB, dtype=torch.uint8)
    kernels.stream_store(buf[start:start + n], 7)
    assert (buf[start:start + n] == 7).all()
    assert (buf[:start] == 0xAB).all() and (buf[start + n:] == 0xAB).all()


def test_any_dtype_its_bytes(seed):
    out = torch.randn(37, 1176, generator=torch.Generator().manual_seed(seed))
    kernels.stream_store(out)
    assert (out == 0).all()
    bf = kernels.empty((10764, 588), torch.bfloat16)  # a compact 1080p Qwen2-VL output
    kernels.stream_store(bf, 0x3F)
    assert (bf.view(torch.uint8) == 0x3F).all()


def test_refusals():
    with pytest.raises(RuntimeError, match="contiguous CPU tensor"):
        kernels.stream_store(torch.zeros(8, 8)[:, ::2])
    with pytest.raises(ValueError, match=r"value: expected an integer in \[0, 255\]"):
        kernels.stream_store(torch.zeros(8), 256)
