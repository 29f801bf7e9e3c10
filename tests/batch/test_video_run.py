"""``vlmprep run`` over videos (issue 29 item 3): a video file is one sample and one row, read back
bit-exact through read_shards / ShardSource; bad videos are error rows naming them; the image
path's limits apply to videos.

Oracle: the Processor on the same clip alone, ``proc([], videos=[Video(path, ...)])``, whose own
output is checked against transformers' video processors in tests/video/. Clips: tiny mp4v MP4 /
MKV files written with OpenCV (tests/_support/clips.py).
"""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
import torch
from _support.clips import make_clips
from _support.imgdata import encode, tiled

import vlmprep
from vlmprep import Video
from vlmprep.batch import shards
from vlmprep.batch.config import JobConfig
from vlmprep.batch.rows import batch_from_rows, process_samples
from vlmprep.batch.run import run
from vlmprep.batch.sources import Sample, discover
from vlmprep.io.video import VideoLimits

_PLAN_FIELDS = ("frame_indices", "timestamps", "resized_hw", "grid_thw", "num_patches", "num_tokens",
                "num_embeddings", "placeholder", "second_per_grid_ts", "group_timestamps",
                "first_resize_hw", "meta")


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    return make_clips(tmp_path_factory.mktemp("clips"))


@pytest.fixture(scope="module")
def still() -> bytes:
    return encode(tiled("coffee", 90, 120), "png")


def _same(got, want) -> None:
    """Bit for bit: to_hf() key for key, the packed fields, and the video plans."""
    a, b = got.to_hf(), want.to_hf()
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k], k
    for x, y in ((got, want), (got.videos, want.videos)):
        assert (x is None) == (y is None)
        if y is None:
            continue
        assert torch.equal(x.pixel_values, y.pixel_values) and x.pixel_values.dtype == y.pixel_values.dtype
        assert torch.equal(x.cu_seqlens, y.cu_seqlens) and torch.equal(x.grid_thw, y.grid_thw)
        assert x.seqlens == y.seqlens and x.num_tokens == y.num_tokens
        assert x.placeholders == y.placeholders and x.layout == y.layout
    if want.videos is not None:
        for p, q in zip(got.videos.video_plans, want.videos.video_plans, strict=True):
            for f in _PLAN_FIELDS:
                assert getattr(p, f) == getattr(q, f), f


def _read(out: Path) -> dict:
    return dict(vlmprep.read_shards(out, include_errors=True))


@pytest.mark.parametrize("fmt", ["parquet", "safetensors"])
def test_folder_of_videos_and_images_reads_back_as_the_processor(tmp_path, clips, still, fmt):
    root = tmp_path / "media"
    root.mkdir()
    for name in ("pan.mp4", "zoom.mkv", "cut.mp4", "garbage.mp4"):
        (root / name).write_bytes(clips[name].read_bytes())
    (root / "still.png").write_bytes(still)
    (root / "notes.txt").write_text("not a sample")
    out = tmp_path / "out"
    s = run([str(root)], str(out), JobConfig(preset="qwen2-vl", fps=2.0, format=fmt, shard_size=2))
    assert (s["images"], s["videos"], s["processed"], s["skipped"]) == (5, 4, 3, 2)
    assert s["complete"] is True
    got = _read(out)
    assert list(got) == ["cut.mp4", "garbage.mp4", "pan.mp4", "still.png", "zoom.mkv"]
    proc = vlmprep.Processor("qwen2-vl", errors="skip")
    for name in ("pan.mp4", "zoom.mkv"):
        _same(got[name], proc([], videos=[Video(str(root / name), fps=2.0)]))
        assert got[name].num_images == 0 and got[name].videos.num_images == 1
    _same(got["still.png"], proc([still]))
    for name in ("cut.mp4", "garbage.mp4"):  # error rows naming the file, the Processor's reason
        b = got[name]
        assert b.num_images == 0 and list(b.videos.errors) == [0]
        err = b.videos.errors[0]
        want = proc.plan(videos=[Video(str(root / name), fps=2.0)]).videos[0].error
        assert err.reason == want.reason and err.source == f"media/{name}" and err.item == "video"
    # batched: one batch per shard, ids in row order, videos in batch.videos
    for ids, b in vlmprep.read_shards(out, batched=True, include_errors=True):
        kinds = ["video" if not i.endswith(".png") else "image" for i in ids]
        assert b.num_images == kinds.count("image")
        assert (b.videos.num_images if b.videos is not None else 0) == kinds.count("video")


