"""First use from several threads at once (issue 33, deliverable 4): the README's quickstart died
with SIGSEGV (2 of 8 runs under load) while one image thread imported OpenCV for the first time
and another ran the compiled JPEG decoder. The optional decoders are now loaded once, under one
lock, before any thread decodes (``vlmprep.io.warm``: at Processor construction, and by the first
decode of a process that has none).

Each case runs fresh processes (tests/io/first_use_child.py: nothing loaded before it) whose
threads call the quickstart (or ``io.decode.decode``) at once over JPEG (kernels' decoder),
opaque and 16-bit PNG (OpenCV), RGBA PNG, WebP, GIF, TIFF (Pillow) and unloaded PIL images.
Oracles: the exit status (no crash), the same calls made one at a time afterwards (equal bit for
bit), and no module loaded by the calls after the Processor was built. The race itself was not
reproduced here (47 runs, loaded or quiet); the module check fails without the fix every time.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from _support.imgdata import crop, encode, png16, tiled

CHILD = os.path.join(os.path.dirname(__file__), "first_use_child.py")
WATCHDOG_S = 300  # a hang, not a speed bound (a child takes ~3 s alone, more on a loaded box)


def _inputs(folder) -> str:
    """Every decoder's kind of file, in ``folder`` (a JPEG large enough that its decode overlaps
    the others' first use)."""
    rgb = crop("astronaut", 120, 160)
    files = {
        "a_big.jpg": encode(tiled("coffee", 768, 1024), "jpeg"),
        "b_opaque.png": encode(rgb, "png"),
        "c_progressive.jpg": encode(rgb, "jpeg_progressive"),
        "d_rgba.png": encode(rgb, "png_rgba"),
        "e_16bit.png": png16(rgb.astype(np.uint16) * 257 + 128),
        "f.webp": encode(rgb, "webp"),
        "g.gif": encode(rgb, "gif"),
        "h.tiff": encode(rgb, "tiff"),
        "pil_i.png": encode(crop("chelsea", 100, 90), "png"),
        "pil_j.jpg": encode(crop("rocket", 90, 130), "jpeg"),
    }
    for name, data in files.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    return str(folder)


def _start(folder: str, threads: int, mode: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "VLMPREP_NUM_THREADS"}  # the default pool
    return subprocess.Popen([sys.executable, CHILD, folder, str(threads), mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _check(p: subprocess.Popen, mode: str) -> dict:
    try:
        out, err = p.communicate(timeout=WATCHDOG_S)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"{mode}: no answer in {WATCHDOG_S} s (a hang)\n{err[-3000:]}")
    assert p.returncode == 0, f"{mode}: exit status {p.returncode} (-11: SIGSEGV)\n{err[-3000:]}"
    got = json.loads(out.strip().splitlines()[-1])
    assert got["mismatches"] == [], got  # threads at once == one at a time, bit for bit
    assert got["errors"] == {}, got
    if mode == "processor":
        # the Processor loaded every decoder: none is imported while the image threads run
        assert got["new_modules"] == [], got["new_modules"]
    assert got["loaded"] and got["loaded"]["PIL"] is not None and got["loaded"]["cv2"] is not None
    return got


def test_quickstart_and_decode_from_threads_in_fresh_processes(tmp_path):
    folder = _inputs(tmp_path)
    procs = [(_start(folder, 4, mode), mode) for mode in ("processor", "decode")]
    for p, mode in procs:
        _check(p, mode)


@pytest.mark.stress
def test_first_use_from_threads_under_load(tmp_path):
    """The same, fresh processes 3 at a time beside two busy CPU burners (opt-in: make stress runs
    16; VLMPREP_STRESS_PROCESSES=N to choose, default 6)."""
    folder = _inputs(tmp_path)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        n = int(os.environ.get("VLMPREP_STRESS_PROCESSES", "6"))
        modes = (["processor", "decode"] * n)[:n]
        for i in range(0, len(modes), 3):
            procs = [(_start(folder, 6, m), m) for m in modes[i:i + 3]]
            for p, m in procs:
                _check(p, m)
    finally:
        for b in burners:
            b.kill()
            b.wait()
