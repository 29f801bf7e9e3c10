"""vlmprep.batch.sources: ids, order, counts, slicing, bad items as error samples, each input kind,
determinism, hostile inputs (corrupt tar / parquet, symlink loops, missing listed paths)."""
from __future__ import annotations

import gzip
import io
import os
import pickle
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from vlmprep.batch.sources import Sample, Unit, discover
from vlmprep.ops import DEFAULT_MAX_SOURCE_BYTES


def _all(unit: Unit) -> list[Sample]:
    return list(unit.samples())


def _check(unit: Unit, built, ids=None) -> list[Sample]:
    """Every sample exactly once, in the documented order, with the bytes that were written."""
    got = _all(unit)
    ids = built.ids if ids is None else ids
    assert [s.id for s in got] == ids
    assert unit.count() == len(ids)
    by_id = dict(zip(ids, built.ids))  # reader id -> fixture id
    for s in got:
        key = by_id[s.id]
        if key in built.unreadable:
            assert s.data is None and s.error, s
        else:
            assert s.error is None, s
            assert s.data == built.data[key], s.id
    return got


# -- each kind -----------------------------------------------------------------------------------
def test_folder(image_folder):
    (u,) = discover([str(image_folder.path)])
    assert (u.kind, u.name, u.path) == ("folder", "photos", str(image_folder.path))
    got = _check(u, image_folder)
    assert got[0].source == f"photos/{got[0].id}"
    assert "notes.txt" not in [s.id for s in got]  # not an image extension


def test_tar(wds_tar):
    (u,) = discover([str(wds_tar.path)])
    assert (u.kind, u.name) == ("tar", "shard-000000")
    got = _check(u, wds_tar)
    (nokey,) = wds_tar.unreadable
    bad = next(s for s in got if s.id == nokey)
    assert "no image member" in bad.error and "json" in bad.error
    assert got[0].source == "shard-000000.tar#000001"


def test_parquet_plain(parquet_plain):
    (u,) = discover([str(parquet_plain.path)], id_column="id")
    assert (u.kind, u.column, u.id_column) == ("parquet", "image", "id")
    got = _check(u, parquet_plain)
    (null,) = parquet_plain.unreadable
    assert "null" in next(s for s in got if s.id == null).error
    assert got[3].source == "plain.parquet#3"
    # without id_column: row-{n}
    (u2,) = discover([str(parquet_plain.path)])
    _check(u2, parquet_plain, ids=[f"row-{n}" for n in range(len(parquet_plain.ids))])


def test_parquet_hf_struct(parquet_hf):
    (u,) = discover([str(parquet_hf.path)])
    assert u.column == "image"
    got = _check(u, parquet_hf)
    errors = {s.id: s.error for s in got if s.error}
    assert set(errors) == set(parquet_hf.unreadable)
    missing = next(i for i, w in parquet_hf.bad.items() if w.startswith("missing"))
    assert "hf_files/missing.jpg" in errors[missing]


def test_list(path_list):
    (u,) = discover([str(path_list.path)])
    assert (u.kind, u.name) == ("list", "paths")
    got = _check(u, path_list)
    (missing,) = path_list.unreadable
    assert "found nothing" in next(s for s in got if s.id == missing).error
    # line numbers in sources: line 1 is a comment, then three paths, a blank line, the rest
    assert [s.source for s in got[:5]] == ["paths.txt#2", "paths.txt#3", "paths.txt#4", "paths.txt#6",
                                           "paths.txt#7"]


# -- slicing, determinism, pickling ---------------------------------------------------------------
@pytest.fixture
def all_units(image_folder, wds_tar, parquet_plain, parquet_hf, path_list):
    return discover([str(b.path) for b in (image_folder, wds_tar, parquet_plain, parquet_hf, path_list)],
                    id_column=None)


def test_slices_equal_full_iteration(all_units, seed):
    rng = np.random.default_rng(seed)
    for u in all_units:
        full = _all(u)
        n = len(full)
        pairs = [(0, None), (0, n), (n, None), (n + 3, None), (2, 1), (3, 3), (0, 1), (n - 1, n + 5)]
        pairs += [tuple(sorted(int(x) for x in rng.integers(0, n + 2, 2))) for _ in range(6)]
        for a, b in pairs:
            assert list(u.samples(a, b)) == full[a:b], (u.kind, a, b)
        # consecutive parts (as a job's work items) cover every sample exactly once
        parts = [s for k in range(0, n, 3) for s in u.samples(k, k + 3)]
        assert parts == full


def test_deterministic_and_picklable(all_units, image_folder, wds_tar, parquet_plain, parquet_hf, path_list):
    again = discover([str(b.path) for b in (image_folder, wds_tar, parquet_plain, parquet_hf, path_list)])
    assert again == all_units
    for u, v in zip(all_units, again):
        w = pickle.loads(pickle.dumps(u))
        assert w == u
        assert _all(u) == _all(v) == _all(w)


