"""vlmprep.batch.run (the local engine) and JobConfig: inputs -> shards + manifest, read back
bit-exact against the Processor; workers; resume; refusals; Ctrl-C. The command line and the
real SIGKILL are in tests/cli/test_run_cli.py."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from vlmprep.batch import run as batch_run
from vlmprep.batch import shards, work
from vlmprep.batch.config import JobConfig
from vlmprep.batch.run import JobFailed, run

CFG = JobConfig(preset="qwen2-vl", shard_size=3)


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())
            if p.name != shards.MANIFEST}


def _ids_in_shards(out: Path) -> list[str]:
    """Every row's id (error rows too), read from the shard files the manifest lists."""
    man = shards.read_manifest(out)
    assert man is not None
    return [r["id"] for name in man["shards"] for r in shards.read_shard_rows(out / name)]


def _check_against_processor(out: Path, built, config: JobConfig) -> None:
    """Every good id comes back once from read_shards, bit-exact with the Processor's output
    for that image alone; every bad id is an error row; nothing else is there."""
    proc = config.processor()
    got = dict(shards.read_shards(out))
    assert sorted(got) == sorted(built.good)
    for i in built.good:
        want = proc([built.data[i]])
        b = got[i]
        assert b.pixel_values.dtype == want.pixel_values.dtype
        assert torch.equal(b.pixel_values, want.pixel_values), i
        assert torch.equal(b.grid_thw, want.grid_thw), i
        assert list(b.num_tokens) == list(want.num_tokens), i
    ids = _ids_in_shards(out)
    assert sorted(ids) == sorted(built.ids)  # each sample exactly once, bad ones included
    rows = {r["id"]: r for name in shards.read_manifest(out)["shards"]
            for r in shards.read_shard_rows(out / name)}
    for i in built.bad:
        assert rows[i]["status"] == "error" and rows[i]["error"], i


@pytest.mark.parametrize("fixture, kw", [("image_folder", {}), ("wds_tar", {}),
                                         ("parquet_plain", {"id_column": "id"}),
                                         ("parquet_hf", {}), ("path_list", {})])
