"""Issue 17's rough edges a new user hits first: the doc paths after ``import vlmprep``, the
loader's batch sizes, logging without handlers, ``python -m vlmprep``. Issue 33's (deliverable 6):
a missing checkpoint path or a mistyped preset named as such, a hub-shaped missing folder without
the hub's retry wait, setup.py's warning for a build without kernels, a quiet dali backend, the Ray
Data example on 2 CPUs, the batch flag table.

Each check runs in a fresh interpreter where the point is what ``import vlmprep`` alone does.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_doc_paths_resolve_after_import_vlmprep():
    """``vlmprep.adapters.vit.encode``, ``vlmprep.pack.concat``, ``vlmprep.kernels
    .set_num_threads`` (as the docs write them) after ``import vlmprep`` alone, while the import
    itself loads neither torch, numpy nor PIL."""
    r = _py("import sys, vlmprep\n"
            "heavy = [m for m in ('torch', 'numpy', 'PIL') if m in sys.modules]\n"
            "assert heavy == [], heavy\n"
            "fns = [vlmprep.adapters.vit.encode, vlmprep.pack.concat,\n"
            "       vlmprep.kernels.set_num_threads, vlmprep.loader.DataLoader,\n"
            "       vlmprep.serve.Batcher, vlmprep.cache.OutputCache,\n"
            "       vlmprep.adapters.transformers, vlmprep.plan.plan_image]\n"
            "assert all(callable(f) or f is not None for f in fns)\n"
            "assert {'pack', 'kernels', 'adapters'} <= set(dir(vlmprep))\n"
            "print('ok')")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_unknown_attributes_still_raise():
    r = _py("import vlmprep\n"
            "for mod, name in ((vlmprep, 'nope'), (vlmprep.adapters, 'nope')):\n"
            "    try:\n"
            "        getattr(mod, name)\n"
            "    except AttributeError as e:\n"
            "        assert 'nope' in str(e)\n"
            "    else:\n"
            "        raise SystemExit('no AttributeError')\n"
            "print('ok')")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_logging_installs_no_handlers():
    """The library logs through logging.getLogger('vlmprep') and its children, configures
    nothing: no handler on 'vlmprep' or the root logger after importing the heavy modules."""
    r = _py("import logging, vlmprep\n"
            "import vlmprep.loader, vlmprep.serve, vlmprep.backends, vlmprep.processor\n"
            "vlmprep.Processor('qwen2-vl', backend='reference')\n"
            "names = ['vlmprep'] + [n for n in logging.root.manager.loggerDict\n"
            "                       if n.startswith('vlmprep.')]\n"
            "assert {'vlmprep.loader', 'vlmprep.serve'} <= set(names), names\n"
            "bad = [n for n in names if logging.getLogger(n).handlers]\n"
            "assert not bad and not logging.root.handlers, (bad, logging.root.handlers)\n"
            "print('ok')")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_loader_defaults_batch_by_count_only():
    import inspect

    from vlmprep.loader import DataLoader
    params = inspect.signature(DataLoader).parameters
    assert params["max_batch_tokens"].default is None and params["progress"].default is None


def test_python_m_vlmprep_version():
    import vlmprep
    r = subprocess.run([sys.executable, "-m", "vlmprep", "--version"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"vlmprep {vlmprep.__version__}"


# -- issue 33, deliverable 6: the first-use rough edges ---------------------------------------------
ROOT = Path(__file__).resolve().parents[1]


def _cli(*argv: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from vlmprep.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_plan_with_a_missing_checkpoint_path_names_the_path(tmp_path):
    """(a) ``--preset /models/X`` that does not exist: the message says the path was checked and
    is not there (it used to say only "unknown preset")."""
    missing = tmp_path / "models" / "Qwen2-VL-7B-Instruct"
    rc, out, err = _cli("plan", "--preset", str(missing), "--size", "10x10")
    assert rc == 2 and out == "" and "Traceback" not in err
    assert f"as a path it does not exist (checked {missing})" in err, err
    # The same through the Python API: Processor('<path>') points at from_pretrained.
    import vlmprep
    with pytest.raises(KeyError) as ei:
        vlmprep.Processor(str(missing), backend="reference")
    assert f"checked {missing}" in ei.value.args[0] and "from_pretrained" in ei.value.args[0]


@pytest.mark.parametrize("typo, want", [("qwen2vl", "qwen2-vl"), ("qwen-2-vl", "qwen2-vl"),
                                        ("intern-vl", "internvl"), ("gemma-3", "gemma3"),
                                        ("siglip2", "siglip2-naflex")])
def test_mistyped_preset_says_did_you_mean(typo, want):
    """(b) A near miss of a registered name is named; a far one lists the names only."""
    from vlmprep import presets
    with pytest.raises(KeyError) as ei:
        presets.get(typo)
    msg = ei.value.args[0]
    assert re.search(rf"did you mean '{want}'", msg), msg  # the nearest first
    assert "checked" not in msg  # not path-shaped: no path talk
    rc, _, err = _cli("plan", "--preset", typo, "--size", "10x10")
    assert rc == 2 and f"did you mean '{want}'" in err
    with pytest.raises(KeyError) as ei:
        presets.get("zzzz")
    assert "did you mean" not in ei.value.args[0] and "qwen2-vl" in ei.value.args[0]


def test_plan_with_a_hub_id_says_how_to_download(tmp_path, monkeypatch):
    """(a, c) ``--preset Org/Name`` that is no local folder: both readings are named, and the fix
    is the ``hf`` CLI (the venv has ``hf``, not ``huggingface-cli``)."""
    monkeypatch.chdir(tmp_path)
    rc, _, err = _cli("plan", "--preset", "Qwen/Qwen2-VL-7B-Instruct", "--size", "10x10")
    assert rc == 2
    assert f"checked {tmp_path / 'Qwen' / 'Qwen2-VL-7B-Instruct'}" in err, err
    assert "hf download Qwen/Qwen2-VL-7B-Instruct preprocessor_config.json" in err
    assert "huggingface-cli" not in err


HUB_CODE = r"""
import sys, time, vlmprep
from vlmprep.errors import ConfigNotFoundError
t = time.perf_counter()
try:
    vlmprep.Processor.from_pretrained("models/qwen-local", backend="reference")
    print("LOADED")
