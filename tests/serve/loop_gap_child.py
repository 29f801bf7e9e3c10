"""Child process of tests/serve/test_loop_gap.py: a loop-gap meter around a Batcher's start and
first requests, in a process that has decoded nothing yet (issue 33: the first PNG's ``import cv2``
held the GIL and stalled the loop 257-273 ms; Pillow's plugins and the kernels' library add to it).

``python loop_gap_child.py FOLDER``: the Processor is built before the loop serves (as a server's
start-up does); on the loop, a ticker task sleeps 1 ms at a time and records each gap between its
ticks, while a Batcher is made and serves FOLDER's files one request each, in name order (a PNG
first). Prints one JSON line: ``first_ms`` (largest gap from the Batcher's construction to the
first answer), ``later_ms`` (largest gap over the other requests), ``ticks``, ``equal`` (each
answer equals ``proc(images)`` alone, bit for bit) and ``errors``.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time


def main(folder: str) -> dict:
    items = [open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder))]
    import vlmprep
    from vlmprep.serve import Batcher
    proc = vlmprep.Processor("qwen2-vl", backend="auto")

    async def serve() -> tuple[float, float, int, list]:
        gaps: list[float] = []
        stop = False

        async def ticker() -> None:
            last = time.perf_counter()
            while not stop:
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        k = len(gaps)
        b = Batcher(proc, max_delay_ms=1)
        out = [await b.submit([items[0]])]
        await asyncio.sleep(0.002)  # a tick after the answer: a stall just before it counts
        first = max(gaps[k:])
        k = len(gaps)
        for x in items[1:]:
            out.append(await b.submit([x]))
        await asyncio.sleep(0.002)
        later = max(gaps[k:], default=0.0)
        stop = True
        await tick
        await b.close()
        return first, later, len(gaps), out

    first, later, ticks, out = asyncio.run(serve())
    import torch
    want = [proc([x]) for x in items]
    return {"first_ms": first * 1e3, "later_ms": later * 1e3, "ticks": ticks,
            "equal": all(torch.equal(o.pixel_values, w.pixel_values) for o, w in zip(out, want)),
            "errors": [str(e) for o in out for e in o.errors.values()]}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
