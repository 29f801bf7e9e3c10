"""bench/dali_transfer.sh: prepare / receive / install on a fake wheel closure (no network, no DALI).

Each test runs the script in a temporary copy of its folder layout (``<tmp>/bench/dali_transfer.sh``,
parts under ``<tmp>/bench/.dali/parts``), never in the real tree's bench/.dali. A second copy
plays the GPU machine: parts are copied there one at a time, as the ``run`` tool's ``carry`` does.
The fake closure: a stand-in ``nvidia.dali`` package, a dependency with incompressible padding
(so the archive spans several parts) and a ``numpy`` wheel that prepare must leave out.
"""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "dali_transfer.sh"
PYTHON = sys.executable  # the project's own python (.venv/bin/python under the usual run)
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"
PART_BYTES = 24_000
FAKE_VERSION = "2.4.0-fake"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, dist: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal valid wheel (METADATA, WHEEL, RECORD with hashes) holding ``files``."""
    info = f"{dist}-{version}.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    make_wheel(folder, "nvidia_dali_fake", "2.4.0", {
        "nvidia/__init__.py": b"",
        "nvidia/dali/__init__.py": f"__version__ = {FAKE_VERSION!r}\n".encode(),
    })
    make_wheel(folder, "fakedep", "1.0", {
        "fakedep/__init__.py": b"VALUE = 42\n",
        "fakedep/blob.bin": os.urandom(3 * PART_BYTES),  # random: several parts, whatever the packing
    })
    make_wheel(folder, "numpy", "9.9", {"numpy_fake_marker/__init__.py": b""})
    return folder


def layout(root: Path) -> Path:
    (root / "bench").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "bench" / "dali_transfer.sh")
    return root


def run(root: Path, command: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHON": PYTHON, "DALI_TRANSFER_PYTHON_TAG": TAG,
            "DALI_TRANSFER_PART_BYTES": str(PART_BYTES), **env}
    if "PYTHONPATH" not in env:
        full.pop("PYTHONPATH", None)
    return subprocess.run(["bash", str(root / "bench" / "dali_transfer.sh"), command],
                          env=full, capture_output=True, text=True, timeout=120)


def manifest(root: Path) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    for line in (root / "bench/.dali/parts/MANIFEST").read_text().splitlines():
        if line and not line.startswith("#"):
            key, *rest = line.split()
            out.setdefault(key, []).append(rest)
    return out


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, wheels) -> Path:
    root = layout(tmp_path_factory.mktemp("here"))
    r = run(root, "prepare", DALI_TRANSFER_WHEELS=str(wheels))
    assert r.returncode == 0, r.stdout + r.stderr
    return root


def gpu_machine(tmp_path: Path, prepared: Path, parts: list[str]) -> Path:
    """A fresh copy of the layout that has received MANIFEST and ``parts``."""
    root = layout(tmp_path / "there")
    dest = root / "bench/.dali/parts"
    dest.mkdir(parents=True)
    for name in ["MANIFEST", *parts]:
        shutil.copy(prepared / "bench/.dali/parts" / name, dest / name)
    return root


def part_names(prepared: Path) -> list[str]:
    return [p[0] for p in manifest(prepared)["part"]]


def test_prepare_writes_parts_and_manifest(prepared):
    parts = prepared / "bench/.dali/parts"
    m = manifest(prepared)
    names = part_names(prepared)
    assert len(names) >= 3
    for name, size, digest in m["part"]:
        assert (parts / name).stat().st_size == int(size) <= PART_BYTES
        assert sha(parts / name) == digest
    whole = b"".join((parts / n).read_bytes() for n in names)
    (_, size, digest), = m["archive"]
    assert len(whole) == int(size) and hashlib.sha256(whole).hexdigest() == digest
    assert m["dali_version"] == [["2.4.0"]] and m["python_tag"] == [[TAG]]
    wheels = [w[0] for w in m["wheel"]]
    assert not any(w.startswith("numpy-") for w in wheels) and m["excluded"] == [["numpy"]]
    assert sorted(p.name for p in parts.iterdir()) == sorted([*names, "MANIFEST"])
    assert not (prepared / "bench/.dali/stage").exists()


def test_prepare_prints_the_run_calls_and_is_idempotent(prepared, wheels):
    before = {p.name: p.stat().st_mtime_ns for p in (prepared / "bench/.dali/parts").iterdir()}
    r = run(prepared, "prepare", DALI_TRANSFER_WHEELS=str(wheels))
    assert r.returncode == 0, r.stderr
    assert "nothing to do" in r.stdout
    assert before == {p.name: p.stat().st_mtime_ns for p in (prepared / "bench/.dali/parts").iterdir()}
    calls = [line.strip() for line in r.stdout.splitlines() if line.strip().split("/")[0].isdigit()]
    names = part_names(prepared)
    assert len(calls) == len(names) + 1
    for call, name in zip(calls, names):
        assert f'carry=["bench/.dali/parts/{name}", "bench/.dali/parts/MANIFEST"]' in call
        assert 'command="bash bench/dali_transfer.sh receive"' in call
    assert 'command="bash bench/dali_transfer.sh install && bash bench/gpu_check.sh"' in calls[-1]


def test_prepare_refuses_a_part_that_does_not_fit_one_call(tmp_path, wheels):
    root = layout(tmp_path)
    r = run(root, "prepare", DALI_TRANSFER_WHEELS=str(wheels), DALI_TRANSFER_PART_BYTES=str(64 * 2**20))
    assert r.returncode == 1
    assert "does not fit one run call" in r.stderr and "fix: DALI_TRANSFER_PART_BYTES=" in r.stderr
    assert not (root / "bench/.dali/parts").exists()


def test_receive_reports_present_and_missing_parts(tmp_path, prepared):
    names = part_names(prepared)
    there = gpu_machine(tmp_path, prepared, names[:1])
    r = run(there, "receive")
    assert r.returncode == 0, r.stderr  # parts arrive one per call: missing ones are not an error
    assert f"{len(names) - 1} part(s) still missing" in r.stdout
    assert all(n in r.stdout for n in names[1:])
    for name in names[1:]:
        shutil.copy(prepared / "bench/.dali/parts" / name, there / "bench/.dali/parts" / name)
    r = run(there, "receive")
    assert r.returncode == 0 and f"all {len(names)} parts present" in r.stdout


def test_receive_and_install_refuse_a_corrupted_part(tmp_path, prepared):
    names = part_names(prepared)
    there = gpu_machine(tmp_path, prepared, names)
    bad = there / "bench/.dali/parts" / names[1]
    data = bytearray(bad.read_bytes())
    data[100] ^= 0xFF
    bad.write_bytes(bytes(data))
    for command in ("receive", "install"):
        r = run(there, command)
        assert r.returncode == 1, command
        assert names[1] in r.stderr and "bad" in r.stderr
    assert not (there / "bench/.dali/site").exists()


def test_install_refuses_a_missing_part(tmp_path, prepared):
    names = part_names(prepared)
    there = gpu_machine(tmp_path, prepared, names[:-1])
    r = run(there, "install")
    assert r.returncode == 1
    assert f"missing: {names[-1]}" in r.stderr
    assert not (there / "bench/.dali/site").exists()


def test_install_refuses_another_python(tmp_path, wheels):
    root = layout(tmp_path)
    other = "cp39" if TAG != "cp39" else "cp310"
    assert run(root, "prepare", DALI_TRANSFER_WHEELS=str(wheels), DALI_TRANSFER_PYTHON_TAG=other).returncode == 0
    r = run(root, "install")
    assert r.returncode == 1 and f"expected a Python for {other}" in r.stderr


def test_install_with_all_parts_makes_an_importable_site(tmp_path, prepared):
    there = gpu_machine(tmp_path, prepared, part_names(prepared))
    r = run(there, "install")
    assert r.returncode == 0, r.stdout + r.stderr
    site = there / "bench/.dali/site"
    assert f"nvidia.dali {FAKE_VERSION} installed" in r.stdout and f"export PYTHONPATH={site}" in r.stdout
    probe = subprocess.run([PYTHON, "-c", "import nvidia.dali, fakedep; print(nvidia.dali.__version__, fakedep.VALUE)"],
                           env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert probe.stdout.split() == [FAKE_VERSION, "42"], probe.stderr
    assert not (site / "numpy_fake_marker").exists()  # left out by prepare
    assert not (there / "bench/.dali/wheels").exists() and not (there / "bench/.dali/site.tmp").exists()
