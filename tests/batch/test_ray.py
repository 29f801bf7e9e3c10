"""vlmprep.integrations.ray on a local Ray (CPU): Preprocess and plan_tokens against the
Processor's own rows and plan, every input form of the image column, corrupt rows reported (never
fatal), and ``run(engine="ray")`` writing the local engine's shards byte for byte.

One Ray for the module: ``ray.init(num_cpus=4)`` (logical CPUs above the 2 physical ones: on 2
CPUs a pool of actors leaves no CPU for Ray's own read tasks and a run can hang, see
ECOSYSTEM.md 3.3), token auth off for this local cluster (Ray 2.60 enables it by default).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray Data is optional: pip install vlmprep[ray]")
pa = pytest.importorskip("pyarrow", reason="the Ray integration needs pyarrow (pip install vlmprep[ray])")

from vlmprep.batch import rows as rows_mod  # noqa: E402
from vlmprep.batch.config import JobConfig  # noqa: E402
from vlmprep.batch.sources import Sample  # noqa: E402
from vlmprep.integrations.ray import Preprocess, plan_tokens, rows_from_batch, run_ray  # noqa: E402

CFG = JobConfig(preset="qwen2-vl", shard_size=3)

# Ray's own DataContext copies read its deprecated fields (not ours to fix)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")


@pytest.fixture(scope="module")
def local_ray():
    with pytest.MonkeyPatch.context() as mp:
        if "RAY_AUTH_MODE" not in os.environ:
            mp.setenv("RAY_AUTH_MODE", "disabled")
        # address="local": always a fresh cluster of our own (never a stale or foreign one)
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        ctx = ray.data.DataContext.get_current()
        bars, ctx.enable_progress_bars = ctx.enable_progress_bars, False
        try:
            yield ray
        finally:
            ctx.enable_progress_bars = bars
            ray.shutdown()


@pytest.fixture(scope="module")
def proc():
    return CFG.processor()


def _expected(proc, samples):
    return {r["id"]: r for r in rows_mod.process_samples(proc, samples)}


def _by_id(rows):
    return {r["id"]: r for r in rows}


def test_import_vlmprep_never_imports_ray():
    code = ("import sys, vlmprep, vlmprep.integrations; vlmprep.integrations.__all__; "
            "assert 'ray' not in sys.modules, 'ray imported'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_missing_ray_names_the_extra():
    code = ("import sys; sys.modules['ray'] = None\n"
            "try:\n    import vlmprep.integrations.ray\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pip install vlmprep[ray]" in out.stdout, (out.stdout, out.stderr)


def test_preprocess_rows_equal_process_samples(parquet_plain, proc):
    """A numpy batch (object arrays of bytes, a null) and the same batch as a pyarrow Table
    (pyarrow binary): the rows are process_samples' rows bit for bit, and a good row's pixels are
    the Processor's; the corrupt rows are error rows; the other columns pass through."""
    import pyarrow.parquet as pq
    table = pq.read_table(parquet_plain.path)
    numpy_batch = {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}
    samples = [Sample(id=i, source=i, data=b, error=None if b is not None else "no image bytes (null)")
               for i, b in zip(table.column("id").to_pylist(), table.column("image").to_pylist())]
    want = _expected(proc, samples)
    stage = Preprocess(CFG.to_json(), column="image", id_column="id")
    for batch in (numpy_batch, table):
        out = stage(batch)
        assert out.column_names[:len(rows_mod.ROW_COLUMNS)] == list(rows_mod.ROW_COLUMNS)
        assert "image" not in out.column_names
        assert out.column("caption").to_pylist() == table.column("caption").to_pylist()
        got = rows_from_batch(out)
        assert [r["id"] for r in got] == parquet_plain.ids
        assert _by_id(got) == want
    assert {i for i, r in want.items() if r["status"] == "error"} == set(parquet_plain.bad)
    good = parquet_plain.good[0]
    ref = proc([parquet_plain.data[good]])
    assert want[good]["pixel_values"] == ref.pixel_values.numpy().tobytes()
    assert want[good]["num_tokens"] == ref.num_tokens[0]


def test_preprocess_output_is_typed_as_the_shard(image_folder, proc):
    """All rows fine: the error column is still a string column (not Arrow null) and the row
    columns have the parquet shard's schema; id_column=None takes the source column as id."""
    from vlmprep.batch import shards
    good = image_folder.good[:2]
    # NaN: how read_webdataset(decoder=None) fills a group's missing member
    batch = {"bytes": np.array([image_folder.data[i] for i in good] + [float("nan")], dtype=object),
             "path": np.array(good + ["missing"], dtype=object)}
    out = Preprocess(CFG, id_column=None, source_column="path")(batch)
    n = len(rows_mod.ROW_COLUMNS)
    assert out.select(list(rows_mod.ROW_COLUMNS)).schema == shards.arrow_schema()
    assert out.column_names[n:] == ["path"]
    ok = Preprocess(CFG, id_column="path")({k: v[:2] for k, v in batch.items()})
    assert ok.schema.field("error").type == pa.string() and ok.column("error").null_count == 2
    got = rows_from_batch(out)
    assert [r["id"] for r in got] == good + ["missing"]
    assert got[2]["status"] == "error" and got[2]["error"] == "no image bytes (null)"


