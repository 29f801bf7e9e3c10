"""Issue 33: damaged batch inputs lose nothing silently (vlmprep.batch.sources).

Every tar here is built with Python's tarfile, the keys and bytes put in are recorded, and what
the reader returns is checked against an oracle that shares no code with it: every offset where
``tarfile.TarInfo.frombuf`` accepts a header (its own checksum check). Every member whose bytes
are intact comes back as a data sample with those exact bytes; every key a header names is a
sample id (data or error row); every damaged place is an error row; nothing is missing. Parquet:
a page over the read cap is not decompressed (peak memory measured in a subprocess); a reader
that yields fewer rows than the metadata says gives error rows for the gap. A tar or list
changed after discover() is an error, not a silent shift. A job over a damaged input is not
complete (manifest, summary, CLI exit status 3).
"""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

from vlmprep.batch import shards, sources
from vlmprep.batch.sources import discover, tar_walk, thrift
from vlmprep.batch.sources import parquet as parquet_src
from vlmprep.batch.sources import tar as tar_src

# -- building tars and the independent oracle ------------------------------------------------------


def _payloads(rng: np.random.Generator, n: int) -> dict[str, dict[str, bytes]]:
    """``n`` WebDataset groups: KEY.jpg (random bytes of odd sizes: the reader never decodes)
    and KEY.txt (a caption)."""
    out = {}
    for k in range(n):
        size = int(rng.integers(1, 3000))
        out[f"{k:06d}"] = {"jpg": rng.integers(0, 256, size, dtype=np.uint8).tobytes(),
                           "txt": f"caption {k} ".encode() * int(rng.integers(1, 40))}
    return out


def _tar(groups: dict[str, dict[str, bytes]], fmt: int = tarfile.USTAR_FORMAT,
         pax: dict[str, dict[str, str]] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for key, members in groups.items():
            for ext, b in members.items():
                ti = tarfile.TarInfo(f"{key}.{ext}")
                ti.size, ti.mtime = len(b), 0
                if pax and f"{key}.{ext}" in pax:
                    ti.pax_headers = dict(pax[f"{key}.{ext}"])
                tf.addfile(ti, io.BytesIO(b))
    return buf.getvalue()


def _layout(raw: bytes) -> dict[str, tuple[int, int, int]]:
    """member name -> (header offset, data offset, size), as tarfile reads the intact tar."""
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        return {m.name: (m.offset, m.offset_data, m.size) for m in tf}


def _oracle(raw: bytes) -> dict[int, str | None]:
    """Every offset where tarfile accepts a ustar header (its checksum check) -> the name of a
    regular member (None: a pax header, a folder, ...)."""
    found = {}
    i = raw.find(b"ustar", 257)
    while i != -1:
        o = i - 257
        if o + 512 <= len(raw):
            try:
                ti = tarfile.TarInfo.frombuf(raw[o:o + 512], "utf-8", "surrogateescape")
                found[o] = ti.name if ti.isreg() else None
            except (tarfile.HeaderError, ValueError):
                pass
        i = raw.find(b"ustar", i + 1)
    return found


_WDS_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's key rule (the docs' rule)