def test_tar_shard_llava_onevision_num_frames(tmp_path, clips, still):
    """A WebDataset tar of clips (another family, frames as tiles) through ShardSource and the
    DataLoader, sampled by num_frames."""
    tar = tmp_path / "clips.tar"
    members = [("000.mp4", clips["pan.mp4"].read_bytes()), ("001.jpg", encode(tiled("rocket", 64, 80), "jpeg")),
               ("002.mkv", clips["zoom.mkv"].read_bytes()), ("003.mp4", clips["garbage.mp4"].read_bytes()),
               ("004.txt", b"caption only")]
    with tarfile.open(tar, "w") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    out = tmp_path / "out"
    s = run([str(tar)], str(out), JobConfig(preset="llava-onevision", num_frames=4, format="safetensors"))
    assert (s["images"], s["videos"], s["processed"], s["skipped"]) == (5, 3, 3, 2)
    got = _read(out)
    proc = vlmprep.Processor("llava-onevision", errors="skip")
    _same(got["000"], proc([], videos=[Video(str(clips["pan.mp4"]), num_frames=4)]))
    _same(got["002"], proc([], videos=[Video(str(clips["zoom.mkv"]), num_frames=4)]))
    assert got["000"].videos.pixel_values.shape == (4, 3, 384, 384)
    assert got["003"].videos.errors[0].source == "clips.tar#003"
    assert "no image member in group (nor a video member)" in got["004"].errors[0].reason
    # the shards as a loader source: the same batches as the Processor's on those samples
    src = vlmprep.loader.ShardSource(out)
    assert src.modalities == ["video", "image", "video"] and src.ids == ["000", "001", "002"]
    for ids, b in vlmprep.loader.DataLoader(src, batch_size=2, num_workers=0):
        vids = [Video(str(clips["pan.mp4" if i == "000" else "zoom.mkv"]), num_frames=4)
                for i in ids if i != "001"]
        imgs = [members[1][1]] if "001" in ids else []
        _same(b, proc(imgs, videos=vids))


