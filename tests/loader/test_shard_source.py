"""vlmprep.loader.DataLoader over a ShardSource (the shards of a batch job): the same batches as
the loader over the images themselves with the Processor (ids, order, bit-exact pixels) for
count and token budgets, shuffle, workers and resume; skipped samples, checks and refusals."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from _support.imgdata import encode, photo

import vlmprep
from vlmprep.batch.config import JobConfig
from vlmprep.batch.rows import process_samples
from vlmprep.batch.shards import FORMATS, shard_name, write_manifest, write_shard
from vlmprep.batch.sources import Sample
from vlmprep.loader import DataLoader, ShardSource

pytest.importorskip("pyarrow", reason="parquet shards need pyarrow (pip install vlmprep[parquet])")
pytest.importorskip("safetensors", reason="safetensors shards need the safetensors package")

TEXT = b"this is a text file, not a JPEG\n"
NAMES = ("astronaut", "coffee", "chelsea", "rocket", "hopper")


@pytest.fixture(scope="module")
def images(seed) -> list[bytes]:
    """14 encoded crops of package photos, of random sizes (so token counts differ)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(14):
        a = photo(NAMES[i % len(NAMES)])
        h, w = int(rng.integers(40, 160)), int(rng.integers(40, 160))
        top, left = int(rng.integers(0, a.shape[0] - h)), int(rng.integers(0, a.shape[1] - w))
        out.append(encode(np.ascontiguousarray(a[top:top + h, left:left + w]),
                          "png" if i % 2 else "jpeg"))
    return out


@pytest.fixture(scope="module")
def proc():
    return vlmprep.Processor("qwen2-vl", backend="reference", dtype="bfloat16", errors="skip")