def test_plan_tokens_equals_processor_plan(image_folder, proc):
    """Header-only: num_tokens / height / width as Processor.plan gives them; an unreadable or
    null item has 0 tokens and its reason; the image column is kept for the heavy stage."""
    ids = image_folder.ids
    batch = {"bytes": np.array([image_folder.data[i] for i in ids] + [None], dtype=object),
             "id": np.array(ids + ["null"], dtype=object)}
    out = plan_tokens(batch, CFG.to_json())
    plan = proc.plan([image_folder.data[i] for i in ids])
    assert out.column("num_tokens").to_pylist() == [p.num_tokens for p in plan.images] + [0]
    assert out.column("height").to_pylist()[:-1] == [p.source_hw[0] for p in plan.images]
    assert out.column("width").to_pylist()[:-1] == [p.source_hw[1] for p in plan.images]
    errors = out.column("error").to_pylist()
    for e, p in zip(errors, plan.images):
        assert (e is None) == (p.error is None) and (p.error is None or e == p.error.reason)
    assert errors[-1] and out.column("bytes").to_pylist()[:-1] == [image_folder.data[i] for i in ids]


def test_refusals_name_the_fix():
    stage = Preprocess(CFG)
    with pytest.raises(ValueError, match="column: expected a column of the batch, got 'bytes'.*image"):
        stage({"image": np.array([b"x"], dtype=object), "id": np.array(["a"], dtype=object)})
    with pytest.raises(ValueError, match="id_column: expected a column of the batch, got 'id'"):
        stage({"bytes": np.array([b"x"], dtype=object)})
    with pytest.raises(TypeError, match="config: expected a vlmprep.batch.config.JobConfig"):
        Preprocess("qwen2-vl")
    with pytest.raises(ValueError, match="rows_from_batch: expected the columns"):
        rows_from_batch({"id": np.array(["a"], dtype=object)})


def test_ray_pipeline_hf_struct_plan_tokens_and_preprocess(local_ray, parquet_hf, proc):
    """read_parquet of a Hugging Face image column (struct<bytes, path>) -> plan_tokens (tasks) ->
    Preprocess (an actor): one row per input, corrupt and null rows reported, not fatal;
    num_tokens equals Processor.plan's; rows equal process_samples' for every row with bytes."""
    ds = ray.data.read_parquet(str(parquet_hf.path))
    ds = ds.map_batches(plan_tokens, fn_kwargs={"config": CFG.to_json(), "column": "image"},
                        batch_format="numpy", batch_size=4)
    ds = ds.rename_columns({"num_tokens": "planned", "error": "plan_error"})  # Preprocess's own follow
    ds = ds.map_batches(Preprocess, fn_constructor_kwargs={"config": CFG.to_json(), "column": "image",
                                                           "id_column": "label"},
                        compute=ray.data.ActorPoolStrategy(size=1), batch_size=4, batch_format="numpy")
    out = ds.take_all()
    assert len(out) == len(parquet_hf.ids)
    by_label = {int(r["label"]): r for r in out}
    planned = proc.plan([parquet_hf.data[f"row-{n}"] for n in sorted(by_label)
                         if f"row-{n}" in parquet_hf.data])
    plan_by_row = dict(zip([n for n in sorted(by_label) if f"row-{n}" in parquet_hf.data],
                           planned.images))
    samples = []
    for n, r in sorted(by_label.items()):
        rid = f"row-{n}"
        # the struct's path is relative to the parquet file: S's reader resolves it, a Ray row
        # does not know the file, so those rows are errors here (their bytes are not in the row)
        in_row = rid in parquet_hf.data and not rid.endswith(("-9", "-10"))
        if rid in parquet_hf.data and r["status"] == "ok":
            assert in_row
        p = plan_by_row.get(n)
        if in_row and p is not None and p.error is None:  # the header plans (decoding may fail)
            assert r["planned"] == p.num_tokens > 0 and r["plan_error"] is None
            assert (r["height"], r["width"]) == tuple(p.source_hw)
        else:
            assert r["planned"] == 0 and r["plan_error"]
            assert r["num_tokens"] == 0 and r["status"] == "error" and r["error"]
        if in_row:
            samples.append(Sample(id=str(n), source=str(n), data=parquet_hf.data[rid], error=None))
    want = _expected(proc, samples)
    got = {r["id"]: r for r in rows_from_batch(pa.Table.from_pylist(out))}
    assert {k: got[k] for k in want} == want
    bad_ids = {str(int(k.split("-")[1])) for k in parquet_hf.bad}
    assert {k for k, r in got.items() if r["status"] == "error"} >= bad_ids


