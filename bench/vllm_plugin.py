"""vLLM's own multimodal processor with and without the vlmprep plugin (issue 32 item 4).

Runs in the real-engine venv (``make test-engines`` builds it):

    PYTHONPATH=. build/engines/venv/bin/python bench/vllm_plugin.py [--requests 12] [--json FILE]

Per request, as vLLM's OpenAI server does it: a 1920x1080 JPEG (a photo mosaic, distinct per
request) as a ``data:`` URI through vLLM's ``MediaConnector`` (its PIL decode), then
``processor.apply`` (no processor cache: every image is processed), Qwen2-VL checkpoint config
(tests/integration/checkpoints.py: the real image processor config, a tiny model config), in both
pixel modes: uint8 (vLLM 0.33's default ``mm_device_do_normalize``: the model normalizes on the
device) and float32 (``mm_device_do_normalize=False``: the processor does). Concurrency 1 and 2: that many threads
each running requests (vLLM's renderer runs one per API-server process; 2 shows what the GIL
allows); torch threads 1, as the renderer sets them, and vlmprep's threads 1 (its default is every
core: one request would then use both). Reported: ms per request (median over the
requests), split into vLLM's ``fetch_image`` of the data: URI (its Pillow decode; with the plugin,
for a plain JPEG, the header only: vlmprep decodes the bytes inside ``apply``) and
``processor.apply``, requests/s, and the ratios. Outputs are checked equal with and without the plugin
(default pixels); "vllm+vlmprep pil" is the plugin with ``VLMPREP_VLLM_PIXELS=pil`` (Pillow-exact
pixels, vlmprep's compiled resize; not equal to vLLM's torchvision pixels by design).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "integration")]


def _uris(n: int) -> list[str]:
    """``n`` distinct 1080p photo mosaics (vlmprep.bench.images, JPEG quality 90) as data: URIs."""
    from vlmprep.bench.images import synthetic_set
    return ["data:image/jpeg;base64," + base64.b64encode(b).decode()
            for b in synthetic_set("1080p", n).items]


def _run(eng, uris: list[str], threads: int, keep: bool = False) -> tuple[list[float], float, list]:
    """(seconds per request, wall seconds, outputs if ``keep``) with ``threads`` requests in flight.
    Timed runs keep no output: a server hands each on and frees it, and holding twelve 1080p
    outputs makes every request fault in fresh pages (measured: 27 -> 42 ms per request)."""
    import torch
    from vllm.multimodal.media import MediaConnector
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs
    conn = MediaConnector()
    prompt = eng.ck.ids(eng.prompt(1))

    def one(uri: str):
        torch.set_num_threads(1)
        t = time.perf_counter()
        img = conn.fetch_image(uri)
        t1 = time.perf_counter()
        items = eng.processor.info.parse_mm_data({"image": [img]})
        out = eng.processor.apply(ProcessorInputs(prompt, items), TimingContext())
        return (time.perf_counter() - t, t1 - t), out if keep else None

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        res = list(pool.map(one, uris))
    return [r[0] for r in res], time.perf_counter() - t0, [r[1] for r in res]


def _engine(mode: str):
    """Qwen2-VL's vLLM processor: uint8 pixels (vLLM 0.33's default ``mm_device_do_normalize``)
    or float32 (``mm_device_do_normalize=False``: the processor rescales and normalizes)."""
    from test_vllm_engine import Engine
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    eng = Engine("qwen2-vl", tempfile.mkdtemp())
    if mode == "float32":
        eng.processor = MULTIMODAL_REGISTRY.create_processor(
            ModelConfig(model=str(eng.ck.path), max_model_len=32768, mm_device_do_normalize=False))
    return eng


PATHS = (("vllm", "0", ""), ("vllm+vlmprep", "1", ""), ("vllm+vlmprep pil", "1", "pil"))


def _mode(eng, uris: list[str], mode: str, rounds: int) -> list[dict]:
    """Rows for one pixel mode: each path at 1 and 2 threads, ``rounds`` times interleaved
    (requests/s: the median round; ms: the median request over all rounds); outputs checked
    equal. The rounds because this 2-core VM's figures move +-25% from run to run."""
    import torch

    from vlmprep.integrations import vllm_plugin as plugin
    for on, pixels in (("1", ""), ("1", "pil"), ("0", "")):  # warm: construction, first calls
        os.environ[plugin.ENV], os.environ[plugin.PIXELS_ENV] = on, pixels
        _run(eng, uris[:2], 1)
    per: dict = {}
    rps: dict = {}
    for _ in range(rounds):
        for threads in (1, 2):
            for name, on, pixels in PATHS:
                os.environ[plugin.ENV], os.environ[plugin.PIXELS_ENV] = on, pixels
                # warmed at this thread count first: on a VM whose freed pages go back to the
                # host (firecracker page reporting) a path's first requests fault in its buffers
                _run(eng, uris[:4 * threads], threads)
                times, wall, _ = _run(eng, uris, threads)
                per.setdefault((name, threads), []).extend(times)
                rps.setdefault((name, threads), []).append(len(uris) / wall)
    rows = []
    for (name, threads), times in per.items():
        rows.append({"mode": mode, "path": name, "threads": threads,
                     "ms_per_request_p50": 1e3 * statistics.median(p[0] for p in times),
                     "ms_fetch_p50": 1e3 * statistics.median(p[1] for p in times),
                     "ms_apply_p50": 1e3 * statistics.median(p[0] - p[1] for p in times),
                     "requests_per_s": statistics.median(rps[name, threads]),
                     "requests_per_s_rounds": rps[name, threads]})
    outs = {}
    for on in ("0", "1"):  # the equality check, untimed: vLLM's path and the plugin's default pixels
        os.environ[plugin.ENV], os.environ[plugin.PIXELS_ENV] = on, ""
        outs[on] = _run(eng, uris, 2, keep=True)[2]
    for a, b in zip(outs["0"], outs["1"]):
        x, y = a["mm_kwargs"]["image"][0], b["mm_kwargs"]["image"][0]
        assert all(torch.equal(x[k].data, y[k].data) for k in x), f"{mode}: outputs differ"
    return rows