def make_job(out, proc, samples, fmt, per_shard=4):
    """What ``vlmprep run`` leaves: shards of ``per_shard`` samples of one unit and a manifest."""
    out.mkdir(parents=True, exist_ok=True)
    infos = {}
    for part in range(0, len(samples), per_shard):
        name = shard_name("unit", part // per_shard, fmt)
        infos[name] = write_shard(out, name, fmt, process_samples(proc, samples[part:part + per_shard]),
                                  {})
    cfg = JobConfig(preset="qwen2-vl", dtype=proc.dtype, format=fmt)
    write_manifest(out, {"format": fmt, "config": cfg.to_json(),
                         "pipeline": proc.pipeline.to_dict(), "shards": infos,
                         "units": {"unit": {"count": len(samples)}}, "complete": True})
    return out


@pytest.fixture(scope="module", params=FORMATS)
def job(request, tmp_path_factory, images, proc):
    """(output folder, ids of the good samples in order, their bytes): the samples are the
    images with a bad one and a reader error mixed in."""
    samples = [Sample(f"img-{i:02d}", f"src/{i}", b) for i, b in enumerate(images)]
    samples.insert(5, Sample("bad-text", "src/text", TEXT))
    samples.insert(9, Sample("bad-none", "x.tar#k", None, "no image member in group"))
    out = make_job(tmp_path_factory.mktemp(f"job-{request.param}"), proc, samples, request.param)
    return out, [s.id for s in samples if s.id.startswith("img")], list(images)


def _same(a, b):
    assert a.pixel_values.dtype == b.pixel_values.dtype
    assert torch.equal(a.pixel_values, b.pixel_values)
    assert torch.equal(a.cu_seqlens, b.cu_seqlens) and torch.equal(a.grid_thw, b.grid_thw)
    assert torch.equal(a.image_index, b.image_index)
    assert (a.seqlens, a.num_tokens, a.placeholders) == (b.seqlens, b.num_tokens, b.placeholders)


@pytest.mark.parametrize("opts", [dict(batch_size=3),
                                  dict(batch_size=4, shuffle=True, seed=7, num_workers=2),
                                  dict(max_batch_tokens=120, shuffle=True, seed=1),
                                  dict(batch_size=5, max_batch_tokens=200, group_by_size=True,
                                       group_window=6, drop_last=True, num_workers=0)])
def test_same_as_the_images(job, proc, opts):
    """The loader over shards == the loader over the images (ids mapped, pixels bit-exact)."""
    out, ids, images = job
    src = ShardSource(out)
    assert len(src) == len(ids) and src.ids == ids
    assert src.num_tokens == [proc.plan([b]).total_tokens for b in images]
    got = list(DataLoader(src, progress=False, **opts))
    ref = list(DataLoader(images, proc, progress=False, **opts))
    assert [g for g, _ in got] == [[ids[i] for i in r] for r, _ in ref]
    for (_, a), (_, b) in zip(got, ref):
        _same(a, b)
    assert len(DataLoader(src, progress=False, **opts)) == len(got)


def test_resume(job):
    out, ids, _ = job
    opts = dict(batch_size=3, shuffle=True, seed=5, num_workers=2, progress=False)
    full = [i for i, _ in DataLoader(ShardSource(out), **opts)]
    loader = DataLoader(ShardSource(out), **opts)
    it = iter(loader)
    first = [next(it)[0] for _ in range(2)]
    state = loader.state_dict()
    assert state["num_samples"] == len(ids) and state["samples_yielded"] == 6
    again = DataLoader(ShardSource(out), **opts)
    again.load_state_dict(state)
    assert first + [i for i, _ in again] == full
    assert sorted(i for b in full for i in b) == sorted(ids)


def test_include_errors(job):
    out, ids, _ = job
    src = ShardSource(out, include_errors=True)
    assert len(src) == len(ids) + 2 and src.ids[5] == "bad-text" and src.num_tokens[5] == 0
    batches = list(DataLoader(src, batch_size=4, progress=False))
    ids_, b = batches[1]
    assert ids_ == ["img-04", "bad-text", "img-05", "img-06"]
    assert sorted(b.errors) == [1] and b.num_tokens[1] == 0
    assert "sample 'bad-text'" in str(b.errors[1]) and "expected a JPEG/PNG" in str(b.errors[1])
    loader = DataLoader(src, batch_size=8, progress=False)
    list(loader)
    assert [i for i, _ in loader.skipped] == ["bad-text", "bad-none"]


def test_items_and_to_hf(job, proc):
    out, ids, images = job
    src = ShardSource(out)
    sid, b = src[3]
    assert sid == ids[3]
    _same(b, proc([images[3]]))
    sid, b = src[-1]
    assert sid == ids[-1]
    hf, ref = src.read([2, 0]).to_hf(), proc([images[2], images[0]]).to_hf()
    assert torch.equal(hf["pixel_values"], ref["pixel_values"])
    assert torch.equal(hf["image_grid_thw"], ref["image_grid_thw"])
    with pytest.raises(IndexError):
        src[len(src)]
    with pytest.raises(IndexError):
        src.read([0, len(src)])


def test_torch_dataloader(job, proc):
    """A ShardSource is a map-style dataset for torch's DataLoader too (and pickles)."""
    out, ids, images = job
    src = pickle.loads(pickle.dumps(ShardSource(out)))
    loader = torch.utils.data.DataLoader(
        src, batch_size=5, collate_fn=lambda items: ([i for i, _ in items],
                                                     vlmprep.pack.concat([b for _, b in items])))
    got = list(loader)
    assert [i for g, _ in got for i in g] == ids
    _same(got[0][1], proc(images[:5]))


def test_checks(tmp_path, job, proc):
    out, _, _ = job
    with pytest.raises(TypeError, match="proc expected None for a ShardSource"):
        DataLoader(ShardSource(out), proc, batch_size=2)
    with pytest.raises(TypeError, match="pass it by name: batch_size=8"):
        DataLoader(ShardSource(out), 8)
    with pytest.raises(ValueError, match="cache expected None"):
        from vlmprep.cache import OutputCache
        DataLoader(ShardSource(out), batch_size=2, cache=OutputCache(max_bytes=1 << 20))
    with pytest.raises(ValueError, match="expected manifest.json"):
        ShardSource(tmp_path)
    with pytest.raises(TypeError, match="ShardSource"):
        DataLoader([b"x"], None, batch_size=2)


def test_corrupt_shard_found_on_first_read(tmp_path, images, proc):
    samples = [Sample(f"img-{i}", f"src/{i}", b) for i, b in enumerate(images[:6])]
    out = make_job(tmp_path / "job", proc, samples, "safetensors", per_shard=3)
    path = out / "unit-00001.safetensors"
    good = path.read_bytes()
    data = bytearray(good)
    data[len(data) // 2] ^= 0xFF  # a pixel, same size: only the sha256 tells
    path.write_bytes(bytes(data))
    src = ShardSource(out)
    src.read([0, 1, 2])  # shard 0 is fine
    with pytest.raises(ValueError, match="unit-00001.safetensors.* expected sha256"):
        src.read([3])
    assert ShardSource(out, verify=False).read([0]).num_images == 1
    data = bytearray(good)
    data[-1] = 0xFF  # the last placeholder byte: no longer UTF-8, found while indexing
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="unit-00001.safetensors.* reader refuses"):
        ShardSource(out)
