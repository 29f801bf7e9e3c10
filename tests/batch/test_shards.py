"""vlmprep.batch.shards: both formats read back bit-exact (rows, read_shards per image and per
shard, against the Processor's own output), deterministic bytes (also from another process),
tmp + rename (nothing left by a failed or interrupted write), the manifest, and every check at
the boundary (missing / corrupt folder, manifest, shard size, sha256, optional packages)."""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys

import pytest
import torch

import vlmprep
from vlmprep.batch import shards
from vlmprep.batch.config import JobConfig
from vlmprep.batch.rows import ROW_COLUMNS, process_samples
from vlmprep.batch.shards import (
    FORMATS,
    read_manifest,
    read_shard_rows,
    read_shards,
    shard_name,
    write_manifest,
    write_shard,
)
from vlmprep.batch.sources import Sample

pytest.importorskip("pyarrow", reason="parquet shards need pyarrow (pip install vlmprep[parquet])")
pytest.importorskip("safetensors", reason="safetensors shards need the safetensors package")

TEXT = b"this is a text file, not a JPEG\n"


def _samples(photos) -> list[Sample]:
    out = [Sample(f"{name}.{ext}", f"src/{name}.{ext}", b) for name, ext, b in photos]
    out.insert(2, Sample("text.jpg", "src/text.jpg", TEXT))
    out.append(Sample("nokey", "x.tar#nokey", None, "no image member in group"))
    return out


def make_job(out, proc, samples, fmt, per_shard=3, complete=True, pipeline=True) -> dict:
    """What ``vlmprep run`` leaves: shards of ``per_shard`` samples of one unit, and a manifest."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = JobConfig(preset=proc.pipeline.name, backend=proc.backend_name, dtype=proc.dtype,
                    format=fmt, shard_size=per_shard)
    infos = {}
    for part in range(0, len(samples), per_shard):
        name = shard_name("unit", part // per_shard, fmt)
        rows = process_samples(proc, samples[part:part + per_shard])
        infos[name] = write_shard(out, name, fmt, rows, {"config_hash": cfg.hash()})
    manifest = {"vlmprep_version": vlmprep.__version__, "format": fmt, "config": cfg.to_json(),
                "config_hash": cfg.hash(), "inputs": ["unit"], "shards": infos,
                "units": {"unit": {"count": len(samples), "parts": len(infos)}},
                "complete": complete, "summary": {}}
    if pipeline:
        manifest["pipeline"] = proc.pipeline.to_dict()
    write_manifest(out, manifest)
    return manifest


def assert_same(got, ref):
    assert got.pixel_values.dtype == ref.pixel_values.dtype
    assert torch.equal(got.pixel_values, ref.pixel_values)
    assert torch.equal(got.cu_seqlens, ref.cu_seqlens)
    assert torch.equal(got.grid_thw, ref.grid_thw)
    assert torch.equal(got.image_index, ref.image_index)
    assert (got.seqlens, got.num_tokens, got.placeholders, got.layout) == \
        (ref.seqlens, ref.num_tokens, ref.placeholders, ref.layout)
    assert sorted(got.errors) == sorted(ref.errors)


# -- round trips ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("family,dtype", [("qwen2-vl", "float32"), ("qwen2-vl", "bfloat16"),
                                          ("qwen2-vl", "uint8"), ("internvl", "bfloat16"),
                                          ("mllama", "uint8"), ("gemma3", "float32"),
                                          ("llava-next", "bfloat16")])
def test_read_shards_bit_exact(tmp_path, photos, family, dtype, fmt):
    proc = vlmprep.Processor(family, backend="reference", dtype=dtype, errors="skip")
    samples = _samples(photos)
    make_job(tmp_path, proc, samples, fmt)
    for name in sorted(os.listdir(tmp_path)):
        if name.endswith("." + fmt):  # every row, errors included, as it was written
            part = int(name[-len(fmt) - 6:-len(fmt) - 1])
            assert read_shard_rows(tmp_path / name) == \
                process_samples(proc, samples[3 * part:3 * part + 3])
    good = [s for s in samples if s.data is not None and s.data != TEXT]
    ref = proc([s.data for s in good])
    got = list(read_shards(tmp_path))
    assert [i for i, _ in got] == [s.id for s in good]
    for (_, b), part in zip(got, ref.split()):
        assert_same(b, part)
    if dtype != "bfloat16":
        h1, h2 = got[0][1].to_hf(), next(ref.split()).to_hf()
        assert set(h1) == set(h2) and all(torch.equal(h1[k], h2[k]) for k in h2
                                          if isinstance(h2[k], torch.Tensor))
    # per shard: (ids, batch) of that shard's good samples
    batched = list(read_shards(tmp_path, batched=True))
    assert [ids for ids, _ in batched] == [[s.id for s in samples[a:a + 3] if s in good]
                                           for a in range(0, len(samples), 3)
                                           if any(s in good for s in samples[a:a + 3])]
    for ids, b in batched:
        assert_same(b, proc([next(s.data for s in good if s.id == i) for i in ids]))


def test_top_level_name():
    assert vlmprep.read_shards is read_shards


def test_include_errors(tmp_path, photos):
    proc = vlmprep.Processor("qwen2-vl", backend="reference", dtype="uint8", errors="skip")
    samples = _samples(photos)
    make_job(tmp_path, proc, samples, "parquet")
    got = list(read_shards(tmp_path, include_errors=True))
    assert [i for i, _ in got] == [s.id for s in samples]
    text = dict(got)["text.jpg"]
    assert text.num_images == 1 and list(text.errors) == [0] and text.num_seqs == 0
    assert text.errors[0].reason.startswith("expected a JPEG/PNG")
    assert dict(got)["nokey"].errors[0].reason == "no image member in group"
    (ids, b), *_ = read_shards(tmp_path, batched=True, include_errors=True)
    assert ids == [s.id for s in samples[:3]] and sorted(b.errors) == [2]
    assert_same(b, proc([s.data for s in samples[:3]]))


def test_order_follows_units(tmp_path, photos):
    """Job order: the manifest's units in their order, then parts (not file-name order)."""
    proc = vlmprep.Processor("siglip", backend="reference", dtype="uint8", errors="skip")
    samples = _samples(photos)[:4]
    shards_ = {}
    for unit, part in (("zeta", 0), ("alpha", 100000), ("alpha", 99999), ("zeta", 1)):
        name = shard_name(unit, part, "parquet")
        chunk = samples[:2] if part in (0, 99999) else samples[2:]
        rows = [dict(r, id=f"{unit}/{r['id']}") for r in process_samples(proc, chunk)]
        shards_[name] = write_shard(tmp_path, name, "parquet", rows, {})
    write_manifest(tmp_path, {"format": "parquet", "pipeline": proc.pipeline.to_dict(),
                              "shards": shards_, "units": {"zeta": {}, "alpha": {}},
                              "complete": True})
    ids = [i for i, _ in read_shards(tmp_path)]
    good = [s.id for s in samples if s.id != "text.jpg"]
    assert ids == [f"zeta/{i}" for i in good] + [f"alpha/{i}" for i in good]


