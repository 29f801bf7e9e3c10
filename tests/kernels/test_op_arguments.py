"""Every op argument is checked before it reaches a kernel, overflow-safe: offsets near 2**63,
sizes past the kernels' int32 (2**32 + 3 must not become 3), products of sizes that overflow
int64, negative values; at the torch op (csrc/torch/ops.cpp) and at vlmprep.kernels' Python
functions. A rejected call raises with what was expected, what came, and what to do, and writes
nothing.

Before the fix (issue 13): an offset near INT64_MAX overflowed ``offset + n <= numel`` and the
kernel wrote before ``out`` (glibc: "free(): invalid pointer", or SIGSEGV); ``resize(width=2**32
+ 3)`` passed the int64 checks, was cast to int32 and returned a 12.9 GB tensor with 3 pixels
written; ``patch_size=2**32 + 14`` ran as patch 14. The calls that corrupted memory run in a child
process, so a regression fails the test instead of killing pytest."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from tests._support.guarded import describe, run_isolated

I64 = 2**63 - 1
NEAR_MAX = I64 - 100  # offset + n wraps negative for any n > 100
ROW = 1176  # merge_grouped P14 m2 T2: 3 * 2 * 14 * 14


def _jpeg(h=28, w=56) -> bytes:
    b = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(b, "JPEG")
    return b.getvalue()


# Each: (label, setup + call in a child, what the error must say). The child prints RAISED and
# the message, or RETURNED when the op accepted the call; it checks `out` was not written.
CHILD_CASES = [
    ("normalize_patchify offset near INT64_MAX",
     "out = torch.full((8 * 1176 + 64,), 7.0)\n"
     f"call = lambda: torch.ops.vlmprep.normalize_patchify([torch.zeros(28, 56, 3, dtype=torch.uint8)], "
     f"torch.zeros(3, 256), out, [{NEAR_MAX}], 'merge_grouped', 14, 2, 2, 1)",
     "needs out elements"),
    ("resize_normalize_patchify offset near INT64_MAX",
     "out = torch.full((8 * 1176 + 64,), 7.0)\n"
     f"call = lambda: torch.ops.vlmprep.resize_normalize_patchify(torch.zeros(30, 50, 3, dtype=torch.uint8), "
     f"28, 56, 'bicubic', torch.zeros(3, 256), out, {NEAR_MAX}, 'merge_grouped', 14, 2, 2, 1)",
     "needs out elements"),
    ("decode_resize_normalize_patchify offset near INT64_MAX",
     "out = torch.full((8 * 1176 + 64,), 7.0)\n"
     "data = torch.frombuffer(bytearray(JPEG), dtype=torch.uint8)\n"
     f"call = lambda: torch.ops.vlmprep.decode_resize_normalize_patchify(data, 28, 56, 28, 56, 'bicubic', "
     f"torch.zeros(3, 256), out, {NEAR_MAX}, 'merge_grouped', 14, 2, 2, 1)",
     "needs out elements"),
    ("normalize_patchify offset INT64_MAX",
     "out = torch.full((8 * 1176,), 7.0)\n"
     f"call = lambda: torch.ops.vlmprep.normalize_patchify([torch.zeros(28, 56, 3, dtype=torch.uint8)], "
     f"torch.zeros(3, 256), out, [{I64}], 'merge_grouped', 14, 2, 2, 1)",
     f"needs out elements [{I64}, {I64} + 9408), out has 9408"),
    ("resize width 2**32 + 3",
     "out = torch.full((4,), 7.0)\n"
     "call = lambda: torch.ops.vlmprep.resize(torch.zeros(5, 6, 3, dtype=torch.uint8), 1, 2**32 + 3, "
     "'bicubic', 1)",
     "width: expected a size in [1, 268435456], got 4294967299"),
    ("resize_normalize_patchify output elements overflow int64",
     "out = torch.full((64,), 7.0)\n"
     "call = lambda: torch.ops.vlmprep.resize_normalize_patchify(torch.zeros(5, 6, 3, dtype=torch.uint8), "
     "2**28, 2**28, 'bilinear', torch.zeros(3, 256), out, 0, 'merge_grouped', 2**14, 2**14, 2**28, 1)",
     "overflows int64"),
]


@pytest.mark.parametrize("label,setup,says", CHILD_CASES, ids=[c[0] for c in CHILD_CASES])
def test_dangerous_arguments_are_rejected_in_a_child(kernels, label, setup, says):
    code = f"""
