"""vlmprep.loader.DataLoader: packing bounds, order, resume, errors, dict ids, collate.

Images are small random arrays (fresh each run) processed by the reference backend; the oracle
for pixels is the Processor itself on the same sources (the loader must only batch, never
change a pixel), and transformers' PIL processor for collate_hf.
"""
from __future__ import annotations

import io
import json
import random
import threading
import time

import numpy as np
import pytest
import torch

import vlmprep
from vlmprep import ImageError
from vlmprep.loader import DataLoader, collate_hf, hf_collate_fn


@pytest.fixture(scope="module")
def proc():
    return vlmprep.Processor("qwen2-vl", backend="reference")


def _images(rng, n, lo=20, hi=170):
    return [rng.integers(0, 256, (int(rng.integers(lo, hi)), int(rng.integers(lo, hi)), 3),
                        dtype=np.uint8) for _ in range(n)]


def _tokens(proc, imgs):
    return [proc.plan([im]).total_tokens for im in imgs]


class Jittery:
    """A Processor whose calls take a random extra time, so that worker threads finish out of
    order; counts the images it processes."""

    def __init__(self, proc, max_sleep=0.01):
        self._proc = proc
        self._max = max_sleep
        self._lock = threading.Lock()
        self.images = 0

    def __getattr__(self, name):
        return getattr(self._proc, name)

    def __call__(self, images):
        time.sleep(random.random() * self._max)
        with self._lock:
            self.images += len(images)
        return self._proc(images)


class Stream:
    """A re-iterable streaming source (no len, no index) that counts the items it hands out."""

    def __init__(self, items):
        self._items = items
        self.drawn = 0

    def __iter__(self):
        for x in self._items:
            self.drawn += 1
            yield x


def _flat(batches):
    return [i for ids, _ in batches for i in ids]


def _assert_rows_match_proc(proc, sources_by_id, batches):
    # Each batch's tensors equal processing exactly those sources in one call (bit-exact).
    for ids, b in batches:
        want = proc([sources_by_id[i] for i in ids])
        assert torch.equal(b.pixel_values, want.pixel_values), ids
        assert torch.equal(b.grid_thw, want.grid_thw) and b.num_tokens == want.num_tokens
        assert b.cu_seqlens.tolist() == want.cu_seqlens.tolist()


# -- packing ------------------------------------------------------------------------------------
def test_token_budget_packing(seed, proc):
    rng = np.random.default_rng(seed)
    imgs = _images(rng, 70)
    # Two images far above the budget (420x420 -> 15x15 merged = 225 tokens).
    imgs[11] = rng.integers(0, 256, (420, 420, 3), dtype=np.uint8)
    imgs[50] = rng.integers(0, 256, (430, 400, 3), dtype=np.uint8)
    budget = 60
    tok = _tokens(proc, imgs)
    loader = DataLoader(imgs, proc, max_batch_tokens=budget, num_workers=2)
    batches = list(loader)
    assert _flat(batches) == list(range(len(imgs)))  # nothing lost, repeated or reordered
    assert len(loader) == len(batches)
    for ids, b in batches:
        assert b.num_tokens == [tok[i] for i in ids]
        if sum(b.num_tokens) > budget:
            assert len(ids) == 1 and tok[ids[0]] > budget, (ids, b.num_tokens)
    # Oversize samples: alone, reported, kept.
    assert [ids for ids, _ in batches if ids in ([11], [50])] == [[11], [50]]
    assert loader.oversize == [(11, tok[11]), (50, tok[50])]
    # Greedy: a batch was closed only because the next sample did not fit, which makes the batch
    # count minimal among order-preserving packings.
    for (ids, b), (nxt, _) in zip(batches, batches[1:]):
        assert sum(b.num_tokens) + tok[nxt[0]] > budget, (ids, nxt)
    _assert_rows_match_proc(proc, imgs, batches)