def test_pipeline_from_config(tmp_path, photos):
    """Without a stored pipeline the manifest's JobConfig (preset + overrides) is used."""
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip", max_pixels=200_000)
    samples = _samples(photos)[:2]
    cfg = JobConfig(preset="qwen2-vl", overrides={"max_pixels": 200_000})
    infos = {"u-00000.parquet": write_shard(tmp_path, "u-00000.parquet", "parquet",
                                            process_samples(proc, samples), {})}
    write_manifest(tmp_path, {"format": "parquet", "config": cfg.to_json(), "shards": infos,
                              "units": {"u": {}}, "complete": True})
    assert shards.manifest_pipeline(read_manifest(tmp_path)) == proc.pipeline
    got = list(read_shards(tmp_path))
    assert [i for i, _ in got] == [s.id for s in samples]
    for (_, b), s in zip(got, samples):
        assert b.pipeline == proc.pipeline
        assert_same(b, proc([s.data]))


# -- the files themselves ----------------------------------------------------------------------
def _rows(photos, dtype="bfloat16"):
    proc = vlmprep.Processor("qwen2-vl", backend="reference", dtype=dtype, errors="skip")
    return proc, process_samples(proc, _samples(photos))


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


_WRITER = """
import pickle, sys
from vlmprep.batch.shards import write_shard
rows, meta = pickle.load(open(sys.argv[1], "rb"))
for fmt in ("parquet", "safetensors"):
    write_shard(sys.argv[2], "s-00000." + fmt, fmt, rows, meta)
"""


