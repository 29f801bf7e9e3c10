"""DataLoader with hostile items among the sources: special files, buffers and tensors that used
to raise (or hang the cache) are skipped as that sample's ImageError; the loader and its workers
survive, every sample is yielded exactly once, also across a resume.

Each loader runs on a watchdog thread: a hang (a FIFO opened, /dev/zero read to its end) fails
the test after 60 s instead of wedging pytest. Images are small random arrays; the oracle for
pixels is the Processor on the good samples alone.
"""
from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest
import torch

import vlmprep
from vlmprep.cache import OutputCache
from vlmprep.loader import DataLoader

WATCHDOG_S = 60


def _watchdog(fn):
    """fn() on a daemon thread; fails the test when it does not return within WATCHDOG_S."""
    box: dict = {}

    def run():
        try:
            box["out"] = fn()
        except BaseException as e:  # noqa: BLE001 (re-raised in the test's thread)
            box["exc"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(WATCHDOG_S)
    assert not t.is_alive(), f"the loader hung for {WATCHDOG_S} s (a special file read?)"
    if "exc" in box:
        raise box["exc"]
    return box["out"]


def _unblock(fifo) -> None:
    # A reader stuck in open() of the FIFO (the old cache) gets EOF: the thread can end.
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def _released() -> memoryview:
    v = memoryview(bytearray(b"\x89PNG\r\n\x1a\n" + bytes(64)))
    v.release()
    return v


def _sources(tmp_path, rng):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    goods = [rng.integers(0, 256, (int(rng.integers(20, 90)), int(rng.integers(20, 90)), 3),
                          dtype=np.uint8) for _ in range(14)]
    bads = {
        "fifo": str(fifo),
        "dev-zero": "/dev/zero",
        "long-name": str(tmp_path / ("x" * 300 + ".jpg")),
        "nul": "a\0b.png",
        "released": _released(),
        "strided-view": memoryview(bytearray(rng.bytes(200)))[::2],
        "meta": torch.empty((3, 8, 8), dtype=torch.uint8, device="meta"),
        "float": np.zeros((8, 8, 3), np.float32),
    }
    items = [{"id": f"g{k}", "image": g} for k, g in enumerate(goods)]
    for k, (sid, item) in enumerate(bads.items()):
        items.insert(1 + 2 * k, {"id": sid, "image": item})
    return items, {d["id"]: d["image"] for d in items}, set(bads), fifo


@pytest.mark.parametrize("nw", [0, 2])
@pytest.mark.parametrize("cached", [False, True])
def test_hostile_sources_are_skipped_and_the_loader_lives(seed, tmp_path, nw, cached):
    rng = np.random.default_rng(seed)
    items, by_id, bad, fifo = _sources(tmp_path, rng)
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    cache = OutputCache(64 << 20) if cached else None

    def make():
        return DataLoader(items, proc, batch_size=3, max_batch_tokens=None, num_workers=nw,
                          cache=cache)

    try:
        loader = make()
        batches = _watchdog(lambda: list(loader))
    finally:
        _unblock(fifo)
    ids = [i for b_ids, _ in batches for i in b_ids]
    assert ids == [d["id"] for d in items]  # every sample once, in order
    assert {sid for sid, _ in loader.skipped} == bad
    for sid, e in loader.skipped:
        assert type(e) is vlmprep.ImageError and repr(sid) in str(e)
    found = {sid: e.reason for sid, e in loader.skipped}
    assert "FIFO" in found["fifo"] and "character device" in found["dev-zero"]
    for b_ids, b in batches:
        assert sorted(b.errors) == [k for k, sid in enumerate(b_ids) if sid in bad]
        want = proc([by_id[sid] for sid in b_ids if sid not in bad])
        assert torch.equal(b.pixel_values, want.pixel_values), b_ids
    # Resume after 2 batches: exactly the rest, skipped samples included.
    loader = make()
    it = iter(loader)
    head = _watchdog(lambda it=it: [next(it) for _ in range(2)])  # bound now: `it` is deleted below
    state = json.loads(json.dumps(loader.state_dict()))
    del it
    resumed = make()
    resumed.load_state_dict(state)
    rest = _watchdog(lambda: list(resumed))
    assert [i for b_ids, _ in head + rest for i in b_ids] == ids


def test_loader_with_a_bad_item_in_errors_raise_names_it_and_stays_usable(seed, tmp_path):
    rng = np.random.default_rng(seed)
    items, by_id, bad, fifo = _sources(tmp_path, rng)
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    loader = DataLoader(items, proc, batch_size=3, max_batch_tokens=None, num_workers=2,
                        cache=OutputCache(1 << 20))
    with pytest.raises(vlmprep.ImageError, match="'fifo'.*FIFO"):
        _watchdog(lambda: list(loader))
    good = [d for d in items if d["id"] not in bad]
    out = _watchdog(lambda: list(DataLoader(good, proc, batch_size=4, max_batch_tokens=None)))
    assert [i for b_ids, _ in out for i in b_ids] == [d["id"] for d in good]


def test_cache_key_never_reads_special_files_and_never_raises(tmp_path):
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    cache = OutputCache(1 << 20)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.png"
    with open(big, "wb") as f:
        f.truncate(proc.pipeline["decode"].max_source_bytes + 1)
    small = tmp_path / "s.png"
    small.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    try:
        keys = _watchdog(lambda: [cache.key_for(x, proc) for x in (
            str(fifo), "/dev/zero", "/dev/urandom", big, _released(),
            torch.empty((3, 4, 4), dtype=torch.uint8, device="meta"), "a\0b", "y" * 300,
            tmp_path)])
    finally:
        _unblock(fifo)
    assert keys == [None] * 9
    # A strided view hashes as its bytes; a regular file as its content.
    view = memoryview(bytearray(range(200)))[::2]
    assert cache.key_for(view, proc) == cache.key_for(bytes(range(0, 200, 2)), proc)
    assert cache.key_for(small, proc) == cache.key_for(small.read_bytes(), proc) is not None