def test_parquet_video_column_and_routing_by_content(tmp_path, clips):
    """A parquet "video" column (checkpoint sampling: every frame); and a sample whose name says
    nothing is routed by its container bytes."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    pan, zoom = clips["pan.mp4"].read_bytes(), clips["zoom.mkv"].read_bytes()
    pq.write_table(pa.table({"key": ["a", "b", "c"], "video": [pan, None, zoom]}), tmp_path / "v.parquet")
    out = tmp_path / "out"
    s = run([str(tmp_path / "v.parquet")], str(out), JobConfig(preset="qwen2-vl"), id_column="key")
    assert (s["videos"], s["processed"], s["skipped"]) == (3, 2, 1)
    got = _read(out)
    proc = vlmprep.Processor("qwen2-vl", errors="skip")
    _same(got["a"], proc([], videos=[str(clips["pan.mp4"])]))
    _same(got["c"], proc([], videos=[zoom]))
    assert got["b"].videos.errors[0].reason.startswith("expected image bytes in column 'video'")
    rows = process_samples(proc, [Sample("x", "x", pan), Sample("y", "y", b"\x89PNG not really")])
    assert [r["modality"] for r in rows] == ["video", "image"]
    _same(batch_from_rows(rows[:1], proc.pipeline), proc([], videos=[pan]))


def test_limits_apply_to_videos(tmp_path, clips):
    """The reader's byte cap, the decode op's pixel limit and the video time bound: error rows."""
    pan = clips["pan.mp4"].read_bytes()
    rows = process_samples(vlmprep.Processor("qwen2-vl", max_source_pixels=10_000), [Sample("p", "p", pan)])
    assert rows[0]["status"] == "error" and "at most 10,000 pixels" in rows[0]["error"]
    slow = vlmprep.Processor("qwen2-vl", video_limits=VideoLimits(timeout_s=1e-6))
    rows = process_samples(slow, [Sample("p", "p", pan)])
    assert "VideoLimits.timeout_s" in rows[0]["error"] and rows[0]["modality"] == "video"
    (unit,) = discover([str(clips["pan.mp4"].parent)], max_bytes=len(pan) - 1)
    by_id = {s.id: s for s in unit.samples()}
    assert by_id["pan.mp4"].data is None and by_id["pan.mp4"].video
    assert f"at most {len(pan) - 1:,} bytes" in by_id["pan.mp4"].error
    rows = process_samples(vlmprep.Processor("qwen2-vl"), [by_id["pan.mp4"]])
    assert rows[0]["modality"] == "video" and rows[0]["status"] == "error"


def test_family_without_video_rule_reads_images_only(tmp_path, clips, still):
    root = tmp_path / "mixed"
    root.mkdir()
    (root / "pan.mp4").write_bytes(clips["pan.mp4"].read_bytes())
    (root / "still.png").write_bytes(still)
    s = run([str(root)], str(tmp_path / "out"), JobConfig(preset="siglip"))
    assert (s["images"], s["videos"], s["processed"]) == (1, 0, 1)
    with pytest.raises(ValueError, match="expected a family with a video rule for fps"):
        run([str(root)], str(tmp_path / "out2"), JobConfig(preset="siglip", fps=1.0))


def test_job_config_sampling_fields():
    base = JobConfig(preset="qwen2-vl")
    assert "fps" not in base.to_json() and "num_frames" not in base.to_json()  # hashes kept
    two = JobConfig(preset="qwen2-vl", fps=2)
    assert two.fps == 2.0 and two.hash() == JobConfig(preset="qwen2-vl", fps=2.0).hash() != base.hash()
    assert JobConfig.from_json(two.to_json()) == two
    assert base.diff(JobConfig(preset="qwen2-vl", num_frames=8)) == ["num_frames: None -> 8"]
    for kw, msg in (({"fps": 1.0, "num_frames": 4}, "at most one of fps and num_frames"),
                    ({"fps": 0}, "fps: expected a number in"), ({"fps": float("nan")}, "fps:"),
                    ({"num_frames": 0}, "num_frames: expected an int"), ({"num_frames": 2.5}, "num_frames:")):
        with pytest.raises(ValueError, match=msg):
            JobConfig(preset="qwen2-vl", **kw)


def test_cli_fps_and_summary(tmp_path, clips, capsys):
    from vlmprep.cli.main import main
    out = tmp_path / "out"
    assert main(["run", "--preset", "qwen2-vl", "--input", str(clips["pan.mp4"].parent), "--output",
                 str(out), "--fps", "2", "--json", "--no-progress"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["images"], s["videos"], s["processed"]) == (4, 4, 2)
    assert shards.read_manifest(out)["config"]["fps"] == 2.0
    with pytest.raises(SystemExit) as e:
        main(["run", "--preset", "qwen2-vl", "--input", str(tmp_path), "--output", str(tmp_path / "o"),
              "--fps", "2", "--num-frames", "3"])
    assert e.value.code == 2


def test_schema_1_shards_still_read(tmp_path, still):
    """A shard written before videos (no modality / video columns, schema "1") reads as images."""
    pq = pytest.importorskip("pyarrow.parquet")
    proc = vlmprep.Processor("qwen2-vl")
    rows = process_samples(proc, [Sample("s", "s", still)])
    shards.write_shard(tmp_path, "u-00000.parquet", "parquet", rows, {})
    t = pq.read_table(tmp_path / "u-00000.parquet").drop_columns(["modality", "video"])
    meta = {**t.schema.metadata, b"vlmprep.shard_schema": b"1"}
    pq.write_table(t.replace_schema_metadata(meta), tmp_path / "old-00000.parquet")
    (row,) = shards.read_shard_rows(tmp_path / "old-00000.parquet")
    assert row["modality"] == "image" and row["video"] is None
    _same(batch_from_rows([row], proc.pipeline), proc([still]))