def test_batch_size_mode_and_both_limits(seed, proc):
    rng = np.random.default_rng(seed)
    imgs = _images(rng, 30)
    keep = list(DataLoader(imgs, proc, batch_size=7, max_batch_tokens=None, num_workers=1))
    assert [len(ids) for ids, _ in keep] == [7, 7, 7, 7, 2]
    assert _flat(keep) == list(range(30))
    drop = DataLoader(imgs, proc, batch_size=7, max_batch_tokens=None, drop_last=True)
    assert len(drop) == 4 and [ids for ids, _ in drop] == [ids for ids, _ in keep[:4]]
    assert len(DataLoader(imgs, proc, batch_size=7, max_batch_tokens=None)) == 5
    # A full final batch is kept with drop_last.
    exact = DataLoader(imgs[:28], proc, batch_size=7, max_batch_tokens=None, drop_last=True)
    assert [len(ids) for ids, _ in exact] == [7, 7, 7, 7] and len(exact) == 4
    _assert_rows_match_proc(proc, imgs, keep)
    # Both limits: at most 4 images and at most 40 tokens (a lone oversize sample excepted).
    tok = _tokens(proc, imgs)
    both = list(DataLoader(imgs, proc, batch_size=4, max_batch_tokens=40, num_workers=2))
    assert _flat(both) == list(range(30))
    for ids, b in both:
        assert len(ids) <= 4
        assert sum(b.num_tokens) <= 40 or len(ids) == 1
    for (ids, b), (nxt, _) in zip(both, both[1:]):
        assert len(ids) == 4 or sum(b.num_tokens) + tok[nxt[0]] > 40


def test_last_batch_policy_token_mode(seed, proc):
    rng = np.random.default_rng(seed)
    imgs = _images(rng, 40)
    keep = [ids for ids, _ in DataLoader(imgs, proc, max_batch_tokens=70, num_workers=0)]
    drop_loader = DataLoader(imgs, proc, max_batch_tokens=70, num_workers=2, drop_last=True)
    drop = [ids for ids, _ in drop_loader]
    tok = _tokens(proc, imgs)
    last_full = sum(tok[i] for i in keep[-1]) >= 70
    assert drop == (keep if last_full else keep[:-1])
    assert len(drop_loader) == len(drop)
    # A tiny final sample forms a final batch that cannot be full when it does not fit.
    big = rng.integers(0, 256, (280, 250, 3), dtype=np.uint8)  # 10x9 merged = 90 tokens
    tail = [big, big, _images(rng, 1, 20, 30)[0]]  # [big] [big] [tiny]: the tiny one is dropped
    assert [ids for ids, _ in DataLoader(tail, proc, max_batch_tokens=70, drop_last=True)] == \
        [[0], [1]]
    assert [ids for ids, _ in DataLoader(tail, proc, max_batch_tokens=70)] == [[0], [1], [2]]
    # A final batch at or above the budget is full: kept.
    assert [ids for ids, _ in DataLoader(tail[::-1], proc, max_batch_tokens=70,
                                         drop_last=True)] == [[0], [1], [2]]


def test_group_by_size_sorts_within_windows(seed, proc):
    rng = np.random.default_rng(seed)
    imgs = _images(rng, 48)
    tok = _tokens(proc, imgs)
    loader = DataLoader(imgs, proc, batch_size=4, max_batch_tokens=None, group_by_size=True,
                        group_window=16, num_workers=2)
    ids = _flat(list(loader))
    assert sorted(ids) == list(range(48))
    for w in range(3):  # each window holds its own samples, largest first, ties in order
        win = ids[16 * w:16 * (w + 1)]
        assert sorted(win) == list(range(16 * w, 16 * (w + 1)))
        assert win == sorted(win, key=lambda i: (-tok[i], i))