import sys, torch
from vlmprep import kernels
assert kernels.available(), kernels.why_unavailable()
JPEG = {_jpeg()!r}
{setup}
try:
    call()
except RuntimeError as e:
    print("RAISED", str(e).splitlines()[0])
    assert bool((out == 7).all()), "out was written"
    sys.exit(0)
print("RETURNED")
sys.exit(3)
"""
    proc = run_isolated(code, timeout=120)
    assert proc.returncode == 0 and "RAISED" in proc.stdout, describe(proc)
    assert says in proc.stdout, describe(proc)


def _np_call(**kw):
    """The op called by its schema's argument names (csrc/torch/ops.cpp)."""
    a = dict(images=[torch.zeros(28, 56, 3, dtype=torch.uint8)], lut=torch.zeros(3, 256),
             out=torch.full((8 * ROW,), 7.0), offsets=[0], order="merge_grouped", patch_size=14,
             merge_size=2, temporal_patch_size=2, num_threads=1)
    a.update(kw)
    torch.ops.vlmprep.normalize_patchify(**a)
    return a["out"]


@pytest.mark.parametrize("kw,says", [
    ({"patch_size": 2**32 + 14}, "patch_size: expected an integer in \\[1, 268435456\\], got 4294967310"),
    ({"merge_size": 2**32 + 2}, "merge_size: expected an integer in \\[1, 268435456\\], got 4294967298"),
    ({"temporal_patch_size": 2**32 + 2},
     "temporal_patch_size: expected an integer in \\[1, 268435456\\], got 4294967298"),
    ({"patch_size": -14}, "patch_size: expected an integer in \\[1, 268435456\\], got -14"),
    ({"offsets": [-1]}, "needs out elements \\[-1, 9407\\), out has 9408"),
    ({"offsets": [1]}, "needs out elements \\[1, 9409\\), out has 9408"),
])
def test_normalize_patchify_op_rejects(kernels, kw, says):
    """Before: patch_size / merge_size / temporal_patch_size of 2**32 + k ran as k (writing rows for another order)."""
    out = torch.full((8 * ROW,), 7.0)
    with pytest.raises(RuntimeError, match=says):
        _np_call(out=out, **kw)
    assert bool((out == 7).all())


def test_normalize_patchify_refuses_an_out_that_overlaps_an_image(kernels):
    """The kernels treat source and output as non-aliasing (__restrict__ in the CUDA body): an
    out that shares bytes with an image is refused at the binding; a neighbour is not."""
    buf = torch.zeros(2 * 28 * 56 * 3 + 8 * ROW, dtype=torch.uint8)
    img = buf[: 28 * 56 * 3].view(28, 56, 3)
    with pytest.raises(RuntimeError, match="images\\[0\\] and out share memory"):
        _np_call(images=[img], lut=None, out=buf[28 * 56 * 3 - 1:][: 8 * ROW])
    out = buf[28 * 56 * 3:][: 8 * ROW]  # right after the image: no shared byte
    _np_call(images=[img], lut=None, out=out)


def test_decode_ops_reject_sizes_past_int32(kernels):
    """Before: src_h = 2**32 + 28 was narrowed to 28, matched the JPEG and decoded."""
    if not kernels.jpeg_available():
        pytest.skip("built without libjpeg-turbo")
    data = torch.frombuffer(bytearray(_jpeg()), dtype=torch.uint8)
    out = torch.full((8 * ROW,), 7.0)
    with pytest.raises(RuntimeError, match="src_h: expected a size in \\[1, 268435456\\], got 4294967324"):
        torch.ops.vlmprep.decode_resize_normalize_patchify(data, 2**32 + 28, 56, 28, 56, "bicubic",
                                                           torch.zeros(3, 256), out, 0, "merge_grouped",
                                                           14, 2, 2, 1)
    with pytest.raises(RuntimeError, match="src_w: expected a size in \\[1, 268435456\\], got 4294967352"):
        torch.ops.vlmprep.decode_jpeg(data, 28, 2**32 + 56)
    # The header is read before anything is allocated: a wrong size is an error, not 10 GB.
    with pytest.raises(RuntimeError, match="not the probed size"):
        torch.ops.vlmprep.decode_jpeg(data, 60000, 60000)
    assert bool((out == 7).all())
    assert torch.ops.vlmprep.decode_jpeg(data, 28, 56).shape == (28, 56, 3)