def _text(name: str) -> str:
    """A tar name as the reader's ids write it (bytes that are not UTF-8 as \\xNN)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _set_size(raw: bytearray, hdr: int, size: int) -> None:
    """Write a new size into the header at ``hdr`` and a checksum that matches it."""
    raw[hdr + 124:hdr + 136] = b"%011o\0" % size
    raw[hdr + 148:hdr + 156] = b" " * 8
    raw[hdr + 148:hdr + 156] = b"%06o\0 " % sum(raw[hdr:hdr + 512])


def _read(path) -> tuple[list[sources.Sample], sources.Unit]:
    (u,) = discover([str(path)])
    got = list(u.samples())
    assert len(got) == u.count()
    return got, u


def _check_accounted(got, groups, raw_damaged: bytes, intact: set[str],
                     changed: frozenset[str] = frozenset()) -> None:
    """Every intact key: a data sample with its exact bytes; every key a surviving header names:
    a sample id; a data sample's bytes are the recorded image bytes of its key (unless the
    damage changed bytes inside that image member: a tar has no checksum on data); every error
    row has a message with a fix."""
    by_id = {s.id: s for s in got}
    assert len(by_id) == len(got), [s.id for s in got]
    for key in intact:
        s = by_id.get(key)
        assert s is not None and s.data == groups[key]["jpg"], (key, s)
    named = {_text(m.group(1)) for n in _oracle(raw_damaged).values()
             if n is not None and (m := _WDS_KEY.match(n))}
    assert named <= set(by_id), named - set(by_id)
    for s in got:
        if s.data is not None:
            assert s.id in groups and (s.id in changed or s.data == groups[s.id]["jpg"]), s
        else:
            assert s.error and "fix" in s.error or "no image member" in s.error, s


# -- the repros --------------------------------------------------------------------------


def test_cut_inside_a_caption(tmp_path, seed):
    """Issue repro: a tar cut inside a caption kept 1 sample of 8 and said nothing. Cut (the
    file ends there): the cut group is a damaged error row naming the cut. Spliced (bytes removed
    there, the rest intact): every later group is read again after the walk resynchronises."""
    groups = _payloads(np.random.default_rng(seed), 8)
    raw = _tar(groups)
    lay = _layout(raw)
    _, data1, size1 = lay["000001.txt"]
    cut = data1 + size1 // 2
    p = tmp_path / "cut.tar"
    p.write_bytes(raw[:cut])
    got, _ = _read(p)
    assert [s.id for s in got] == ["000000", "000001"]
    assert got[0].data == groups["000000"]["jpg"] and not got[0].damaged
    assert got[1].data is None and got[1].damaged and "ends inside it" in got[1].error
    assert "000001.txt" in got[1].error and "cut" in got[1].error
    _check_accounted(got, groups, raw[:cut], {"000000"})

    spliced = raw[:cut] + raw[cut + 100:]  # 100 bytes gone: everything after is misaligned
    (tmp_path / "splice.tar").write_bytes(spliced)
    with tarfile.open(tmp_path / "splice.tar") as tf:  # before: tarfile stops there, silently
        assert len(tf.getmembers()) == 4
    got, _ = _read(tmp_path / "splice.tar")
    later = [k for k in groups if k > "000001"]
    assert [s.id for s in got] == ["000000", "000001"] + later
    assert got[1].damaged and "000001.txt" in got[1].error and "is not read" in got[1].error
    _check_accounted(got, groups, spliced, {"000000", *later})


@pytest.mark.parametrize("header_size", ["real", "zero"])
@pytest.mark.parametrize("lie", [+5000, -1])
def test_pax_header_with_a_false_size(tmp_path, seed, lie, header_size):
    """Issue repro: a pax ``size`` record that lies hid every member after it (tarfile reads on
    from the wrong place). When the header's own size (checksummed) disagrees, the member is an
    error and the walk goes on by the header's size. When the header says 0 (as for a member too
    large for it), the next header must confirm the pax size: too large, a valid header inside
    its stated data shows the lie; too small, the bytes after it are not a header: the member
    is an error, the rest of it one region, and the walk resumes at the next header."""
    groups = _payloads(np.random.default_rng(seed), 8)
    groups["000003"]["txt"] = b"caption " * 200  # over two blocks: a short lie lands inside it
    real = len(groups["000003"]["txt"])
    lay = _layout(_tar(groups, tarfile.PAX_FORMAT, {"000003.txt": {"size": str(real)}}))
    heads = {h for h, _, _ in lay.values()} | {d - 512 for _, d, _ in lay.values()}
    d = lay["000003.txt"][1]  # the same layout as with the false record (blocks of 512)
    fake = real + lie if lie > 0 else 1
    while lie > 0 and d + -(-fake // 512) * 512 in heads:  # landing on a header: another test
        fake += 512
    raw = bytearray(_tar(groups, tarfile.PAX_FORMAT, {"000003.txt": {"size": str(fake)}}))
    if header_size == "zero":
        _set_size(raw, d - 512, 0)
    p = tmp_path / "pax.tar"
    p.write_bytes(raw)
    with tarfile.open(p) as tf:  # before: tarfile stops at the lie, silently
        assert len([m for m in tf if m.name.startswith("00000")]) < 16
    got, _ = _read(p)
    errors = {s.id: s for s in got if s.data is None}
    assert errors["000003"].damaged and "000003.txt" in errors["000003"].error
    _check_accounted(got, groups, bytes(raw), set(groups) - {"000003"})
    regions = [i for i in errors if i.startswith("@")]
    assert set(errors) == {"000003", *regions}
    assert len(regions) == (lie < 0 and header_size == "zero")
    assert all(errors[i].damaged for i in regions)


def test_bad_checksum_header(tmp_path, seed):
    """A flipped byte in a header: that region is one damaged error row; its group lost the
    image member (an error row saying so); every other group reads."""
    groups = _payloads(np.random.default_rng(seed), 6)
    raw = bytearray(_tar(groups))
    hdr = _layout(bytes(raw))["000002.jpg"][0]
    raw[hdr + 10] ^= 0x40  # in the name: the checksum no longer matches
    (tmp_path / "b.tar").write_bytes(raw)
    got, _ = _read(tmp_path / "b.tar")
    ids = [s.id for s in got]
    assert ids == ["000000", "000001", f"@{hdr}", "000002", "000003", "000004", "000005"]
    assert got[2].damaged and f"byte {hdr:,}" in got[2].error and "fix" in got[2].error
    assert "no image member" in got[3].error and not got[3].damaged
    _check_accounted(got, groups, bytes(raw), {"000000", "000001", "000003", "000004", "000005"})


def test_member_size_past_the_end(tmp_path, seed):
    """A size (valid checksum) that runs past the end of the file: the last member -> its group
    is a damaged error row (the tar is cut); a member in the middle -> the next header lies
    inside its stated data: a false size, and the walk goes on from that header."""
    groups = _payloads(np.random.default_rng(seed), 5)
    raw = _tar(groups)
    lay = _layout(raw)
    last = bytearray(raw)
    _set_size(last, lay["000004.txt"][0], len(raw) * 3)
    (tmp_path / "last.tar").write_bytes(last)
    got, _ = _read(tmp_path / "last.tar")
    assert [s.id for s in got] == list(groups)
    assert got[-1].damaged and "ends inside it" in got[-1].error
    _check_accounted(got, groups, bytes(last), set(list(groups)[:-1]))

    mid = bytearray(raw)
    _set_size(mid, lay["000001.jpg"][0], len(raw) * 3)
    (tmp_path / "mid.tar").write_bytes(mid)
    got, _ = _read(tmp_path / "mid.tar")
    assert [s.id for s in got] == list(groups)
    assert got[1].damaged and "false size" in got[1].error
    _check_accounted(got, groups, bytes(mid), set(groups) - {"000001"})


@pytest.mark.parametrize("codec", ["gzip", "xz", "bz2"])
def test_compressed_tar_cut(tmp_path, seed, codec):
    """A compressed tar cut short: every member the cut stream still holds whole reads with its
    bytes; the cut is an error row naming the stream and the compressed offset; nothing is
    silent. (bz2 gives no bytes of a block that is cut: then no header is left, and discover
    refuses the file, naming it.)"""
    groups = _payloads(np.random.default_rng(seed), 10)
    raw = _tar(groups)
    packed = {"gzip": lambda b: gzip.compress(b, mtime=0), "xz": lzma.compress,
              "bz2": bz2.compress}[codec](raw)
    cut = packed[: len(packed) * 3 // 5]
    p = tmp_path / f"c.tar{'.gz' if codec == 'gzip' else ''}"
    p.write_bytes(cut)
    # what the cut stream holds, by another decompressor (the oracle)
    dec = {"gzip": lambda: zlib.decompressobj(31), "xz": lzma.LZMADecompressor,
           "bz2": bz2.BZ2Decompressor}[codec]()
    try:
        held = dec.decompress(cut)
    except (EOFError, OSError, lzma.LZMAError):
        held = b""
    if len(held) < 512:
        with pytest.raises(ValueError, match="c.tar.*does not open"):
            discover([str(p)])
        return
    lay = _layout(raw)

    def whole(name: str) -> bool:
        return lay[name][1] + lay[name][2] <= len(held)

    # a member whose header the cut stream lost is simply not there; one that begins and is
    # cut makes its group an error row
    readable = {k for k in groups if whole(f"{k}.jpg")
                and (whole(f"{k}.txt") or lay[f"{k}.txt"][0] + 512 > len(held))}
    assert 0 < len(readable) < len(groups)
    got, _ = _read(p)
    _check_accounted(got, groups, held, {k for k in readable if whole(f"{k}.txt")})
    damaged = [s for s in got if s.damaged]
    assert damaged and any(f"{codec} stream ends before its end marker" in s.error for s in damaged)
    assert [s.id for s in got if s.data is not None] == sorted(readable)


def test_gzip_corrupt_and_trailing_bytes(tmp_path, seed):
    """Corrupt deflate data in the middle, or bytes after the gzip stream: an error row, and
    every member before the damage reads."""
    groups = _payloads(np.random.default_rng(seed), 8)
    raw = _tar(groups)
    packed = bytearray(gzip.compress(raw, mtime=0))
    trailing = bytes(packed) + b"not gzip data"
    (tmp_path / "t.tar.gz").write_bytes(trailing)
    got, _ = _read(tmp_path / "t.tar.gz")
    assert [s.id for s in got if s.data is not None] == list(groups)
    (bad,) = [s for s in got if s.data is None]
    assert bad.damaged and "other bytes" in bad.error
    for k in range(len(packed) // 2, len(packed) // 2 + 8):
        packed[k] ^= 0xFF
    (tmp_path / "x.tar.gz").write_bytes(packed)
    try:  # the data check fails at the stream's end: nothing of it is trusted, or an error row
        got, _ = _read(tmp_path / "x.tar.gz")
    except ValueError as e:
        assert "x.tar.gz" in str(e) and "gzip data is corrupt" in str(e)
    else:
        assert any(s.damaged and "gzip" in s.error for s in got)


def test_concatenated_tars_and_trailing_garbage(tmp_path, seed):
    """Zero blocks end an archive; a valid header after them is read on (cat a.tar b.tar), other
    bytes after them are an error row, never ignored."""
    rng = np.random.default_rng(seed)
    a, b = _payloads(rng, 3), {f"x{k}": v for k, v in _payloads(rng, 3).items()}
    (tmp_path / "cat.tar").write_bytes(_tar(a) + _tar(b))
    got, _ = _read(tmp_path / "cat.tar")
    assert [(s.id, s.data) for s in got] == [(k, v["jpg"]) for k, v in {**a, **b}.items()]
    raw = _tar(a)
    (tmp_path / "junk.tar").write_bytes(raw + b"\x01junk" * 50)
    got, _ = _read(tmp_path / "junk.tar")
    assert [s.id for s in got] == [*a, f"@{len(raw)}"]
    assert got[-1].damaged and "after the end-of-archive marker" in got[-1].error
    (tmp_path / "nomarker.tar").write_bytes(raw[:raw.index(b"\0" * 1024, _layout(raw)["000002.txt"][1])])
    got, _ = _read(tmp_path / "nomarker.tar")
    assert got[-1].damaged and "end-of-archive marker" in got[-1].error


def test_swallowed_headers_fail_discover_naming_the_tar(tmp_path, seed):
    """The independent count: a false size that lands exactly on a later header hides the
    members between (the walk alone cannot tell); the plain scan of every header finds them, and
    discover refuses the tar, naming it. The same for an uncompressed tar stored in a shard."""
    groups = _payloads(np.random.default_rng(seed), 5)
    raw = _tar(groups)
    lay = _layout(raw)
    h1, d1, s1 = lay["000001.jpg"]
    h3 = lay["000003.jpg"][0]
    lie = bytearray(raw)
    _set_size(lie, h1, h3 - d1)  # its data now ends exactly at 000003.jpg's header
    (tmp_path / "lie.tar").write_bytes(lie)
    with pytest.raises(ValueError, match=r"lie\.tar.*a plain scan.*000001\.jpg.*false size"):
        discover([str(tmp_path / "lie.tar")])
    nested = _tar({"000000": {"jpg": b"x" * 10, "tar": _tar(groups)}, "000001": groups["000001"]})
    (tmp_path / "nested.tar").write_bytes(nested)
    with pytest.raises(ValueError, match=r"nested\.tar.*000000\.tar"):
        discover([str(tmp_path / "nested.tar")])


# -- seeded random damage ------------------------------------------------------------------------


def _damage(rng: np.random.Generator, raw: bytes) -> tuple[bytes, list[tuple[int, int]], int]:
    """(damaged bytes, the original byte ranges it touched, where the original bytes after the
    damage start in the damaged file minus where they were: a shift)."""
    n = len(raw)
    kind = int(rng.integers(0, 5))
    a = int(rng.integers(0, n - 1024))
    if kind == 0:  # cut (truncate)
        return raw[:a], [(a, n)], 0
    if kind == 1:  # flip bytes anywhere
        out = bytearray(raw)
        spots = sorted(int(x) for x in rng.integers(0, n - 1024, int(rng.integers(1, 6))))
        for k in spots:
            out[k] ^= int(rng.integers(1, 256))
        return bytes(out), [(k, k + 1) for k in spots], 0
    if kind == 2:  # a block overwritten with noise
        b = a + int(rng.integers(1, 1500))
        return raw[:a] + rng.integers(0, 256, b - a, dtype=np.uint8).tobytes() + raw[b:], [(a, b)], 0
    if kind == 3:  # a span removed (the rest misaligned)
        b = a + int(rng.integers(1, 1500))
        return raw[:a] + raw[b:], [(a, b)], a - b
    noise = rng.integers(0, 256, int(rng.integers(1, 700)), dtype=np.uint8).tobytes()
    return raw[:a] + noise + raw[a:], [(a, a + 1)], len(noise)  # bytes inserted


@pytest.mark.parametrize("k", range(24))
def test_random_damage_loses_nothing(tmp_path, seed, k):
    """Random cuts, flips, noise, removed and inserted spans: every group whose members are
    untouched is a data sample with its exact bytes; every key a surviving header names is a
    sample; every data sample's bytes are its key's; the headers the reader walked are exactly
    the ones the oracle finds; count() equals the samples given; a cut is a damaged error row."""
    rng = np.random.default_rng([seed, k])
    groups = _payloads(rng, int(rng.integers(4, 12)))
    raw = _tar(groups)
    lay = _layout(raw)
    bad, ranges, _ = _damage(rng, raw)
    p = tmp_path / "r.tar"
    p.write_bytes(bad)

    def touched(name: str) -> bool:
        # its header, data or padding, or the next header (bytes cut out of that one shift a
        # header into this padding: then this member cannot be told from one cut short)
        h, d, s = lay[name]
        return any(lo < d + -(-s // 512) * 512 + 512 and h < hi for lo, hi in ranges)

    intact = {key for key in groups if not any(touched(f"{key}.{e}") for e in ("jpg", "txt"))}
    changed = frozenset(key for key in groups if touched(f"{key}.jpg"))
    oracle = _oracle(bad)
    if not oracle:
        with pytest.raises(ValueError, match="r.tar"):
            discover([str(p)])
        return
    try:
        got, _ = _read(p)
    except ValueError as e:  # a removed span can make a size land on a later header exactly:
        assert "a plain scan" in str(e) and "r.tar" in str(e)  # refused, naming the tar
        return
    _check_accounted(got, groups, bad, intact, changed)
    assert tar_src.tar_index(str(p)).headers == frozenset(oracle)
    end = max(d + s for _, d, s in lay.values())
    if len(bad) < len(raw) and ranges[0][0] < end and ranges == [(ranges[0][0], len(raw))]:
        assert any(s.damaged for s in got), "a cut inside the members must be an error row"
    assert list(discover([str(p)])[0].samples(1, 4)) == got[1:4]


# -- a job over a damaged input ------------------------------------------------------------------


def test_job_over_a_damaged_tar_is_not_complete(tmp_path, photos, capsys):
    """The job reads what it can, writes every sample the unit counts (error rows included), and
    ends not complete: manifest and summary say so and name the tar; the CLI exits 3; a resume
    does not make it complete either."""
    from vlmprep.batch.config import JobConfig
    from vlmprep.batch.run import run
    from vlmprep.cli.main import main
    groups = {f"{k:06d}": {"jpg": b, "txt": f"a photo of {name} ".encode() * 30}
              for k, (name, ext, b) in enumerate(p for p in photos if p[1] == "jpg")}
    assert len(groups) >= 2
    raw = _tar(groups)
    _, d, size = _layout(raw)["000000.txt"]
    p = tmp_path / "shard-000001.tar"
    p.write_bytes(raw[:d + size // 2] + raw[d + size // 2 + 64:])  # 64 bytes out of a caption
    (u,) = discover([str(p)])
    samples = list(u.samples())
    assert [x.id for x in samples] == list(groups)  # every group still there
    cfg = JobConfig(preset="qwen2-vl", shard_size=1)
    s = run([str(p)], str(tmp_path / "out"), cfg, progress=False)
    man = shards.read_manifest(tmp_path / "out")
    assert not s["complete"] and not man["complete"]
    assert s["damaged"] == 1 and s["damaged_inputs"] == {str(p): 1}
    assert man["units"][u.name]["count"] == u.count() == s["images"] == len(groups)
    assert s["processed"] == len(groups) - 1
    rows = [r for name in man["shards"] for r in shards.read_shard_rows(tmp_path / "out" / name)]
    assert [r["id"] for r in rows] == list(groups)
    assert rows[0]["status"] == "error" and "000000.txt" in rows[0]["error"]
    s2 = run([str(p)], str(tmp_path / "out"), cfg, resume=True, progress=False)
    assert not s2["complete"] and s2["run_images"] == 0
    rc = main(["run", "--preset", "qwen2-vl", "--input", str(p), "--output",
               str(tmp_path / "cli"), "--shard-size", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 3 and "not complete" in err and str(p) in err


def test_changed_inputs_are_an_error_not_a_shift(tmp_path, seed):
    """A tar or list rewritten after discover() counted it: count() and samples() refuse,
    naming the file (the job's parts would read shifted samples). A list line holding another
    line break (\\x85, \\u2028, ...) is refused at discover: it would silently become two paths."""
    groups = _payloads(np.random.default_rng(seed), 3)
    p = tmp_path / "t.tar"
    p.write_bytes(_tar(groups))
    (u,) = discover([str(p)])
    p.write_bytes(_tar({**groups, "000009": groups["000000"]}))
    with pytest.raises(ValueError, match=r"t\.tar.*unchanged since discover"):
        u.samples(0, 2)
    with pytest.raises(ValueError, match=r"t\.tar.*unchanged since discover"):
        u.count()
    (tmp_path / "a.jpg").write_bytes(b"x")
    lst = tmp_path / "l.txt"
    lst.write_text("a.jpg\na.jpg\n")
    (v,) = discover([str(lst)])
    lst.write_text("b.jpg\na.jpg\na.jpg\n")
    with pytest.raises(ValueError, match=r"l\.txt.*unchanged since discover"):
        list(v.samples(1))
    lst.write_text("a.jpg\nx\u2028y.jpg\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"one path per line in .*l\.txt.*line 2"):
        discover([str(lst)])
    lst.write_text("a.jpg\r\n\r\n# c\r\na.jpg\r")  # \r\n and \r line ends are fine
    assert discover([str(lst)])[0].count() == 2


# -- parquet -------------------------------------------------------------------------------------
_PROBE = textwrap.dedent("""
    import json, resource, sys
    import pyarrow.parquet  # imported before the baseline
    from vlmprep.batch.sources import discover
    (u,) = discover([sys.argv[1]], max_bytes=int(sys.argv[2]))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = list(u.samples())
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"growth_kb": after - before, "errors": [s.error for s in got],
                      "data": [None if s.data is None else len(s.data) for s in got]}))
