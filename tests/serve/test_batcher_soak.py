"""Load and soak test of the Batcher, in process (no sockets): thousands of requests, hundreds in
flight, bad items mixed in, cancellations while queued and while processed, close() under load.

Asserted: no request is lost, answered twice or given another's images (each image is a solid
colour unique to its request and position, so a result is checked by content, row by row,
against the colour's expected patch row; geometry against the plan of its size), every bad item
is exactly its own request's error at its own index, and RSS stays flat across rounds after a
warm-up. CI runs the small version (~2,000 requests); VLMPREP_SOAK=1 runs the heavy one. Its
figures are shown in the run's terminal summary (tests/_support/figures.py).
"""
from __future__ import annotations

import asyncio
import collections
import io
import os
import random
import time

import numpy as np
import pytest
import torch
from _support import figures
from PIL import Image

import vlmprep
from vlmprep.cache import OutputCache
from vlmprep.serve import Batcher

HEAVY = os.environ.get("VLMPREP_SOAK") == "1"
# rounds after warm-up, requests per round, clients in flight
ROUNDS, PER_ROUND, CLIENTS = (6, 5000, 500) if HEAVY else (3, 750, 200)
SIZES = [(28, 28), (56, 28), (28, 84), (42, 70), (70, 42)]
PRESET = "qwen2-vl"
WATCHDOG_S = 600 if HEAVY else 120


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def colour(k: int, j: int) -> tuple[int, int, int]:
    """Unique per (request k < 2**16, position j < 4); channel values never the reference's."""
    return (k & 0xFF, (k >> 8) & 0xFF, 200 + j)


def _png(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    return buf.getvalue()


class World:
    """Makes requests (items + what each must give) and checks results."""

    def __init__(self, proc, tmp_path, rng: random.Random):
        self.proc, self.rng = proc, rng
        # The reference patch row: a solid (1, 2, 3) image; a solid (r, g, b) image's rows are
        # this row with 1 -> r, 2 -> g, 3 -> b (uint8 output: resized, patchified pixels).
        ref = proc([np.broadcast_to(np.array([1, 2, 3], np.uint8), (28, 28, 3)).copy()])
        row = ref.pixel_values[0]
        assert set(row.unique().tolist()) == {1, 2, 3}
        self.ref_row = row.long()
        self.plans = {hw: proc.plan([np.zeros((*hw, 3), np.uint8)]).images[0] for hw in SIZES}
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        self.fifo = str(fifo)
        self.dir = str(tmp_path)
        self.bad_kinds = {
            "corrupt bytes": lambda: self.rng.randbytes(300),
            "truncated png": lambda: _png(np.zeros((40, 40, 3), np.uint8) + 7)[:80],
            "fifo": lambda: self.fifo,
            "/dev/zero": lambda: "/dev/zero",
            "directory": lambda: self.dir,
            "float32 array": lambda: np.zeros((20, 20, 3), np.float32),
            "aspect ratio": lambda: np.zeros((1, 250, 3), np.uint8),
            "released view": self._released,
        }
        self.history: list = []  # earlier good requests, for repeats (cache hits)

    @staticmethod
    def _released():
        v = memoryview(bytearray(32))
        v.release()
        return v

    def good_item(self, k: int, j: int):
        c = colour(k, j)
        hw = SIZES[(k + j) % len(SIZES)]
        a = np.broadcast_to(np.array(c, np.uint8), (*hw, 3))
        kind = (k * 4 + j) % 10
        if kind == 0:
            item = _png(np.ascontiguousarray(a))
        elif kind == 1:
            item = torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1)
        elif kind == 2:
            item = Image.fromarray(np.ascontiguousarray(a))
        else:
            item = np.ascontiguousarray(a)
        return item, ("ok", c, hw)

    def request(self, k: int):
        """-> (items, expectations): expectation ("ok", colour, hw) or ("bad", kind)."""
        if self.history and self.rng.random() < 0.1:  # a repeat: same content, cache hits
            return self.rng.choice(self.history)
        items, want = [], []
        for j in range(self.rng.randint(1, 3)):
            item, w = self.good_item(k, j)
            items.append(item)
            want.append(w)
        if self.rng.random() < 0.15:
            kind = self.rng.choice(sorted(self.bad_kinds))
            pos = self.rng.randint(0, len(items))
            items.insert(pos, self.bad_kinds[kind]())
            want.insert(pos, ("bad", kind))
        elif len(self.history) < 200:
            self.history.append((items, want))
        return items, want

    def check(self, batch, want) -> None:
        """Raises AssertionError unless ``batch`` is exactly this request's images."""
        bad = [i for i, w in enumerate(want) if w[0] == "bad"]
        assert sorted(batch.errors) == bad, (sorted(batch.errors), want)
        for i in bad:
            e = batch.errors[i]
            assert type(e) is vlmprep.ImageError and e.index == i, e
        assert batch.num_images == len(want)
        row0 = 0
        seq = 0
        idx = batch.image_index.tolist()
        for i, w in enumerate(want):
            if w[0] == "bad":
                assert batch.num_tokens[i] == 0
                continue
            _, c, hw = w
            p = self.plans[hw]
            assert batch.num_tokens[i] == p.num_tokens, (i, w)
            n = p.num_patches
            assert idx[seq] == i and batch.grid_thw[seq].tolist() == list(p.grid_thw[0])
            seq += len(p.grid_thw)
            lut = torch.tensor([0, *c], dtype=torch.long)
            rows = batch.pixel_values[row0:row0 + n]
            assert rows.shape[0] == n and torch.equal(rows.long(), lut[self.ref_row].expand(n, -1)), \
                f"image {i}: rows are not colour {c}: another request's image?"
            row0 += n
        assert row0 == batch.pixel_values.shape[0]


