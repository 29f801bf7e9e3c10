"""What setup.py built is recorded and reported; under VLMPREP_REQUIRE_KERNELS=1 (CI) every
part that this machine can build must have been built, CUDA code included when nvcc exists."""
from __future__ import annotations

import os
import shutil

import pytest

from vlmprep import kernels


def test_build_record_is_reported_by_info():
    from vlmprep.cli.info import collect
    info = collect()
    assert info["kernels"]["torch_ext"]["built"] == (kernels.build_info()["torch_ext"]["built"])
    assert "dali_plugin" in info["kernels"]


@pytest.mark.skipif(not os.environ.get("VLMPREP_REQUIRE_KERNELS"),
                    reason="VLMPREP_REQUIRE_KERNELS is not set (CI sets it)")
def test_everything_buildable_here_was_built():
    info = kernels.build_info()
    assert info["torch_ext"]["built"], info["torch_ext"]
    assert kernels.why_unavailable() is None
    if shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"):
        assert info["torch_ext"]["cuda"], "nvcc is here but the CUDA kernel was not compiled"
    if os.path.exists("/usr/include/jpeglib.h") and not os.environ.get("VLMPREP_NO_LIBJPEG"):
        assert info["torch_ext"]["libjpeg"], info["torch_ext"].get("libjpeg_reason")
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return
    assert info["dali_plugin"]["built"], info["dali_plugin"]
    assert kernels.dali_plugin() is not None
