"""Child process of tests/io/test_first_use.py: first use of vlmprep from several threads at once,
in a process that has loaded no decoder yet (issue 33: a first ``import cv2`` in one image thread
while another ran the compiled JPEG decoder crashed the README's quickstart with SIGSEGV).

``python first_use_child.py FOLDER THREADS MODE``; FOLDER holds the inputs (``*.jpg``, ``*.png``,
... written by the test; ``pil_*`` files are handed over as unloaded PIL images, so Pillow loads
them in the image threads too). MODE:

- ``processor``: the README quickstart (``Processor("qwen2-vl", backend="auto", ...)``) called
  by THREADS threads at once, each over all the inputs in its own order;
- ``decode``: no Processor: THREADS threads call ``vlmprep.io.decode.decode`` at once (the first
  decode must load the decoders before any thread decodes).

Oracle: the same calls again, one at a time, after the threads: equal bit for bit. Prints one
JSON line: ``mismatches`` (thread, what), ``errors`` (per item), ``new_modules`` (loaded during
or after the threaded calls, from the processor's construction on: must be none), ``loaded``
(``vlmprep.io.warm.loaded()``). A crash shows as the exit status (-11: SIGSEGV).
"""
from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading

faulthandler.enable()


def main(folder: str, n: int, mode: str) -> dict:
    from PIL import Image  # what a user has loaded: Pillow's core, not its plugins
    names = sorted(os.listdir(folder))
    raw = {f: open(os.path.join(folder, f), "rb").read() for f in names if not f.startswith("pil_")}

    def items(k: int) -> list:
        # each call its own unloaded PIL images (a PIL image is not safe to load from two threads)
        out = [raw[f] if f in raw else Image.open(os.path.join(folder, f)) for f in names]
        return out[k % len(out):] + out[:k % len(out)]

    calls = [items(k) for k in range(n)]
    oracle = [items(k) for k in range(n)]
    import vlmprep
    if mode == "processor":
        proc = vlmprep.Processor("qwen2-vl", backend="auto", device="cpu", dtype="float32",
                                 errors="skip")
        run = proc
    else:
        from vlmprep.io.decode import decode
        from vlmprep.io.inputs import resolve

        def run(xs):
            return [decode(resolve(x), fast=True) for x in xs]
    before = set(sys.modules)
    barrier = threading.Barrier(n)
    got: list = [None] * n

    def one(k: int) -> None:
        barrier.wait()
        got[k] = run(calls[k])

    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mismatches, errors = [], {}
    import numpy as np
    import torch
    for k in range(n):
        want = run(oracle[k])
        if mode == "processor":
            errors.update({str(i): str(e) for i, e in got[k].errors.items()})
            errors.update({str(i): str(e) for i, e in want.errors.items()})
            if not (torch.equal(got[k].pixel_values, want.pixel_values)
                    and torch.equal(got[k].grid_thw, want.grid_thw)):
                mismatches.append([k, "pixel_values"])
        else:
            mismatches += [[k, i] for i, (a, b) in enumerate(zip(got[k], want))
                           if not np.array_equal(a, b)]
    new = sorted(m for m in set(sys.modules) - before if not m.startswith("cv2."))
    try:
        from vlmprep.io import warm
        loaded = warm.loaded()
    except ImportError:  # a vlmprep before issue 33 (to see this test fail there)
        loaded = None
    return {"mismatches": mismatches, "errors": errors, "new_modules": new, "loaded": loaded,
            "images": len(names)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), sys.argv[3])))