def test_thread_counts_are_clamped_not_wrapped(kernels):
    img = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (40, 30, 3), dtype=np.uint8))
    want = torch.ops.vlmprep.resize(img, 17, 23, "bicubic", 1)
    for n in (-5, 0, 2, 2**31, 2**40 + 2, I64):
        assert torch.equal(torch.ops.vlmprep.resize(img, 17, 23, "bicubic", n), want), n


@pytest.mark.parametrize("call,says", [
    (lambda k, img, out: k.resize(img, (2**32 + 3, 4), "bicubic"), "hw\\[0\\]: expected an integer in"),
    (lambda k, img, out: k.resize(img, (2.5, 4), "bicubic"), "hw\\[0\\]: expected an integer .* got float"),
    (lambda k, img, out: k.resize(img, (True, 4), "bicubic"), "got bool"),
    (lambda k, img, out: k.resize(img, (4,), "bicubic"), "hw: expected \\(height, width\\)"),
    (lambda k, img, out: k.resize(img, (0, 4), "bicubic"), "expected an integer in \\[1, 268435456\\], got 0"),
    (lambda k, img, out: k.normalize_patchify([img], None, out, [2**70], "merge_grouped", 14, 2, 2),
     "offsets\\[0\\]: expected an integer in \\[0, 9223372036854775807\\]"),
    (lambda k, img, out: k.normalize_patchify([img], None, out, [0], "merge_grouped", 2**64, 2, 2),
     "patch_size: expected an integer"),
    (lambda k, img, out: k.resize_normalize_patchify(img, (28, 28), "bicubic", None, out, -3,
                                                     "merge_grouped", 14, 2, 2), "offset: expected"),
    (lambda k, img, out: k.resize_normalize_patchify(img, (28, 28), "bicubic", None, out, 0,
                                                     "merge_grouped", 14, 2, 2**40),
     "temporal_patch_size: expected"),
    (lambda k, img, out: k.decode_resize_normalize_patchify(b"x", (2**32 + 1, 5), (28, 28), "bicubic", None,
                                                            out, 0, "merge_grouped", 14, 2, 2),
     "src_hw\\[0\\]: expected"),
    (lambda k, img, out: k.decode_jpeg(b"x", (5, "7")), "src_hw\\[1\\]: expected an integer .* got str"),
    (lambda k, img, out: k.empty((-1, 5), torch.float32), "shape\\[0\\]: expected an integer in \\[0,"),
    (lambda k, img, out: k.empty((2**40, 2**40), torch.float32), "expected at most 2\\*\\*63 - 1 bytes"),
])
def test_python_functions_reject_bad_integers(kernels, call, says):
    img = torch.zeros(28, 56, 3, dtype=torch.uint8)
    out = torch.full((8 * ROW,), 9, dtype=torch.uint8)
    with pytest.raises(ValueError, match=says):
        call(kernels, img, out)
    assert bool((out == 9).all())


def test_numpy_integers_are_accepted(kernels):
    img = torch.from_numpy(np.random.default_rng(2).integers(0, 256, (20, 30, 3), dtype=np.uint8))
    want = kernels.resize(img, (28, 56), "bilinear")
    assert torch.equal(kernels.resize(img, (np.int64(28), np.int32(56)), "bilinear"), want)
    out = torch.zeros(8 * ROW, dtype=torch.uint8)
    kernels.normalize_patchify([want], None, out, [np.int64(0)], "merge_grouped", np.int64(14), 2, 2)
    ref = torch.zeros(8 * ROW, dtype=torch.uint8)
    kernels.normalize_patchify([want], None, ref, [0], "merge_grouped", 14, 2, 2)
    assert torch.equal(out, ref)


def test_empty_host_rejects_sizes_that_overflow(kernels):
    """Before: nbytes near INT64_MAX overflowed the rounding to 2 MiB blocks."""
    with pytest.raises(RuntimeError, match="expected nbytes in \\[0, 2\\^62\\]"):
        torch.ops.vlmprep.empty_host(I64)
    with pytest.raises(RuntimeError, match="expected nbytes in"):
        torch.ops.vlmprep.empty_host(-1)
