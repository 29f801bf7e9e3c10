"""The process-wide memory budget (vlmprep.budget; issue 33, deliverable 3): the items processed
at once hold their planned bytes from one budget, so N items never plan more than it between
them; an item over the whole budget is refused; a waiting item gives up at its deadline; the
pixels are the same with or without a budget. The peak-RSS measurement of eight decode bombs at
once runs in child processes (opt-in: make stress)."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from _support.figures import record
from _support.imgdata import crop, encode
from PIL import Image

import vlmprep
from vlmprep import budget
from vlmprep.io.video import VideoLimits
from vlmprep.kernels import local_threads


@pytest.fixture
def use_budget(monkeypatch):
    """``use_budget(value, wait_s=None)``: the process budget made again from
    VLMPREP_MEMORY_BUDGET=value (both restored after the test)."""
    def use(value, wait_s=None):
        monkeypatch.setenv(budget.ENV, str(value))
        monkeypatch.setattr(budget, "_PROCESS", None)
        b = budget.process_budget()
        if wait_s is not None:
            monkeypatch.setattr(b, "wait_s", wait_s)
        return b
    return use


def _images(n=8, h=240, w=320):
    """``n`` different PNGs of the same size (so the same planned bytes)."""
    names = ("astronaut", "coffee", "chelsea", "rocket")
    return [encode(crop(names[k % 4], h, w, top=8 * (k // 4)), "png") for k in range(n)]


def _spy_concurrency(monkeypatch, proc):
    """Record how many images run at once (each held ~30 ms so that overlaps show)."""
    seen = {"now": 0, "max": 0, "calls": 0}
    lock = threading.Lock()
    real = proc._backend.run_image

    def spy(ctx):
        with lock:
            seen["now"] += 1
            seen["calls"] += 1
            seen["max"] = max(seen["max"], seen["now"])
        try:
            time.sleep(0.03)
            return real(ctx)
        finally:
            with lock:
                seen["now"] -= 1
    monkeypatch.setattr(proc._backend, "run_image", spy)
    return seen


def _planned(proc, images):
    sources, plans = proc.prepare(images)
    return [budget.image_bytes(s, p) for s, p in zip(sources, plans)]


def test_eight_items_run_at_most_three_at_once_with_a_budget_of_three(monkeypatch, use_budget):
    images = _images()
    proc = vlmprep.Processor("qwen2-vl", errors="skip")
    ref = proc(images)  # the default budget: all eight fit
    sizes = _planned(proc, images)
    x = sizes[0]
    assert set(sizes) == {x} and x > 240 * 320 * 3
    b = use_budget(3 * x + x // 2)
    seen = _spy_concurrency(monkeypatch, proc)
    with local_threads(8):  # eight image threads: without the budget all eight overlap
        got = proc(images)
    assert seen["calls"] == 8 and seen["max"] == 3, seen
    assert b.peak == 3 * x and b.in_use == 0
    assert not got.errors and torch.equal(got.pixel_values, ref.pixel_values)
    assert torch.equal(got.grid_thw, ref.grid_thw)
    # the same spy without a budget: the overlap the budget removed is really there
    use_budget("off")
    seen.update(max=0, calls=0)
    with local_threads(8):
        again = proc(images)
    assert seen["max"] > 3 and torch.equal(again.pixel_values, ref.pixel_values), seen


def test_outputs_are_bit_identical_with_and_without_a_budget(use_budget):
    images = _images(4) + [encode(crop("coffee", 200, 300), "jpeg")]
    proc = vlmprep.Processor("internvl", dtype="bfloat16", errors="skip")
    use_budget("off")
    ref = proc(images)
    use_budget(max(_planned(proc, images)) + 1)  # room for one image at a time
    with local_threads(4):
        got = proc(images)
    assert not got.errors and torch.equal(got.pixel_values, ref.pixel_values)
    assert got.num_tokens == ref.num_tokens


def test_an_item_over_the_whole_budget_is_refused_the_others_run(use_budget):
    small = encode(crop("coffee", 64, 64), "png")
    big = _images(1, 400, 500)[0]
    proc = vlmprep.Processor("qwen2-vl", errors="skip")
    need = _planned(proc, [small, big])
    use_budget(need[0] + 1000)
    out = proc([small, big, small])
    assert sorted(out.errors) == [1]
    msg = str(out.errors[1])
    assert msg.startswith("image 1") and f"plan at most {need[0] + 1000:,} bytes" in msg, msg
    assert f"got {need[1]:,} planned" in msg and budget.ENV in msg and "max_decode_bytes" in msg
    ref = vlmprep.Processor("qwen2-vl")([small])
    assert torch.equal(out.pixel_values[: ref.pixel_values.shape[0]], ref.pixel_values)
    with pytest.raises(vlmprep.ImageError, match="process's memory budget"):
        vlmprep.Processor("qwen2-vl")([big])


def test_a_waiting_image_times_out_and_the_budget_recovers(use_budget):
    img = _images(1)[0]
    proc = vlmprep.Processor("qwen2-vl", errors="skip")
    b = use_budget(_planned(proc, [img])[0] * 2, wait_s=0.3)
    hold = b.acquire(b.total)  # another item holds everything
    t = time.perf_counter()
    out = proc([img])
    took = time.perf_counter() - t
    assert 0.3 <= took < 2.0 and sorted(out.errors) == [0], took
    assert "within 0.3 s" in str(out.errors[0]) and budget.ENV in str(out.errors[0])
    hold.release()
    assert not proc([img]).errors and b.in_use == 0


def _gif(frames=4, h=96, w=128) -> bytes:
    rng = np.random.default_rng(0)
    ims = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).convert("P")
           for _ in range(frames)]
    buf = io.BytesIO()
    ims[0].save(buf, "GIF", save_all=True, append_images=ims[1:], duration=100, loop=0)
    return buf.getvalue()


def test_a_waiting_video_times_out_at_its_timeout_s(use_budget):
    gif = _gif()
    proc = vlmprep.Processor("qwen2-vl", errors="skip", video_limits=VideoLimits(timeout_s=0.3))
    ref = proc(videos=[gif]).videos
    assert not ref.errors
    b = use_budget(1 << 30)
    hold = b.acquire(b.total)
    t = time.perf_counter()
    out = proc(videos=[gif]).videos
    took = time.perf_counter() - t
    assert 0.3 <= took < 2.0 and sorted(out.errors) == [0], took
    assert str(out.errors[0]).startswith("video 0") and "within 0.3 s" in str(out.errors[0])
    hold.release()
    again = proc(videos=[gif]).videos
    assert not again.errors and torch.equal(again.pixel_values, ref.pixel_values)


def test_budget_semantics():
    b = budget.MemoryBudget(100, wait_s=5)
    h1 = b.acquire(60)
    order = []

    def take(n, tag):
        with b.acquire(n):
            order.append(tag)
    t1 = threading.Thread(target=take, args=(50, "first"))  # waits: 60 + 50 > 100
    t1.start()
    time.sleep(0.05)
    t2 = threading.Thread(target=take, args=(10, "second"))  # fits, but queues behind "first"
    t2.start()
    time.sleep(0.05)
    assert order == [] and b.in_use == 60
    h1.release()
    h1.release()  # once only
    t1.join(2)
    t2.join(2)
    assert order == ["first", "second"] and b.in_use == 0 and b.peak == 60
    with pytest.raises(vlmprep.ImageError, match="plan at most 100 bytes.*got 101 planned"):
        b.acquire(101)
    assert budget.MemoryBudget(None).acquire(10**18).nbytes == 0  # off: nothing held
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="total expected"):
            budget.MemoryBudget(bad)


def test_held_chunks_cut_where_the_next_item_does_not_fit():
    b = budget.MemoryBudget(100, wait_s=0.2)
    refused, seen = [], []
    costs = {"a": 40, "b": 40, "c": 30, "d": 101, "e": 90, "f": 5, "g": 5, "h": 5}
    for chunk in budget.held_chunks(list(costs), 3, costs.__getitem__,
                                    lambda it, e: refused.append((it, str(e))), budget=b):
        seen.append((chunk, b.in_use))
    # a+b fit, c does not beside them (110): it heads the next chunk; d is over the whole
    # budget; e waits for c's chunk to give back; f, g join it (100: full); the step of 3 cuts
    # before h
    assert seen == [(["a", "b"], 80), (["c"], 30), (["e", "f", "g"], 100), (["h"], 5)], seen
    assert [r[0] for r in refused] == ["d"] and "got 101 planned" in refused[0][1]
    assert b.in_use == 0 and b.peak == 100
    # a caller that stops early gives the chunk's holds back
    it = budget.held_chunks(["a", "b"], 2, costs.__getitem__, lambda *_: None, budget=b)
    assert next(it) == ["a", "b"] and b.in_use == 80
    it.close()
    assert b.in_use == 0
    # a first item whose wait runs out is refused, not yielded
    hold = b.acquire(100)
    t = time.perf_counter()
    got = list(budget.held_chunks(["f"], 1, costs.__getitem__,
                                  lambda it, e: refused.append((it, str(e))), budget=b))
    assert got == [] and refused[-1][0] == "f" and "within 0.2 s" in refused[-1][1]
    assert 0.2 <= time.perf_counter() - t < 2
    hold.release()
    with pytest.raises(ValueError, match="step expected"):
        list(budget.held_chunks(["a"], 0, costs.__getitem__, lambda *_: None, budget=b))


def _chunk_spy(monkeypatch, owner, name, get_items):
    """Record the number of images of each call of ``owner.name`` (a chunk) and the budget
    held during it."""
    calls = []
    real = getattr(owner, name)

    def spy(*a, **k):
        calls.append((len(get_items(*a, **k)), budget.process_budget().in_use))
        return real(*a, **k)
    monkeypatch.setattr(owner, name, spy)
    return calls


def _chunked_backend_case(proc, use_budget, calls):
    """Eight equal images under a budget of 3.5 images: chunks of 3, 3, 2, the same pixels;
    then a budget under one image beside a small one: the big one is refused alone."""
    images = _images()
    use_budget("off")
    ref = proc(images)
    x = _planned(proc, images)[0]
    b = use_budget(3 * x + x // 2)
    calls.clear()
    got = proc(images)
    assert [c[0] for c in calls] == [3, 3, 2] and [c[1] for c in calls] == [3 * x, 3 * x, 2 * x]
    assert b.peak == 3 * x and b.in_use == 0
    assert not got.errors and torch.equal(got.pixel_values, ref.pixel_values)
    small = encode(crop("coffee", 64, 64), "png")
    need = _planned(proc, [small])[0]
    use_budget(need + 1000)
    out = proc([small, images[0], small])
    assert sorted(out.errors) == [1] and str(out.errors[1]).startswith("image 1")
    assert f"plan at most {need + 1000:,} bytes" in str(out.errors[1])
    alone = proc([small])
    assert torch.equal(out.pixel_values, torch.cat([alone.pixel_values] * 2))


@pytest.mark.dali
def test_dali_backend_holds_each_chunk_from_the_budget(monkeypatch, use_budget):
    from vlmprep.backends.dali.backend import Backend as Dali
    proc = vlmprep.Processor("qwen2-vl", backend="dali", errors="skip")
    calls = _chunk_spy(monkeypatch, Dali, "_decode", lambda self, chunk, errors: chunk)
    proc(_images(1))  # builds the graphs
    calls.clear()
    _chunked_backend_case(proc, use_budget, calls)


def test_torch_batched_path_holds_each_chunk_from_the_budget(monkeypatch, use_budget):
    """The torch backend's stage-by-stage path (CUDA's), forced on the CPU."""
    from vlmprep.backends.torch import gpu
    proc = vlmprep.Processor("qwen2-vl", backend="torch", errors="skip")
    calls = _chunk_spy(monkeypatch, gpu, "plan_batch", lambda backend, jobs: jobs)
    with gpu.forced():
        _chunked_backend_case(proc, use_budget, calls)


def test_run_workers_share_the_budget(tmp_path, monkeypatch, use_budget):
    """``vlmprep run --workers 2`` gives each worker half of the budget: an image that fits the
    whole budget but not half of it is an error row with two workers, processed with one."""
    from vlmprep.batch.config import JobConfig
    from vlmprep.batch.run import run
    folder = tmp_path / "in"
    folder.mkdir()
    images = _images(2)
    for k, data in enumerate(images):
        (folder / f"{k}.png").write_bytes(data)
    x = _planned(vlmprep.Processor("qwen2-vl"), images)[0]
    use_budget(x + x // 2)
    cfg = JobConfig(preset="qwen2-vl", shard_size=1)
    one = run([str(folder)], str(tmp_path / "w1"), cfg, workers=1, progress=False)
    two = run([str(folder)], str(tmp_path / "w2"), cfg, workers=2, progress=False)
    assert (one["processed"], one["skipped"]) == (2, 0), one
    assert (two["processed"], two["skipped"]) == (0, 2), two


@pytest.mark.parametrize("value,want", [("1000", 1000), ("512M", 512 << 20), ("1.5G", 3 << 29),
                                        ("off", None), ("OFF", None)])
def test_env_values(use_budget, value, want):
    assert use_budget(value).total == want


@pytest.mark.parametrize("value", ["lots", "-5", "0", "8GB", "150%", "0%"])
def test_bad_env_value_fails_the_call_naming_it(use_budget, monkeypatch, value):
    monkeypatch.setenv(budget.ENV, value)
    monkeypatch.setattr(budget, "_PROCESS", None)
    with pytest.raises(ValueError, match=rf"{budget.ENV}: expected bytes .* got {value!r}"):
        vlmprep.Processor("qwen2-vl", errors="skip")([_images(1, 32, 32)[0]])


def test_default_is_half_the_host_memory(monkeypatch):
    monkeypatch.delenv(budget.ENV, raising=False)
    monkeypatch.setattr(budget, "_PROCESS", None)
    phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert budget.process_budget().total == budget.host_memory() // 2 <= phys // 2
    assert budget.process_budget() is budget.process_budget()


# -- eight decode bombs at once: peak RSS in child processes -----------------------------------
_CHILD = r"""
import json, sys, time
import numpy as np, vlmprep
from vlmprep.kernels import local_threads
proc = vlmprep.Processor("siglip", errors="skip")
proc([np.zeros((64, 64, 3), np.uint8)])  # warm (kernels, pools) without raising the peak

