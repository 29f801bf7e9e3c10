"""``Processor.from_pretrained(folder)`` reads the checkpoint's video config (issue 19, V3a):
``video_preprocessor_config.json`` beside ``preprocessor_config.json`` (transformers 5.x), else the
video keys of ``preprocessor_config.json`` (4.x; Qwen2-VL / Qwen2.5-VL ship no video config and
transformers reads the image one). The oracle: transformers' own video processor built from the
same folder (``AutoVideoProcessor.from_pretrained``), its sampling and sizes."""
from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import vlmprep
from vlmprep.io.video import Video
from vlmprep.presets import idefics3, qwen, video_defaults

CHECKPOINTS = Path(vlmprep.__file__).parent / "presets" / "checkpoints"


def _folder(tmp: Path, image: dict, video: dict | None = None) -> Path:
    (tmp / "preprocessor_config.json").write_text(json.dumps(image))
    if video is not None:
        (tmp / "video_preprocessor_config.json").write_text(json.dumps(video))
    return tmp


def _image_cfg(name: str) -> dict:
    return json.loads((CHECKPOINTS / f"{name}.json").read_text())


def test_qwen2_vl_without_video_config_reads_the_image_one(tmp_path):
    cfg = _image_cfg("qwen2-vl")
    proc = vlmprep.Processor.from_pretrained(_folder(tmp_path, cfg))
    assert proc.video_options == qwen.video_from_config(cfg) == video_defaults("qwen2-vl")
    assert not proc.video_options.do_sample_frames
    assert proc.video_options.max_pixels == cfg["max_pixels"]


def test_qwen2_5_vl_processor_class_gives_its_family(tmp_path):
    cfg = {**_image_cfg("qwen2-vl"), "processor_class": "Qwen2_5_VLProcessor"}
    proc = vlmprep.Processor.from_pretrained(_folder(tmp_path, cfg))
    assert proc.video_options.family == "qwen2.5-vl"
    frames = np.zeros((8, 56, 84, 3), np.uint8)
    out = proc(videos=[Video(frames, source_fps=4.0)]).to_hf()
    assert "second_per_grid_ts" in out


def test_qwen3_vl_video_config_and_transformers_agree(tmp_path):
    video = qwen.video_configs()["qwen3-vl"]
    video = {**video, "fps": 1, "max_frames": 10}  # the checkpoint's file, changed: must be read
    folder = _folder(tmp_path, _image_cfg("qwen3-vl"), video)
    proc = vlmprep.Processor.from_pretrained(folder)
    assert proc.video_options.fps == 1.0 and proc.video_options.max_frames == 10
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = transformers.AutoVideoProcessor.from_pretrained(str(folder))
    assert type(ref).__name__ == "Qwen3VLVideoProcessor"
    assert (ref.fps, ref.max_frames, ref.size["longest_edge"]) == (
        proc.video_options.fps, proc.video_options.max_frames, proc.video_options.max_pixels)
    # 40 frames at 4 fps = 10 s -> 10 frames at 1 fps, as the reference samples them
    from transformers.video_utils import VideoMetadata
    meta = VideoMetadata(total_num_frames=40, fps=4.0, duration=10.0, height=64, width=96)
    want = ref.sample_frames(meta).tolist() if hasattr(ref.sample_frames(meta), "tolist") \
        else list(ref.sample_frames(meta))
    plan = proc.plan(videos=[Video(np.zeros((40, 64, 96, 3), np.uint8), source_fps=4.0)]).videos[0]
    assert plan.frame_indices == want


def test_smolvlm_4x_keys_in_preprocessor_config(tmp_path):
    """4.x: SmolVLM's video_sampling lived in preprocessor_config.json."""
    cfg = {**_image_cfg("smolvlm"), "video_sampling": {"fps": 2, "max_frames": 8}}
    proc = vlmprep.Processor.from_pretrained(_folder(tmp_path, cfg))
    assert (proc.video_options.fps, proc.video_options.num_frames) == (2.0, 8)


def test_video_config_beside_a_json_file_path(tmp_path):
    folder = _folder(tmp_path, _image_cfg("smolvlm"), idefics3.video_configs()["idefics3"])
    proc = vlmprep.Processor.from_pretrained(folder / "preprocessor_config.json")
    assert proc.video_options == idefics3.video_from_config(idefics3.video_configs()["idefics3"])


def test_video_config_that_disagrees_with_the_image_config_is_refused(tmp_path):
    video = {**qwen.video_configs()["qwen3-vl"], "image_mean": [0.1, 0.2, 0.3]}
    with pytest.raises(ValueError, match="mean / std"):
        vlmprep.Processor.from_pretrained(_folder(tmp_path, _image_cfg("qwen3-vl"), video))
    video = {**qwen.video_configs()["qwen3-vl"], "resample": 2}
    with pytest.raises(ValueError, match="resample"):
        vlmprep.Processor.from_pretrained(_folder(tmp_path, _image_cfg("qwen3-vl"), video))


def test_family_without_video_and_explicit_options(tmp_path):
    proc = vlmprep.Processor.from_pretrained(_folder(tmp_path, _image_cfg("siglip")))
    assert proc.video_options is None
    with pytest.raises(ValueError, match="video rule"):
        proc.plan(videos=[np.zeros((2, 32, 32, 3), np.uint8)])
    mine = replace(video_defaults("qwen3-vl"), fps=0.5)
    folder = _folder(tmp_path / "q", _image_cfg("qwen3-vl")) if (tmp_path / "q").mkdir() is None \
        else None
    assert folder is not None
    assert vlmprep.Processor.from_pretrained(folder, video_options=mine).video_options == mine
