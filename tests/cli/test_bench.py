"""`vlmprep bench`: flags, the JSON schema, the plot, errors for bad flags, --compare hf.

Speed is never asserted here (see docs/benchmarks.md); the inputs are tiny mosaics and one timed
pass, so each run takes a second or two.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlmprep.bench import command as bench_command
from vlmprep.bench import harness as bench_harness
from vlmprep.bench import hf as bench_hf
from vlmprep.bench import images as bench_images
from vlmprep.bench import timing as bench_timing
from vlmprep.cli import bench
from vlmprep.cli.main import main

FAST = ["--num-images", "2", "--repeat", "1", "--warmup", "0"]
TINY = ["--synthetic", "64x48,80x60", *FAST]

# Numeric fields of a result row that are neither a time (_ms) nor a rate (_per_s).
UNITLESS = {"images", "batch_size", "threads", "vlmprep_threads", "torch_threads",
            "cpu_cores_used", "ratio_vs_lower_bound", "peak_rss_mib", "ratio_vs_decode_floor", "speedup_vs_hf_pil",
            "speedup_vs_hf_torchvision"}


def _main(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = main(["bench", *args])
    except SystemExit as e:  # argparse's usage errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    bench.add_parser(p.add_subparsers())
    return p


def _check_row(row: dict) -> None:
    for k, v in row.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        assert k.endswith(("_ms", "_per_s")) or k in UNITLESS, f"{k}: a number without a unit"
    assert row["images_per_s"] > 0 and row["per_image_p50_ms"] > 0
    assert row["batch_p99_ms"] >= row["batch_p50_ms"]


def test_flags_parse():
    a = _parser().parse_args(["bench", "--synthetic", "720p,1080p,4K", "--threads", "1,2",
                              "--dtype", "float32,uint8", "--json", "--batch-size", "8",
                              "--compare", "hf"])
    assert a.synthetic == ["720p", "1080p", "4K"] and a.threads == [1, 2]
    assert a.dtype == ["float32", "uint8"] and a.json == "-" and a.batch_size == 8
    assert a.compare == "hf" and a.preset == "qwen2-vl" and a.backend == "auto"
    a = _parser().parse_args(["bench", "--json", "out.json", "--plot", "p.png"])
    assert (a.json, a.plot, a.synthetic, a.threads) == ("out.json", "p.png", None, None)
    assert bench_images.parse_size("4k") == ("4k", (2160, 3840))
    assert bench_images.parse_size("640x480") == ("640x480", (480, 640))


@pytest.mark.slow  # a real bench run on every backend
def test_json_schema_and_plot(tmp_path, capsys):
    out_json, png = tmp_path / "r.json", tmp_path / "r.png"
    rc, out, err = _main([*TINY, "--threads", "1", "--dtype", "float32,uint8", "--backend", "all",
                          "--json", str(out_json), "--plot", str(png)], capsys)
    assert rc == 0, err
    d = json.loads(out_json.read_text())
    assert d["schema_version"] == 1
    for k in ("platform", "cpu_model", "cpu_count", "name"):
        assert d["machine"][k]
    for k in ("python", "vlmprep", "torch", "torchvision", "pillow", "numpy", "opencv", "dali",
              "transformers"):
        assert k in d["versions"]
    assert d["versions"]["torch"] and d["versions"]["numpy"]
    from vlmprep import Pipeline, kernels, presets
    if kernels.available():  # every figure names the CPU paths it came from
        assert d["kernels"]["cpu_paths"] == kernels.cpu_paths()
        assert f"cpu paths: resize {d['kernels']['cpu_paths']['resize']}" in out
    assert d["preset"]["name"] == "qwen2-vl"
    assert Pipeline.from_dict(d["preset"]["pipeline"]) == presets.get("qwen2-vl")
    assert [i["label"] for i in d["inputs"]] == ["64x48", "80x60"]
    assert d["inputs"][0]["formats"] == ["jpeg"] and d["inputs"][0]["count"] == 2
    backends = d["config"]["backends"]
    assert len(d["results"]) == 2 * len(backends) * 2  # sizes x backends x dtypes
    for r in d["results"]:
        _check_row(r)
        assert r["threads"] == 1 and r["vlmprep_threads"] == 1 and r["torch_threads"] == 1
        if r["backend"] in ("torch", "reference"):  # they run op by op (dali builds a graph)
            assert r["stages_error"] is None
        if r["stages_error"] is not None:
            assert r["stages_ms"] is None and r["stage_sum_ms"] is None
            continue
        assert set(r["stages_ms"]) == set(bench_harness.STAGES)
        assert all(k.endswith("_ms") for k in r["stages_ms"])
        assert r["stages_ms"]["transfer_ms"] == 0.0  # on the CPU
        assert r["stage_sum_ms"] == pytest.approx(sum(r["stages_ms"].values()), abs=0.01)
        assert r["ratio_vs_decode_floor"] > 0 and r["decode_floor_decoder"]
        assert r["peak_rss_mib"] > 0 and r["cpu_cores_used"] > 0
    for f in d["decode_floor"]:
        assert {"pil", "opencv", "torchvision"} <= set(f["decoders"])
        assert f["decode_floor_ms"] == min(v["per_image_p50_ms"] for v in f["decoders"].values())
    assert d["hf"] == []
    assert set(d["definitions"]) >= {"images_per_s", "stages_ms", "ratio_vs_decode_floor"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the human report names every section; progress went to stderr
    for words in ("end to end", "stages", "decode floor", "ratios"):
        assert words in out
    assert "[1/" in err and "images/s" in err


def test_json_on_stdout_and_quiet(capsys):
    rc, out, err = _main(["--synthetic", "64x48", *FAST, "--no-stages", "--no-decode-floor",
                          "--json", "--quiet"], capsys)
    assert rc == 0 and err == ""
    d = json.loads(out)  # stdout is the JSON document alone
    assert d["decode_floor"] == [] and d["results"][0]["size"] == "64x48"
    assert "stages_ms" not in d["results"][0] and "ratio_vs_decode_floor" not in d["results"][0]


def test_images_folder(tmp_path, capsys):
    folder = tmp_path / "photos"
    folder.mkdir()
    img = bench_images.mosaic((40, 70), seed=1)
    (folder / "a.jpg").write_bytes(bench_images.encode(img, "JPEG", quality=90))
    (folder / "b.png").write_bytes(bench_images.encode(img, "PNG"))
    (folder / "notes.txt").write_text("not an image")
    rc, out, err = _main(["--images", str(folder), "--repeat", "1", "--warmup", "0", "--json",
                          "--quiet", "--batch-size", "3"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["inputs"][0]["label"] == "photos" and d["inputs"][0]["formats"] == ["jpeg", "png"]
    r = d["results"][0]
    assert r["batch_size"] == 3 and r["images"] == 3  # one call: a.jpg, b.png, a.jpg
    assert r["per_image_p50_ms"] == pytest.approx(r["batch_p50_ms"] / 3, rel=1e-3, abs=1e-3)


def test_reference_backend_refused_on_cuda():
    """Checked before any image is built (the device check comes first on a machine without one)."""
    with pytest.raises(ValueError, match="'reference' runs on the CPU only"):
        bench_command._backends("reference", "cuda")


def test_options_are_the_flags():
    """BenchOptions has one field per flag, with the flag's default (what scripts start from)."""
    args = _parser().parse_args(["bench"])
    assert bench_command.BenchOptions.from_namespace(args) == bench_command.BenchOptions()
    dests = set(vars(args)) - {"run"}
    assert dests == {f for f in bench_command.BenchOptions.__dataclass_fields__}
    a = _parser().parse_args(["bench", "--synthetic", "720p,1080p", "--threads", "1,2",
                              "--no-stages", "--json"])
    opts = bench_command.BenchOptions.from_namespace(a)
    assert (opts.synthetic, opts.threads, opts.no_stages, opts.json) == (
        ["720p", "1080p"], [1, 2], True, "-")


