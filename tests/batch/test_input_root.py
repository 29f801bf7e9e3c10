"""Paths inside data (parquet ``struct<bytes, path>`` values, list lines, tar link members) are
read only under the input root (``discover(input_root=)``, ``vlmprep run --input-root``; default:
the input's own folder), never under /proc, /dev or /sys, and no error row carries the bytes of
a file it names (issue 33, deliverable 2).

Layout of every test (``tree``)::

    top/outside/secret.txt       MARKER..., a host file the data must not reach
    top/root/data/good.png       the good image (relative path)
    top/root/data/link.png  ->   ../../outside/secret.txt (a link inside the root, out of it)
    top/root/data/t.parquet      image: struct<bytes: null, path: ENTRY>, one row per ENTRY
    top/root/data/l.txt          one ENTRY per line
    top/root/other/b.png         an image outside the default root, inside --input-root top/root
"""
from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from PIL import Image

from vlmprep.batch import shards
from vlmprep.batch.config import JobConfig
from vlmprep.batch.sources import discover, paths
from vlmprep.cli.main import main

MARKER = b"QX7SECRETMARKER=hunter2"


def _png(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), color).save(buf, "PNG")
    return buf.getvalue()


GOOD, OTHER = _png((200, 30, 30)), _png((30, 200, 30))


def _leaks(text: object) -> bool:
    """Whether a text carries the secret file's content (whole, or its first bytes, as a decoder
    message quoting the head of unknown data would)."""
    s = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    return MARKER.decode() in s or MARKER[:8].decode() in s


@pytest.fixture
def tree(tmp_path):
    top = tmp_path / "top"
    (top / "outside").mkdir(parents=True)
    secret = top / "outside" / "secret.txt"
    secret.write_bytes(MARKER + b"\nmore secret lines\n")
    data = top / "root" / "data"
    data.mkdir(parents=True)
    (top / "root" / "other").mkdir()
    (data / "good.png").write_bytes(GOOD)
    (top / "root" / "other" / "b.png").write_bytes(OTHER)
    os.symlink("../../outside/secret.txt", data / "link.png")
    other_abs = str(top / "root" / "other" / "b.png")
    # (entry as written in the data, outcome with the default root, outcome with top/root)
    entries = [
        ("good.png", GOOD, GOOD),
        ("../../../../etc/shadow", "under", "under"),
        ("../" * 40 + "etc/shadow", "under", "under"),
        ("/proc/self/environ", "outside /proc", "outside /proc"),
        ("/etc/passwd", "under", "under"),
        ("link.png", "under", "under"),  # the link is inside the root, its target is not
        ("../../outside/secret.txt", "under", "under"),
        (str(secret), "under", "under"),
        (other_abs, "under", OTHER),
        ("../other/b.png", "under", OTHER),
    ]
    import pyarrow as pa
    import pyarrow.parquet as pq
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    pq.write_table(pa.table({"image": pa.array([{"bytes": None, "path": e} for e, _, _ in entries],
                                               struct)}), data / "t.parquet")
    (data / "l.txt").write_text("".join(f"{e}\n" for e, _, _ in entries))
    return top, entries


def _check(samples, entries, which: int, root: str) -> None:
    assert len(samples) == len(entries)
    for s, entry in zip(samples, entries):
        want = entry[which]
        if isinstance(want, bytes):
            assert s.error is None and s.data == want, (entry[0], s)
        else:
            assert s.data is None, (entry[0], s)
            assert f"expected a path {want}" in s.error, (entry[0], s.error)
            if want == "under":
                assert repr(root) in s.error and "--input-root" in s.error, s.error
        assert not _leaks(s.error or ""), s.error


@pytest.mark.parametrize("name", ["t.parquet", "l.txt"])
def test_default_root_is_the_inputs_folder(tree, name):
    top, entries = tree
    (u,) = discover([str(top / "root" / "data" / name)])
    assert u.input_root is None  # resolved when read: the input's folder
    _check(list(u.samples()), entries, 1, os.path.realpath(top / "root" / "data"))