# -- order --------------------------------------------------------------------------------------
def test_deterministic_order_across_runs_and_workers(seed, proc):
    rng = np.random.default_rng(seed)
    imgs = _images(rng, 40)
    runs = []
    for nw in (0, 1, 3, 3):
        loader = DataLoader(imgs, Jittery(proc), max_batch_tokens=50, shuffle=True, seed=7,
                            num_workers=nw, prefetch=4)
        runs.append(list(loader))
    ref = runs[0]
    assert sorted(_flat(ref)) == list(range(40)) and _flat(ref) != list(range(40))
    for run in runs[1:]:
        assert [ids for ids, _ in run] == [ids for ids, _ in ref]
        for (_, a), (_, b) in zip(run, ref):
            assert torch.equal(a.pixel_values, b.pixel_values)
    other = _flat(list(DataLoader(imgs, proc, max_batch_tokens=50, shuffle=True, seed=8)))
    assert sorted(other) == list(range(40)) and other != _flat(ref)


def test_shuffle_differs_across_epochs(seed, proc):
    rng = np.random.default_rng(seed)
    imgs = _images(rng, 30, 20, 60)
    loader = DataLoader(imgs, proc, batch_size=5, max_batch_tokens=None, shuffle=True, seed=1)
    e0 = _flat(list(loader))
    assert loader.epoch == 1  # a complete pass advances the epoch
    e1 = _flat(list(loader))
    assert sorted(e0) == sorted(e1) == list(range(30)) and e0 != e1
    assert e0 == np.random.default_rng(1).permutation(30).tolist()
    loader.set_epoch(0)
    assert _flat(list(loader)) == e0
    loader.set_epoch(1)
    assert _flat(list(loader)) == e1
    # An abandoned pass restarts the same epoch on the next iter().
    it = iter(loader)
    next(it)
    del it
    assert loader.epoch == 2
    fresh = DataLoader(imgs, proc, batch_size=5, max_batch_tokens=None, shuffle=True, seed=1)
    fresh.set_epoch(2)
    assert _flat(list(loader)) == _flat(list(fresh))


# -- resume -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["map", "iterable"])
@pytest.mark.parametrize("mode", ["tokens", "tokens+group", "count+shuffle"])
def test_resume_yields_exactly_the_rest(seed, proc, kind, mode):
    if kind == "iterable" and "shuffle" in mode:
        mode = "count"
    rng = np.random.default_rng(seed)
    imgs = _images(rng, 36)
    items = [{"id": f"img-{i}", "image": im} for i, im in enumerate(imgs)]
    by_id = {d["id"]: d["image"] for d in items}
    kw = {"tokens": dict(max_batch_tokens=45),
          "tokens+group": dict(max_batch_tokens=45, group_by_size=True, group_window=7),
          "count": dict(batch_size=5, max_batch_tokens=None),
          "count+shuffle": dict(batch_size=5, max_batch_tokens=None, shuffle=True, seed=3)}[mode]

    def make():
        return DataLoader(items if kind == "map" else Stream(items), proc, num_workers=2, **kw)

    full = list(make())
    assert len(full) >= 5
    assert sorted(_flat(full)) == sorted(by_id)  # every sample exactly once
    if "shuffle" not in mode and "group" not in mode:
        assert _flat(full) == [d["id"] for d in items]
    for k in (1, 3):
        loader = make()
        it = iter(loader)
        head = [next(it) for _ in range(k)]
        state = json.loads(json.dumps(loader.state_dict()))  # JSON-safe
        assert state["samples_yielded"] == sum(len(ids) for ids, _ in head)
        del it
        resumed = make()
        resumed.load_state_dict(state)
        rest = list(resumed)
        assert [ids for ids, _ in head + rest] == [ids for ids, _ in full]
        for (ids, a), (_, b) in zip(head + rest, full):
            assert torch.equal(a.pixel_values, b.pixel_values), ids
        if kind == "iterable":
            assert resumed.sources.drawn == len(items)  # skipped by next(), not re-read twice
        assert resumed.epoch == state["epoch"] + 1
    _assert_rows_match_proc(proc, by_id, full)
    # The same loader can also rewind to a saved point.
    loader = make()
    it = iter(loader)
    head = [next(it) for _ in range(2)]
    state = loader.state_dict()
    list(it)
    loader.load_state_dict(state)
    assert [ids for ids, _ in head] + [ids for ids, _ in loader] == [ids for ids, _ in full]


