"""`vlmprep bench --video`: flags, the JSON schema, the same-output check against the real
transformers video processor, errors for bad flags.

Speed is never asserted (docs/benchmarks.md); the clip is tiny and each part is timed once.
"""
from __future__ import annotations

import json

import pytest

from vlmprep.bench import video as bench_video
from vlmprep.cli.main import main

TINY = ["--video", "--video-size", "96x64", "--video-seconds", "1", "--video-source-fps", "8",
        "--video-fps", "4", "--threads", "1", "--repeat", "1", "--warmup", "0", "--quiet"]
PARTS = ("vlmprep", "decode", "vlmprep_rest", "output_write_floor")


def _main(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = main(["bench", *args])
    except SystemExit as e:  # argparse's usage errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_make_clip_is_what_the_probe_reads():
    from vlmprep.io.video import Video, decode_frames, probe_video
    clip = bench_video.make_clip(96, 64, 8.0, 1.0)
    # deterministic; checked before any decode: where torchcodec is installed, its FFmpeg 5.1
    # libraries, once loaded into the process, change what PyAV's encoder writes
    assert bench_video.make_clip(96, 64, 8.0, 1.0) == clip
    meta = probe_video(Video(clip))
    assert (meta.width, meta.height, meta.total_num_frames, meta.fps) == (96, 64, 8, 8.0)
    assert meta.container == "mp4"
    frames = decode_frames(Video(clip), [0, 7])
    assert frames.shape == (2, 64, 96, 3) and not (frames[0] == frames[1]).all()  # it moves
    assert meta.codec == "h264"  # the default: H.264 through PyAV
    mp4v = bench_video.make_clip(96, 64, 8.0, 1.0, fourcc="mp4v")
    assert probe_video(Video(mp4v), decoder="opencv").codec == "FMP4"
    with pytest.raises(ValueError, match="fourcc 'XXXX'"):
        bench_video.make_clip(96, 64, 8.0, 1.0, fourcc="XXXX")


@pytest.mark.hf
def test_video_json_schema_and_same_output_as_transformers(capsys, tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "video.json"
    rc, stdout, _ = _main([*TINY, "--compare", "hf", "--json", str(out)], capsys)
    assert rc == 0, stdout
    r = json.loads(out.read_text())
    assert r["tool"] == "vlmprep bench --video" and r["preset"]["name"] == "qwen2-vl"
    assert r["hf_class"] == "Qwen2VLVideoProcessor"
    c = r["clip"]
    assert (c["width"], c["height"], c["total_num_frames"], c["sampled_frames"]) == (96, 64, 8, 4)
    assert c["frame_indices"] == [0, 2, 4, 6] and c["fourcc"] == "avc1" and c["keyframes"] == [0]
    (row,) = r["results"]
    for part in (*PARTS, "transformers"):
        x = row[part]
        assert x["clips_per_s"] > 0 and x["p50_ms"] > 0
        assert x["frames_per_s"] == pytest.approx(x["clips_per_s"] * 4, rel=1e-3)
    # like for like: the transformers processor on the same frames gives vlmprep's pixels
    assert row["same_grid_thw"] and row["max_abs_diff_vs_transformers"] == 0.0
    assert row["rest_equals_end_to_end"]
    assert row["output_shape"] == row["transformers_output_shape"]
    # the same-run bound: the decode of the needed frames plus the rest
    bound = row["decode"]["p50_ms"] + row["vlmprep_rest"]["p50_ms"]
    assert row["same_run_bound_ms"] == pytest.approx(bound, abs=0.01)
    assert row["end_to_end_vs_bound"] == pytest.approx(row["vlmprep"]["p50_ms"] / bound, abs=1e-3)
    assert set(r["definitions"]) >= {"clips_per_s", "frames_per_s", "speedup_rest",
                                      "speedup_end_to_end", "speedup_file", "output_write_floor"}
    assert len(row["load_average_before"]) == 3
    if r["config"]["hf_file_decoder"] is not None:  # torchcodec imports: transformers from the file
        assert row["file_same_frame_indices"] and row["file_same_output"]
        assert row["transformers_file"]["p50_ms"] > 0 and row["speedup_file"] > 0
    else:
        assert "transformers_file" not in row
    assert "Qwen2VLVideoProcessor" in stdout and "speedup vs transformers" in stdout


#: every video family the bench takes -> (transformers class, pipeline, vlmprep's output shape for
#: TINY's four 96x64 frames: Qwen-layout rows, or one tile per frame)
FAMILIES = {
    "qwen2.5-vl": ("Qwen2VLVideoProcessor", "qwen2-vl", [48, 1176]),
    "qwen3-vl": ("Qwen3VLVideoProcessor", "qwen3-vl", [48, 1536]),
    "glm4v": ("Glm4vVideoProcessor", "glm4v", [48, 1176]),
    "llava-onevision": ("LlavaOnevisionVideoProcessor", "llava-onevision", [4, 3, 384, 384]),
    "internvl": ("InternVLVideoProcessor", "internvl", [4, 3, 448, 448]),
    "smolvlm": ("SmolVLMVideoProcessor", "idefics3", [4, 3, 512, 512]),
}


def test_video_families_are_every_declared_video_family():
    """The bench takes each video family whose checkpoint video config is declared (SmolVLM2's,
    declared under its pipeline name idefics3, as smolvlm)."""
    assert bench_video.video_families() == sorted({"qwen2-vl", *FAMILIES})


@pytest.mark.hf
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_video_other_families_same_output(family, capsys):
    """Each family against its real transformers video processor, both built from the same
    checkpoint folder (``write_checkpoint``): the sampled frames with do_sample_frames=False
    give the same output keys, dtypes and values (the tile families' pixels carry a batch dim
    there)."""
    pytest.importorskip("transformers")
    cls, pipeline, shape = FAMILIES[family]
    rc, stdout, _ = _main([*TINY, "--preset", family, "--compare", "hf", "--json"], capsys)
    assert rc == 0
    r = json.loads(stdout)
    (row,) = r["results"]
    assert r["hf_class"] == cls and r["clip"]["sampled_frames"] == 4
    assert r["preset"]["name"] == pipeline and r["preset"]["family"] == family
    assert row["same_output"] and row["max_abs_diff_vs_transformers"] == 0.0
    assert row["rest_equals_end_to_end"] and row["output_shape"] == shape
    assert row["same_grid_thw"] is (True if len(shape) == 2 else None)
    if r["config"]["hf_file_decoder"] is not None:  # torchcodec imports: transformers from the file
        assert row["file_same_frame_indices"] and row["file_same_output"]


def test_write_checkpoint_is_what_both_sides_read(tmp_path):
    """The folder holds the image config and, where the checkpoint ships one, the video config;
    vlmprep reads back the family's declared video options."""
    import vlmprep
    from vlmprep import presets
    (tmp_path / "q").mkdir()
    qwen2 = bench_video.write_checkpoint("qwen2.5-vl", str(tmp_path / "q"))
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == ["preprocessor_config.json"]
    assert vlmprep.Processor.from_pretrained(qwen2).video_options == presets.video_defaults("qwen2.5-vl")
    (tmp_path / "s").mkdir()
    smol = bench_video.write_checkpoint("smolvlm", str(tmp_path / "s"))
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        "preprocessor_config.json", "video_preprocessor_config.json"]
    assert vlmprep.Processor.from_pretrained(smol).video_options == presets.video_defaults("idefics3")


def test_video_without_compare_and_json_on_stdout(capsys):
    rc, stdout, _ = _main([*TINY, "--json"], capsys)
    assert rc == 0
    r = json.loads(stdout)
    (row,) = r["results"]
    assert set(PARTS) <= set(row) and "transformers" not in row and r["hf_class"] is None


@pytest.mark.parametrize("args, message", [
    (["--preset", "siglip"], "--video: expected --preset one of"),
    (["--images", "."], "--video: expected no --images"),
    (["--synthetic", "720p"], "--video: expected no --synthetic"),
    (["--batch-size", "2"], "--video: expected --device cpu, --backend auto, --batch-size 1"),
    (["--video-size", "big"], "--video-size"),
    (["--fourcc", "XXXX"], "fourcc 'XXXX'"),
])
def test_video_flag_errors(args, message, capsys):
    rc, _, err = _main([*TINY, *args], capsys)
    assert rc == 2 and message in err, err


def test_video_number_flags_are_checked(capsys):
    rc, _, err = _main(["--video", "--video-fps", "0"], capsys)
    assert rc == 2 and "expected a positive number, got '0'" in err