@pytest.mark.parametrize("name", ["t.parquet", "l.txt"])
def test_input_root_widens_to_a_named_folder_only(tree, name):
    top, entries = tree
    (u,) = discover([str(top / "root" / "data" / name)], input_root=str(top / "root"))
    assert u.input_root == os.path.realpath(top / "root")
    _check(list(u.samples()), entries, 2, os.path.realpath(top / "root"))


def test_root_covering_the_file_reads_it_but_no_error_row_quotes_it(tree):
    """A root that covers a non-image file reads it; the decoder's error says what it looks like
    ("text"), never its bytes. /proc stays refused under the root "/"."""
    from vlmprep import Processor
    from vlmprep.batch.rows import process_samples
    top, _ = tree
    (u,) = discover([str(top / "root" / "data" / "l.txt")], input_root="/")
    got = {s.id: s for s in u.samples()}
    assert got["../../outside/secret.txt"].data.startswith(MARKER)
    assert got["link.png"].data.startswith(MARKER)  # the link's target is under "/"
    assert "outside /proc" in got["/proc/self/environ"].error
    rows = process_samples(Processor("qwen2-vl", errors="skip"), list(got.values()))
    by_id = {r["id"]: r for r in rows}
    assert by_id["good.png"]["status"] == "ok"
    err = by_id["../../outside/secret.txt"]["error"]
    assert by_id["../../outside/secret.txt"]["status"] == "error" and "got text" in err, err
    assert not any(_leaks(r["error"] or "") for r in rows)


def test_bad_input_root_is_refused(tree, tmp_path):
    top, _ = tree
    lst = str(top / "root" / "data" / "l.txt")
    for bad in ("/proc", "/proc/self", "/sys", "/dev"):
        with pytest.raises(ValueError, match="expected input_root outside /proc, /dev, /sys"):
            discover([lst], input_root=bad)
    with pytest.raises(ValueError, match="expected input_root an existing folder"):
        discover([lst], input_root=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="expected input_root an existing folder"):
        discover([lst], input_root=lst)
    with pytest.raises(ValueError, match="expected input_root a folder path"):
        discover([lst], input_root="")


def test_swap_after_the_check_is_refused(tree, monkeypatch):
    """TOCTOU: the path is checked, then a folder on it (or the file itself) is replaced by a
    link out of the root before the open: the open refuses it."""
    top, _ = tree
    data = top / "root" / "data"
    (data / "sub").mkdir()
    (data / "sub" / "secret.txt").write_bytes(GOOD)
    (data / "l2.txt").write_text("sub/secret.txt\ngood.png\n")
    (u,) = discover([str(data / "l2.txt")])
    real_stat = paths.stat_image_file
    swaps = []

    def swap_then_stat(path, max_bytes):
        st = real_stat(path, max_bytes)
        if path.endswith("sub/secret.txt") and not swaps:
            swaps.append(path)
            os.rename(data / "sub", data / "sub.old")
            os.symlink(str(top / "outside"), data / "sub")  # the folder becomes a link out
        return st

    monkeypatch.setattr(paths, "stat_image_file", swap_then_stat)
    first, good = list(u.samples())
    assert swaps and first.data is None and "expected a path under" in first.error, first
    assert not _leaks(first.error) and good.data == GOOD
    # the last component swapped for a link: O_NOFOLLOW
    os.remove(data / "sub")
    os.rename(data / "sub.old", data / "sub")
    swaps.clear()

    def swap_file_then_stat(path, max_bytes):
        st = real_stat(path, max_bytes)
        if path.endswith("sub/secret.txt") and not swaps:
            swaps.append(path)
            os.remove(path)
            os.symlink(str(top / "outside" / "secret.txt"), path)
        return st

    monkeypatch.setattr(paths, "stat_image_file", swap_file_then_stat)
    first, _ = list(u.samples())
    assert swaps and first.data is None and "symbolic link" in first.error, first