async def _round(b: Batcher, world: World, k0: int, n: int, stats: collections.Counter,
                 close_at: int | None = None):
    """n requests numbered k0.., CLIENTS at a time; cancels ~3% queued and ~3% mid-flight;
    with close_at, close() starts after that many submits and later submits must be refused."""
    rng = world.rng
    next_k = iter(range(k0, k0 + n))
    started = 0
    closing: list = []

    async def client():
        nonlocal started
        for k in next_k:
            items, want = world.request(k)
            started += 1
            if close_at is not None and started == close_at:
                closing.append(asyncio.create_task(b.close()))
            t = asyncio.create_task(b.submit(items))
            r = rng.random()
            if r < 0.03:
                t.cancel()                       # cancelled while planned or queued
            elif r < 0.06:
                await asyncio.sleep(rng.random() * 0.02)
                t.cancel()                       # queued, running or already done
            try:
                out = await t
            except asyncio.CancelledError:
                stats["cancelled"] += 1
                continue
            except RuntimeError as e:
                assert closing and "closed" in str(e), e
                stats["refused after close"] += 1
                continue
            world.check(out, want)
            stats["answered"] += 1
            stats["images"] += len(want)
            for w in want:
                if w[0] == "bad":
                    stats[f"error: {w[1]}"] += 1

    await asyncio.wait_for(asyncio.gather(*(client() for _ in range(CLIENTS))), WATCHDOG_S)
    if closing:
        await asyncio.wait_for(closing[0], WATCHDOG_S)
    return started


@pytest.mark.slow
def test_soak(tmp_path, seed):
    proc = vlmprep.Processor(PRESET, backend="auto", dtype="uint8", errors="skip")
    world = World(proc, tmp_path, random.Random(seed))
    stats: collections.Counter = collections.Counter()
    rss: list[int] = []

    async def main():
        b = Batcher(proc, max_delay_ms=2, max_batch_images=64, cache=OutputCache(4 << 20))
        k = 0
        t0 = time.monotonic()
        for r in range(ROUNDS + 1):  # round 0 warms up (allocator, caches, threads)
            last = r == ROUNDS
            submitted = await _round(b, world, k, PER_ROUND, stats,
                                     close_at=PER_ROUND * 3 // 4 if last else None)
            k += submitted
            rss.append(rss_bytes())
        return b.metrics(), k, time.monotonic() - t0

    try:
        m, total, wall = asyncio.run(main())
    finally:
        try:
            os.close(os.open(world.fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    # Nothing lost or doubled: every request was answered (and checked), cancelled or refused.
    assert stats["answered"] + stats["cancelled"] + stats["refused after close"] == total
    assert stats["refused after close"] >= 1
    # The batcher's own counts agree (a task cancelled before its submit ever ran is not its).
    assert m["requests"] == stats["answered"] and m["rejected"] == stats["refused after close"]
    assert m["cancelled"] <= stats["cancelled"]
    assert m["queue_depth"] == 0 and m["running"] == 0
    growth = rss[-1] - rss[0]
    measured = {
        "requests": total, "clients in flight": CLIENTS, "wall s": round(wall, 1),
        "requests/s": round(total / wall), "images": stats["images"],
        "batches": m["batches"], "batch_size_p50": m["batch_size_p50"],
        "latency_ms_p50/p99": (m["latency_ms_p50"], m["latency_ms_p99"]),
        "cache hits": m["cache_hits"], "RSS MiB per round": [r >> 20 for r in rss],
        "RSS growth after warm-up MiB": round(growth / 2**20, 1),
        **{k: v for k, v in sorted(stats.items()) if k.startswith(("error", "cancel", "refused"))},
    }
    figures.record("serve: batcher soak", ", ".join(f"{k} {v}" for k, v in measured.items()))
    # Flat memory: the rounds after warm-up add at most 64 MiB (no per-request leak: 2,000+
    # requests leaking even 32 KiB each would exceed it).
    assert growth < 64 << 20, measured