""")


def test_parquet_value_over_the_cap_is_not_decompressed(tmp_path):
    """Issue repro, scaled: one zstd value of 48 MB in a file of a few KB (the issue: 300 MB in
    17.9 KB, peak 2.28 GB). The page header says 48 MB uncompressed; with max_bytes 1 MB the row
    is an error row naming the page, and the reader's peak memory grows by well under the value
    (before: pyarrow decompressed it, several copies)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    value = 48 << 20
    p = tmp_path / "big.parquet"
    pq.write_table(pa.table({"image": pa.array([b"\0" * value, b"ok"], pa.binary())}), p,
                   compression="zstd", use_dictionary=False, row_group_size=1)
    assert os.path.getsize(p) < 64 << 10
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", _PROBE, str(p), str(1 << 20)], cwd=root,
                         capture_output=True, text=True, check=True).stdout
    r = json.loads(out)
    assert r["data"] == [None, 2]
    assert "bytes uncompressed" in r["errors"][0] and "not decompressed" in r["errors"][0]
    assert r["growth_kb"] * 1024 < value // 8, r["growth_kb"]


def test_parquet_page_bound_and_collateral_rows(tmp_path, monkeypatch):
    """A page over the absolute bound (many values, each under the cap) is not decompressed
    either; the other rows of its row group are error rows saying why (pyarrow reads a row
    group's pages together); other row groups read; ids still come from the id column."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    vals = [bytes([k]) * 40_000 for k in range(6)]
    p = tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": [f"k{k}" for k in range(6)], "image": pa.array(vals, pa.binary())}),
                   p, row_group_size=3, data_page_size=1 << 20, use_dictionary=False)
    monkeypatch.setattr(parquet_src, "_PARQUET_PAGE_MAX", 64_000)
    monkeypatch.setattr(parquet_src, "_PARQUET_PAGE_SLACK", 0)
    (u,) = discover([str(p)], id_column="id", max_bytes=50_000)
    got = list(u.samples())
    assert [s.id for s in got] == [f"k{k}" for k in range(6)]
    assert all(s.data is None and "read bound" in s.error and not s.damaged for s in got)
    monkeypatch.setattr(parquet_src, "_PARQUET_PAGE_MAX", 256 << 20)
    assert [s.data for s in u.samples()] == vals


def test_parquet_rows_lost_by_the_reader_are_error_rows(tmp_path, monkeypatch, parquet_plain):
    """If pyarrow yields fewer rows than a row group's metadata says, the gap is damaged error
    rows (ids from the id column), so count() always equals the samples given."""
    pq = pytest.importorskip("pyarrow.parquet")
    real = pq.ParquetFile.iter_batches

    def short(self, *a, **kw):
        it = real(self, *a, **kw)
        yield next(it)  # the first batch only, then a silent end

    monkeypatch.setattr(parquet_src, "_PARQUET_BATCH", 2)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", short)
    (u,) = discover([str(parquet_plain.path)], id_column="id")
    got = list(u.samples())
    assert [s.id for s in got] == parquet_plain.ids and len(got) == u.count()
    lost = [s for s in got if s.damaged]
    assert lost and all("expected 3 rows in row group" in s.error for s in lost)
    assert all(s.data == parquet_plain.data[s.id] for s in got if s.data is not None)


@pytest.mark.parametrize("kw", [{"compression": "zstd"}, {"compression": "snappy", "use_dictionary": False},
                                {"compression": "gzip", "data_page_version": "2.0"},
                                {"compression": "none", "data_page_size": 1000}])
def test_page_headers_match_the_metadata(tmp_path, kw):
    """The thrift page-header reader against pyarrow's column metadata: the pages' values add up
    to the chunk's, and (uncompressed - compressed) summed over the pages equals the chunk's
    total_uncompressed_size - total_compressed_size (the headers cancel out)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = np.random.default_rng(3)
    n = 40
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    imgs = [None if k % 7 == 3 else {"bytes": rng.integers(0, 9, int(rng.integers(0, 900)),
                                                           dtype=np.uint8).tobytes(), "path": f"p{k}"}
            for k in range(n)]
    p = tmp_path / "h.parquet"
    pq.write_table(pa.table({"image": pa.array(imgs, struct), "id": list(range(n))}), p,
                   row_group_size=16, **kw)
    md = pq.ParquetFile(p).metadata
    fd = os.open(p, os.O_RDONLY)
    try:
        chunks = thrift.footer_chunks(fd)  # our footer reader against pyarrow's metadata
        assert not isinstance(chunks, str), chunks
        assert [len(g) for g in chunks] == [md.num_columns] * md.num_row_groups
        for g in range(md.num_row_groups):
            for c in range(md.num_columns):
                col = md.row_group(g).column(c)
                ours = chunks[g][c]
                assert (ours.path, ours.num_values, ours.compressed, ours.data_at) == (
                    col.path_in_schema, col.num_values, col.total_compressed_size,
                    col.data_page_offset)
                assert ours.dict_at == (col.dictionary_page_offset if col.has_dictionary_page
                                        else None)
                pages = thrift.chunk_pages(fd, ours)
                assert sum(nv for t, _, nv, _, _ in pages if t in (0, 3)) == col.num_values
                assert (sum(u - c_ for _, _, _, u, c_ in pages)
                        == col.total_uncompressed_size - col.total_compressed_size), (g, c, pages)
    finally:
        os.close(fd)
    (u,) = discover([str(p)], max_bytes=1 << 20)
    assert [s.data for s in u.samples()] == [None if i is None else i["bytes"] for i in imgs]