except ConfigNotFoundError as e:
    print("ERR", e)
print("SECONDS", time.perf_counter() - t)
p = vlmprep.Processor.from_pretrained("Org/Tiny", backend="reference")  # cached: no wait either
print("CACHED", p.pipeline["smart_resize"].max_pixels, time.perf_counter() - t)
"""


def test_missing_local_folder_shaped_like_a_hub_id_fails_fast_and_names_both(tmp_path):
    """(c) ``from_pretrained("models/qwen-local")`` (a folder that is not there, shaped like a hub
    id) with the hub unreachable and HF_HUB_OFFLINE unset: huggingface_hub alone retried for ~24 s
    and named neither the local path nor the right CLI. Now: at once, both named; a cached repo
    still loads."""
    pytest.importorskip("huggingface_hub")
    import json
    cache = tmp_path / "hub"
    snap = cache / "models--Org--Tiny" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (cache / "models--Org--Tiny" / "refs").mkdir()
    (cache / "models--Org--Tiny" / "refs" / "main").write_text("0" * 40)
    (snap / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": 3136,
         "max_pixels": 1003520, "patch_size": 14, "merge_size": 2, "temporal_patch_size": 2}))
    env = {k: v for k, v in os.environ.items()
           if not k.upper().endswith("_PROXY") and not k.startswith("HF_")}
    # .invalid never resolves (RFC 2606): an unreachable hub without touching the network
    env.update(HF_ENDPOINT="https://hub.vlmprep-test.invalid", HF_HOME=str(tmp_path / "home"),
               HF_HUB_CACHE=str(cache))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", HUB_CODE], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    msg = lines["ERR"]
    assert float(lines["SECONDS"]) < 5 and wall < 30, (lines["SECONDS"], wall)
    assert f"no local folder {tmp_path / 'models' / 'qwen-local'}" in msg, msg
    assert "hub.vlmprep-test.invalid does not resolve" in msg
    assert "hf download models/qwen-local preprocessor_config.json" in msg
    assert "huggingface-cli" not in msg
    assert lines["CACHED"].split()[0] == "1003520"


def _setup_tree(dst: Path) -> Path:
    """What setup.py reads to decide (no package code is built: build_py copies one file)."""
    for rel in ("setup.py", "README.md", "vlmprep/__init__.py", "csrc/sources.json"):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        (dst / rel).write_bytes((ROOT / rel).read_bytes())
    return dst


@pytest.mark.parametrize("no_build", ["", "1"])
def test_pure_build_without_torch_warns_on_stderr(tmp_path, no_build):
    """(d) A build where torch is not importable (pip's build isolation) makes a pure-Python
    package: setup.py says so on stderr with the fix, and the build record keeps it. Asked for
    (VLMPREP_NO_BUILD=1): no warning. Checked on ``build_py`` (the step a pure wheel runs), with a
    torch that fails to import, in a copy of setup.py's inputs: no wheel is built."""
    src = _setup_tree(tmp_path / "src")
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\")\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLMPREP_")}
    env.update(PYTHONPATH=str(fake.parent), VLMPREP_NO_BUILD=no_build)
    if not no_build:
        del env["VLMPREP_NO_BUILD"]
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib",
                        str(tmp_path / "lib")], cwd=src, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    import json
    info = json.loads((tmp_path / "lib" / "vlmprep" / "kernels" / "_build_info.json").read_text())
    assert info["torch_ext"]["built"] is False
    if no_build:
        assert "WARNING" not in r.stderr and "VLMPREP_NO_BUILD" in info["torch_ext"]["reason"]
        return
    warning = [ln for ln in r.stderr.splitlines() if "WARNING" in ln]
    assert len(warning) == 1, r.stderr
    assert "WITHOUT its compiled kernels" in warning[0] and "torch was not importable" in warning[0]
    assert "pip wheel --no-build-isolation --no-deps ." in warning[0]
    assert "--no-build-isolation" in info["torch_ext"]["reason"]