def test_resume_state_is_validated(seed, proc):
    imgs = _images(np.random.default_rng(seed), 6, 20, 40)
    state = DataLoader(imgs, proc, batch_size=2, max_batch_tokens=None).state_dict()
    with pytest.raises(ValueError, match="num_samples expected 5"):
        DataLoader(imgs[:5], proc, batch_size=2, max_batch_tokens=None).load_state_dict(state)
    with pytest.raises(ValueError, match="kind expected 'iterable'"):
        DataLoader(Stream(imgs), proc, batch_size=2,
                   max_batch_tokens=None).load_state_dict(state)
    with pytest.raises(ValueError, match="shuffle=True expected a sequence"):
        DataLoader(Stream(imgs), proc, batch_size=2, shuffle=True)
    with pytest.raises(ValueError, match="expected batch_size or max_batch_tokens"):
        DataLoader(imgs, proc, batch_size=None, max_batch_tokens=None)
    with pytest.raises(TypeError, match="wrap it in a list"):
        DataLoader(imgs[0], proc, batch_size=2)
    with pytest.raises(TypeError, match="iterable source has no length"):
        len(DataLoader(Stream(imgs), proc, batch_size=2))


# -- errors -------------------------------------------------------------------------------------
def _bad_mix(rng):
    """(sources, ids of the bad ones): corrupt bytes, a dict without an image, a float array,
    an aspect ratio Qwen rejects (> 200)."""
    good = _images(rng, 14, 20, 90)
    items = [{"id": f"ok-{i}", "image": im} for i, im in enumerate(good)]
    bad = [(2, {"id": "corrupt", "image": b"\xff\xd8\xff not a jpeg"}),
           (5, {"id": "no-image", "pixels": good[0]}),
           (6, {"id": "floats", "image": np.zeros((40, 40, 3), np.float32)}),
           (11, {"id": "too-wide", "image": np.zeros((2, 500, 3), np.uint8)})]
    for pos, d in bad:
        items.insert(pos, d)
    return items, [d["id"] for _, d in sorted(bad)]


@pytest.mark.parametrize("nw", [0, 2])
def test_errors_skip_reports_and_keeps_the_rest(seed, nw):
    rng = np.random.default_rng(seed)
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    items, bad_ids = _bad_mix(rng)
    loader = DataLoader(items, proc, batch_size=4, max_batch_tokens=None, num_workers=nw)
    batches = list(loader)
    assert _flat(batches) == [d["id"] for d in items]  # ids list skipped samples too
    assert [sid for sid, _ in loader.skipped] == bad_ids
    for sid, e in loader.skipped:
        assert isinstance(e, ImageError) and repr(sid) in str(e)
    for ids, b in batches:
        assert sorted(b.errors) == [k for k, sid in enumerate(ids) if sid in bad_ids]
        for k, e in b.errors.items():
            assert e.index == k and repr(ids[k]) in str(e) and b.num_tokens[k] == 0
        good = [next(d["image"] for d in items if d["id"] == sid) for sid in ids
                if sid not in bad_ids]
        want = proc(good)
        assert torch.equal(b.pixel_values, want.pixel_values)
        assert torch.equal(b.grid_thw, want.grid_thw)
        assert b.num_images == len(ids)
    assert "no-image" in [sid for sid, _ in loader.skipped]
    assert "'image'" in str(dict(loader.skipped)["no-image"])


