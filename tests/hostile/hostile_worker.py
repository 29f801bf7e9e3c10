"""Runs groups of the hostile corpus in this (child) process and reports each step.

    python tests/hostile/hostile_worker.py GROUP[,GROUP...] --backends reference,torch
           [--modes proc,loader] --start N --tmp DIR [--full]

A step is ``[group, case indices, backend, mode]``: one case in proc mode, a chunk of ``--chunk``
cases in batcher and loader modes (their items share the batches, as in serving). The child
runs the steps from ``--start`` and writes one JSON line per event on its protocol fd (stdout;
everything else printed goes to stderr):

    {"cases": {group: [...names]}, "steps": [["corrupt", [0], "torch", "proc"], ...]}   at start
    {"begin": j}                         before step j (a crash or hang is blamed on its cases)
    {"end": j, "results": {case: {"problems": [...], "seconds": s, "outcome": "ok" | "error",
                                  "rss_peak_mb": m, "bound_mb": b (proc mode)}}}

The parent (hostile_runner.py) restarts the child after the step that crashed or hung.

Checks per step (errors="skip"), the bad item placed between two good images ``[g0, item, g1]``:
- nothing raises; the item is an ImageError with index 1 and a message that says what was
  expected (or, for "good" cases, it is processed and equals its oracle given as an array);
- g0 and g1 are bit-exact with a batch that holds only them, and the Processor gives the same
  bytes again afterwards (usable after);
- proc mode: peak RSS during the call (VmHWM, reset through /proc/self/clear_refs) stays within
  the bound ``_bound`` computes from what the header predicts;
- batcher mode: the same through ``Batcher.submit`` (with an OutputCache), with a good request
  sharing the batch, no probe on the event loop's thread, and the Batcher usable after;
- loader mode: the same through ``DataLoader`` over ``[g0, item, g1, g0]`` (2 workers, cache).
"""
from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import os
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # tests/hostile and tests/ (_support)

