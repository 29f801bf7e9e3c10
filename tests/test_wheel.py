"""Install as a user does (issue 17, items 1-2): what setup.py builds travels with the package.

- Running setup.py for metadata writes nothing into the source tree (it used to rewrite the
  in-tree build record, switching off an editable install's kernels).
- A pure-Python wheel (VLMPREP_NO_BUILD=1) carries a build record that says why it has no kernels.
- Without torch (a `--no-deps` install), the Processor's error names the missing package.
- VLMPREP_WHEEL_TEST=1 (`make wheel-check`, CI): a wheel built from a copy of this tree with this
  Python's torch carries the torch ops, their record and (when DALI is here) the DALI plugin; it is
  installed with its dependencies into a fresh venv (CI's pins as constraints), where the kernels
  load, `vlmprep info` reports them and the Processor's torch backend gives the reference's output.
  Then `pip install --no-build-isolation .` (non-editable) in that venv builds against the venv's own
  torch and passes the same checks. Minutes (two builds, a venv with torch): opt-in.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _support.figures import record

ROOT = Path(__file__).resolve().parents[1]
KERNELS = "vlmprep/kernels"
WHEEL_TEST = os.environ.get("VLMPREP_WHEEL_TEST") == "1"

# Run in the fresh venv, outside the source tree: the installed package, its kernels, its output.
CHECK = r"""
import io, json, sys
import numpy as np
import vlmprep, vlmprep.kernels as k
from PIL import Image
assert vlmprep.__file__.startswith(sys.prefix), ("not the installed package", vlmprep.__file__)
assert k.available(), k.why_unavailable()
rng = np.random.default_rng(int(sys.argv[1]))
img = rng.integers(0, 256, (61, 93, 3), dtype=np.uint8)
buf = io.BytesIO()
Image.fromarray(img).save(buf, "JPEG", quality=90)
worst = 0.0
for inp in (img, buf.getvalue()):  # an array and JPEG bytes (the kernels' decoder when built)
    for dtype in ("uint8", "float32"):
        got, want = (vlmprep.Processor("qwen2-vl", backend=b, device="cpu", dtype=dtype)([inp])
                     for b in ("torch", "reference"))
        assert got.grid_thw.tolist() == want.grid_thw.tolist()
        diff = (got.pixel_values.float() - want.pixel_values.float()).abs().max().item()
        # uint8: the same levels; float32: the same up to float rounding (well under a level)
        assert diff <= (0 if dtype == "uint8" else 1e-5), (type(inp).__name__, dtype, diff)
        worst = max(worst, diff)
import os
files = sorted(f for f in os.listdir(os.path.dirname(k.__file__)) if not f.endswith((".py", "__")))
print(json.dumps({"file": vlmprep.__file__, "info": k.build_info(), "files": files, "max_diff": worst}))
"""


def _copy_tree(dst: Path) -> Path:
    """This checkout's files (tracked and untracked-not-ignored: no builds, no venv) into ``dst``."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():  # a tracked file deleted in the work tree is left out
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    return dst


