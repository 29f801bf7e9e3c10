"""No kernel reads or writes a byte outside its buffers: every entry point runs with its inputs
and outputs flush against an unmapped page (tests/_support/guarded.py), where a heap buffer's
slack would hide a one-byte over-read, on every instruction-set path (VLMPREP_CPU_ISA), over the
sizes where vector loads and stores meet a row's end (tests/kernels/_guard_sweep.py). Each sweep
runs in a child process, so a fault fails the test with the call that faulted instead of
killing pytest.

Found this way (issue 13): the AVX2 horizontal resize loaded 16 bytes per 5 taps and admitted
the last window ending exactly at the row's end, reading one byte past it: a valid 17-wide,
9-high image whose buffer ends at a page boundary killed the process (SIGSEGV), for narrow or
upscaled images and for downscales by more than ~8 (where the AVX-512 pass declines)."""
from __future__ import annotations

import pytest

from tests._support.guarded import describe, run_isolated

WATCHDOG_S = 600  # a hang, not a speed bound (the sweeps take 3-15 s here)


def _sweep(name: str):
    return run_isolated(f"from tests.kernels._guard_sweep import main; main({name!r})", timeout=WATCHDOG_S)


@pytest.mark.parametrize("name", ["resize", "resize_torchvision",
                                  "normalize_patchify", "resize_normalize_patchify", "jpeg", "jpeg_split",
                                  "stream_store"])
def test_every_entry_point_stays_inside_its_buffers(kernels, name):
    proc = _sweep(name)
    assert proc.returncode == 0, describe(proc)
    assert "done:" in proc.stdout or "SKIP" in proc.stdout, describe(proc)


def test_17x9_image_at_a_page_end_resizes_on_every_path(kernels):
    """The issue's case, alone: before the fix, the AVX2 and default paths died with SIGSEGV
    (exit -11) at the first call; the scalar path passed."""
    code = """
import os, numpy as np, torch
from PIL import Image
from tests._support.guarded import guarded_copy
from vlmprep import kernels
img = np.random.default_rng(0).integers(0, 256, (9, 17, 3), dtype=np.uint8)
src = torch.from_numpy(guarded_copy(img, "end"))
for isa in ("avx2", "native", "scalar"):
    if isa == "native":
        os.environ.pop("VLMPREP_CPU_ISA", None)
    else:
        os.environ["VLMPREP_CPU_ISA"] = isa
    for hw in ((9, 40), (9, 5), (9, 2), (3, 17), (20, 35)):
        for f, pf in (("bilinear", Image.BILINEAR), ("bicubic", Image.BICUBIC), ("lanczos", Image.LANCZOS)):
            print("case", isa, hw, f, flush=True)
            want = np.asarray(Image.fromarray(img).resize((hw[1], hw[0]), pf))
            assert np.array_equal(kernels.resize(src, hw, f).numpy(), want), (isa, hw, f)
print("ok")
"""
    proc = run_isolated(code, timeout=WATCHDOG_S)
    assert proc.returncode == 0 and "ok" in proc.stdout, describe(proc)


@pytest.mark.parametrize("where,index", [("end", "a.nbytes"), ("start", "-1")])
def test_a_guarded_array_faults_one_byte_outside(where, index):
    """The guard itself: one byte past an "end" array (or before a "start" one) is unmapped,
    so the sweeps above can fail; every byte inside is readable and writable."""
    code = f"""
import ctypes, numpy as np
from tests._support.guarded import guarded
a = guarded((9, 17, 3), np.uint8, {where!r})
a[...] = 5
assert int(a.sum()) == 5 * a.size
print("inside ok", flush=True)
ctypes.c_uint8.from_address(a.ctypes.data + {index}).value
print("outside readable")
"""
    proc = run_isolated(code, timeout=60)
    assert "inside ok" in proc.stdout and "outside readable" not in proc.stdout, describe(proc)
    # SIGSEGV; under `make sanitize` ASan's handler reports the SEGV and exits non-zero instead.
    assert proc.returncode == -11 or (proc.returncode != 0 and "SEGV" in proc.stderr), describe(proc)