def test_deterministic_bytes(tmp_path, photos):
    """Same rows + meta -> same bytes: twice here, and once in another process (the
    safetensors package's own writer orders metadata by a per-process hash map)."""
    _, rows = _rows(photos)
    meta = {f"key{i}": f"value {i}" for i in range(12)}
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    (tmp_path / "rows.pkl").write_bytes(pickle.dumps((rows, meta)))
    subprocess.run([sys.executable, "-c", _WRITER, str(tmp_path / "rows.pkl"), str(c)],
                   check=True, timeout=120)
    for fmt in FORMATS:
        name = shard_name("s", 0, fmt)
        ia = write_shard(a, name, fmt, rows, meta)
        ib = write_shard(b, name, fmt, rows, dict(reversed(list(meta.items()))))
        assert ia == ib
        assert ia["sha256"] == _digest(a / name) == _digest(b / name) == _digest(c / name)
        assert ia["bytes"] == os.path.getsize(a / name)
        ok = [r for r in rows if r["status"] == "ok"]
        assert (ia["count"], ia["ok"], ia["errors"]) == (len(rows), len(ok), len(rows) - len(ok))
        assert ia["tokens"] == sum(r["num_tokens"] for r in ok)
        ids = json.dumps([r["id"] for r in rows], ensure_ascii=False, separators=(",", ":"))
        assert ia["ids_sha256"] == hashlib.sha256(ids.encode()).hexdigest()
        assert sorted(os.listdir(a)) == sorted(n for n in os.listdir(a) if not n.endswith(".tmp"))


def test_parquet_schema(tmp_path, photos):
    """The documented parquet schema, readable with plain pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    _, rows = _rows(photos)
    write_shard(tmp_path, "s-00000.parquet", "parquet", rows, {"config_hash": "abc"})
    t = pq.read_table(tmp_path / "s-00000.parquet")
    assert t.schema.names == list(ROW_COLUMNS)
    assert t.schema.field("pixel_values").type == pa.large_binary()
    assert t.schema.field("grid_thw").type == pa.list_(pa.int32())
    assert t.schema.field("num_tokens").type == pa.int32()
    meta = t.schema.metadata
    assert meta[b"config_hash"] == b"abc" and meta[b"vlmprep.shard_schema"] == b"2"
    assert t.column("id").to_pylist() == [r["id"] for r in rows]
    assert t.column("pixel_values").to_pylist() == [r["pixel_values"] for r in rows]


def test_rows_table(photos):
    """The parquet shard's types, also for a column that is None on every row (Ray)."""
    import pyarrow as pa
    _, rows = _rows(photos)
    ok = [r for r in rows if r["status"] == "ok"]
    t = shards.rows_table(ok)
    assert t.schema == shards.arrow_schema() and t.schema.metadata is None
    assert t.schema.field("error").type == pa.string() and t.column("error").null_count == len(ok)
    assert t.to_pylist() == ok


def test_parquet_row_groups(tmp_path, photos, monkeypatch):
    """Row groups are bounded by pixel bytes; reading across them gives the same rows."""
    import pyarrow.parquet as pq
    _, rows = _rows(photos)
    monkeypatch.setattr(shards.parquet, "_ROW_GROUP_BYTES", 1)
    write_shard(tmp_path, "s-00000.parquet", "parquet", rows, {})
    assert pq.ParquetFile(tmp_path / "s-00000.parquet").num_row_groups == len(rows)
    assert read_shard_rows(tmp_path / "s-00000.parquet") == rows


def test_safetensors_layout(tmp_path, photos):
    """The documented safetensors tensors and metadata, read with the safetensors package."""
    from safetensors import safe_open
    proc, rows = _rows(photos)
    write_shard(tmp_path, "s-00000.safetensors", "safetensors", rows, {"config_hash": "abc"})
    with safe_open(str(tmp_path / "s-00000.safetensors"), framework="pt") as f:
        meta = f.metadata()
        t = {k: f.get_tensor(k) for k in f.keys()}
    ref = proc([r_data for r_data in (s.data for s in _samples(photos)) if r_data is not None])
    assert torch.equal(t["pixel_values"], ref.pixel_values) and t["pixel_values"].dtype == \
        torch.bfloat16
    assert torch.equal(t["cu_seqlens"], ref.cu_seqlens)
    assert torch.equal(t["grid_thw"], ref.grid_thw)
    assert t["num_tokens"].tolist() == [r["num_tokens"] for r in rows]
    assert t["orig_hw"].tolist() == [r["orig_hw"] for r in rows]
    off = t["placeholder_offsets"].tolist()
    raw = t["placeholders"].numpy().tobytes()
    assert [raw[off[i]:off[i + 1]].decode() for i in range(len(rows))] == \
        [r["placeholder"] for r in rows]
    assert meta["config_hash"] == "abc" and meta["vlmprep.shard_schema"] == "2"
    info = json.loads(meta["vlmprep.rows"])
    assert info["ids"] == [r["id"] for r in rows]
    assert info["errors"] == [r["error"] for r in rows]
    assert (info["dtype"], info["layout"], info["row_shape"]) == ("bfloat16", "patches", [1176])