def test_tar_link_members_are_error_rows_never_followed(tmp_path):
    """A symlink or hardlink member as a group's image is an error row naming the link; it is
    never followed (nor silently dropped). A link that is not the image (a caption) is ignored."""
    p = tmp_path / "links.tar"
    with tarfile.open(p, "w", format=tarfile.USTAR_FORMAT) as tf:
        def add(name: str, data: bytes | None = None, link: str | None = None, kind=None):
            ti = tarfile.TarInfo(name)
            if link is not None:
                ti.type, ti.linkname = kind, link
                tf.addfile(ti)
            else:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
        add("a.jpg", link="/etc/passwd", kind=tarfile.SYMTYPE)
        add("a.txt", b"a caption")
        add("c.png", GOOD)
        add("b.png", link="c.png", kind=tarfile.LNKTYPE)
        add("d.jpg", link="../../outside/secret.txt", kind=tarfile.SYMTYPE)
        add("e.jpg", GOOD)
        add("e.txt", link="/etc/passwd", kind=tarfile.SYMTYPE)
    (u,) = discover([str(p)])
    got = list(u.samples())
    assert [s.id for s in got] == ["a", "c", "b", "d", "e"] and u.count() == 5
    assert got[1].data == GOOD and got[4].data == GOOD
    for s, kind in ((got[0], "symbolic"), (got[2], "hard"), (got[3], "symbolic")):
        assert s.data is None and f"got a {kind} link" in s.error, s


def test_job_config_input_root(tmp_path):
    cfg = JobConfig(preset="qwen2-vl")
    assert "input_root" not in cfg.to_json()  # configs without it keep their hash
    rel = JobConfig(preset="qwen2-vl", input_root=os.path.relpath(tmp_path))
    assert rel.input_root == str(tmp_path)
    assert JobConfig.from_json(rel.to_json()) == rel and rel.hash() != cfg.hash()
    assert rel.diff(cfg) == [f"input_root: {str(tmp_path)!r} -> None"]
    with pytest.raises(ValueError, match="input_root: expected a folder path"):
        JobConfig(preset="qwen2-vl", input_root="")


def _rows(out: Path) -> list[dict]:
    man = shards.read_manifest(out)
    assert man is not None and man["complete"]
    return [r for name in man["shards"] for r in shards.read_shard_rows(out / name)]


def test_vlmprep_run_job_reads_nothing_outside_the_root(tree, capsys):
    """A full `vlmprep run` over the parquet and the list, default root, then --input-root
    covering the secret: the shards hold the good images and error rows, and no row, manifest
    or summary holds a byte of the secret file."""
    top, entries = tree
    data = top / "root" / "data"
    for extra, col in (([], 1), (["--input-root", str(top)], None)):
        out = top / f"out{len(extra)}"
        rc = main(["run", "--preset", "qwen2-vl", "--input", str(data / "t.parquet"),
                   str(data / "l.txt"), "--output", str(out), "--json", "--no-progress", *extra])
        printed, err = capsys.readouterr()
        assert rc == 0, err
        assert not _leaks(printed) and not _leaks(err)
        rows = _rows(out)
        assert len(rows) == 2 * len(entries)
        assert not any(_leaks(repr({k: v for k, v in r.items() if k != "pixel_values"}))
                       for r in rows)
        assert not any(MARKER in (r["pixel_values"] or b"") for r in rows)
        assert not _leaks((out / shards.MANIFEST).read_bytes())
        ok = sorted({r["id"] for r in rows if r["status"] == "ok"})
        if col is not None:  # default root: only the good relative path
            assert ok == ["good.png", "row-0"]
        else:  # top covers other/ and outside/ (read, but the secret is no image: error row)
            assert ok == sorted(["good.png", "row-0", str(top / "root" / "other" / "b.png"),
                                 "../other/b.png", "row-8", "row-9"])
            assert json.loads(printed)["skipped"] == 2 * len(entries) - 6
    rc = main(["run", "--preset", "qwen2-vl", "--input", str(data / "l.txt"), "--output",
               str(top / "out-proc"), "--no-progress", "--input-root", "/proc/self"])
    assert rc == 2 and "expected input_root outside /proc" in capsys.readouterr().err
