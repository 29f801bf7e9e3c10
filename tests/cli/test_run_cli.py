"""`vlmprep run`: the summary (table and --json), usage errors (exit 2), and the real thing: a
`python -m vlmprep run` process killed with SIGKILL, interrupted with Ctrl-C (SIGINT to its
process group), or losing a worker (exit 1), then `--resume`: every id exactly once, no
temporary file left."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _support.imgdata import encode, tiled

from vlmprep.batch import shards
from vlmprep.cli.main import main

BAD = b"not an image at all\n"


@pytest.fixture(scope="module")
def photo_dir(tmp_path_factory) -> tuple[Path, list[str]]:
    """12 photo JPEGs (800x600, enough work that a job is caught mid-run) in two folders,
    and a text file named .jpg; returns (folder, every id)."""
    root = tmp_path_factory.mktemp("cli_run") / "photos"
    names = ["astronaut", "coffee", "chelsea", "rocket"]
    ids = []
    for i in range(12):
        rel = f"{'ab'[i % 2]}/img{i:02d}.jpg"
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(encode(tiled(names[i % 4], 600 + 8 * i, 800), "jpeg"))
        ids.append(rel)
    (root / "bad.jpg").write_bytes(BAD)
    return root, sorted(ids + ["bad.jpg"])


def _main(capsys, *args: str) -> tuple[int, str, str]:
    try:
        rc = main(["run", *args])
    except SystemExit as e:  # argparse
        rc = int(e.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def _ids(out: Path) -> list[str]:
    man = shards.read_manifest(out)
    assert man is not None
    return [r["id"] for name in man["shards"] for r in shards.read_shard_rows(out / name)]


def _tmp_files(out: Path) -> list[str]:
    return [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_run_json_and_table(tmp_path, capsys, photo_dir):
    src, ids = photo_dir
    out = tmp_path / "out"
    rc, text, _ = _main(capsys, "--preset", "qwen2-vl", "--input", str(src), "--output",
                        str(out), "--shard-size", "5", "--set", "max_pixels=200000", "--json",
                        "--no-progress")
    assert rc == 0
    s = json.loads(text)
    assert (s["images"], s["processed"], s["skipped"], s["shards"]) == (13, 12, 1, 3)
    assert list(s["skipped_by_reason"].values()) == [1]
    assert s["tokens"] == sum(shards.read_manifest(out)["shards"][k]["tokens"]
                              for k in shards.read_manifest(out)["shards"]) > 0
    assert sorted(_ids(out)) == ids
    man = shards.read_manifest(out)
    assert man["config"]["overrides"] == {"max_pixels": 200000}
    # done: resuming does nothing, and the table says what the job holds
    rc, text, _ = _main(capsys, "--preset", "qwen2-vl", "--input", str(src), "--output",
                        str(out), "--shard-size", "5", "--set", "max_pixels=200000", "--resume",
                        "--no-progress")
    assert rc == 0
    lines = text.splitlines()
    assert "vlmprep run" in lines[0]
    row = {ln[:17].strip(): ln[17:].split() for ln in lines[1:12]}
    assert row["processed"] == ["12"] and row["skipped"] == ["1"] and row["complete"] == ["yes"]
    assert "skipped, by reason" in text and "   1  expected a JPEG/PNG" in text


def test_usage_errors_exit_2(tmp_path, capsys, photo_dir):
    src, _ = photo_dir
    base = ["--input", str(src), "--no-progress"]
    rc, _, err = _main(capsys, *base, "--output", str(tmp_path / "o"))
    assert rc == 2 and "expected --preset NAME or --checkpoint PATH" in err
    rc, _, err = _main(capsys, *base, "--output", str(tmp_path / "o"), "--preset", "qwen2-vl",
                       "--set", "max_pixel=5")
    assert rc == 2 and "did you mean 'max_pixels'" in err
    rc, _, err = _main(capsys, *base, "--output", str(tmp_path / "o"), "--preset", "qwen2-vl",
                       "--workers", "0")
    assert rc == 2 and "expected a positive integer" in err
    # a folder of the user's: refused, untouched
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "paper.tex").write_text("x")
    rc, _, err = _main(capsys, *base, "--output", str(mine), "--preset", "qwen2-vl")
    assert rc == 2 and "paper.tex" in err and "--overwrite" in err
    assert [p.name for p in mine.iterdir()] == ["paper.tex"]
    # a changed config on --resume: refused, naming the difference
    out = tmp_path / "out"
    rc, _, _ = _main(capsys, *base, "--output", str(out), "--preset", "qwen2-vl",
                     "--set", "max_pixels=100000", "--shard-size", "20")
    assert rc == 0
    rc, _, err = _main(capsys, *base, "--output", str(out), "--preset", "qwen2-vl",
                       "--set", "max_pixels=100000", "--shard-size", "20", "--dtype", "uint8",
                       "--resume")
    assert rc == 2 and "dtype: 'float32' -> 'uint8'" in err


def _start(src: Path, out: Path, *extra: str) -> subprocess.Popen:
    # workers wait 0.5 s after each shard: the job (7 shards) is still running when the test
    # sees its first shard and interrupts it (without it a fast machine finished first: rc 0)
    env = dict(os.environ, VLMPREP_PROGRESS="0", VLMPREP_RUN_TEST_PAUSE_S="0.5")
    return subprocess.Popen(
        [sys.executable, "-m", "vlmprep", "run", "--preset", "qwen2-vl", "--input", str(src),
         "--output", str(out), "--shard-size", "2", "--workers", "2", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True, preexec_fn=_default_sigint)


def _default_sigint() -> None:
    # A test run launched as a background job of a shell without job control inherits SIGINT
    # ignored (POSIX), and Python then installs no KeyboardInterrupt handler: the job would not
    # see the test's Ctrl-C at all. The test wants a terminal's Ctrl-C, so default it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_first_shard(p: subprocess.Popen, out: Path, timeout: float = 240) -> None:
    """Until the manifest lists a shard (the job is then mid-run: 7 shards in all)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        man = shards.read_manifest(out) if out.is_dir() else None
        if man and man["shards"]:
            return
        if p.poll() is not None:
            pytest.fail(f"the job ended before writing a shard: rc {p.returncode}, "
                        f"{p.stderr.read() if p.stderr else ''}")
        time.sleep(0.01)
    p.kill()
    pytest.fail("no shard appeared in time")


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie reparented to init counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _resume_all(capsys, src: Path, out: Path) -> dict:
    rc, text, err = _main(capsys, "--preset", "qwen2-vl", "--input", str(src), "--output",
                          str(out), "--shard-size", "2", "--resume", "--json", "--no-progress")
    assert rc == 0, err
    return json.loads(text)


