"""vlmprep.cache.OutputCache: keys, counters, LRU order, the byte bound, threads, and its use
by the DataLoader (a repeated image is processed once)."""
from __future__ import annotations

import io
import os
import random
import threading

import numpy as np
import pytest
import torch
from PIL import Image

import vlmprep
from vlmprep.cache import OutputCache
from vlmprep.loader import DataLoader


@pytest.fixture(scope="module")
def proc():
    return vlmprep.Processor("qwen2-vl", backend="reference")


def _img(rng, lo=20, hi=120):
    return rng.integers(0, 256, (int(rng.integers(lo, hi)), int(rng.integers(lo, hi)), 3),
                        dtype=np.uint8)


class Counting:
    """A Processor that counts the images it is asked to process."""

    def __init__(self, proc):
        self._proc = proc
        self._lock = threading.Lock()
        self.images = 0

    def __getattr__(self, name):
        return getattr(self._proc, name)

    def __call__(self, images):
        with self._lock:
            self.images += len(images)
        return self._proc(images)


def _png(a):
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    return buf.getvalue()


def _tensor_bytes(b):
    return b.pixel_values.numel() * b.pixel_values.element_size()


# -- keys ---------------------------------------------------------------------------------------
def test_keys_follow_content_and_config(seed, proc, tmp_path):
    rng = np.random.default_rng(seed)
    cache = OutputCache(1 << 20)
    a = _img(rng, 40, 60)
    k = cache.key_for(a, proc)
    assert isinstance(k, str) and k == cache.key_for(a.copy(), proc)  # content, not identity
    assert k == cache.key_for(a, vlmprep.Processor("qwen2-vl", backend="reference"))
    b = a.copy()
    b[-1, -1, -1] ^= 1  # one bit of one pixel
    assert cache.key_for(b, proc) != k
    assert cache.key_for(np.ascontiguousarray(a[:, :-1]), proc) != k  # shape
    # Config: a field override, the dtype, the backend, match, the preset.
    others = [vlmprep.Processor("qwen2-vl", backend="reference", max_pixels=3136 * 4),
              vlmprep.Processor("qwen2-vl", backend="reference", dtype="bfloat16"),
              vlmprep.Processor("qwen2-vl", backend="reference", dtype="uint8"),
              vlmprep.Processor("qwen2-vl", backend="torch"),
              vlmprep.Processor("qwen2-vl", backend="torch", match="torchvision"),
              vlmprep.Processor("qwen3-vl", backend="reference")]
    keys = {k} | {cache.key_for(a, p) for p in others}
    assert len(keys) == 1 + len(others)
    # Input kinds: array, CHW tensor, PIL, encoded bytes are told apart; a file and its bytes
    # decode identically and share a key.
    t = torch.from_numpy(a).permute(2, 0, 1).contiguous()
    pil = Image.fromarray(a)
    data = _png(a)
    path = tmp_path / "a.png"
    path.write_bytes(data)
    kinds = [cache.key_for(x, proc) for x in (a, t, pil, data)]
    assert len(set(kinds)) == 4
    assert cache.key_for(path, proc) == cache.key_for(str(path), proc) == kinds[3]
    assert cache.key_for(memoryview(data), proc) == kinds[3]
    assert cache.key_for(pil.convert("L"), proc) != kinds[2]  # PIL mode
    # A rewritten file with the same size and mtime: the content decides.
    st = os.stat(path)
    data2 = _png(b)
    path.write_bytes(data2)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns
    assert cache.key_for(path, proc) == cache.key_for(data2, proc) != kinds[3]
    # Items it cannot hash: None (processed uncached).
    assert cache.key_for(tmp_path / "missing.png", proc) is None
    assert cache.key_for(object(), proc) is None
    assert cache.key_for(np.array([object()]), proc) is None


# -- get / put ----------------------------------------------------------------------------------
def test_hits_misses_and_lru_order(seed, proc):
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (56, 56, 3), dtype=np.uint8) for _ in range(4)]  # 16 rows each
    one = [proc([im]) for im in imgs]
    size = _tensor_bytes(one[0])
    cache = OutputCache(max_bytes=2 * size + 2 * 4096)  # room for two entries, not three
    keys = [cache.key_for(im, proc) for im in imgs]
    assert cache.get(keys[0]) is None and cache.misses == 1 and cache.hits == 0
    assert cache.put(keys[0], one[0]) and cache.put(keys[1], one[1])
    assert len(cache) == 2 and cache.evictions == 0
    got = cache.get(keys[0])  # 0 is now the most recently used
    assert cache.hits == 1 and torch.equal(got.pixel_values, one[0].pixel_values)
    assert torch.equal(got.grid_thw, one[0].grid_thw) and got.num_tokens == one[0].num_tokens
    got.num_tokens.append(99)  # callers may edit the host fields of what they get
    assert cache.get(keys[0]).num_tokens == one[0].num_tokens
    cache.put(keys[2], one[2])  # evicts 1, the least recently used
    assert cache.evictions == 1 and len(cache) == 2
    assert keys[1] not in cache and keys[0] in cache and keys[2] in cache
    assert cache.get(keys[1]) is None
    cache.put(keys[3], one[3])  # now 0 is the oldest (2 was put after 0 was last read)
    assert keys[0] not in cache and keys[2] in cache and keys[3] in cache
    s = cache.stats()
    assert (s["hits"], s["misses"], s["evictions"], s["entries"]) == (2, 2, 2, 2)
    assert s["nbytes"] == cache.nbytes and s["hit_rate"] == 0.5
    # Re-putting a key replaces it without growing.
    before = cache.nbytes
    cache.put(keys[3], one[3])
    assert cache.nbytes == before and len(cache) == 2