@pytest.mark.parametrize("bad_pos", [3, 9])
def test_errors_raise_names_the_sample(seed, proc, bad_pos):
    rng = np.random.default_rng(seed)
    items = [{"id": f"s{i}", "image": im} for i, im in enumerate(_images(rng, 12, 20, 90))]
    items[bad_pos] = {"id": "bad-7", "image": b"garbage bytes"}
    loader = DataLoader(items, proc, batch_size=4, max_batch_tokens=None, num_workers=2)
    seen = []
    with pytest.raises(ImageError, match="sample 'bad-7'") as ei:
        for ids, _ in loader:
            seen.append(ids)
    assert "bytes[13]" in str(ei.value)
    # Every batch before the bad one was yielded, in order; none after.
    assert seen == [[f"s{i}" for i in range(b, b + 4)] for b in range(0, bad_pos // 4 * 4, 4)]
    # A dict without its image raises too, naming its id; an earlier bad image in the same
    # batch raises first.
    items[bad_pos] = {"id": "nokey", "img": items[0]["image"]}
    with pytest.raises(ImageError, match="sample 'nokey'.*under 'image'"):
        list(DataLoader(items, proc, batch_size=4, max_batch_tokens=None, num_workers=0))
    items[bad_pos - 1] = {"id": "first", "image": np.zeros((9, 9), np.uint8)}
    with pytest.raises(ImageError, match="sample 'first'.*3 channels"):
        list(DataLoader(items, proc, batch_size=4, max_batch_tokens=None, num_workers=0))


def test_dict_sources_ids_and_fields(seed, proc):
    rng = np.random.default_rng(seed)
    imgs = _images(rng, 9, 20, 80)
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(imgs[4]).save(buf, "PNG")
    items = [{"key": f"k{i}", "pic": im} for i, im in enumerate(imgs)]
    del items[2]["key"]  # no id: its position is its id
    items[4]["pic"] = {"bytes": buf.getvalue(), "path": None}  # HF Image(decode=False)
    loader = DataLoader(items, proc, batch_size=4, max_batch_tokens=None, image_key="pic",
                        id_key="key")
    batches = list(loader)
    assert _flat(batches) == ["k0", "k1", 2, "k3", "k4", "k5", "k6", "k7", "k8"]
    png_rgb = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    assert np.array_equal(png_rgb, imgs[4])
    _assert_rows_match_proc(proc, {("k%d" % i if i != 2 else 2): im for i, im in enumerate(imgs)},
                            batches)


@pytest.mark.gpu
def test_cuda_worker_streams(seed):
    rng = np.random.default_rng(seed)
    imgs = _images(rng, 24)
    gpu = vlmprep.Processor("qwen2-vl", backend="torch", device="cuda")
    batches = list(DataLoader(imgs, gpu, max_batch_tokens=60, num_workers=3))
    assert _flat(batches) == list(range(24))
    for ids, b in batches:
        assert b.pixel_values.is_cuda
        want = gpu([imgs[i] for i in ids])
        assert torch.equal(b.pixel_values, want.pixel_values)


# -- collate ------------------------------------------------------------------------------------
def test_collate_hf_keys_and_cu_seqlens(seed, proc):
    imgs = _images(np.random.default_rng(seed), 5)
    batch = proc(imgs)
    out = collate_hf(batch)
    assert set(out) == {"pixel_values", "image_grid_thw", "cu_seqlens"}
    assert out["pixel_values"] is batch.pixel_values
    cu = torch.cumsum(out["image_grid_thw"].prod(1), 0).tolist()
    assert out["cu_seqlens"].tolist() == [0] + cu and out["cu_seqlens"].dtype == torch.int32
    assert collate_hf(([0, 1, 2, 3, 4], batch))["pixel_values"] is batch.pixel_values
    with pytest.raises(TypeError, match="expected a PackedBatch"):
        collate_hf(imgs)


def test_hf_collate_fn_in_torch_dataloader(seed, proc):
    imgs = _images(np.random.default_rng(seed), 6)
    ds = [{"image": im, "label": i} for i, im in enumerate(imgs)]
    fn = hf_collate_fn(proc)
    import pickle
    fn = pickle.loads(pickle.dumps(fn))  # worker processes receive it pickled
    got = list(torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=fn))
    assert [d["label"] for d in got] == [[0, 1, 2, 3], [4, 5]]
    for d, chunk in zip(got, (imgs[:4], imgs[4:])):
        want = collate_hf(proc(chunk))
        for k in ("pixel_values", "image_grid_thw", "cu_seqlens"):
            assert torch.equal(d[k], want[k]), k
    skip = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    out = hf_collate_fn(skip)([imgs[0], b"junk", imgs[1]])
    assert out["skipped"] == [1] and out["image_grid_thw"].shape == (2, 3)


@pytest.mark.hf
def test_collate_hf_equals_transformers(seed, proc):
    from PIL import Image
    from transformers import Qwen2VLImageProcessorPil
    rng = np.random.default_rng(seed)
    pils = [Image.fromarray(a) for a in _images(rng, 7, 30, 300)]
    hf = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056)
    want = hf(images=pils, return_tensors="pt")
    got = hf_collate_fn(proc)(pils)
    assert torch.equal(got["image_grid_thw"], want["image_grid_thw"])
    assert got["pixel_values"].dtype == want["pixel_values"].dtype
    # The reference backend runs transformers' own PIL + numpy steps: bit-exact.
    assert torch.equal(got["pixel_values"], want["pixel_values"])
    # Through the loader: the batches, concatenated, are the same rows.
    batches = [collate_hf(x) for x in DataLoader(pils, proc, max_batch_tokens=300)]
    assert torch.equal(torch.cat([b["pixel_values"] for b in batches]), want["pixel_values"])
    assert torch.equal(torch.cat([b["image_grid_thw"] for b in batches]), want["image_grid_thw"])