def test_sigkill_mid_run_then_resume_gives_every_id_once(tmp_path, capsys, photo_dir):
    src, ids = photo_dir
    out = tmp_path / "out"
    p = _start(src, out)
    _wait_first_shard(p, out)
    workers = _children(p.pid)
    os.kill(p.pid, signal.SIGKILL)  # the parent only, as the OOM killer would
    p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL
    end = time.monotonic() + 15  # the workers die with their parent (no writer left behind)
    while any(_alive(w) for w in workers) and time.monotonic() < end:
        time.sleep(0.05)
    assert not [w for w in workers if _alive(w)]
    man = shards.read_manifest(out)
    assert man is not None and not man["complete"]  # caught mid-run
    s = _resume_all(capsys, src, out)
    assert s["complete"] and s["images"] == len(ids) and s["run_images"] < len(ids)
    got = _ids(out)
    assert sorted(got) == ids and len(set(got)) == len(got)  # each id exactly once
    assert not _tmp_files(out)


def test_ctrl_c_exits_130_without_half_shard_then_resume(tmp_path, capsys, photo_dir):
    src, ids = photo_dir
    out = tmp_path / "out"
    p = _start(src, out)
    _wait_first_shard(p, out)
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground group
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "--resume" in err and "interrupted" in err
    assert not _tmp_files(out)
    man = shards.read_manifest(out)
    assert not man["complete"]
    for name, info in man["shards"].items():  # the manifest lists whole shards only
        assert (out / name).stat().st_size == info["bytes"]
    s = _resume_all(capsys, src, out)
    got = _ids(out)
    assert s["complete"] and sorted(got) == ids and len(set(got)) == len(got)


def test_a_dead_worker_stops_the_job_with_exit_1_then_resume(tmp_path, capsys, photo_dir):
    """A worker killed (as the OOM killer would): exit 1 naming it; --resume finishes."""
    src, ids = photo_dir
    out = tmp_path / "out"
    p = _start(src, out)
    _wait_first_shard(p, out)
    workers = [c for c in _children(p.pid) if "spawn_main" in _cmdline(c)]
    if not workers:
        p.kill()
        pytest.skip("the workers are not visible in /proc here")
    os.kill(workers[0], signal.SIGKILL)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1, err
    assert "a worker process ended unexpectedly" in err and "--resume" in err
    assert not _tmp_files(out)
    s = _resume_all(capsys, src, out)
    got = _ids(out)
    assert s["complete"] and sorted(got) == ids and len(set(got)) == len(got)