def hwm():  # the peak RSS since the reset below (VmHWM), in bytes
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) << 10 for ln in f if ln.startswith("VmHWM:"))

# reset the peak to the current RSS (Linux >= 4.0): the base is what is resident now, not the
# high-water mark of start-up (imports), which a loaded run's decodes could stay under
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = hwm()
t = time.perf_counter()
with local_threads(8):
    out = proc(sys.argv[1:])
print(json.dumps({"base": base, "peak": hwm(),
                  "errors": len(out.errors), "s": time.perf_counter() - t,
                  "sum": float(out.pixel_values.double().sum())}))
"""


@pytest.mark.stress
def test_eight_bombs_at_once_peak_rss_bounded_by_the_budget(tmp_path):
    """Eight legal PNGs of 4000^2 (one colour plane each: ~50 KB files, 112 MB planned decode
    each), processed at once on eight image threads, in a child process each way."""
    side = 4000
    paths = []
    for k in range(8):
        a = np.zeros((side, side, 3), np.uint8)
        a[:, :, k % 3] = 40 + 25 * k
        paths.append(str(tmp_path / f"bomb{k}.png"))
        Image.fromarray(a).save(paths[-1], "PNG", compress_level=1)

    def child(value):
        env = dict(os.environ, VLMPREP_MEMORY_BUDGET=value)
        r = subprocess.run([sys.executable, "-c", _CHILD, *paths], env=env, timeout=300,
                           capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout.strip().splitlines()[-1])
    one = side * side * 7 + 384 * 384 * 3  # decode_cost of an RGB PNG + the resized canvas
    free = child("off")
    held = child(str(one + one // 2))  # one image at a time
    for r in (free, held):
        assert r["errors"] == 0
    assert held["sum"] == free["sum"]
    grew_free, grew_held = free["peak"] - free["base"], held["peak"] - held["base"]
    record("memory budget", f"eight {side}^2 PNG bombs at once: peak RSS +{grew_free >> 20} MiB "
           f"in {free['s']:.1f} s without a budget, +{grew_held >> 20} MiB in {held['s']:.1f} s "
           f"with a budget of {(one + one // 2) >> 20} MiB")
    if os.environ.get("VLMPREP_UNDER_SANITIZER"):
        return  # ASan's redzones and free quarantine (make sanitize) bound no peak
    assert grew_held < 2 * one + (64 << 20), grew_held  # one item's plan, with slack
    assert grew_held < grew_free / 2, (grew_held, grew_free)
