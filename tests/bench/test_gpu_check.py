"""bench/gpu_check.sh, dry-run on the CPU (issue 15): every step but the build and the CUDA-only
memcheck runs here as it will on the GPU machine; a wrong result, a step past its time box and a
Python without torch each make the run fail loudly. The build step and Python 3.12 / torch 2.11
are covered by `make gpu-check-dry` (the machine simulated, in CI)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # ~1 min: real pipelines on every step


def _run(tmp_path: Path, *args: str, **env_extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "VLMPREP_GPU_CHECK_INJECT")}
    env.update(PYTHON=sys.executable, DEVICE="cpu", **env_extra)
    # The time boxes are the GPU machine's; on a loaded 2-core CI box parity and dali ran past
    # them (90.6 s, 50.3 s), so the dry run gets three times the budget: what is tested here is
    # that every step runs and passes, not its speed (bench/ shows that).
    p = subprocess.run(["bash", "bench/gpu_check.sh", "--skip-build", "--quick", "--out", str(tmp_path),
                        "--tag", "t", "--budget", "1620", *args], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=1800)
    report = tmp_path / "gpu_check_t.json"
    return p, (json.loads(report.read_text()) if report.exists() else {})


def test_dry_run_passes_and_reports_every_step(tmp_path):
    out = tmp_path / "device_out"
    out.mkdir()
    p, rep = _run(tmp_path, OUT=str(out))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    st = {k: v["status"] for k, v in rep["steps"].items()}
    assert list(st) == ["env", "build", "kernels", "memcheck", "parity", "timing", "engine", "video", "dali"]
    assert st["build"] == "SKIP" and st["memcheck"] == "SKIP"  # --skip-build; memcheck is CUDA-only
    assert all(st[k] == "PASS" for k in ("env", "kernels", "parity", "timing", "engine")), st
    assert st["dali"] in ("PASS", "SKIP") and st["video"] in ("PASS", "SKIP")
    if st["video"] == "PASS":  # DALI's CPU decoder: the MJPEG clip within the bound, MPEG-4 refused
        vids = {r["clip"]: r for r in rep["steps"]["video"]["rows"]}
        assert vids["pan_mjpg_640x360.avi"]["status"] == "PASS" and vids["pan_mjpg_640x360.avi"]["same_geometry"]
        assert vids["pan_mp4v_640x360.mp4"]["status"] == "SKIP" and "MPEG-4" in vids["pan_mp4v_640x360.mp4"]["why"]
    checks = [r["check"] for r in rep["steps"]["kernels"]["rows"]]
    assert sum(c.startswith("strided_crop_vs_twin") for c in checks) == 5  # every order
    assert "bandwidth run output vs twin" in checks  # the timed output is compared, not only timed
    env = rep["steps"]["env"]
    # The machine's Pillow and its pass order are reported, probed against resample_order's rule.
    assert env["env"]["pillow"] and env["env"]["pass_order_rule"] in ("pillow>=13", "pillow 12.2-12.x",
                                                                      "pillow<12.2")
    assert len(env["pass_order"]) == 4 and all(r["ok"] for r in env["pass_order"])
    if st["dali"] == "PASS":
        rows = rep["steps"]["dali"]["rows"]
        plug = [r for r in rows if r.get("check", "").startswith("plugin")]
        assert len(plug) in (0, 4) and all(r["ok"] for r in plug)  # the plugin op vs the twin
        # Each path on its own: decode (the CPU decoder here: exact), resize on the same pixels,
        # the rounding of exact ties (the host's conversion moves none), end to end.
        dec = [r for r in rows if r.get("path_key") == "decode"]
        assert len(dec) == 3 and all(r["max_levels"] == 0 for r in dec)  # 720p, 1080p, 333x777
        assert sum(r.get("path", "").startswith("resize") for r in rows) == 3
        (rnd,) = [r for r in rows if r.get("path_key") == "rounding"]
        assert rnd["to_levels_ties_moved"] == 0 and rnd["device_cast_ties_moved"] == 0
        assert sum(r.get("path") == "end to end" for r in rows) == 6
    parity = rep["steps"]["parity"]["rows"]
    assert len(parity) == 9 and all(r["ok"] and r["batch_invariant"] and r["same_geometry"] for r in parity)
    resize = rep["steps"]["parity"]["resize_rows"]  # the resize alone, every filter, bit-exact
    assert len(resize) == 6 and all(r["ok"] and r["max_levels"] == 0 for r in resize)
    timing = rep["steps"]["timing"]["rows"]
    assert [r["size"] for r in timing] == ["720p", "1080p"] and all(r["output_ok"] for r in timing)
    # the engines' hook (issue 32): on the CPU its oracle is the torchvision processor, bit-exact,
    # from decoded images and from the JPEG bytes vLLM's loader leaves undecoded
    engine = rep["steps"]["engine"]["rows"]
    assert [(r["mode"], r["size"]) for r in engine] == [(m, s) for m in ("float32", "uint8")
                                                        for s in ("720p", "1080p", "odd_333x777")]
    assert all(r["images_exact"] and r["max_abs_diff"] == 0 and r["jpeg_bytes_max_levels"] == 0 for r in engine)
    assert all(r["ms_hook_device"] > 0 and r["ms_transformers_torchvision_cpu"] > 0 for r in engine
               if r["size"] == "1080p")
    assert set(rep["goals"]) == {"images_per_s_1080p", "speedup_vs_hf_torchvision",
                                 "kernel_fraction_of_copy", "max_levels"}
    assert rep["goals"]["max_levels"]["got"] is not None
    assert "gpu_check: all steps passed" in p.stdout
    # The device tool brings back what is under $OUT: the JSON, the table and the log are there.
    assert sorted(f.name for f in out.iterdir()) == ["gpu_check_t.json", "gpu_check_t.log", "gpu_check_t.md"]
    assert "| parity | PASS |" in (out / "gpu_check_t.md").read_text()


@pytest.mark.parametrize("step", ["kernels", "parity", "timing", "engine", "video", "dali"])
def test_an_injected_wrong_result_fails_the_run(tmp_path, step):
    if step in ("dali", "video"):
        pytest.importorskip("nvidia.dali", reason="the dali step needs DALI")
    only = {"timing": "env,timing", "dali": "env,timing,dali"}.get(step, f"env,{step},timing")
    p, rep = _run(tmp_path, "--only", only, VLMPREP_GPU_CHECK_INJECT=step)
    assert p.returncode == 1, p.stdout[-2000:]
    assert rep["failed"] == [step] and rep["exit_status"] == 1
    assert f"gpu_check: FAILED 1 step(s): {step}" in p.stderr
    if step not in ("timing", "dali"):  # the steps after a failed one still run and report
        assert rep["steps"]["timing"]["status"] == "PASS"


@pytest.mark.parametrize("check,step", [("pass_order", "env"), ("torch_resize", "parity"),
                                        ("dali_decode", "dali"), ("dali_resize", "dali"),
                                        ("dali_rounding", "dali")])
def test_an_injected_error_fails_each_new_check(tmp_path, check, step):
    # One check of a step alone: the pass-order probe (the rule's order reversed), the dali
    # decode path, resize path and rounding of ties (one value corrupted).
    if step == "dali":
        pytest.importorskip("nvidia.dali", reason="the dali step needs DALI")
    p, rep = _run(tmp_path, "--only", "env" if step == "env" else f"env,{step}",
                  VLMPREP_GPU_CHECK_INJECT=check)
    assert p.returncode == 1, p.stdout[-2000:]
    assert rep["failed"] == [step], rep["failed"]
    res = rep["steps"][step]
    if step == "env":
        assert "expected Pillow" in res["summary"] and "fix:" in res["summary"]
        return
    if step == "parity":  # only the resize rows fail; the preset rows still pass
        assert all(r["ok"] for r in res["rows"]) and not any(r["ok"] for r in res["resize_rows"])
        return
    bad = [r for r in res["rows"] if not r["ok"]]
    key = check.removeprefix("dali_")
    assert bad and all(r.get("path_key") == key or r.get("path", "").startswith(key) for r in bad), bad


def test_a_step_past_its_time_box_fails_and_the_rest_still_report(tmp_path):
    # parity needs ~10 s here: in a 2 s box it is killed, reported, and the run fails.
    p, rep = _run(tmp_path, "--only", "env,parity,kernels", "--box", "parity=2")
    assert p.returncode == 1
    assert "within its" in rep["steps"]["parity"]["summary"], rep["steps"]["parity"]
    assert rep["steps"]["env"]["status"] == "PASS" and rep["steps"]["kernels"]["status"] == "PASS"
    assert rep["failed"] == ["parity"]


def test_a_python_without_torch_is_refused_with_a_fix(tmp_path):
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    p = subprocess.run(["bash", "bench/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHON=str(fake)), timeout=60)
    assert p.returncode == 2
    assert "expected" in p.stderr and "fix: PYTHON=" in p.stderr