def _ratios(rows: list[dict]) -> dict:
    by = {(r["path"], r["threads"]): r["requests_per_s"] for r in rows}
    return {
        "speedup_1_thread": by[("vllm+vlmprep", 1)] / by[("vllm", 1)],
        "speedup_2_threads": by[("vllm+vlmprep", 2)] / by[("vllm", 2)],
        "vllm_2_vs_1_threads": by[("vllm", 2)] / by[("vllm", 1)],
        "plugin_2_vs_1_threads": by[("vllm+vlmprep", 2)] / by[("vllm+vlmprep", 1)],
        "pil_pixels_speedup_1_thread": by[("vllm+vlmprep pil", 1)] / by[("vllm", 1)],
        "pil_pixels_2_vs_1_threads": by[("vllm+vlmprep pil", 2)] / by[("vllm+vlmprep pil", 1)],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    from vlmprep.integrations import vllm_plugin as plugin
    from vlmprep.kernels import set_num_threads
    set_num_threads(1)  # one core per request, as torch's threads below: ratios per core
    os.environ[plugin.ENV] = "1"
    plugin.register()
    uris = _uris(args.requests)
    rows, ratios = [], {}
    for mode in ("uint8", "float32"):
        eng = _engine(mode)
        mode_rows = _mode(eng, uris, mode, args.rounds)
        rows += mode_rows
        ratios[mode] = _ratios(mode_rows)
    print(f"{'pixels':<8}{'path':<18}{'threads':>8}{'ms/request p50':>16}{'fetch p50':>11}{'apply p50':>11}"
          f"{'requests/s':>12}")
    for r in rows:
        print(f"{r['mode']:<8}{r['path']:<18}{r['threads']:>8}{r['ms_per_request_p50']:>16.1f}"
              f"{r['ms_fetch_p50']:>11.1f}{r['ms_apply_p50']:>11.1f}{r['requests_per_s']:>12.2f}")
    for mode, rs in ratios.items():
        print(mode + ": " + ", ".join(f"{k} {v:.2f}x" for k, v in rs.items()))
    print(f"outputs equal: yes ({len(uris)} requests x 2 pixel modes, checked untimed); "
          f"load average {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"requests": len(uris), "rounds": args.rounds, "rows": rows, "ratios": ratios,
                       "loadavg": os.getloadavg(), "cpus": os.cpu_count()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