@pytest.mark.parametrize("fmt", FORMATS)
def test_edge_shards(tmp_path, fmt):
    """A shard of only error rows, and an empty shard, write and read back."""
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    bad = process_samples(proc, [Sample("a", "a", TEXT), Sample("b", "b", None, "gone")])
    for name, rows in ((shard_name("bad", 0, fmt), bad), (shard_name("empty", 0, fmt), [])):
        info = write_shard(tmp_path, name, fmt, rows, {})
        assert read_shard_rows(tmp_path / name) == rows
        assert (info["count"], info["ok"], info["tokens"]) == (len(rows), 0, 0)


# -- atomic writes ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("exc", [ValueError, KeyboardInterrupt])
def test_failed_write_leaves_nothing(tmp_path, photos, monkeypatch, fmt, exc):
    """A write that fails half-way (or is interrupted) leaves no shard and no .tmp; a shard
    already there under that name is kept as it was."""
    _, rows = _rows(photos)
    name = shard_name("s", 0, fmt)
    calls = {"n": 0}
    real = shards.files.Hashing.write

    def write(self, b):
        calls["n"] += 1
        if calls["n"] == 3:  # some bytes are in the .tmp file by now
            raise exc("disk went away")
        return real(self, b)

    monkeypatch.setattr(shards.files.Hashing, "write", write)
    with pytest.raises(exc):
        write_shard(tmp_path, name, fmt, rows, {})
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(shards.files.Hashing, "write", real)
    info = write_shard(tmp_path, name, fmt, rows, {})
    calls["n"] = 0
    monkeypatch.setattr(shards.files.Hashing, "write", write)
    with pytest.raises(exc):
        write_shard(tmp_path, name, fmt, rows[:1], {})
    assert os.listdir(tmp_path) == [name] and _digest(tmp_path / name) == info["sha256"]


def test_bad_row_value_leaves_nothing(tmp_path, photos):
    _, rows = _rows(photos)
    bad = rows[:1] + [dict(rows[1], num_tokens="many")]
    for fmt in FORMATS:
        with pytest.raises((ValueError, TypeError)):
            write_shard(tmp_path, shard_name("s", 0, fmt), fmt, bad, {})
    assert os.listdir(tmp_path) == []


def test_write_shard_refuses(tmp_path, photos):
    _, rows = _rows(photos)
    with pytest.raises(ValueError, match="fmt expected one of"):
        write_shard(tmp_path, "s-00000.npz", "npz", rows, {})
    with pytest.raises(ValueError, match="name expected"):
        write_shard(tmp_path, "../s-00000.parquet", "parquet", rows, {})
    with pytest.raises(ValueError, match="existing folder"):
        write_shard(tmp_path / "nope", "s-00000.parquet", "parquet", rows, {})
    with pytest.raises(ValueError, match="str -> str"):
        write_shard(tmp_path, "s-00000.parquet", "parquet", rows, {"n": 1})
    with pytest.raises(ValueError, match="vlmprep's own"):
        write_shard(tmp_path, "s-00000.safetensors", "safetensors", rows, {"vlmprep.rows": "x"})
    with pytest.raises(ValueError, match="one value for every row"):
        write_shard(tmp_path, "s-00000.parquet", "parquet",
                    [rows[0], dict(rows[1], dtype="uint8")], {})
    with pytest.raises(ValueError, match="expected the keys"):
        write_shard(tmp_path, "s-00000.parquet", "parquet", [{"id": "x"}], {})
    assert os.listdir(tmp_path) == []


def test_shard_name():
    assert shard_name("photos", 3, "parquet") == "photos-00003.parquet"
    assert shard_name("shard-000000", 12345, "safetensors") == "shard-000000-12345.safetensors"
    for bad in (("a/b", 0, "parquet"), ("", 0, "parquet"), ("a", -1, "parquet"),
                ("a", True, "parquet"), ("a", 0, "csv")):
        with pytest.raises(ValueError, match="expected"):
            shard_name(*bad)