_MiB = 1 << 20
# Peak-memory bound of one call on [g0, item, g1] (proc mode):
#   8 x the decoded RGB bytes the header predicts (decoded_px * 3 = 24 bytes per pixel): a decode
#     legitimately holds the decoder's own image (Pillow: 4 bytes per pixel for RGB/RGBA, 8 for
#     16-bit RGBA read by OpenCV), the RGB output and conversion temporaries; the decode cost
#     vlmprep predicts (vlmprep.io.decode.decode_cost) is at most 16 bytes per pixel, and the
#     memory group measures 15-16 (a 3072^2 16-bit RGBA PNG: 144-148 MiB for 9.4 Mpx). 24 is that
#     with 50% headroom; the 39 bytes per pixel of issue 13 #7 (uint32 temporaries: 364 MiB for
#     the same file) is above it.
#   + 4 x the encoded bytes held in memory (the caller's buffer or the file read, one copy for
#     the decoder, one for the JPEG fast path's tensor, one spare);
#   + 2 x the output tensor (the batch's buffer and one copy when a failed image's rows are
#     dropped);
#   + 64 MiB: decoder tables, allocator arenas of the worker threads, small temporaries; an
#     item rejected from its header must cost no more than this.
# RSS can only under-count (a step may reuse pages an earlier one left mapped), never over-count.
_FACTOR_DECODED = 8
_FACTOR_ENCODED = 4
_CONST = 64 * _MiB


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (the kernel's peak RSS, what ru_maxrss reports) to VmRSS
        return True
    except OSError:
        return False


def _encoded_len(item) -> int:
    if isinstance(item, (bytes, bytearray)):
        return len(item)
    if isinstance(item, memoryview):
        try:
            return item.nbytes
        except ValueError:
            return 0
    if isinstance(item, (str, os.PathLike)):
        try:
            st = os.stat(item)
            # blocks actually stored: a sparse file's holes read as zeros but cost nothing
            # unless someone reads them
            return st.st_blocks * 512 if os.path.isfile(item) else 0
        except (OSError, ValueError):
            return 0
    return 0


def _bound(case, item, out_bytes: int) -> int:
    return (_FACTOR_DECODED * 3 * case.decoded_px + _FACTOR_ENCODED * _encoded_len(item)
            + 2 * out_bytes + _CONST)


class Backend:
    """One backend's Processor (errors="skip"), the good images and their batch alone."""

    def __init__(self, name: str, group, goods):
        import vlmprep
        self.name = name
        self.proc = vlmprep.Processor(group.preset, backend=name, errors="skip", **group.overrides)
        self.goods = goods
        self.alone = self.proc(list(goods))
        assert not self.alone.errors, self.alone.errors
        self.alone_parts = list(self.alone.split())
        self.strict = None  # the same with errors="raise", made on first use
        self.oracles: dict = {}


def _same(a, b) -> bool:
    import torch
    return (a.pixel_values.shape == b.pixel_values.shape and torch.equal(a.pixel_values, b.pixel_values)
            and torch.equal(a.grid_thw, b.grid_thw) and a.num_tokens == b.num_tokens)


def _diff(a, b) -> str:
    if a.pixel_values.shape != b.pixel_values.shape:
        return f"shape {tuple(a.pixel_values.shape)} vs {tuple(b.pixel_values.shape)}"
    d = (a.pixel_values.float() - b.pixel_values.float()).abs()
    return f"max |diff| {float(d.max()):.4g}, {int((d > 0).sum())} of {d.numel()} values differ"


def _check_item(case, part, err, be: Backend, where: str, oracle_part) -> list[str]:
    """The bad item's outcome: ``err`` (ImageError or None) and its one-image ``part``."""
    import re

    import vlmprep
    p = []
    if err is not None:
        if not isinstance(err, vlmprep.ImageError):
            p.append(f"{where}: error is {type(err).__name__}, not ImageError: {err}")
            return p
        if case.expect == "good":
            p.append(f"{where}: a valid input was rejected: {err}")
        if "expected" not in str(err):
            p.append(f"{where}: message does not say what was expected: {err}")
        if case.msg_not and re.search(case.msg_not, str(err)):
            p.append(f"{where}: wrong message (matches {case.msg_not!r}): {err}")
        return p
    if case.expect == "bad":
        shape = tuple(part.pixel_values.shape) if part is not None else "?"
        p.append(f"{where}: accepted without an ImageError (output {shape}); expected an ImageError")
    elif case.expect == "good" and oracle_part is not None and part is not None and not _same(part, oracle_part):
        p.append(f"{where}: output differs from the oracle (Pillow/numpy given as an array): "
                 f"{_diff(part, oracle_part)}")
    return p


def _check_goods(parts, idx: list[int], be: Backend, where: str) -> list[str]:
    p = []
    for k, i in enumerate(idx):
        if i >= len(parts):
            p.append(f"{where}: good image {i} missing")
            continue
        if parts[i].errors:
            p.append(f"{where}: good image {i} got an error: {parts[i].errors[0]}")
        elif not _same(parts[i], be.alone_parts[k]):
            p.append(f"{where}: good image {i} differs from the batch of the good images alone: "
                     f"{_diff(parts[i], be.alone_parts[k])}")
    return p


def _check_batch(case, b, be: Backend, where: str, oracle_part) -> list[str]:
    p = []
    extra = sorted(set(b.errors) - {1})
    if extra:
        p.append(f"{where}: good images {extra} reported as errors: "
                 f"{[str(b.errors[i]) for i in extra]}")
    if b.num_images != 3:
        return p + [f"{where}: batch has {b.num_images} images, expected 3"]
    parts = list(b.split())
    err = b.errors.get(1)
    if err is not None and getattr(err, "index", 1) != 1:
        p.append(f"{where}: ImageError index is {err.index}, expected 1: {err}")
    if err is not None and b.num_tokens[1] != 0:
        p.append(f"{where}: skipped image has {b.num_tokens[1]} tokens, expected 0")
    p += _check_item(case, parts[1], err, be, where, oracle_part)
    return p + _check_goods(parts, [0, 2], be, where)


def _oracle_part(case, be: Backend):
    """The oracle image processed in the item's place (once per backend and case: every mode
    compares against the same)."""
    if case.expect != "good" or case.oracle is None:
        return None
    if case.name not in be.oracles:
        ob = be.proc([be.goods[0], case.oracle(), be.goods[1]])
        be.oracles[case.name] = list(ob.split())[1] if not ob.errors else None
    return be.oracles[case.name]


def _after(be: Backend, where: str) -> list[str]:
    again = be.proc(list(be.goods))
    if again.errors or not _same(again, be.alone):
        return [f"{where}: the Processor is not usable after: a good batch now gives "
                f"{dict(again.errors) or _diff(again, be.alone)}"]
    return []


def _exc(where: str, e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    at = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
    return f"{where}: raised {type(e).__name__}: {str(e)[:400]}{at} (errors='skip' must not raise)"


def run_proc(cases, items, be: Backend) -> dict:
    """One case alone (chunks of 1: the peak-memory delta is the item's own)."""
    (case,), (item,) = cases, items
    return {case.name: _run_proc(case, item, be)}


def _run_proc(case, item, be: Backend) -> dict:
    import vlmprep
    where = "proc"
    measured = _reset_peak()
    rss0 = _rss_kb("VmRSS:")
    try:
        b = be.proc([be.goods[0], item, be.goods[1]])
    except Exception as e:  # noqa: BLE001
        return {"problems": [_exc(where, e)] + _after(be, where)}
    peak_kb = _rss_kb("VmHWM:") - rss0 if measured else None
    out_bytes = b.pixel_values.numel() * b.pixel_values.element_size()
    p = _check_batch(case, b, be, where, _oracle_part(case, be))
    res = {"outcome": "error" if 1 in b.errors else "ok"}
    if 1 in b.errors:
        res["error"] = str(b.errors[1])[:300]
    if peak_kb is not None:
        bound = _bound(case, item, out_bytes)
        res["rss_peak_mb"] = round(peak_kb / 1024, 1)
        res["bound_mb"] = round(bound / _MiB, 1)
        # under AddressSanitizer (make sanitize sets VLMPREP_UNDER_SANITIZER=1) redzones and the
        # free quarantine (256 MiB) inflate RSS: the peak is recorded, not held to the bound
        if peak_kb * 1024 > bound and not os.environ.get("VLMPREP_UNDER_SANITIZER"):
            p.append(f"{where}: peak memory {peak_kb / 1024:.0f} MiB above the bound "
                     f"{bound / _MiB:.0f} MiB (decoded_px={case.decoded_px}, encoded "
                     f"{_encoded_len(item)} B, output {out_bytes} B)")
    # errors="raise": the bad item raises ImageError with index 1 (nothing else), before
    # or at decode; the same Processor settings otherwise
    if case.expect == "bad":
        if be.strict is None:  # built once: a DALI Processor builds a pipeline
            be.strict = vlmprep.Processor(be.proc.pipeline, backend=be.name)
        try:
            be.strict([be.goods[0], item, be.goods[1]])
            p.append("proc errors='raise': returned instead of raising ImageError")
        except vlmprep.ImageError as e:
            if e.index != 1:
                p.append(f"proc errors='raise': ImageError index {e.index}, expected 1: {e}")
        except Exception as e:  # noqa: BLE001
            p.append(_exc("proc errors='raise'", e).replace(" (errors='skip' must not raise)",
                                                             " (expected ImageError)"))
    res["problems"] = p + _after(be, where)
    return res


_PROBE_THREADS: list[int] | None = None


def _install_probe_spy() -> None:
    """Record the thread of every probe call (submit must never probe on the event loop)."""
    import vlmprep.io.inputs as inputs
    import vlmprep.io.probe as probe_mod
    real = probe_mod.probe

    def spy(*a, **k):
        if _PROBE_THREADS is not None:
            _PROBE_THREADS.append(threading.get_ident())
        return real(*a, **k)
    probe_mod.probe = spy
    if getattr(inputs, "probe", None) is real:
        inputs.probe = spy


def run_batcher(cases, items, be: Backend) -> dict:
    """Every case of the chunk as its own request ``[g0, item, g1]``, all submitted at once
    (they share batches), plus good requests ``[g1]`` between them."""
    global _PROBE_THREADS
    import vlmprep
    from vlmprep.cache import OutputCache
    where = "batcher"
    out: dict = {c.name: {"problems": []} for c in cases}
    shared: list[str] = []

    async def main():
        global _PROBE_THREADS
        loop_tid = threading.get_ident()
        bat = vlmprep.serve.Batcher(be.proc, max_delay_ms=2.0, cache=OutputCache(max_bytes=64 * _MiB))
        gaps = [0.0]
        stop = False

        async def heartbeat():
            t = time.monotonic()
            while not stop:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps[0] = max(gaps[0], now - t - 0.01)
                t = now
        hb = asyncio.create_task(heartbeat())
        _PROBE_THREADS = []
        reqs = []
        for item in items:
            reqs += [bat.submit([be.goods[0], item, be.goods[1]]), bat.submit([be.goods[1]])]
        r = await asyncio.gather(*reqs, return_exceptions=True)
        threads = _PROBE_THREADS
        _PROBE_THREADS = None
        if loop_tid in threads:
            shared.append(f"{where}: probe ran on the event loop's thread during submit "
                          f"({threads.count(loop_tid)} of {len(threads)} probe calls in this chunk "
                          f"of {len(cases)} requests; issue 13 #5)")
        for k, case in enumerate(cases):
            p = out[case.name]["problems"]
            mine, good = r[2 * k], r[2 * k + 1]
            if isinstance(mine, BaseException):
                p.append(_exc(f"{where} submit", mine))
            else:
                p.extend(_check_batch(case, mine, be, where, _oracle_part(case, be)))
                out[case.name]["outcome"] = "error" if 1 in mine.errors else "ok"
            if isinstance(good, BaseException):
                p.append(_exc(f"{where} (a good request sharing the batch)", good))
            elif good.errors or not _same(list(good.split())[0], be.alone_parts[1]):
                p.append(f"{where}: a good request sharing the batch differs: "
                         f"{dict(good.errors) or _diff(list(good.split())[0], be.alone_parts[1])}")
        try:
            again = await bat.submit(list(be.goods))
            if again.errors or not _same(again, be.alone):
                shared.append(f"{where}: the Batcher is not usable after: "
                              f"{dict(again.errors) or _diff(again, be.alone)}")
        except Exception as e:  # noqa: BLE001
            shared.append(_exc(f"{where} (a good request after)", e))
        await bat.close()
        stop = True
        await hb
        for c in cases:
            out[c.name]["loop_max_gap_s"] = round(gaps[0], 3)

    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001
        shared.append(_exc(where, e))
    finally:
        _PROBE_THREADS = None
    for c in cases:
        out[c.name]["problems"] += shared
    return out


def run_loader(cases, items, be: Backend) -> dict:
    """One DataLoader over ``[g0, item_1, g1, item_2, g0, ...]`` (batches of 4: bad items mixed
    with good ones), 2 worker threads, an OutputCache."""
    import vlmprep
    from vlmprep.cache import OutputCache
    where = "loader"
    out: dict = {c.name: {"problems": []} for c in cases}
    src = [be.goods[0]]
    for k, item in enumerate(items):
        src += [item, be.goods[(k + 1) % 2]]
    try:
        loader = vlmprep.loader.DataLoader(src, be.proc, batch_size=4, max_batch_tokens=16384,
                                           num_workers=2, cache=OutputCache(max_bytes=64 * _MiB))
        got = list(loader)
    except Exception as e:  # noqa: BLE001
        for c in cases:
            out[c.name]["problems"].append(_exc(where, e))
        return out
    ids = [i for ids, _ in got for i in ids]
    if ids != list(range(len(src))):
        for c in cases:
            out[c.name]["problems"].append(f"{where}: yielded ids {ids}, expected 0..{len(src) - 1} "
                                           f"(each sample once, in order)")
        return out
    parts = [part for _, b in got for part in b.split()]
    for k, case in enumerate(cases):
        p = out[case.name]["problems"]
        i = 1 + 2 * k
        err = parts[i].errors.get(0)
        out[case.name]["outcome"] = "error" if err is not None else "ok"
        p += _check_item(case, parts[i], err, be, where, _oracle_part(case, be))
        for j, g in ((i - 1, k % 2), (i + 1, (k + 1) % 2)):
            if parts[j].errors or not _same(parts[j], be.alone_parts[g]):
                p.append(f"{where}: the good sample {j} next to it differs: "
                         f"{dict(parts[j].errors) or _diff(parts[j], be.alone_parts[g])}")
    return out


RUNNERS = {"proc": run_proc, "batcher": run_batcher, "loader": run_loader}


def _warm_up(be: Backend) -> None:
    """Import and first-use costs (decoders, cv2, thread pools, kernel caches) paid before any
    measured step, so the peak-memory deltas are the items' own (once per backend name)."""
    from hostile_corpus import format_files
    f = format_files()
    for name in ("jpeg", "jpeg_progressive", "jpeg_cmyk", "png", "png_rgba", "png_16_rgba", "webp",
                 "webp_animated", "gif", "bmp", "tiff", "tiff_16_rgb"):
        be.proc([be.goods[0], f[name], be.goods[1]])
    from _support.guarded import guarded_copy
    from _support.imgdata import tiled
    be.proc([guarded_copy(tiled("astronaut", 17, 9))])


def _trim(collect: bool) -> None:
    """Give freed heap memory back to the OS before a measurement: pages left free in the heap
    by the previous step would otherwise be reused without raising RSS (an under-count).
    ``collect``: run the garbage collector first (~0.1 s with torch loaded: only before the
    large cases, whose bound is not the constant alone)."""
    import ctypes
    import gc
    if collect:
        gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("groups", help="comma list of group names")
    ap.add_argument("--backends", required=True)
    ap.add_argument("--modes", default=None, help="override every group's modes (comma list)")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--skip", default="", help="group:case-index items that hung: report, do not run")
    ap.add_argument("--chunk", type=int, default=16, help="cases per batcher / loader step")
    args = ap.parse_args()
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed (Python or C) goes to stderr
    sys.stdout = sys.stderr
    faulthandler.enable()  # a SIGSEGV prints the Python stack to stderr, which the parent shows

    def emit(**kw):
        proto.write(json.dumps(kw) + "\n")
        proto.flush()

    import hostile_corpus
    from _support.imgdata import crop, encode
    builders = hostile_corpus.groups(args.full)
    groups = {g: builders[g]() for g in args.groups.split(",")}
    backends = args.backends.split(",")
    steps = []
    for g, group in groups.items():
        modes = args.modes.split(",") if args.modes else group.modes
        for c0 in range(0, len(group.cases), args.chunk):
            chunk = list(range(c0, min(c0 + args.chunk, len(group.cases))))
            for b in backends:
                for m in modes:
                    steps += [[g, [c], b, m] for c in chunk] if m == "proc" else [[g, chunk, b, m]]
    emit(cases={g: [c.name for c in group.cases] for g, group in groups.items()}, steps=steps)
    goods = (crop("chelsea", 57, 91), encode(crop("coffee", 80, 60), "jpeg"))
    bes: dict = {}
    warm: set = set()
    skip = set(args.skip.split(",")) - {""}
    _install_probe_spy()
    ctx = hostile_corpus.Ctx(args.tmp)
    for j in range(args.start, len(steps)):
        g, idx, bname, mode = steps[j]
        group = groups[g]
        cases = [group.cases[i] for i in idx]
        emit(begin=j)
        key = (bname, group.preset, tuple(sorted(group.overrides.items())))
        if key not in bes:
            try:
                bes[key] = Backend(bname, group, goods)
                if bname not in warm:
                    _warm_up(bes[key])
                    warm.add(bname)
            except Exception as e:  # noqa: BLE001 (e.g. an override this version does not know)
                msg = (f"setup: Processor({group.preset!r}, backend={bname!r}, **{group.overrides}) "
                       f"failed: {type(e).__name__}: {e}")
                emit(end=j, results={c.name: {"problems": [msg]} for c in cases})
                continue
        items, results = [], {}
        for i in idx:
            if f"{g}:{i}" in skip:
                results[group.cases[i].name] = {"problems": [
                    "not run: this case hung alone in an earlier step (it would wait the watchdog again)"]}
        for c in cases:
            if c.name in results:
                continue
            try:
                items.append(c.make(ctx))
            except Exception as e:  # noqa: BLE001
                results[c.name] = {"problems": [f"corpus: making the case failed: {type(e).__name__}: {e}"]}
        cases = [c for c in cases if c.name not in results]
        if mode == "proc":
            _trim(collect=any(c.decoded_px for c in cases))
        t0 = time.monotonic()
        try:
            results.update(RUNNERS[mode](cases, items, bes[key]) if cases else {})
        except Exception as e:  # noqa: BLE001 (a check itself failed: report it, go on)
            msg = f"{mode}: the check raised {type(e).__name__}: {e}\n{traceback.format_exc()[-800:]}"
            results.update({c.name: {"problems": [msg]} for c in cases})
        dt = round((time.monotonic() - t0) / max(1, len(results)), 4)  # a chunk's time, shared
        for r in results.values():
            r.setdefault("seconds", dt)
        del items
        emit(end=j, results=results)

if __name__ == "__main__":
    main()