def test_run_each_input_kind(request, tmp_path, fixture, kw):
    built = request.getfixturevalue(fixture)
    out = tmp_path / "out"
    s = run([str(built.path)], str(out), CFG, progress=False, **kw)
    assert (s["complete"], s["images"], s["processed"], s["skipped"]) == \
        (True, len(built.ids), len(built.good), len(built.bad))
    assert sum(s["skipped_by_reason"].values()) == len(built.bad)
    man = shards.read_manifest(out)
    assert man["complete"] and man["config_hash"] == CFG.hash()
    assert JobConfig.from_json(man["config"]) == CFG
    assert man["pipeline"] == CFG.processor().pipeline.to_dict()
    n = len(built.ids)
    assert list(man["shards"]) == [shards.shard_name(u, p, "parquet")
                                   for u in man["units"] for p in range(-(-n // 3))]
    assert s["bytes"] == sum(os.path.getsize(out / k) for k in man["shards"])
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    _check_against_processor(out, built, CFG)


def test_safetensors_and_bfloat16(tmp_path, wds_tar):
    cfg = JobConfig(preset="qwen2-vl", dtype="bfloat16", format="safetensors", shard_size=4)
    out = tmp_path / "out"
    run([str(wds_tar.path)], str(out), cfg, progress=False)
    assert all(k.endswith(".safetensors") for k in shards.read_manifest(out)["shards"])
    _check_against_processor(out, wds_tar, cfg)


def test_two_workers_write_the_same_bytes_as_one(tmp_path, image_folder, wds_tar):
    inputs = [str(image_folder.path), str(wds_tar.path)]
    run(inputs, str(tmp_path / "w1"), CFG, workers=1, progress=False)
    s = run(inputs, str(tmp_path / "w2"), CFG, workers=2, progress=False)
    one, two = _files(tmp_path / "w1"), _files(tmp_path / "w2")
    assert len(one) == s["shards"] >= 4 and one == two
    m1, m2 = shards.read_manifest(tmp_path / "w1"), shards.read_manifest(tmp_path / "w2")
    assert m1["shards"] == m2["shards"] and m1["units"] == m2["units"]


def test_resume_redoes_only_what_is_missing(tmp_path, image_folder):
    """A kill leaves: the manifest without the last shards, a stray .tmp, maybe a shard renamed
    but not yet recorded; a damaged (resized) shard is redone too. Resume: each id once, the
    same bytes as an uninterrupted run."""
    out = tmp_path / "out"
    run([str(image_folder.path)], str(out), CFG, progress=False)
    full = _files(out)
    man = shards.read_manifest(out)
    names = list(man["shards"])
    assert len(names) == 3
    del man["shards"][names[2]]  # renamed, not recorded
    man["complete"] = False
    shards.write_manifest(out, man)
    (out / names[1]).write_bytes(full[names[1]][:100])  # damaged: another size
    (out / (names[2] + ".tmp")).write_bytes(b"half")
    s = run([str(image_folder.path)], str(out), CFG, resume=True, progress=False)
    assert s["run_shards"] == 2 and s["run_images"] == 5 and s["images"] == len(image_folder.ids)
    assert _files(out) == full
    assert sorted(_ids_in_shards(out)) == sorted(image_folder.ids)
    # a complete job resumed: nothing to do
    s = run([str(image_folder.path)], str(out), CFG, resume=True, progress=False)
    assert s["run_images"] == 0 and s["complete"]


def test_resume_refuses_a_changed_config_naming_it(tmp_path, image_folder):
    out = tmp_path / "out"
    run([str(image_folder.path)], str(out), CFG, progress=False)
    other = JobConfig(preset="qwen2-vl", shard_size=3, dtype="bfloat16",
                      overrides={"max_pixels": 200_000})
    with pytest.raises(ValueError) as e:
        run([str(image_folder.path)], str(out), other, resume=True, progress=False)
    msg = str(e.value)
    assert "dtype: 'float32' -> 'bfloat16'" in msg and "override max_pixels: unset -> 200000" in msg
    assert "--overwrite" in msg


def test_resume_refuses_changed_inputs(tmp_path, image_folder, photos, builders):
    out = tmp_path / "out"
    run([str(image_folder.path)], str(out), CFG, progress=False)
    (image_folder.path / "new.png").write_bytes(photos[1][2])
    with pytest.raises(ValueError, match=r"expected the inputs of the job.*-> 9 samples"):
        run([str(image_folder.path)], str(out), CFG, resume=True, progress=False)


def test_output_folder_rules(tmp_path, image_folder):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.txt").write_text("my data")
    with pytest.raises(ValueError, match="not|expected a new or empty folder") as e:
        run([str(image_folder.path)], str(out), CFG, resume=True, progress=False)
    assert "thesis.txt" in str(e.value) and "--overwrite" in str(e.value)
    assert sorted(p.name for p in out.iterdir()) == ["thesis.txt"]
    # a vlmprep output without --resume / --overwrite: refused
    out2 = tmp_path / "out"
    run([str(image_folder.path)], str(out2), CFG, progress=False)
    with pytest.raises(ValueError, match="holding a vlmprep output.*--resume"):
        run([str(image_folder.path)], str(out2), CFG, progress=False)
    # --overwrite with another shard size: the old shards go (one renamed but never recorded,
    # as a kill leaves it, too), a file of the user's stays
    (out2 / "notes.txt").write_text("keep me")
    man = shards.read_manifest(out2)
    unrecorded = list(man["shards"])[-1]
    del man["shards"][unrecorded]
    shards.write_manifest(out2, man)
    s = run([str(image_folder.path)], str(out2), JobConfig(preset="qwen2-vl", shard_size=8),
            overwrite=True, progress=False)
    assert s["shards"] == 1
    assert sorted(p.name for p in out2.iterdir()) == sorted(
        ["notes.txt", shards.MANIFEST, *shards.read_manifest(out2)["shards"]])
    with pytest.raises(ValueError, match="expected a folder"):
        run([str(image_folder.path)], str(out / "thesis.txt"), CFG, progress=False)


def test_ctrl_c_leaves_no_half_shard_then_resume(tmp_path, image_folder, monkeypatch):
    """KeyboardInterrupt while the second shard is being written: no .tmp, the manifest lists
    the first shard only; --resume finishes with every id once."""
    out = tmp_path / "out"
    real = shards.write_shard
    calls = []

    def interrupted(out_dir, name, fmt, rows, meta):
        calls.append(name)
        if len(calls) == 2:
            (Path(out_dir) / (name + ".tmp")).write_bytes(b"PAR1 half")
            raise KeyboardInterrupt
        return real(out_dir, name, fmt, rows, meta)

    monkeypatch.setattr(work, "write_shard", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run([str(image_folder.path)], str(out), CFG, progress=False)
    man = shards.read_manifest(out)
    assert not man["complete"] and list(man["shards"]) == calls[:1]
    assert sorted(p.name for p in out.iterdir()) == sorted([shards.MANIFEST, calls[0]])
    monkeypatch.setattr(work, "write_shard", real)
    s = run([str(image_folder.path)], str(out), CFG, resume=True, progress=False)
    assert s["complete"] and s["run_shards"] == 2
    assert sorted(_ids_in_shards(out)) == sorted(image_folder.ids)


def test_a_failed_write_stops_the_job_as_job_failed(tmp_path, image_folder, monkeypatch):
    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(work, "write_shard", full_disk)
    with pytest.raises(JobFailed, match="--resume.*No space left"):
        run([str(image_folder.path)], str(tmp_path / "out"), CFG, progress=False)
    assert not shards.read_manifest(tmp_path / "out")["complete"]


def test_process_item_is_deterministic_and_reports(tmp_path, wds_tar):
    from vlmprep.batch.sources import discover
    (unit,) = discover([str(wds_tar.path)])
    proc = CFG.processor()
    seen = []
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    info = batch_run.process_item(proc, unit, 1, str(tmp_path / "a"), CFG,
                                  on_images=lambda n, t: seen.append((n, t)))
    again = batch_run.process_item(proc, unit, 1, str(tmp_path / "b"), CFG)
    name = shards.shard_name(unit.name, 1, "parquet")
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert again["sha256"] == info["sha256"] == shards.file_sha256(tmp_path / "a" / name)
    assert (info["unit"], info["part"], info["count"]) == (unit.name, 1, 3)
    assert sum(n for n, _ in seen) == 3 and sum(t for _, t in seen) == info["tokens"]
    assert sum(info["reasons"].values()) == info["errors"]
    assert set(info["timing"]) == {"process_s", "write_s"}


def test_argument_errors(tmp_path, image_folder):
    d = str(image_folder.path)
    for kw, pat in [({"workers": 0}, "workers: expected a positive int"),
                    ({"engine": "spark"}, "engine: expected one of"),
                    ({"resume": True, "overwrite": True}, "at most one of resume and overwrite"),
                    ({"gpus_per_worker": 0.5}, "gpus_per_worker: expected a number >= 0 with "
                                               "engine='ray'"),
                    ({"gpus_per_worker": -1, "engine": "ray"}, "gpus_per_worker: expected")]:
        with pytest.raises(ValueError, match=pat):
            run([d], str(tmp_path / "o"), CFG, progress=False, **kw)
    with pytest.raises(ValueError, match="inputs: expected a non-empty list"):
        run(d, str(tmp_path / "o"), CFG)  # type: ignore[arg-type]


# -- JobConfig ------------------------------------------------------------------------------------
def test_jobconfig_round_trips_hashes_and_pickles():
    c = JobConfig(preset="qwen2-vl", dtype="bfloat16", format="safetensors", shard_size=7,
                  overrides={"mean": [0.5, 0.5, 0.5], "max_pixels": 1003520})
    assert c.overrides == (("max_pixels", 1003520), ("mean", (0.5, 0.5, 0.5)))
    d = c.to_json()
    assert d["overrides"] == {"max_pixels": 1003520, "mean": [0.5, 0.5, 0.5]}
    assert JobConfig.from_json(d) == c and JobConfig.from_json(d).hash() == c.hash()
    assert pickle.loads(pickle.dumps(c)) == c
    same = JobConfig(preset="qwen2-vl", dtype="bfloat16", format="safetensors", shard_size=7,
                     overrides=(("max_pixels", 1003520), ("mean", (0.5, 0.5, 0.5))))
    assert same.hash() == c.hash() and c.diff(same) == []
    assert c.diff(JobConfig(preset="qwen2-vl", shard_size=7)) == [
        "dtype: 'bfloat16' -> 'float32'", "format: 'safetensors' -> 'parquet'",
        "override max_pixels: 1003520 -> unset", "override mean: (0.5, 0.5, 0.5) -> unset"]
    p = c.processor()
    assert p.errors == "skip" and p.dtype == "bfloat16"
    assert p.pipeline.sizing.max_pixels == 1003520
    assert JobConfig.__dataclass_fields__["format"].default in shards.FORMATS


@pytest.mark.parametrize("kw, pat", [
    ({}, "exactly one of preset= or checkpoint="),
    ({"preset": "qwen2-vl", "checkpoint": "x"}, "exactly one of"),
    ({"preset": "nope"}, "unknown preset 'nope'"),
    ({"preset": "qwen2-vl", "dtype": "float16"}, "dtype: expected one of"),
    ({"preset": "qwen2-vl", "device": "gpu"}, "device: expected 'cpu', 'cuda' or 'cuda:N'"),
    ({"preset": "qwen2-vl", "backend": "magic"}, "backend: expected one of"),
    ({"preset": "qwen2-vl", "format": "csv"}, "format: expected one of"),
    ({"preset": "qwen2-vl", "shard_size": 0}, "shard_size: expected a positive int"),
    ({"preset": "qwen2-vl", "shard_size": True}, "shard_size: expected a positive int"),
    ({"preset": "qwen2-vl", "overrides": {"max_pixel": 5}}, "no op has a field 'max_pixel'"),
    ({"preset": "qwen2-vl", "overrides": {"max_pixels": object()}}, "JSON-safe value"),
    ({"preset": "qwen2-vl", "overrides": [("a", 1), ("a", 2)]}, "given twice"),
])
def test_jobconfig_refuses_bad_fields(kw, pat):
    with pytest.raises(ValueError, match=pat):
        JobConfig(**kw)


def test_jobconfig_from_json_refuses_unknown_keys():
    with pytest.raises(ValueError, match=r"unknown \['colour'\]"):
        JobConfig.from_json({"preset": "qwen2-vl", "colour": "red"})