class Heavy(Jittery):
    """A Processor whose plans say 5000 tokens per image (a 4K photo's worth), on small arrays."""

    def plan(self, images):
        class P:
            total_tokens = 5000 * len(images)
        return P()


def test_batch_size_alone_gives_batches_of_batch_size(seed, proc):
    """As torch: batch_size=4 alone gives 4, 4, 2 whatever the images' token counts; the token
    budget is off unless asked for (it used to default to 16384: batches of 3, 3, 3, 1 here)."""
    imgs = _images(np.random.default_rng(seed), 10, lo=20, hi=40)
    heavy = Heavy(proc, max_sleep=0)
    loader = DataLoader(imgs, heavy, batch_size=4, num_workers=0)
    assert loader.max_batch_tokens is None
    assert [len(ids) for ids, _ in loader] == [4, 4, 2] and len(loader) == 3
    asked = DataLoader(imgs, heavy, batch_size=4, max_batch_tokens=16384, num_workers=0)
    assert [len(ids) for ids, _ in asked] == [3, 3, 3, 1]
    with pytest.raises(ValueError, match="expected batch_size or max_batch_tokens"):
        DataLoader(imgs, proc)


def test_progress_bar_over_the_epoch(seed, proc, capsys, monkeypatch):
    """progress=True draws a tqdm bar on stderr over the epoch's samples; off by default when
    stderr is not a terminal, and with VLMPREP_PROGRESS=0."""
    pytest.importorskip("tqdm")
    monkeypatch.delenv("VLMPREP_PROGRESS", raising=False)
    imgs = _images(np.random.default_rng(seed), 5, lo=20, hi=40)
    list(DataLoader(imgs, proc, batch_size=2, num_workers=0))
    assert capsys.readouterr().err == ""
    list(DataLoader(imgs, proc, batch_size=2, num_workers=0, progress=True))
    err = capsys.readouterr().err
    assert "vlmprep epoch 0" in err and "/5 " in err  # total: the epoch's samples
    monkeypatch.setenv("VLMPREP_PROGRESS", "0")
    list(DataLoader(imgs, proc, batch_size=2, num_workers=0, progress=True))
    assert capsys.readouterr().err == ""