def _sha(folder):
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(folder)) if name != "manifest.json"}


def test_run_engine_ray_writes_the_local_shards(local_ray, image_folder, tmp_path):
    """The local engine's job, then the Ray engine (2 actors) resuming a copy of it that lost all
    shards but one: the Ray actors rewrite exactly the lost shards, byte for byte the local ones,
    and the manifests list the same shards (one Ray run covers both engines' identity and resume)."""
    import shutil

    from vlmprep.batch import run as run_mod
    from vlmprep.batch import shards
    local, remote = tmp_path / "local", tmp_path / "ray"
    a = run_mod.run([str(image_folder.path)], str(local), CFG, workers=1, progress=False)
    assert a["images"] == len(image_folder.ids) and a["skipped"] == len(image_folder.bad)
    want = _sha(local)
    assert len(want) == -(-len(image_folder.ids) // CFG.shard_size) >= 3
    shutil.copytree(local, remote)
    kept = sorted(want)[0]
    for name in want:
        if name != kept:
            (remote / name).unlink()
    b = run_mod.run([str(image_folder.path)], str(remote), CFG, workers=2, engine="ray", resume=True,
                    progress=False)
    assert b["run_shards"] == len(want) - 1
    assert b["images"] == a["images"] and b["skipped"] == a["skipped"] and b["tokens"] == a["tokens"]
    assert _sha(remote) == want
    assert shards.read_manifest(remote)["shards"] == shards.read_manifest(local)["shards"]


def test_run_ray_refuses_a_pool_the_cluster_cannot_place(local_ray, tmp_path):
    """8 actors on the test cluster's 4 CPUs: refused before any actor is asked for (Ray would
    wait for them forever), naming what is missing and the fix."""
    items = [(None, part) for part in range(8)]  # never read: the check comes first
    with pytest.raises(ValueError, match=r"expected a Ray cluster with 8 CPU .* got 4.*fewer --workers"):
        next(iter(run_ray(items, tmp_path, CFG, workers=8)))
    with pytest.raises(ValueError, match="workers: expected an int >= 1"):
        run_ray(items, tmp_path, CFG, workers=0)


def test_run_ray_failed_item_is_job_failed(local_ray, image_folder, tmp_path):
    """A cause that is not an image's (here the output is a file, so the shard cannot be
    written) stops the job as the local engine does: JobFailed naming the item and the cause."""
    from vlmprep.batch import run as run_mod
    from vlmprep.batch import sources
    unit = sources.discover([str(image_folder.path)])[0]
    not_a_folder = tmp_path / "out"
    not_a_folder.write_text("a file")
    with pytest.raises(run_mod.JobFailed, match=r"a Ray actor failed .*--resume.*photos part 0"):
        list(run_ray([(unit, 0)], not_a_folder, CFG))


def test_preprocess_struct_paths_only_under_the_input_root(tmp_path, proc):
    """A {bytes, path} struct with null bytes: its path is read only under the config's
    input_root (as `vlmprep run` reads paths inside data); without one no path is read, and
    /etc/passwd, /proc/self/environ and a '..' out of the root are error rows that carry none of
    the file's bytes. A good path under the root gives the row the Processor gives its bytes."""
    import dataclasses

    from PIL import Image
    root = tmp_path / "imgs"
    root.mkdir()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(root / "a.png")
    secret = tmp_path / "secret.txt"
    secret.write_text("MARKER-7f3c1 not for rows\n")
    paths = ["a.png", "/etc/passwd", "/proc/self/environ", "../secret.txt", str(secret)]
    batch = {"image": np.array([{"bytes": None, "path": p} for p in paths], dtype=object),
             "id": np.array([f"r{k}" for k in range(len(paths))], dtype=object)}
    want = _expected(proc, [Sample("r0", "r0", (root / "a.png").read_bytes(), None)])["r0"]
    for cfg, readable in ((CFG, set()), (dataclasses.replace(CFG, input_root=str(root)), {"r0"})):
        got = _by_id(rows_from_batch(Preprocess(cfg, column="image")(batch)))
        assert {k for k, r in got.items() if r["status"] == "ok"} == readable
        for k, r in got.items():
            assert "MARKER" not in (r["error"] or "") and "root:x:" not in (r["error"] or "")
            if k not in readable:
                assert r["error"] and ("input root" in r["error"] or "under" in r["error"]), r
        if readable:
            assert got["r0"] == want