def test_bad_slice_arguments(all_units):
    u = all_units[0]
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="expected start an int >= 0"):
            u.samples(bad)
    with pytest.raises(ValueError, match="expected stop"):
        u.samples(0, -2)


# -- names and inputs ----------------------------------------------------------------------------
def test_unit_names_unique_and_safe(tmp_path, builders, photos):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    a = builders.tar(tmp_path / "x" / "Data.tar", photos)
    b = builders.tar(tmp_path / "y" / "data.tar", photos)
    c = builders.tar(tmp_path / "data-2.tar", photos)
    d = builders.folder(tmp_path / "my photos (2024)", photos)
    units = discover([str(a.path), str(b.path), str(c.path), str(d.path)])
    assert [u.name for u in units] == ["Data", "data-2", "data-2-2", "my_photos_2024_"]
    assert discover([str(b.path), str(a.path)])[1].name == "Data-2"  # input order decides


def test_inputs_checked(tmp_path, wds_tar, image_folder):
    with pytest.raises(ValueError, match="twice"):
        discover([str(wds_tar.path), str(tmp_path / "." / wds_tar.path.name)])
    with pytest.raises(ValueError, match="at least one input"):
        discover([])
    with pytest.raises(ValueError, match="expected an input folder or file.*check the path"):
        discover([str(tmp_path / "nope")])
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match=r"\.parquet.*got the file 'x.csv'"):
        discover([str(tmp_path / "x.csv")])
    with pytest.raises(ValueError, match="no match"):
        discover([str(tmp_path / "*.zip")])
    # one str is one input; a pattern expands, sorted
    assert discover(str(wds_tar.path))[0].kind == "tar"
    assert [u.kind for u in discover([str(tmp_path / "*.tar")])] == ["tar"]
    with pytest.raises(ValueError, match="max_bytes"):
        discover([str(wds_tar.path)], max_bytes=0)