def test_fuzz_found_parquet_files_are_error_rows_in_a_live_process():
    """Four files fuzz/fuzz_parquet.py found (tests/data/parquet_fuzz): size statistics whose
    level histograms do not match (pyarrow's metadata objects call std::terminate on them: the
    process aborted), a row group of -19 rows (count() was negative) and a column path that is
    not UTF-8. Read in a child process, so an abort fails this test instead of ending pytest:
    each gives count() >= 0 samples, as many as count(), the readable rows' bytes and error rows
    for the rest."""
    files = sorted((Path(__file__).parents[1] / "data" / "parquet_fuzz").glob("*.parquet"))
    assert len(files) == 4
    code = (
        "import json, sys\n"
        "from vlmprep.batch.sources import discover\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    (u,) = discover([p])\n"
        "    got = list(u.samples())\n"
        "    out[p] = [u.count(), len(got), sum(s.data is not None for s in got),\n"
        "              sum(s.error is not None for s in got)]\n"
        "print(json.dumps(out))\n")
    r = subprocess.run([sys.executable, "-c", code, *map(str, files)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for p, (count, n, ok, bad) in got.items():
        assert count >= 0 and n == count == ok + bad, (p, count, n, ok, bad)
    name = {Path(p).stem: v for p, v in got.items()}
    assert name["negative-count"][3] >= 1  # the footer / row group disagreement is an error row
    assert name["abort-def-histogram"][2] >= 1 and name["abort-def-histogram"][3] >= 1


def test_pax_record_without_a_length_is_malformed_not_a_hang():
    """A pax header whose second record has no "LEN " prefix (fuzz/fuzz_tar.py found it:
    tests/data/tar_fuzz): the record parser read its length as 0 and never moved on, so
    discover() hung. Now the pax header is malformed (its member an error row) and the walk goes
    on. In a child process with a time limit, so a hang fails this test instead of the suite."""
    tar = Path(__file__).parents[1] / "data" / "tar_fuzz" / "pax_record_without_length.tar"
    code = ("import sys\nfrom vlmprep.batch.sources import discover\n"
            "(u,) = discover([sys.argv[1]])\ngot = list(u.samples())\n"
            "assert len(got) == u.count() > 0, (len(got), u.count())\n"
            "print(sum(s.error is not None for s in got))\n")
    r = subprocess.run([sys.executable, "-c", code, str(tar)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout.split()[-1]) >= 1  # the damaged pax header is reported
    assert tar_walk.pax_records(b"6 a=b\n" + b"x" * 30 + b"\n") is None
    assert tar_walk.pax_records(b"6 a=b\n8 k=val\n\0\0") == {"a": "b", "k": "val"}


# -- hostile footer numbers (fuzz/fuzz_parquet.py: /tmp/crash parquet-oom-*, -timeout-*, -crash-*) --


def _zz(v: int) -> bytes:
    """A thrift compact i64: zigzag, then a varint (written here, not with vlmprep's reader)."""
    u = v << 1 if v >= 0 else ((-v - 1) << 1) | 1
    out = bytearray()
    while True:
        out.append((u & 0x7F) | (0x80 if u > 0x7F else 0))
        u >>= 7
        if not u:
            return bytes(out)


def _patch_footer(raw: bytes, old: bytes, new: bytes) -> bytes:
    """``raw`` with the one occurrence of ``old`` in its footer replaced, the footer length fixed."""
    n = int.from_bytes(raw[-8:-4], "little")
    head, footer = raw[:-8 - n], raw[-8 - n:-8]
    assert footer.count(old) == 1, (old, footer.count(old))
    footer = footer.replace(old, new)
    return head + footer + len(footer).to_bytes(4, "little") + b"PAR1"


def _write(tmp_path, table, **kw) -> tuple[bytes, object]:
    pq = pytest.importorskip("pyarrow.parquet")
    p = tmp_path / "honest.parquet"
    pq.write_table(table, p, **kw)
    return p.read_bytes(), pq.ParquetFile(p).metadata


@pytest.mark.parametrize("hf", [False, True])
def test_parquet_row_group_saying_billions_of_rows_is_bounded_by_its_chunks(tmp_path, hf):
    """A row group's num_rows (one footer varint) set to 2**40 in a file of a few hundred bytes
    (fuzz: 1.9 billion rows in 1.5 KB; every row was an error row: > 2 GB, minutes). Now a group's
    rows are at most its column chunks' value counts: count() is the 3 rows plus one error row
    for the footer, at once; the group's rows are damaged error rows saying so, not read."""
    pa = pytest.importorskip("pyarrow")
    vals = [b"a1", b"b22", b"c333", b"d4", b"e55"]
    col = (pa.array([{"bytes": v, "path": None} for v in vals],
                    pa.struct([("bytes", pa.binary()), ("path", pa.string())])) if hf
           else pa.array(vals, pa.binary()))
    raw, md = _write(tmp_path, pa.table({"image": col, "id": [f"k{k}" for k in range(5)]}),
                     row_group_size=3)
    rg = md.row_group(1)  # 2 rows
    old = b"\x16" + _zz(rg.total_byte_size) + b"\x16" + _zz(rg.num_rows)  # RowGroup fields 2, 3
    p = tmp_path / "hostile.parquet"
    p.write_bytes(_patch_footer(raw, old, b"\x16" + _zz(rg.total_byte_size) + b"\x16" + _zz(1 << 40)))
    pq = pytest.importorskip("pyarrow.parquet")
    assert pq.ParquetFile(p).metadata.row_group(1).num_rows == 1 << 40  # pyarrow believes it
    (u,) = discover([str(p)], id_column="id", max_bytes=1 << 10)
    assert u.count() == 5 + 1
    got = list(u.samples())
    assert [s.data for s in got[:3]] == vals[:3]
    assert [s.id for s in got] == ["k0", "k1", "k2", "row-3", "row-4", "@row-5"]
    bad = got[3:5]
    assert all(s.damaged and s.data is None for s in bad)
    assert "expected row group 1's row count to be at most its column chunks' value counts" in bad[0].error
    assert f"got {1 << 40:,} rows in its metadata and 2 value(s) in column" in bad[0].error
    assert "fix: rewrite or download it again" in bad[0].error
    assert got[5].damaged and f"got 5 rows in the footer, {3 + (1 << 40):,} in its row groups and 5" in got[5].error
    assert [(s.id, s.error) for s in u.samples(4, 6)] == [(s.id, s.error) for s in got[4:6]]


def test_parquet_list_column_values_beyond_rows_are_not_damage(tmp_path):
    """The bound is at least one value per row: a list leaf holds more values than rows (one per
    element), and such a file reads whole, with no error row."""
    pa = pytest.importorskip("pyarrow")
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string()), ("tags", pa.list_(pa.int32()))])
    imgs = [{"bytes": b"x" * k, "path": None, "tags": list(range(k))} for k in range(1, 6)]
    raw, _ = _write(tmp_path, pa.table({"image": pa.array(imgs, struct)}), row_group_size=2)
    p = tmp_path / "lists.parquet"
    p.write_bytes(raw)
    (u,) = discover([str(p)])
    assert u.count() == 5 and [s.data for s in u.samples()] == [i["bytes"] for i in imgs]