def _run(cmd: list, timeout: float, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    assert p.returncode == 0, (f"{' '.join(map(str, cmd))} exited {p.returncode}:\n"
                               f"{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    return p


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLMPREP_", "PYTHON"))}
    env.update(extra)
    return env


def _build_wheel(src: Path, out: Path, python: str, timeout: float, **env: str) -> tuple[Path, str]:
    p = _run([python, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", src, "-w", out],
             timeout, env=_env(**env))
    (wheel,) = out.glob("vlmprep-*.whl")
    return wheel, p.stdout


def _wheel_kernels(wheel: Path) -> tuple[set[str], dict]:
    """The kernels folder's compiled files in the wheel, and its build record."""
    with zipfile.ZipFile(wheel) as z:
        names = {n.rsplit("/", 1)[1] for n in z.namelist()
                 if n.startswith(KERNELS + "/") and not n.endswith(".py")}
        info = json.loads(z.read(f"{KERNELS}/_build_info.json"))
    return names, info


@pytest.mark.parametrize("no_build", ["", "1"])
def test_setup_run_for_metadata_writes_nothing(tmp_path, no_build):
    src = tmp_path / "src"
    for rel in ("setup.py", "README.md", "vlmprep/__init__.py", "csrc/sources.json"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    p = _run([sys.executable, "setup.py", "--version"], 120, cwd=src, env=_env(VLMPREP_NO_BUILD=no_build))
    assert p.stdout.strip().splitlines()[-1] == _version()
    assert not (src / KERNELS / "_build_info.json").exists(), "setup.py wrote the in-tree build record"


def _version() -> str:
    import vlmprep
    return vlmprep.__version__


def test_without_torch_the_processor_says_what_to_install():
    """A `--no-deps` install (or a broken env) without torch: the error names the missing package."""
    code = ("import sys; sys.modules['torch'] = sys.modules['torchvision'] = None\n"
            "import numpy as np, vlmprep\n"
            "try:\n    vlmprep.Processor('qwen2-vl')([np.zeros((32, 32, 3), np.uint8)])\n"
            "except RuntimeError as e:\n    print(e)\n")
    out = _run([sys.executable, "-c", code], 120, env=_env()).stdout
    assert "no backend can run on device 'cpu'" in out, out
    assert "torch: python package 'torch' is not installed (pip install torch)" in out, out


@pytest.mark.slow  # pip builds a wheel (no compile): ~15 s
def test_pure_python_wheel_records_why(tmp_path):
    src = _copy_tree(tmp_path / "src")
    wheel, _ = _build_wheel(src, tmp_path / "dist", sys.executable, 300, VLMPREP_NO_BUILD="1")
    names, info = _wheel_kernels(wheel)
    assert names == {"_build_info.json"}, names
    assert not info["torch_ext"]["built"] and "VLMPREP_NO_BUILD" in info["torch_ext"]["reason"], info
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as z:  # the package data: PEP 561 marker, checkpoint configs
        assert {"vlmprep/py.typed", "vlmprep/presets/checkpoints/qwen2-vl.json"} <= set(z.namelist())
    assert not (src / KERNELS / "_build_info.json").exists(), "the wheel build wrote the in-tree record"


@pytest.mark.slow
@pytest.mark.skipif(not WHEEL_TEST, reason="opt-in (minutes: two kernel builds and a fresh venv with torch): "
                    "VLMPREP_WHEEL_TEST=1, or `make wheel-check`")
def test_wheel_in_fresh_venv(tmp_path, seed):
    src = _copy_tree(tmp_path / "src")
    # 1. The wheel, built with this Python's torch (and DALI, when installed), as CI requires.
    wheel, _ = _build_wheel(src, tmp_path / "dist", sys.executable, 1200, VLMPREP_REQUIRE_KERNELS="1")
    names, info = _wheel_kernels(wheel)
    dali_here = "nvidia-dali not importable" not in str(info["dali_plugin"].get("reason"))
    want = {"_build_info.json", "_vlmprep_torch.so"} | ({"libvlmprep_dali.so"} if dali_here else set())
    assert names == want, (names, info)
    assert info["torch_ext"]["built"] and (info["dali_plugin"]["built"] or not dali_here), info
    assert not (src / KERNELS / "_build_info.json").exists(), "the wheel build wrote the in-tree record"
    assert not list((src / KERNELS).glob("*.so")), "the wheel build wrote into the source tree"
    record("wheel", f"{wheel.name}: {wheel.stat().st_size / 1e6:.2f} MB; {KERNELS}: {sorted(names)}")
    venv = tmp_path / "venv"
    try:
        _install_and_check(src, wheel, venv, tmp_path, seed)
    finally:  # torch's wheels make it ~6 GB; pytest keeps the last three runs' tmp_path
        shutil.rmtree(venv, ignore_errors=True)


def _install_and_check(src: Path, wheel: Path, venv: Path, tmp_path: Path, seed: int) -> None:
    # 2. A fresh venv (no system site-packages), the wheel and its dependencies at CI's pins.
    base = shutil.which(f"python{sys.version_info.major}.{sys.version_info.minor}") or sys.executable
    _run([base, "-m", "venv", venv], 300)
    py = venv / "bin" / "python"
    _run([py, "-m", "pip", "install", "-q", "-c", ROOT / "requirements/runtime.txt", wheel], 1200, env=_env())
    got = _check_installed(py, tmp_path, seed)
    assert got["files"] == sorted(_wheel_kernels(wheel)[0]), got
    record("wheel", f"fresh venv: kernels load, torch backend vs reference max diff {got['max_diff']:g}")

    # 3. `pip install --no-build-isolation .` (non-editable) in that venv: built for its own torch,
    # which has no DALI, over step 1's build/ (its plugin must not be carried over).
    _run([py, "-m", "pip", "uninstall", "-y", "vlmprep"], 300, env=_env())
    _run([py, "-m", "pip", "install", "-q", "setuptools>=61", "wheel"], 300, env=_env())
    _run([py, "-m", "pip", "install", "--no-build-isolation", "--no-deps", src], 1200,
         env=_env(VLMPREP_REQUIRE_KERNELS="1"))
    installed = _check_installed(py, tmp_path, seed)
    assert installed["info"]["torch_ext"]["built"], installed
    assert not installed["info"]["dali_plugin"]["built"], installed
    assert installed["files"] == ["_build_info.json", "_vlmprep_torch.so"], installed
    assert not (src / KERNELS / "_build_info.json").exists(), "pip install . wrote the in-tree record"
    record("wheel", f"pip install --no-build-isolation . (non-editable): {installed['file']}, "
                    f"torch ext built for torch {installed['info']['torch_ext'].get('torch')}")


def _check_installed(py: Path, cwd: Path, seed: int) -> dict:
    """The installed package's kernels load, `vlmprep info` reports them, outputs match."""
    out = json.loads(_run([py, "-c", CHECK, str(seed)], 300, cwd=cwd, env=_env()).stdout.strip().splitlines()[-1])
    info = _run([py.parent / "vlmprep", "info"], 300, cwd=cwd, env=_env()).stdout
    line = next(ln for ln in info.splitlines() if ln.startswith("kernels:"))
    assert line.startswith("kernels: torch ops built for torch"), info
    return out