def test_import_is_light():
    code = ("import sys, vlmprep.batch, vlmprep.batch.sources; "
            "bad = [m for m in ('pyarrow', 'torch', 'ray') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))


# -- folder --------------------------------------------------------------------------------------
def test_folder_glob(image_folder):
    root = str(image_folder.path)
    ids = image_folder.ids
    assert [s.id for s in _all(discover([root], glob="*.png")[0])] == [i for i in ids if i.endswith(".png")]
    # a glob replaces the extension filter; "*" crosses "/"
    assert [s.id for s in _all(discover([root], glob="a/*")[0])] == sorted(
        [i for i in ids if i.startswith("a/")] + ["a/meta.json"])
    top = [s.id for s in _all(discover([root], glob="**/*.jpg")[0])]
    assert "top.jpg" in top and "a/b/c/hopper4.jpg" in top and "a/b/c/rocket3.jpeg" not in top
    with pytest.raises(ValueError, match="matching '\\*.avif'.*none"):
        discover([root], glob="*.avif")


def test_folder_links_hidden_and_odd_names(image_folder):
    root = image_folder.path
    os.symlink("..", root / "a" / "loop")            # a folder loop: listed once
    os.symlink(root / "a" / "b", root / "again")      # a second link to a folder: listed once
    os.symlink("z.lnk", root / "x.jpg")               # a file link loop: an error sample
    os.symlink("x.jpg", root / "z.lnk")
    os.symlink("nowhere.png", root / "broken.png")    # a broken link: an error sample
    (root / ".hidden.jpg").write_bytes(b"x")          # hidden: skipped
    (root / ".cache").mkdir()
    (root / ".cache" / "k.jpg").write_bytes(b"x")
    odd = os.fsencode(str(root)) + b"/caf\xe9.jpg"    # not UTF-8: the id escapes the byte
    with open(odd, "wb") as f:
        f.write(image_folder.data["top.jpg"])
    (u,) = discover([str(root)])
    got = {s.id: s for s in _all(u)}
    assert set(got) == set(image_folder.ids) | {"x.jpg", "broken.png", "caf\\xe9.jpg"}
    assert got["caf\\xe9.jpg"].data == image_folder.data["top.jpg"]
    assert "loop" in got["x.jpg"].error and got["x.jpg"].data is None
    assert got["broken.png"].data is None and got["broken.png"].error
    assert [s.id for s in _all(u)] == sorted(got, key=lambda i: i.replace("\\xe9", "\udce9"))


def test_folder_size_cap(image_folder):
    (u,) = discover([str(image_folder.path)], max_bytes=20_000)
    big = {i for i, b in image_folder.data.items() if len(b) > 20_000}
    assert big
    for s in _all(u):
        assert (s.data is None) == (s.id in big), s
        if s.id in big:
            assert "max_source_bytes" in s.error
    assert Unit("u", "folder", "/x").max_bytes == DEFAULT_MAX_SOURCE_BYTES


def test_folder_without_images_names_the_shards(tmp_path, wds_tar):
    with pytest.raises(ValueError, match=r"got none \(it holds .tar"):
        discover([str(tmp_path)])


# -- tar -----------------------------------------------------------------------------------------
def _tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, b in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(b)
            tf.addfile(ti, io.BytesIO(b))
    return buf.getvalue()


def test_tar_grouping_rules(tmp_path, photos):
    jpg, png = photos[0][2], photos[1][2]
    p = tmp_path / "g.tar"
    p.write_bytes(_tar_bytes([
        ("d/k1.png", png), ("d/k1.JPG", jpg),    # jpg wins over png; extensions lower-cased
        ("k2.seg.png", png),                       # key up to the first dot: k2, ext "seg.png"
        ("README", b"no dot: ignored"),
        ("k3.webp", png), ("k3.webp", jpg),        # repeated member: the first is kept
        ("d/k1.json", b"{}"),                      # a key seen again later joins its group
    ]))
    got = _all(discover([str(p)])[0])
    assert [s.id for s in got] == ["d/k1", "k2", "k3"]
    assert got[0].data == jpg and got[2].data == png
    assert got[1].data is None and "seg.png" in got[1].error


def test_tar_gz(tmp_path, wds_tar):
    p = tmp_path / "z.tar.gz"
    p.write_bytes(gzip.compress(wds_tar.path.read_bytes(), mtime=0))
    (u,) = discover([str(p)])
    assert u.name == "z"
    _check(u, wds_tar)


def test_tar_hostile(tmp_path, wds_tar):
    raw = wds_tar.path.read_bytes()
    (tmp_path / "garbage.tar").write_bytes(b"not a tar at all " * 100)
    with pytest.raises(ValueError, match="garbage.tar.*does not open"):
        discover([str(tmp_path / "garbage.tar")])
    (tmp_path / "empty.tar").write_bytes(b"")
    with pytest.raises(ValueError, match="empty.tar"):
        discover([str(tmp_path / "empty.tar")])
    # cut in the middle of the second member's data: that group is an error, the first is fine
    offs = [(m.name, m.offset_data, m.size) for m in tarfile.open(wds_tar.path)]
    name, off, size = offs[3]
    assert name.startswith("000002.")
    (tmp_path / "cut.tar").write_bytes(raw[: off + size // 2])
    got = _all(discover([str(tmp_path / "cut.tar")])[0])
    assert [s.id for s in got] == ["000001", "000002"]
    assert got[0].data == wds_tar.data["000001"]
    assert got[1].data is None and "damaged" in got[1].error
    # a corrupt header in the middle: an error sample for its region, then the walk resumes at
    # the next valid header (its group lost the image member: no image); every later group reads
    name, off, size = offs[6]
    hdr = off - 512
    (tmp_path / "mid.tar").write_bytes(raw[:hdr] + b"\x7f" * 512 + raw[hdr + 512:])
    got = _all(discover([str(tmp_path / "mid.tar")])[0])
    assert [s.id for s in got] == ["000001", "000002", f"@{hdr}"] + wds_tar.ids[2:]
    assert f"expected a tar header at byte {hdr:,}" in got[2].error and got[2].data is None
    assert got[2].damaged and "no image member" in got[3].error and not got[3].damaged
    assert all(s.data == wds_tar.data[s.id] for s in got[4:] if s.id not in wds_tar.unreadable)
    # a member over the cap
    got = _all(discover([str(wds_tar.path)], max_bytes=15_000)[0])
    assert all((s.data is None) == (s.id in wds_tar.unreadable or len(wds_tar.data[s.id]) > 15_000)
               for s in got)


# -- parquet -------------------------------------------------------------------------------------
def test_parquet_columns(tmp_path, photos):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    jpg = photos[0][2]

    def write(name, **cols):
        p = tmp_path / name
        pq.write_table(pa.table(cols), p)
        return str(p)

    only = write("only.parquet", key=pa.array([7, 8]), payload=pa.array([jpg, jpg], pa.large_binary()))
    (u,) = discover([only], id_column="key")
    assert u.column == "payload"
    assert [(s.id, s.data) for s in _all(u)] == [("7", jpg), ("8", jpg)]
    two = write("two.parquet", a=pa.array([jpg], pa.binary()), b=pa.array([jpg], pa.binary()))
    with pytest.raises(ValueError, match=r"expected one image-bytes column.*got 2 such columns \(a, b\)"):
        discover([two])
    assert discover([two], column="b")[0].column == "b"
    named = write("named.parquet", bytes=pa.array([b"x"], pa.binary()), jpg=pa.array([jpg], pa.binary()))
    assert discover([named])[0].column == "jpg"  # IMAGE_COLUMNS order
    wrong = write("wrong.parquet", image=pa.array(["a.jpg"]), n=pa.array([1.5]))
    with pytest.raises(ValueError, match=r"expected one image-bytes column.*got none \(columns: image: string"):
        discover([wrong])
    with pytest.raises(ValueError, match=r"column 'image' .* to hold image bytes .*got string; pass column="):
        discover([wrong], column="image")
    with pytest.raises(ValueError, match=r"expected an image column 'nope'.*got the columns image: string"):
        discover([wrong], column="nope")
    floats = write("f.parquet", img=pa.array([jpg], pa.binary()), n=pa.array([1.5]))
    with pytest.raises(ValueError, match=r"id column 'n' .* string or integer column, got double"):
        discover([floats], id_column="n")
    with pytest.raises(ValueError, match="expected an id column 'id'"):
        discover([only], id_column="id")


def test_parquet_null_id_and_cap(tmp_path, photos):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    small, big = sorted((b for _, _, b in photos), key=len)[::len(photos) - 1]
    p = tmp_path / "n.parquet"
    pq.write_table(pa.table({"id": pa.array(["a", None, "c"]),
                             "image": pa.array([small, small, big], pa.binary())}), p)
    got = _all(discover([str(p)], id_column="id", max_bytes=len(big) - 1)[0])
    assert [s.id for s in got] == ["a", "row-1", "c"]
    assert got[0].data == small
    assert got[1].data is None and "null" in got[1].error
    assert got[2].data is None and "max_source_bytes" in got[2].error


def test_parquet_hostile(tmp_path, parquet_plain):
    pq = pytest.importorskip("pyarrow.parquet")
    raw = parquet_plain.path.read_bytes()
    (tmp_path / "bad.parquet").write_bytes(b"PAR1" + b"\x00" * 100)
    with pytest.raises(ValueError, match="bad.parquet.*does not open"):
        discover([str(tmp_path / "bad.parquet")])
    (tmp_path / "cut.parquet").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="cut.parquet.*does not open"):
        discover([str(tmp_path / "cut.parquet")])
    # a damaged data page in row group 1 (footer intact): its rows are error samples with their ids
    md = pq.ParquetFile(parquet_plain.path).metadata
    col = [md.row_group(1).column(i) for i in range(md.num_columns)]
    img = next(c for c in col if c.path_in_schema == "image")
    off = img.data_page_offset
    broken = raw[:off] + b"\xff" * 64 + raw[off + 64:]
    (tmp_path / "page.parquet").write_bytes(broken)
    (u,) = discover([str(tmp_path / "page.parquet")], id_column="id")
    got = _all(u)
    assert [s.id for s in got] == parquet_plain.ids  # every row once, ids from the id column
    rg1 = range(md.row_group(0).num_rows, md.row_group(0).num_rows + md.row_group(1).num_rows)
    for k, s in enumerate(got):
        if k in rg1:
            assert s.data is None and "row group 1" in s.error, s
        else:
            assert s.data == parquet_plain.data.get(s.id), s
    assert list(u.samples(4, 7)) == got[4:7]


# -- list ----------------------------------------------------------------------------------------
def test_list_rules(tmp_path, image_folder):
    top = image_folder.path / "top.jpg"
    p = tmp_path / "l.lst"
    p.write_text(f"  photos/top.jpg  \n#comment\n\n{top}\nphotos/top.jpg\nphotos/top.jpg\r\nmissing.png\n")
    (u,) = discover([str(p)])
    got = _all(u)
    assert [s.id for s in got] == ["photos/top.jpg", str(top), "photos/top.jpg#2", "photos/top.jpg#3",
                                   "missing.png"]
    assert [s.source for s in got] == ["l.lst#1", "l.lst#4", "l.lst#5", "l.lst#6", "l.lst#7"]
    assert all(s.data == image_folder.data["top.jpg"] for s in got[:4])
    assert got[4].data is None and got[4].error
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9.jpg\n")
    with pytest.raises(ValueError, match="bad.txt.*not UTF-8"):
        discover([str(tmp_path / "bad.txt")])


def test_folder_listed_once_per_process_and_again_by_discover(image_folder):
    (u,) = discover([str(image_folder.path)])
    n = u.count()
    (image_folder.path / "zz.jpg").write_bytes(image_folder.data["top.jpg"])
    assert u.count() == n and [s.id for s in _all(u)] == image_folder.ids  # parts of one job agree
    (v,) = discover([str(image_folder.path)])
    assert v.count() == n + 1 and _all(v)[-1].id == "zz.jpg"


def test_unit_kind_checked():
    with pytest.raises(ValueError, match="expected kind one of"):
        Unit("x", "zip", "/x.zip")