@pytest.mark.parametrize("args, words", [
    (["--preset", "nope"], "unknown preset"),
    (["--synthetic", "1080x"], "WIDTHxHEIGHT"),
    (["--synthetic", "8k"], "WIDTHxHEIGHT"),
    (["--synthetic", "4x4"], "between 16 and 16384"),
    (["--threads", "0"], "positive thread counts"),
    (["--threads", "two"], "positive thread counts"),
    (["--batch-size", "0"], "positive integer"),
    (["--dtype", "float16"], "float32, bfloat16, uint8"),
    (["--images", "/no/such/dir"], "expected a directory"),
    (["--images", "x", "--synthetic", "720p"], "not allowed with"),
    (["--backend", "nope"], "unknown backend"),
    (["--device", "tpu"], "cpu, cuda or cuda:N"),
    (["--compare", "vllm"], "invalid choice"),
    (["--json", "/no/such/dir/r.json"], "existing folder"),
    (["--plot", "/no/such/dir/r.png"], "existing folder"),
    (["--json", "/tmp"], "expected a file path, got the folder"),
])
def test_bad_flags(args, words, capsys):
    inputs = [] if {"--images", "--synthetic"} & set(args) else ["--synthetic", "64x48"]
    rc, out, err = _main([*inputs, *FAST, *args], capsys)
    assert rc == 2 and words in err, err
    assert out == ""


