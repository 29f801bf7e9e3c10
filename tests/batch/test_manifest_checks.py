"""A manifest read from disk is checked before anything acts on it (issue 33, deliverable 3):
``vlmprep run --resume`` / ``--overwrite`` / no flag, ``read_shards`` and ``ShardSource`` refuse a
tampered manifest with a ValueError naming the file and the field (expected / got / fix), and
``--overwrite`` redoes the job without trusting the manifest's numbers (the 10^7-parts repro ran
past 110 s and 1.8 GB before: it made 2 x 10^7 shard names).

Each test tampers a copy of one real finished job (8 photos of the folder fixture, shard_size 3).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from vlmprep.batch import shards
from vlmprep.batch.config import JobConfig
from vlmprep.batch.run import run

pytest.importorskip("pyarrow", reason="parquet shards need pyarrow (pip install vlmprep[parquet])")

CFG = JobConfig(preset="qwen2-vl", shard_size=3)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, photos, builders):
    """(input folder, a finished job's folder, its shard files' bytes)."""
    root = tmp_path_factory.mktemp("manifest_job")
    folder = builders.folder(root / "photos", photos)
    out = root / "out"
    run([str(folder.path)], str(out), CFG, progress=False)
    return folder.path, out, _shard_files(out)


def _shard_files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != shards.MANIFEST}


@pytest.fixture
def job(tmp_path, finished):
    """A fresh copy of the finished job: (inputs, output folder, manifest as a dict)."""
    inputs, out, _ = finished
    dst = tmp_path / "out"
    shutil.copytree(out, dst)
    man = json.loads((dst / shards.MANIFEST).read_text())
    return [str(inputs)], dst, man


def _tamper(out: Path, man: dict) -> None:
    # written as raw JSON: write_manifest would refuse nothing, but this is what an editor does
    (out / shards.MANIFEST).write_text(json.dumps(man))


def _unit(man: dict) -> str:
    (unit,) = man["units"]
    return unit


def test_ten_million_parts_overwrite_redoes_the_job_fast(job, finished):
    """The repro: units.X.parts = 10^7. --overwrite is what the user asked for, so it redoes the
    job (the same bytes as the first run), in about the time of a run, without 10^7 steps."""
    inputs, out, man = job
    man["units"][_unit(man)]["parts"] = 10**7
    _tamper(out, man)
    (out / "notes.txt").write_text("keep me")
    t = time.perf_counter()
    s = run(inputs, str(out), CFG, overwrite=True, progress=False)
    took = time.perf_counter() - t
    assert s["complete"] and s["run_shards"] == 3 and took < 2.0, took
    files = _shard_files(out)
    assert files.pop("notes.txt") == b"keep me"
    assert files == finished[2]  # the same shards, bit for bit, and nothing else
    new = shards.read_manifest(out)
    assert new["units"][_unit(man)]["parts"] == 3


def test_ten_million_parts_resume_is_refused_fast_naming_the_field(job):
    inputs, out, man = job
    unit = _unit(man)
    man["units"][unit]["parts"] = 10**7
    _tamper(out, man)
    for kw in ({"resume": True}, {}):
        t = time.perf_counter()
        with pytest.raises(ValueError) as e:
            run(inputs, str(out), CFG, progress=False, **kw)
        assert time.perf_counter() - t < 2.0
        msg = str(e.value)
        assert str(out / shards.MANIFEST) in msg and f"'units'.{unit!r}.'parts'" in msg, msg
        assert "ceil(count 8 / shard_size 3) = 3" in msg and "got 10000000" in msg, msg
        assert "--overwrite" in msg and "delete the folder" in msg, msg
    with pytest.raises(ValueError, match=r"'parts'.*got 10000000"):
        shards.read_shards(out)


def _set(path):
    """A tampering: set man[path...] = value (a path of keys; "$shard" is the first shard)."""
    def apply(man, value):
        d = man
        keys = [next(iter(man["shards"])) if k == "$shard" else
                (_unit(man) if k == "$unit" else k) for k in path]
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return apply


def _rename_first_shard(new):
    def apply(man, _):
        first = next(iter(man["shards"]))
        man["shards"] = {new: man["shards"][first], **{k: v for k, v in man["shards"].items()
                                                       if k != first}}
    return apply


CASES = [
    # (id, tampering, value, text the message must hold)
    ("dotdot_name", _rename_first_shard("../photos-00000.parquet"), None,
     "shard file names as the writer makes them"),
    ("abs_name", _rename_first_shard("/etc/passwd"), None, "'/etc/passwd'"),
    ("other_ext", _rename_first_shard("photos-00000.safetensors"), None,
     "ext in ['parquet']"),
    ("part_not_05d", _rename_first_shard("photos-0.parquet"), None, "shard file names"),
    ("negative_count", _set(["shards", "$shard", "count"]), -1, "'count', got -1"),
    ("count_str", _set(["shards", "$shard", "count"]), "3", "'count', got '3'"),
    ("count_float", _set(["shards", "$shard", "count"]), 3.0, "'count', got 3.0"),
    ("count_bool", _set(["shards", "$shard", "count"]), True, "'count', got True"),
    ("samples_over_shard_size", _set(["shards", "$shard", "samples"]), 4, "shard_size = 3"),
    ("samples_over_count", _set(["shards", "$shard", "samples"]), 5, "'samples'"),
    ("huge_bytes", _set(["shards", "$shard", "bytes"]), 10**30, "'bytes', got 1000000"),
    ("negative_bytes", _set(["shards", "$shard", "bytes"]), -5, "'bytes', got -5"),
    ("ok_errors_sum", _set(["shards", "$shard", "ok"]), 0, "'ok' + 'errors'"),
    ("damaged_over_count", _set(["shards", "$shard", "damaged"]), 99, "'damaged', got 99"),
    ("sha_not_hex", _set(["shards", "$shard", "sha256"]), "../../x", "64 lowercase hex"),
    ("reasons_type", _set(["shards", "$shard", "reasons"]), [1], "'reasons'"),
    ("unit_count_negative", _set(["units", "$unit", "count"]), -8, "'count', got -8"),
    ("unit_parts_str", _set(["units", "$unit", "parts"]), "3", "'parts', got '3'"),
    ("unit_name_slash", _set(["units", "../up"]), {"count": 1, "parts": 1}, "unit names"),
    ("units_list", _set(["units"]), [1, 2], "an object of {unit name"),
    ("shards_list", _set(["shards"]), ["x"], "a 'shards' object"),
    ("complete_str", _set(["complete"]), "yes", "'complete', got 'yes'"),
    ("format_other", _set(["format"]), "csv", "'format', got 'csv'"),
    ("shard_size_zero", _set(["config", "shard_size"]), 0, "'shard_size', got 0"),
]


@pytest.mark.parametrize("tamper,value,text", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_tampered_manifest_is_refused_everywhere_it_is_read(job, tamper, value, text):
    """--resume, a run without a flag, read_shards and ShardSource: each a ValueError naming
    the manifest file, with expected / got / fix; nothing outside the folder is touched."""
    inputs, out, man = job
    tamper(man, value)
    _tamper(out, man)
    before = _shard_files(out)
    for call in (lambda: run(inputs, str(out), CFG, resume=True, progress=False),
                 lambda: run(inputs, str(out), CFG, progress=False),
                 lambda: shards.read_shards(out),
                 lambda: shards.ShardSource(out)):
        with pytest.raises(ValueError) as e:
            call()
        msg = str(e.value)
        assert str(out / shards.MANIFEST) in msg and text in msg, msg
        assert "expected" in msg and "--overwrite" in msg, msg
    assert _shard_files(out) == before  # nothing acted on it


def test_overwrite_never_removes_outside_the_folder_or_other_names(job, finished):
    """A manifest naming '../victim' units and shards, a foreign shard-like name of another
    unit, a user's file: --overwrite removes only the old job's own shard files."""
    inputs, out, man = job
    victim = out.parent / "victim-00000.parquet"
    victim.write_bytes(b"user data")
    man["units"]["../victim"] = {"count": 1, "parts": 1}
    man["shards"]["../victim-00000.parquet"] = {"count": 1}
    man["shards"]["/tmp/victim-00000.parquet"] = {"count": 1}
    _tamper(out, man)
    (out / "other-00000.parquet").write_bytes(b"not this job's unit")
    (out / "mine.txt").write_text("keep")
    s = run(inputs, str(out), CFG, overwrite=True, progress=False)
    assert s["complete"] and victim.read_bytes() == b"user data"
    files = _shard_files(out)
    assert files.pop("other-00000.parquet") == b"not this job's unit"
    assert files.pop("mine.txt") == b"keep"
    assert files == finished[2]


def test_overwrite_removes_unlisted_shards_of_the_old_units(job, finished):
    """A shard renamed but never recorded (a kill), and one beyond the old parts: the old job's
    by its naming rule, so --overwrite removes them (found by one listing, not by counting)."""
    inputs, out, man = job
    unit = _unit(man)
    last = list(man["shards"])[-1]
    del man["shards"][last]
    _tamper(out, man)
    (out / shards.shard_name(unit, 7, "parquet")).write_bytes(b"old")
    (out / (shards.shard_name(unit, 8, "parquet") + ".tmp")).write_bytes(b"half")
    s = run(inputs, str(out), JobConfig(preset="qwen2-vl", shard_size=8), overwrite=True,
            progress=False)
    assert s["shards"] == 1
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [shards.MANIFEST, shards.shard_name(unit, 0, "parquet")])


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"units": 5, "shards": "x"}'])
def test_overwrite_of_an_unreadable_manifest_redoes_the_job(job, finished, content):
    """--overwrite works on a manifest that cannot be read or is of the wrong shape: the files
    it cannot attribute are kept (the new job's shards replace the same names)."""
    inputs, out, _ = job
    (out / shards.MANIFEST).write_bytes(content)
    (out / "stray.parquet.tmp").write_bytes(b"half")
    s = run(inputs, str(out), CFG, overwrite=True, progress=False)
    assert s["complete"] and s["run_shards"] == 3
    assert _shard_files(out) == finished[2]


def test_a_manifest_that_is_not_a_regular_file_or_too_large_is_not_read(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / shards.MANIFEST)  # reading it would block forever
    t = time.perf_counter()
    with pytest.raises(ValueError, match="expected .*manifest.json to be a regular file.*got not "
                                         "a regular file"):
        shards.read_manifest(out)
    assert time.perf_counter() - t < 1.0
    os.remove(out / shards.MANIFEST)
    (out / shards.MANIFEST).write_text(json.dumps({"shards": {}, "pad": "x" * 2000}))
    monkeypatch.setattr(shards.manifest, "MAX_MANIFEST_BYTES", 1000)
    with pytest.raises(ValueError, match=r"at most 1,000 bytes, got 2,0\d\d bytes"):
        shards.read_manifest(out)


def test_deeply_nested_manifest_is_a_value_error(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / shards.MANIFEST).write_text('{"x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(ValueError, match="expected JSON"):
        shards.read_manifest(out)


def test_the_writers_manifest_passes_its_own_check(finished):
    """Every field a real job writes is within the checks (no false refusal)."""
    _, out, _ = finished
    man = json.loads((out / shards.MANIFEST).read_text())
    assert shards.check_manifest(man, out / shards.MANIFEST) is man
    assert len(list(shards.read_shards(out))) == 5