def test_missing_package_names_the_extra(tmp_path, photos, monkeypatch):
    _, rows = _rows(photos)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ValueError, match=r"pip install vlmprep\[parquet\]"):
        write_shard(tmp_path, "s-00000.parquet", "parquet", rows, {})
    assert os.listdir(tmp_path) == []
    write_shard(tmp_path, "s-00000.safetensors", "safetensors", rows, {})  # needs neither
    monkeypatch.setitem(sys.modules, "safetensors", None)
    with pytest.raises(ValueError, match=r"expected the safetensors package.*pip install"):
        read_shard_rows(tmp_path / "s-00000.safetensors")


# -- manifest and the checks of read_shards -----------------------------------------------------
def test_manifest_round_trip(tmp_path):
    assert read_manifest(tmp_path) is None
    m = {"format": "parquet", "shards": {"a-00000.parquet": {"bytes": 1}}, "ids": ["é", "b"],
         "complete": False}
    write_manifest(tmp_path, m)
    assert read_manifest(tmp_path) == m and os.listdir(tmp_path) == ["manifest.json"]
    m["complete"] = True
    write_manifest(tmp_path, m)
    assert read_manifest(tmp_path) == m and os.listdir(tmp_path) == ["manifest.json"]
    with pytest.raises(ValueError):  # not JSON: nothing replaced
        write_manifest(tmp_path, {"x": float("nan")})
    assert read_manifest(tmp_path) == m and os.listdir(tmp_path) == ["manifest.json"]


@pytest.mark.parametrize("text,match", [("{not json", "expected JSON"),
                                        ("[1, 2]", "expected a JSON object"),
                                        (b"\xff\xfe", "readable UTF-8")])
def test_corrupt_manifest(tmp_path, text, match):
    p = tmp_path / "manifest.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=match):
        read_manifest(tmp_path)
    with pytest.raises(ValueError, match=match):
        read_shards(tmp_path)


@pytest.fixture
def job(tmp_path, photos):
    proc = vlmprep.Processor("qwen2-vl", backend="reference", dtype="uint8", errors="skip")
    out = tmp_path / "job"
    return out, make_job(out, proc, _samples(photos), "parquet")


def test_read_shards_checks_the_folder(tmp_path, job):
    out, manifest = job
    with pytest.raises(ValueError, match="no such folder"):
        read_shards(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        read_shards(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="expected manifest.json .* got none"):
        read_shards(tmp_path / "empty")
    write_manifest(out, dict(manifest, complete=False))
    with pytest.raises(ValueError, match="complete job .* --resume, or pass partial=True"):
        read_shards(out)
    assert len(list(read_shards(out, partial=True))) == 5
    write_manifest(out, dict(manifest, shards=[1]))
    with pytest.raises(ValueError, match="'shards' object"):
        read_shards(out)


def test_read_shards_checks_each_shard(job):
    out, manifest = job
    name = sorted(manifest["shards"])[1]
    path = out / name
    data = path.read_bytes()
    path.write_bytes(data + b"\0")  # another size: found before anything is yielded
    with pytest.raises(ValueError, match=rf"{name}.* expected {len(data)} bytes .* got "
                                         rf"{len(data) + 1}"):
        read_shards(out)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF  # same size, other bytes: the sha256 check finds it
    path.write_bytes(bytes(flipped))
    it = read_shards(out)
    first = [next(it) for _ in range(2)]  # shard 0 is fine
    assert [i for i, _ in first] == ["astronaut0.jpg", "coffee1.png"]
    with pytest.raises(ValueError, match=rf"{name}.* expected sha256 {manifest['shards'][name]['sha256']}"):
        next(it)
    path.unlink()
    with pytest.raises(ValueError, match=rf"expected shard .*{name}.* no such file.* --resume"):
        read_shards(out)


def test_damaged_row_group_without_verify(job):
    """verify=False skips the sha256; a row group its reader cannot decode is still a
    ValueError, not pyarrow's exception."""
    out, manifest = job
    path = out / sorted(manifest["shards"])[0]
    data = bytearray(path.read_bytes())
    data[4:64] = b"\xff" * 60  # the first column chunk (ids): page header and zstd data
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="reader refuses"):
        list(read_shards(out, verify=False))


def test_read_shards_refuses_foreign_files(tmp_path, job):
    out, manifest = job
    (out / "x-00000.parquet").write_bytes(b"PAR1 not really")
    bad = dict(manifest, shards={"x-00000.parquet": {}})
    write_manifest(out, bad)
    with pytest.raises(ValueError, match="expected a vlmprep shard, got a file its reader refuses"):
        list(read_shards(out))
    write_manifest(out, dict(manifest, shards={"../evil.parquet": {}}))
    with pytest.raises(ValueError, match="shard file names"):
        read_shards(out)