def test_empty_images_folder(tmp_path, capsys):
    rc, _, err = _main(["--images", str(tmp_path)], capsys)
    assert rc == 2 and "found none" in err


def test_no_cuda_is_a_clear_error(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    rc, _, err = _main([*TINY, "--device", "cuda"], capsys)
    assert rc == 2 and "expected a CUDA GPU" in err


def test_thread_count_restores():
    import torch

    from vlmprep.kernels import get_num_threads
    before = (torch.get_num_threads(), get_num_threads())
    with bench_timing.thread_count(1) as eff:
        assert eff == {"vlmprep_threads": 1, "torch_threads": 1}
        assert torch.get_num_threads() == 1
    assert (torch.get_num_threads(), get_num_threads()) == before


def test_synthetic_images_are_deterministic_mosaics():
    a = bench_images.synthetic_set("96x64", 2)
    b = bench_images.synthetic_set("96x64", 2)
    assert a.items == b.items and a.items[0] != a.items[1]
    assert a.items[0][:2] == b"\xff\xd8"  # JPEG
    img = bench_images.mosaic((64, 96), seed=0)
    # six cells from different photos: the cells' mean colours differ
    cells = [img[r * 32:(r + 1) * 32, c * 32:(c + 1) * 32].reshape(-1, 3).mean(0)
             for r in range(2) for c in range(3)]
    assert len({tuple(int(v) for v in m) for m in cells}) == 6


def test_checkpoint_configs_resolve_to_the_presets():
    """Every preset has its checkpoint config packaged, and it resolves to the preset."""
    from vlmprep import presets
    for name in presets.names():
        assert presets.from_config(bench_hf.checkpoint_config(name)) == presets.get(name)
    with pytest.raises(ValueError, match="no checkpoint config for preset 'nope'"):
        bench_hf.checkpoint_config("nope")


@pytest.mark.slow  # a real bench run in a child process
def test_without_transformers():
    """Without transformers: bench runs; --compare hf says to install it."""
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "from vlmprep.cli.main import main\n"
        "args = ['bench', '--synthetic', '64x48', '--num-images', '1', '--repeat', '1', "
        "'--warmup', '0', '--no-stages', '--no-decode-floor', '--quiet']\n"
        "assert main(args) == 0\n"
        "assert main(args + ['--compare', 'hf']) == 2\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "needs transformers" in r.stderr and "pip install transformers" in r.stderr


@pytest.mark.hf
def test_compare_hf(tmp_path, capsys):
    out_json = tmp_path / "r.json"
    rc, out, err = _main([*TINY, "--compare", "hf", "--threads", "1", "--json", str(out_json)],
                         capsys)
    assert rc == 0, err
    assert "speedup vs hf pil" in out and "speedup vs hf torchvision" in out
    d = json.loads(out_json.read_text())
    assert d["config"]["compare"] == ["hf"]
    assert [(h["size"], h["class"]) for h in d["hf"]] == [
        ("64x48", "Qwen2VLImageProcessorPil"), ("64x48", "Qwen2VLImageProcessor"),
        ("80x60", "Qwen2VLImageProcessorPil"), ("80x60", "Qwen2VLImageProcessor")]
    for h in d["hf"]:
        _check_row(h)
        assert h["same_output_shape_as_vlmprep"] is True
    for r in d["results"]:
        assert r["speedup_vs_hf_pil"] > 0 and r["speedup_vs_hf_torchvision"] > 0


@pytest.mark.hf
def test_hf_processors_are_the_oracles():
    """The processors --compare hf builds equal the test suite's oracles, for every preset."""
    import transformers
    from hfref import hf_processor

    from vlmprep import presets
    for name in presets.names():
        pipe = presets.get(name)
        cfg = bench_hf.config_for(name, pipe)
        for backend in bench_hf.BACKENDS:
            if not hasattr(transformers, bench_hf.class_names(cfg)[backend]):
                continue  # LFM2-VL: a torchvision processor only (no PIL class in 5.24)
            mine, ref = bench_hf.build(cfg, pipe, backend), hf_processor(name, backend)
            assert type(mine) is type(ref) and mine.to_dict() == ref.to_dict(), (name, backend)


@pytest.mark.hf
@pytest.mark.hf
def test_compare_hf_with_a_torchvision_processor_only(tmp_path, capsys):
    """LFM2-VL: transformers 5.24 has no PIL class; --compare hf measures the torchvision one
    (it refused the whole run before: it built the PIL processor first)."""
    out_json = tmp_path / "r.json"
    rc, out, err = _main(["--preset", "lfm2-vl", "--synthetic", "64x48", *FAST, "--compare", "hf",
                          "--threads", "1", "--json", str(out_json)], capsys)
    assert rc == 0, err
    d = json.loads(out_json.read_text())
    assert [h["class"] for h in d["hf"]] == ["Lfm2VlImageProcessor"]
    assert all("speedup_vs_hf_pil" not in r and "speedup_vs_hf_torchvision" in r
               for r in d["results"] if r["dtype"] == "float32")


def test_compare_hf_refuses_a_changed_pipeline():
    from vlmprep import presets
    with pytest.raises(ValueError, match="does not resolve"):
        bench_hf.config_for("qwen2-vl", presets.get("qwen2-vl", max_pixels=1_003_520))


def test_scenario_files_are_valid_commands():
    """Every bench/scenarios/*.json spells flags the CLI accepts (run_scenarios.py runs them)."""
    import importlib.util
    root = Path(__file__).resolve().parents[2] / "bench"
    spec = importlib.util.spec_from_file_location("run_scenarios", root / "run_scenarios.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    files = sorted((root / "scenarios").glob("*.json"))
    assert {f.stem for f in files} >= {"qwen2-vl", "internvl", "llava-1.5"}
    for f in files:
        sc = json.loads(f.read_text())
        argv = mod.scenario_argv(sc, str(f))
        args = _parser().parse_args(argv)
        assert args.preset and args.synthetic and args.threads, f
        # what the script measures is what the command line spells
        opts = mod.scenario_options(sc, str(f))
        assert opts == bench_command.BenchOptions.from_namespace(args), f
    switched = {"preset": "qwen2-vl", "stages": False, "decode_floor": False, "lower_bound": False,
                "compare": ["hf"], "formats": ["JPEG", "png"], "backends": ["torch", "reference"]}
    assert mod.scenario_options(switched, "x.json") == bench_command.BenchOptions.from_namespace(
        _parser().parse_args(mod.scenario_argv(switched, "x.json")))
    for make in (mod.scenario_argv, mod.scenario_options):
        with pytest.raises(ValueError, match="unknown keys"):
            make({"preset": "qwen2-vl", "thread": [1]}, "x.json")


def test_issue20_runs_are_their_flags():
    """bench/issue20.py measures the options of the flags it records as each run's command."""
    import importlib.util
    path = Path(__file__).resolve().parents[2] / "bench" / "issue20.py"
    spec = importlib.util.spec_from_file_location("issue20", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, flags in mod.RUNS.items():
        args = _parser().parse_args(["bench", *flags])
        assert bench_command.BenchOptions(**mod.OPTIONS[name]) == \
            bench_command.BenchOptions.from_namespace(args), name


def test_images_folder_skips_and_names_bad_files(tmp_path, capsys):
    """A bad file is skipped and named with its reason (stderr, report, JSON); the rest run."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    img = bench_images.mosaic((40, 70), seed=2)
    good = bench_images.encode(img, "JPEG", quality=90)
    (folder / "a.jpg").write_bytes(good)
    (folder / "b_cut.jpg").write_bytes(good[:200])           # truncated
    (folder / "c_text.png").write_bytes(b"not an image at all")  # wrong content
    (folder / "d.png").write_bytes(bench_images.encode(img, "PNG"))
    rc, out, err = _main(["--images", str(folder), "--repeat", "1", "--warmup", "0",
                          "--no-stages", "--no-decode-floor", "--backend", "reference", "--json",
                          "--quiet"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    skipped = {s["name"]: s["reason"] for s in d["inputs"][0]["skipped"]}
    assert set(skipped) == {"b_cut.jpg", "c_text.png"}
    assert "truncated" in skipped["b_cut.jpg"] and "JPEG/PNG" in skipped["c_text.png"]
    assert d["inputs"][0]["count"] == 2 and d["results"][0]["images"] == 2
    assert "skipped" in err and "b_cut.jpg" in err and "c_text.png" in err
    # The human report names them too.
    rc, out, err = _main(["--images", str(folder), "--repeat", "1", "--warmup", "0",
                          "--no-stages", "--no-decode-floor", "--backend", "reference",
                          "--quiet"], capsys)
    assert rc == 0 and "skipped b_cut.jpg:" in out and "skipped c_text.png:" in out


def test_images_folder_without_a_usable_file(tmp_path, capsys):
    (tmp_path / "x.jpg").write_bytes(b"\xff\xd8\xff")
    rc, out, err = _main(["--images", str(tmp_path)], capsys)
    assert rc == 2 and "x.jpg" in err and "cannot be measured" in err and out == ""


def test_progress_lines_without_a_terminal(capsys, monkeypatch):
    """Not a TTY (pytest's capture): plain step lines, no bar; --no-progress the same."""
    monkeypatch.delenv("VLMPREP_PROGRESS", raising=False)
    rc, _, err = _main([*TINY, "--no-stages", "--no-decode-floor", "--backend", "reference",
                        "--json"], capsys)
    assert rc == 0 and "[1/2]" in err and "\r" not in err
    from vlmprep import progress
    assert not progress.wanted() and not progress.wanted(False)
    monkeypatch.setenv("VLMPREP_PROGRESS", "1")
    assert progress.wanted() and not progress.wanted(False)
    monkeypatch.setenv("VLMPREP_PROGRESS", "0")
    assert not progress.wanted(True)