def test_byte_bound(seed, proc):
    rng = np.random.default_rng(seed)
    imgs = [_img(rng) for _ in range(24)]
    batch = proc(imgs)
    parts = list(batch.split())
    cache = OutputCache(max_bytes=sum(_tensor_bytes(p) for p in parts) // 3)
    stored = {}
    for i, part in enumerate(parts):
        ok = cache.put(f"k{i}", part)
        assert cache.nbytes <= cache.max_bytes
        if ok:
            stored[f"k{i}"] = part
    live = [k for k in stored if k in cache]
    assert 0 < len(live) < len(parts) and cache.evictions > 0
    # nbytes counts every live entry's tensors (and a bit more), never a whole parent batch:
    # a view from split() is copied, so the cache does not pin the big batch.
    assert cache.nbytes >= sum(_tensor_bytes(stored[k]) for k in live)
    for k in live:
        pv = cache.get(k).pixel_values
        assert pv.untyped_storage().nbytes() == pv.numel() * pv.element_size()
        assert torch.equal(pv, stored[k].pixel_values)
    # An entry alone above max_bytes is not stored, and evicts nothing.
    n, ev = len(cache), cache.evictions
    assert not cache.put("huge", proc([np.zeros((400, 400, 3), np.uint8)]))
    assert "huge" not in cache and len(cache) == n and cache.evictions == ev
    # A skipped image is not cached; a batch of several images is refused loudly.
    skip = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    assert not cache.put("bad", skip([b"junk"]))
    with pytest.raises(ValueError, match="one image, got 2 images"):
        cache.put("two", proc(imgs[:2]))
    with pytest.raises(ValueError, match="max_bytes expected an int >= 0"):
        OutputCache(-1)


def test_thread_safety_under_concurrent_put_get(seed, proc):
    rng = np.random.default_rng(seed)
    parts = list(proc([_img(rng, 20, 90) for _ in range(30)]).split())
    sizes = [_tensor_bytes(p) for p in parts]
    cache = OutputCache(max_bytes=sum(sizes) // 2)
    gets = [0] * 8
    errors = []

    def work(t):
        r = random.Random(t)
        try:
            for _ in range(400):
                i = r.randrange(len(parts))
                if r.random() < 0.5:
                    cache.put(f"k{i}", parts[i])
                else:
                    gets[t] += 1
                    b = cache.get(f"k{i}")
                    if b is not None and not torch.equal(b.pixel_values, parts[i].pixel_values):
                        errors.append(i)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert cache.hits + cache.misses == sum(gets)
    # The byte count is exactly the sum over live entries (no lost update), within the bound.
    live = [int(k[1:]) for k in list(cache._entries)]
    assert cache.nbytes == sum(cache._entries[f"k{i}"][1] for i in live) <= cache.max_bytes
    assert len(cache) == len(live)


# -- with the DataLoader ------------------------------------------------------------------------
@pytest.mark.parametrize("nw", [0, 2])
def test_loader_processes_a_repeated_image_once(seed, proc, nw):
    rng = np.random.default_rng(seed)
    imgs = [_img(rng) for _ in range(10)]
    data = _png(imgs[3])
    # Every image twice (second pass in another order), plus its PNG bytes and a repeat
    # inside one batch.
    sources = imgs + imgs[::-1] + [data, data]
    counting = Counting(proc)
    cache = OutputCache(max_bytes=64 << 20)
    batches = list(DataLoader(sources, counting, batch_size=5, max_batch_tokens=None,
                              num_workers=nw, prefetch=1, cache=cache))
    uncached = list(DataLoader(sources, proc, batch_size=5, max_batch_tokens=None,
                               num_workers=nw))
    assert [ids for ids, _ in batches] == [ids for ids, _ in uncached]
    for (_, a), (_, b) in zip(batches, uncached):
        assert torch.equal(a.pixel_values, b.pixel_values)
        assert torch.equal(a.grid_thw, b.grid_thw) and a.num_tokens == b.num_tokens
        assert a.cu_seqlens.tolist() == b.cu_seqlens.tolist()
    # With prefetch=1 no two batches are in flight at once: each distinct content once.
    assert counting.images == 11
    assert cache.misses == 11 and cache.hits == 10 and len(cache) == 11
    # A second epoch is all hits.
    counting.images = 0
    list(DataLoader(sources, counting, batch_size=5, max_batch_tokens=None, num_workers=nw,
                    cache=cache))
    assert counting.images == 0 and cache.hits == 10 + 21


def test_loader_cache_with_skipped_images(seed):
    rng = np.random.default_rng(seed)
    skip = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    imgs = [_img(rng) for _ in range(4)]
    sources = [imgs[0], b"junk", imgs[1], imgs[0], b"junk", imgs[2], imgs[3]]
    cache = OutputCache(max_bytes=64 << 20)
    counting = Counting(skip)
    loader = DataLoader(sources, counting, batch_size=4, max_batch_tokens=None, cache=cache,
                        num_workers=0)
    batches = list(loader)
    assert [sid for sid, _ in loader.skipped] == [1, 4]
    assert [sorted(b.errors) for _, b in batches] == [[1], [0]]
    want = skip(sources[:4]), skip(sources[4:])
    for (_, a), w in zip(batches, want):
        assert torch.equal(a.pixel_values, w.pixel_values) and a.num_tokens == w.num_tokens
    assert counting.images == 6  # imgs[0] once (repeat in batch 0), junk twice (never cached)
    assert len(cache) == 4
