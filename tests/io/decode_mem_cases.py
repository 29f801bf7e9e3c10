"""Hostile and ordinary inputs for the decode memory bound, and a child-process meter of a decode's
peak RSS (tests/io/test_decode_bounds.py; also run by hand to print the figures:
``python tests/io/decode_mem_cases.py [size]``)."""
from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
from PIL import Image


def gif_screen_bomb(side: int) -> bytes:
    """~35 bytes: a ``side x side`` logical screen holding one 1x1 frame (Pillow decodes it all)."""
    screen = b"GIF89a" + struct.pack("<HHBBB", side, side, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    frame = b"," + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return screen + frame + b";"


def png16_rgba(side: int) -> bytes:
    """A 16-bit RGBA PNG of smooth ramps (compresses like a photo's gradients, ~2-30x)."""
    y, x = np.mgrid[0:side, 0:side].astype(np.uint32)
    a = np.stack([x * 65535 // side, y * 65535 // side, (x + y) * 32767 // side,
                  65535 - x * 30000 // side], -1).astype(">u2")
    raw = b"".join(b"\x00" + a[r].tobytes() for r in range(side))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">L", len(body)) + kind + body + struct.pack(">L", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">LLBBBBB", side, side, 16, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))


def _photo(side: int) -> np.ndarray:
    rng = np.random.default_rng(side)
    base = rng.integers(0, 256, (side // 16 + 1, side // 16 + 1, 3), np.uint8)
    return np.ascontiguousarray(np.kron(base, np.ones((16, 16, 1), np.uint8))[:side, :side])


def jpeg_rgb(side: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(_photo(side)).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def jpeg_cmyk(side: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(_photo(side)).convert("CMYK").save(buf, "JPEG", quality=85)
    return buf.getvalue()


def png_palette_trns(side: int) -> bytes:
    buf = io.BytesIO()
    p = Image.fromarray(_photo(side)).convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
    p.save(buf, "PNG", transparency=int(np.asarray(p)[0, 0]))
    return buf.getvalue()


def png_text_flood(side: int) -> bytes:
    """An RGB PNG carrying 60 zTXt chunks that inflate to ~1 MiB each (~60 KiB of file): just
    under Pillow's 64 MiB text allowance, so Pillow keeps all of it while decoding."""
    buf = io.BytesIO()
    Image.fromarray(_photo(side)).save(buf, "PNG", compress_level=1)
    png = buf.getvalue()
    packed = zlib.compress(b"\x00" * ((1 << 20) - 1024), 9)
    text = b""
    for i in range(60):  # distinct keywords: Pillow keeps one text per keyword
        body = b"Comment%d\x00\x00" % i + packed
        text += struct.pack(">L", len(body)) + b"zTXt" + body + struct.pack(">L", zlib.crc32(b"zTXt" + body))
    return png[:33] + text + png[33:]  # after IHDR (8 + 25 bytes)


CASES = {"gif_screen_bomb": gif_screen_bomb, "png16_rgba": png16_rgba, "jpeg_rgb": jpeg_rgb,
         "jpeg_cmyk": jpeg_cmyk, "png_palette_trns": png_palette_trns,
         "png_text_flood": png_text_flood}

_CHILD = r"""
import gc, json, resource, sys, time
path, small, backend = sys.argv[1], sys.argv[2], sys.argv[3]
from vlmprep.io.inputs import resolve
from vlmprep.io import decode as D
if backend != "new":  # the decode.py of another commit, as module vlmprep.io._old_decode
    import importlib.util
    spec = importlib.util.spec_from_file_location("vlmprep.io._old_decode", backend)
    old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
    run = old.decode
else:
    run = D.decode
run(resolve(open(small, "rb").read()))  # libraries loaded and warm
data = open(path, "rb").read()
src = resolve(data)
gc.collect()

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

try:  # reset the peak (VmHWM) to the current RSS, so earlier peaks cannot hide the decode's
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base, hwm = status("VmRSS:"), True
except OSError:  # no /proc reset: ru_maxrss, a peak since the start (may hide a smaller one)
    base, hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, False
t = time.perf_counter()
out = run(src)
dt = time.perf_counter() - t
peak = status("VmHWM:") if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"growth": peak - base, "predicted": D.decode_cost(src.header),
                  "output": out.nbytes, "encoded": len(data), "seconds": dt,
                  "mode": src.header.mode_hint, "hw": list(src.hw)}))
"""


def measure(name: str, side: int, tmp: str, decoder: str = "new") -> dict:
    """Peak RSS growth of decoding case ``name`` at ``side`` in a fresh process (bytes), with the
    prediction (``decode_cost``) and the output's size."""
    path, small = os.path.join(tmp, f"{name}_{side}"), os.path.join(tmp, f"{name}_small")
    for p, s in ((path, side), (small, 64)):
        if not os.path.exists(p):
            with open(p, "wb") as f:
                f.write(CASES[name](s))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", _CHILD, path, small, decoder], capture_output=True,
                       text=True, timeout=300, env=env)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    import tempfile
    sides = [int(a) for a in sys.argv[1:2]] or [3000]
    decoder = sys.argv[2] if len(sys.argv) > 2 else "new"
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            for side in sides:
                m = measure(name, side, tmp, decoder)
                print(f"{name:18s} {side:6d} encoded {m['encoded']:>11,} out {m['output'] / 2**20:8.1f} MiB "
                      f"peak+ {m['growth'] / 2**20:8.1f} MiB ({m['growth'] / m['output']:.2f}x out) "
                      f"predicted {m['predicted'] / 2**20:8.1f} MiB  {m['seconds']:.2f} s")
