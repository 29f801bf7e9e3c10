"""vlmprep.batch.rows: process_samples (one row per sample, bad ones as error rows, never raising
for an item) and batch_from_rows, the bit-exact inverse. The oracle is the Processor itself
(errors="skip") on the same encoded bytes: every PackedBatch field, the image plans and to_hf()."""
from __future__ import annotations

import io
import json
import pickle

import pytest
import torch
from _support.imgdata import encode, tiled
from PIL import Image

import vlmprep
from vlmprep.batch import rows as rows_mod
from vlmprep.batch.rows import ROW_COLUMNS, batch_from_rows, process_samples
from vlmprep.batch.sources import Sample, discover

# patches (qwen2-vl, pixtral, siglip2-naflex) and tiles (internvl, idefics3, llava-next, gemma3,
# mllama: several sequences per image for the tiling ones)
FAMILIES = ("qwen2-vl", "internvl", "idefics3", "llava-next", "gemma3", "mllama", "pixtral",
            "siglip2-naflex")
DTYPES = ("float32", "bfloat16", "uint8")
TEXT = b"this is a text file, not a JPEG\n"


def _samples(photos, n=3) -> list[Sample]:
    """``n`` good photos, then bytes that are no image, a truncated JPEG (fails at decode, after
    a good header) and a reader error."""
    jpeg = next(b for _, ext, b in photos if ext == "jpg")
    out = [Sample(f"{name}.{ext}", f"src/{name}.{ext}", b) for name, ext, b in photos[:n]]
    out += [Sample("text.jpg", "src/text.jpg", TEXT),
            Sample("trunc.jpg", "src/trunc.jpg", jpeg[: len(jpeg) * 2 // 5]),
            Sample("nokey", "x.tar#nokey", None, "no image member in group (members: json)")]
    return out


def assert_same_batch(got, ref, plans=True):
    """Every PackedBatch field equal, bit for bit (dtype included)."""
    assert got.pixel_values.dtype == ref.pixel_values.dtype
    assert got.pixel_values.shape == ref.pixel_values.shape
    assert torch.equal(got.pixel_values.cpu(), ref.pixel_values.cpu())
    assert torch.equal(got.cu_seqlens.cpu(), ref.cu_seqlens.cpu())
    assert got.cu_seqlens.dtype == torch.int32
    assert torch.equal(got.grid_thw, ref.grid_thw) and got.grid_thw.dtype == torch.int64
    assert torch.equal(got.image_index, ref.image_index)
    assert got.seqlens == ref.seqlens and got.max_seqlen == ref.max_seqlen
    assert got.num_tokens == ref.num_tokens and got.placeholders == ref.placeholders
    assert got.layout == ref.layout and got.pipeline == ref.pipeline
    assert sorted(got.errors) == sorted(ref.errors)
    if plans:
        assert len(got.image_plans) == len(ref.image_plans)
        for a, b in zip(got.image_plans, ref.image_plans):
            if b.index in ref.errors:  # (a decode failure keeps its good plan in ref)
                assert a.error is not None and a.index == b.index
            else:
                assert a == b


def assert_same_hf(got, ref):
    a, b = got.to_hf(), ref.to_hf()
    assert set(a) == set(b)
    for k in b:
        if isinstance(b[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip_bit_exact(family, dtype, photos):
    proc = vlmprep.Processor(family, backend="reference", dtype=dtype, errors="skip")
    samples = _samples(photos)
    rows = process_samples(proc, samples)
    assert [r["id"] for r in rows] == [s.id for s in samples]
    assert [r["status"] for r in rows] == ["ok"] * 3 + ["error"] * 3
    ref = proc([s.data for s in samples[:5]])  # the reader error has no bytes to give it
    got = batch_from_rows(rows[:5], proc.pipeline)
    assert_same_batch(got, ref)
    if dtype != "bfloat16":  # numpy has no bfloat16 (to_hf('np')); 'pt' is checked below
        assert_same_hf(got, ref)
    else:
        assert torch.equal(got.to_hf()["pixel_values"], ref.to_hf()["pixel_values"])
    assert got.num_embeddings == ref.num_embeddings
    # each good row alone is that image's batch
    for r, part in zip(rows[:3], ref.split()):
        assert_same_batch(batch_from_rows([r], proc.pipeline), part)


def test_row_values(photos):
    """The documented row schema: plain values, a flat grid, sizes, LE bytes, picklable."""
    proc = vlmprep.Processor("internvl", backend="reference", dtype="bfloat16", errors="skip")
    wide = Sample("wide", "src/wide.jpg", encode(tiled("astronaut", 500, 1000), "jpeg"))
    samples = [wide] + _samples(photos, n=1)[:1]
    rows = process_samples(proc, samples)
    assert len(rows[0]["seqlens"]) > 1  # several tiles (and a thumbnail) for one image
    ref = proc([s.data for s in samples[:2]])
    for r, s, part, plan in zip(rows, samples, ref.split(), ref.image_plans):
        assert tuple(r) == ROW_COLUMNS
        assert (r["id"], r["source"], r["status"], r["error"]) == (s.id, s.source, "ok", None)
        assert (r["dtype"], r["layout"]) == ("bfloat16", "tiles")
        assert r["grid_thw"] == part.grid_thw.reshape(-1).tolist()
        assert r["seqlens"] == part.seqlens
        assert r["num_patches"] == sum(part.seqlens) == plan.num_patches
        assert r["num_tokens"] == part.num_tokens[0] and r["placeholder"] == part.placeholders[0]
        assert r["row_shape"] == [3, 448, 448]
        w, h = Image.open(io.BytesIO(s.data)).size
        assert r["orig_hw"] == [h, w]
        pv = part.pixel_values.contiguous()
        assert r["pixel_values"] == pv.view(torch.int16).numpy().astype("<i2").tobytes()
    assert pickle.loads(pickle.dumps(rows)) == rows
    json.dumps([{k: v for k, v in r.items() if k != "pixel_values"} for r in rows])


def test_error_rows(photos):
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    rows = process_samples(proc, _samples(photos, n=1))
    text, trunc, nokey = rows[1:]
    for r in (text, trunc, nokey):
        assert r["status"] == "error" and isinstance(r["error"], str) and r["error"]
        assert (r["pixel_values"], r["grid_thw"], r["seqlens"]) == (b"", [], [])
        assert (r["num_patches"], r["num_tokens"], r["placeholder"]) == (0, 0, "")
        assert (r["dtype"], r["layout"], r["row_shape"]) == ("float32", "patches", [1176])
    assert text["error"].startswith("expected a JPEG/PNG") and text["orig_hw"] == [0, 0]
    assert trunc["orig_hw"][0] > 0  # the header was good: the decode failed
    assert nokey["error"] == "no image member in group (members: json)"
    # what the Processor itself says for those bytes
    ref = proc([TEXT, _samples(photos, n=1)[2].data])
    assert [e.reason for _, e in sorted(ref.errors.items())] == [text["error"], trunc["error"]]
    # an error row reads back as a skipped image
    b = batch_from_rows(rows[1:], proc.pipeline)
    assert b.num_images == 3 and b.num_seqs == 0 and b.pixel_values.shape == (0, 1176)
    assert sorted(b.errors) == [0, 1, 2] and b.errors[2].source == "x.tar#nokey"
    assert b.errors[2].reason == nokey["error"]


def test_no_samples():
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    assert process_samples(proc, []) == []


def test_raising_processor_is_not_changed(photos):
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="raise")
    rows = process_samples(proc, _samples(photos, n=1))
    assert [r["status"] for r in rows] == ["ok", "error", "error", "error"]
    assert proc.errors == "raise"
    with pytest.raises(vlmprep.ImageError):
        proc([TEXT])


def test_chunks_change_nothing(photos, monkeypatch):
    """Several Processor calls (bounded output) give the rows of one call."""
    proc = vlmprep.Processor("gemma3", backend="reference", dtype="uint8", errors="skip")
    samples = _samples(photos, n=5)
    whole = process_samples(proc, samples)
    monkeypatch.setattr(rows_mod, "_CHUNK_IMAGES", 2)
    assert process_samples(proc, samples) == whole
    monkeypatch.setattr(rows_mod, "_CHUNK_IMAGES", 64)
    monkeypatch.setattr(rows_mod, "_CHUNK_BYTES", 1)  # one image per call
    assert process_samples(proc, samples) == whole


def test_unexpected_failure_is_narrowed_to_its_image(photos):
    """A non-ImageError inside a call: the images are retried one by one; the one that fails
    alone is an error row naming the exception; when every image fails, it is raised."""
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    samples = _samples(photos, n=3)
    poison = proc.plan([samples[1].data]).images[0].source_hw
    real = proc.execute

    def execute(sources, plans):
        if any(p.source_hw == poison for p in plans):
            raise RuntimeError("backend fault")
        return real(sources, plans)

    proc.execute = execute  # type: ignore[method-assign]
    rows = process_samples(proc, samples[:3])
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert rows[1]["error"] == "RuntimeError: backend fault"
    assert rows[0] == process_samples(vlmprep.Processor("qwen2-vl", backend="reference"),
                                      samples[:1])[0]
    with pytest.raises(RuntimeError, match="backend fault"):
        process_samples(proc, [samples[1]])


def test_real_sources(wds_tar):
    """Samples from a WebDataset tar (helper S's reader): bad items become error rows."""
    (unit,) = discover([str(wds_tar.path)])
    proc = vlmprep.Processor("qwen2-vl", backend="reference", dtype="uint8", errors="skip")
    samples = list(unit.samples())
    rows = process_samples(proc, samples)
    assert [r["id"] for r in rows] == wds_tar.ids
    assert {r["id"] for r in rows if r["status"] == "error"} == set(wds_tar.bad)
    good = [s for s in samples if s.id not in wds_tar.bad]
    assert_same_batch(batch_from_rows([r for r in rows if r["status"] == "ok"], proc.pipeline),
                      proc([s.data for s in good]))


def test_batch_from_rows_refuses(photos):
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    rows = process_samples(proc, _samples(photos, n=2))
    with pytest.raises(ValueError, match="at least one row"):
        batch_from_rows([], proc.pipeline)
    with pytest.raises(ValueError, match="expected the keys"):
        batch_from_rows([{k: v for k, v in rows[0].items() if k != "orig_hw"}], proc.pipeline)
    short = dict(rows[0], pixel_values=rows[0]["pixel_values"][:-4])
    with pytest.raises(ValueError, match="pixel_values: expected .* got"):
        batch_from_rows([short], proc.pipeline)
    with pytest.raises(ValueError, match="one of .* for every row"):
        batch_from_rows([rows[0], dict(rows[1], dtype="uint8")], proc.pipeline)
    # another pipeline: a different grid for the same source size
    other = vlmprep.presets.get("qwen2-vl", max_pixels=56 * 56)
    with pytest.raises(ValueError, match="another pipeline"):
        batch_from_rows(rows[:1], other)
    with pytest.raises(ValueError, match="layout"):
        batch_from_rows(rows[:1], vlmprep.presets.get("internvl"))
    with pytest.raises(ValueError, match="row_shape"):
        batch_from_rows(rows[:1], vlmprep.presets.get("qwen3-vl"))


def test_compact_processor_refused(photos):
    # shards record no row form: compact rows would read back labelled as full rows
    proc = vlmprep.Processor("qwen2-vl", backend="reference", row_form="compact")
    with pytest.raises(ValueError, match="row_form='full'"):
        process_samples(proc, _samples(photos, n=1))
