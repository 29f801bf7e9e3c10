"""The DALI plugin op (fn.vlmprep_normalize_patchify) inside a CPU pipeline against the numpy
oracle: the same bytes as the torch op's CPU twin (it is the same code)."""
from __future__ import annotations

import os

import numpy as np
import pytest
from _support.seed import SEED

from tests.kernels.oracle import rows

pytestmark = pytest.mark.dali


@pytest.fixture(scope="module")
def plugin(kernels):
    path = kernels.dali_plugin()
    if path is None:
        info = kernels.build_info()["dali_plugin"]
        if os.environ.get("VLMPREP_REQUIRE_KERNELS"):
            pytest.fail(f"VLMPREP_REQUIRE_KERNELS is set but the DALI plugin is missing: {info}")
        pytest.skip(f"DALI plugin not built: {info.get('reason')}")
    return path


@pytest.mark.parametrize("order,P,m,T,dtype", [
    ("merge_grouped", 14, 2, 2, "float"), ("merge_grouped", 16, 2, 2, "uint8"),
    ("raster", 16, 1, 1, "float"), ("naflex", 16, 1, 1, "float"), ("tiles", 14, 1, 1, "float"),
])
def test_plugin_in_cpu_pipeline(plugin, order, P, m, T, dtype):
    from nvidia.dali import fn, pipeline_def, types
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    q = P * (m if order == "merge_grouped" else 1)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 4)) * q, int(rng.integers(1, 4)) * q, 3),
                         dtype=np.uint8) for _ in range(4)]
    lut = rng.standard_normal((3, 256)).astype(np.float32)

    @pipeline_def(batch_size=len(imgs), num_threads=2, device_id=None)
    def pipe():
        x = fn.external_source(source=lambda: imgs, batch=True, layout="HWC")
        kw = {"lut": lut.reshape(-1).tolist(), "dtype": types.FLOAT} if dtype == "float" \
            else {"dtype": types.UINT8}
        return fn.vlmprep_normalize_patchify(x, order=order, patch_size=P, merge_size=m,
                                             temporal_patch_size=T, **kw)

    p = pipe()
    p.build()
    (out,) = p.run()
    for k, img in enumerate(imgs):
        got = np.asarray(out[k]).reshape(-1)
        want = rows(img, lut if dtype == "float" else None, order, P, m, T)
        assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_plugin_rejects_bad_sizes(plugin):
    from nvidia.dali import fn, pipeline_def, types
    imgs = [np.zeros((30, 56, 3), np.uint8)]

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(source=lambda: imgs, batch=True, layout="HWC")
        return fn.vlmprep_normalize_patchify(x, order="merge_grouped", patch_size=14, merge_size=2,
                                             temporal_patch_size=2, dtype=types.UINT8)

    p = pipe()
    p.build()
    with pytest.raises(RuntimeError, match="sample 0 \\(30x56\\): sample sides are not multiples"):
        p.run()


@pytest.mark.parametrize("kw,says", [
    ({"patch_size": 4, "merge_size": 2**30}, "expected integers in \\[1, 268435456\\], got 4, 1073741824, 1"),
    ({"patch_size": 2, "merge_size": 1, "temporal_patch_size": 2**30}, "got 2, 1, 1073741824"),
])
def test_plugin_rejects_arguments_past_the_limits(plugin, kw, says):
    """Before: patch * merge was computed in int32 (4 * 2**30 wrapped), and a temporal of 2**30
    sized a 2.5 TB output; now the arguments are checked when the op is built."""
    from nvidia.dali import fn, pipeline_def, types
    imgs = [np.zeros((8, 8, 3), np.uint8)]

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():
        x = fn.external_source(source=lambda: imgs, batch=True, layout="HWC")
        return fn.vlmprep_normalize_patchify(x, order="merge_grouped", dtype=types.UINT8, **kw)

    with pytest.raises(RuntimeError, match=says):
        p = pipe()
        p.build()
        p.run()