def test_dali_backend_run_prints_nothing():
    """(e) A dali backend run printed DALI's AutoGraph warning (through the root logger) asking
    the user to decorate vlmprep's own ``_pil_pass``; now it prints nothing."""
    pytest.importorskip("nvidia.dali")
    r = _py("import logging, numpy as np, vlmprep\n"
            "img = (np.arange(48 * 64 * 3) % 251).astype(np.uint8).reshape(48, 64, 3)\n"
            "b = vlmprep.Processor('qwen2-vl', backend='dali')([img])\n"
            "assert tuple(b.pixel_values.shape) == (16, 1176), b.pixel_values.shape\n"
            "assert not logging.root.handlers, logging.root.handlers\n"
            "print('ok')")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert r.stderr == "", r.stderr


def _flag_table(md: str, heading: str) -> list[str]:
    """The first-column flags of the first table after ``heading``."""
    rows, seen = [], False
    for line in md[md.index(heading):].splitlines():
        if line.startswith("| `--"):
            seen = True
            rows += re.findall(r"`(--[a-z-]+)", line.split("|")[1])
        elif seen and not line.startswith("|"):
            break
    return rows


def test_run_flag_table_lists_each_flag_once_and_matches_the_parser():
    """(g) docs/how-to/batch.md's `vlmprep run` flag table: no row twice (``--set`` was), and the
    flags are the parser's."""
    import argparse

    from vlmprep.cli import run as run_cli
    md = (ROOT / "docs" / "how-to" / "batch.md").read_text(encoding="utf-8")
    flags = _flag_table(md, "| flag | meaning |")
    assert len(flags) == len(set(flags)), sorted(f for f in flags if flags.count(f) > 1)
    sub = argparse.ArgumentParser().add_subparsers()
    run_cli.add_parser(sub)
    parser = sub.choices["run"]
    want = {s for a in parser._actions for s in a.option_strings if s.startswith("--")} - {"--help"}
    assert set(flags) == want, (sorted(want - set(flags)), sorted(set(flags) - want))


RAY_INIT = ('ray.init(address="local", num_cpus=2, include_dashboard=False, '
            'log_to_driver=False)')


@pytest.mark.stress
def test_ray_data_example_runs_on_two_cpus(tmp_path):
    """(f) The Preprocess example of docs/how-to/batch.md, as written, on a 2-CPU Ray: it hung
    (an actor pool of 2 left no CPU for the read and write tasks). ~30 s, 1.5 GB: slow."""
    pytest.importorskip("ray")
    pytest.importorskip("pyarrow")
    import io

    import numpy as np
    from PIL import Image
    md = (ROOT / "docs" / "how-to" / "batch.md").read_text(encoding="utf-8")
    sec = md[md.index("### Preprocess in your own pipeline"):]
    code = sec[sec.index("```python\n") + 10:]
    code = code[:code.index("```")]
    (tmp_path / "photos").mkdir()
    for i in range(4):
        buf = io.BytesIO()
        Image.fromarray(np.full((40 + 8 * i, 56, 3), 30 * i, np.uint8)).save(buf, "JPEG")
        (tmp_path / "photos" / f"{i}.jpg").write_bytes(buf.getvalue())
    # a watchdog turns a hang into a failure (and stops the Ray it started)
    script = ("import os, threading, ray\n"
              "def _dog():\n"
              "    print('HUNG', flush=True); ray.shutdown(); os._exit(3)\n"
              "threading.Timer(150, _dog).start()\n"
              + RAY_INIT + "\n" + code.replace("ray.init()", "None")  # 2 CPUs on any machine
              + "import pyarrow.parquet as pq\n"
              "t = pq.read_table('processed/')\n"
              "print('ROWS', t.num_rows, sorted(set(t.column('status').to_pylist())), flush=True)\n"
              "ray.shutdown(); os._exit(0)\n")
    env = dict(os.environ, RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"))
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=240)
    assert "ROWS 4 ['ok']" in r.stdout, (r.stdout[-2000:], r.stderr[-3000:])