def test_parquet_chunk_offset_past_the_file_is_a_clear_error(tmp_path):
    """A column chunk's data_page_offset of 2**64 (fuzz: 4.6e19; os.pread raised OverflowError,
    which no caller expects). The chunk's span is checked against the file's size first: a
    ValueError from thrift.chunk_pages, so the group's rows are damaged error rows naming it."""
    pa = pytest.importorskip("pyarrow")
    fd = os.open(__file__, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        for at, comp in ((1 << 64, 42), (-5, 42), (4, size)):
            with pytest.raises(ValueError, match=r"a column chunk of [\d,]+ bytes at byte -?[\d,]+, "
                                                 r"not within the file's"):
                thrift.chunk_pages(fd, thrift.Chunk("image", 1, comp, at, None))
    finally:
        os.close(fd)
    raw, md = _write(tmp_path, pa.table({"image": pa.array([b"a1", b"b2"], pa.binary())}),
                     use_dictionary=False)
    c = md.row_group(0).column(0)
    assert not c.has_dictionary_page
    old = b"\x16" + _zz(c.total_compressed_size) + b"\x26" + _zz(c.data_page_offset)  # fields 7, 9
    p = tmp_path / "offset.parquet"
    p.write_bytes(_patch_footer(raw, old, b"\x16" + _zz(c.total_compressed_size) + b"\x26"
                                + _zz(1 << 64)))  # 1 << 64 as Python reads it; int64 readers wrap
    (u,) = discover([str(p)])
    got = list(u.samples())
    assert len(got) == u.count() == 2 and all(s.damaged for s in got)
    assert "a column chunk of" in got[0].error and "not within the file's" in got[0].error
