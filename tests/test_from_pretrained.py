"""Processor.from_pretrained by hub repo id, offline, from a hub cache built here (no network)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import vlmprep
from vlmprep.errors import ConfigNotFoundError

pytest.importorskip("huggingface_hub")

REV = "0123456789abcdef0123456789abcdef01234567"
QWEN = {"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": 3136,
        "max_pixels": 1003520, "patch_size": 14, "merge_size": 2, "temporal_patch_size": 2}


def _hub_cache(root: Path, repo: str, files: dict[str, dict]) -> Path:
    """The hub's cache layout: models--Org--Name/{refs/main, snapshots/<rev>/<file>}."""
    d = root / ("models--" + repo.replace("/", "--"))
    (d / "refs").mkdir(parents=True, exist_ok=True)
    (d / "refs" / "main").write_text(REV)
    snap = d / "snapshots" / REV
    snap.mkdir(parents=True, exist_ok=True)
    for name, cfg in files.items():
        (snap / name).write_text(json.dumps(cfg))
    return root


def test_repo_id_from_the_local_cache(tmp_path):
    cache = _hub_cache(tmp_path / "hub", "Qwen/Qwen2-VL-7B-Instruct",
                       {"preprocessor_config.json": QWEN})
    proc = vlmprep.Processor.from_pretrained("Qwen/Qwen2-VL-7B-Instruct", cache_dir=cache,
                                             local_files_only=True, backend="reference")
    sr = proc.pipeline["smart_resize"]
    assert (proc.pipeline.name, sr.min_pixels, sr.max_pixels) == ("qwen2-vl", 3136, 1003520)
    assert "max_pixels=1003520" in repr(proc)  # the checkpoint's change from the preset
    # Same as the local file it came from; kwargs still reach Processor.
    local = cache / "models--Qwen--Qwen2-VL-7B-Instruct" / "snapshots" / REV
    assert vlmprep.Processor.from_pretrained(local, backend="reference").pipeline == proc.pipeline
    p2 = vlmprep.Processor.from_pretrained("Qwen/Qwen2-VL-7B-Instruct", cache_dir=cache,
                                           local_files_only=True, backend="reference",
                                           max_pixels=200_704)
    assert p2.pipeline["smart_resize"].max_pixels == 200_704


def test_missing_repo_or_file_is_a_clear_error(tmp_path):
    cache = _hub_cache(tmp_path / "hub", "Org/NoConfig", {"config.json": {}})
    for repo, words in [("Org/Missing", "no cached copy"), ("Org/NoConfig", "no cached copy")]:
        with pytest.raises(ConfigNotFoundError) as ei:
            vlmprep.Processor.from_pretrained(repo, cache_dir=cache, local_files_only=True)
        msg = str(ei.value)
        assert isinstance(ei.value, ValueError) and isinstance(ei.value, FileNotFoundError)
        assert msg.startswith("expected preprocessor_config.json of hub repo") and words in msg
        assert "hf download" in msg and "huggingface-cli" not in msg and "Traceback" not in msg
    # A local path that is not there says so and never goes to the hub.
    with pytest.raises(ConfigNotFoundError, match="never downloads for a local path"):
        vlmprep.Processor.from_pretrained(tmp_path / "missing" / "preprocessor_config.json")
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        vlmprep.Processor.from_pretrained("/nonexistent/Org/Name")


def test_hf_hub_offline_env_is_honoured(tmp_path):
    # HF_HUB_OFFLINE and HF_HUB_CACHE are read when huggingface_hub is imported: a fresh process.
    cache = _hub_cache(tmp_path / "hub", "Org/Tiny", {"preprocessor_config.json": QWEN})
    code = (
        "import vlmprep\n"
        "p = vlmprep.Processor.from_pretrained('Org/Tiny', backend='reference')\n"
        "print(p.pipeline['smart_resize'].max_pixels)\n"
        "try:\n"
        "    vlmprep.Processor.from_pretrained('Org/Absent')\n"
        "except vlmprep.errors.ConfigNotFoundError as e:\n"
        "    print('ERR', e)\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(cache), HF_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "1003520"
    assert lines[1].startswith("ERR expected preprocessor_config.json of hub repo 'Org/Absent'")
    assert "HF_HUB_OFFLINE=1" in lines[1]


def test_transformers_5_processor_config_json(tmp_path):
    """A checkpoint saved by transformers 5 holds processor_config.json (the image processor's
    config under "image_processor") and no preprocessor_config.json: read as a folder, as the
    file, and from the hub cache."""
    nested = {"image_processor": QWEN, "processor_class": "Qwen2VLProcessor"}
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "processor_config.json").write_text(json.dumps(nested))
    want = vlmprep.Processor.from_pretrained(
        _hub_cache(tmp_path / "hub0", "Org/Old", {"preprocessor_config.json": QWEN}) /
        "models--Org--Old" / "snapshots" / REV, backend="reference").pipeline
    for src in (folder, folder / "processor_config.json"):
        assert vlmprep.Processor.from_pretrained(src, backend="reference").pipeline == want
    cache = _hub_cache(tmp_path / "hub", "Org/New", {"processor_config.json": nested})
    got = vlmprep.Processor.from_pretrained("Org/New", cache_dir=cache, local_files_only=True,
                                            backend="reference")
    assert got.pipeline == want and got.pipeline["smart_resize"].max_pixels == 1003520
    (folder / "processor_config.json").write_text(json.dumps({"processor_class": "X"}))
    with pytest.raises(ValueError, match='under "image_processor"'):
        vlmprep.Processor.from_pretrained(folder)
