"""Fixtures of the kernel tests."""
from __future__ import annotations

import os

import pytest


@pytest.fixture
def jpeg(kernels, monkeypatch):
    """``vlmprep.kernels`` with the JPEG fast path (libjpeg-turbo); skips where it was not built,
    except under VLMPREP_REQUIRE_KERNELS (CI) unless VLMPREP_NO_LIBJPEG says it was left out.
    The split switch is cleared (off would skip the two-decoder path) and the thread count is
    restored after."""
    if not kernels.jpeg_available():
        if os.environ.get("VLMPREP_REQUIRE_KERNELS") and not os.environ.get("VLMPREP_NO_LIBJPEG"):
            pytest.fail("VLMPREP_REQUIRE_KERNELS is set but the JPEG fast path was not built: "
                        + str(kernels.build_info().get("torch_ext", {}).get("libjpeg_reason")))
        pytest.skip("built without libjpeg-turbo's headers")
    monkeypatch.delenv("VLMPREP_JPEG_SPLIT", raising=False)
    yield kernels
    kernels.set_num_threads(None)


#: the instruction sets a resize test runs under (VLMPREP_CPU_ISA caps what the kernels use)
ISAS = ["native", "avx2", "scalar"]


@pytest.fixture(params=ISAS)
def isa(request, monkeypatch):
    """The highest instruction set the resize may use (read by the kernel at every call)."""
    if request.param != "native":
        monkeypatch.setenv("VLMPREP_CPU_ISA", request.param)
    else:
        monkeypatch.delenv("VLMPREP_CPU_ISA", raising=False)
    return request.param


@pytest.fixture(params=["band", "row", "row-scalar"])
def cpu_path(request, monkeypatch):
    """Which CPU path normalize_patchify's twin may take (read by the kernel at every call): the
    band path (AVX-512 VBMI), the row path with its AVX2 patch rows, the row path in plain C++."""
    if request.param == "row":
        monkeypatch.setenv("VLMPREP_CPU_ISA", "avx2")
    elif request.param == "row-scalar":
        monkeypatch.setenv("VLMPREP_CPU_ISA", "scalar")
    else:
        monkeypatch.delenv("VLMPREP_CPU_ISA", raising=False)
    return request.param
