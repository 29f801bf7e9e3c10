"""Harness (d): a WebDataset tar (plain or gzip) read by the batch source reader.

The bytes are written to a fresh ``.tar`` file (tarfile detects gzip by content) and given to
``vlmprep.batch.sources.discover``; then the unit's ``count()`` and ``samples()``. Guarantees:
discover either makes one tar unit or raises a ValueError naming the file; ``count()`` equals
the number of samples yielded (a damaged tar is error rows, never samples that vanish); every
sample has data (at most max_bytes) or an error; ``samples(a, b)`` is ``samples()[a:b]``; no
other exception. The per-input bound is run.py's ``-timeout``.

Nothing lost silently, checked against an independent walk of the headers (``_walk``, plain
ustar/v7 headers only; it gives up on pax, GNU long names, sparse members, compressed tars and
fields a reader may read two ways): every key of a regular member whose data is whole in the
file is a sample id, and a tar that is damaged before its end (a bad header checksum, a member
cut short, a cut header) has at least one error sample.

    .venv/bin/python fuzz/fuzz_tar.py fuzz/corpus/tar fuzz/seeds/tar -max_total_time=60
    .venv/bin/python fuzz/fuzz_tar.py fuzz/crashes/tar-crash-<sha>     # reproduce one input
"""
from __future__ import annotations

import os
import re
import zlib

import _common

MAX_BYTES = 4096  # below the seeds' largest member: the size cap is on the fuzzed path too
_WDS_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's key.ext split (batch/sources/tar.py doc)
_OCTAL = re.compile(rb"^[ ]*[0-7]*[ ]*$")
_NUMBERS = ((100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (329, 337), (337, 345))


def _field(b: bytes) -> bytes:
    return b.split(b"\0", 1)[0]


def _walk(data: bytes) -> tuple[set[str], bool] | None:
    """(keys of the regular members whose data is whole, damaged before the end) from the
    headers alone; None where a reader may fairly read the tar another way."""
    if data[:2] == b"\x1f\x8b" or data[:3] == b"BZh" or data[:6] == b"\xfd7zXZ\x00":
        return None
    keys: set[str] = set()
    pos, n = 0, len(data)
    while pos < n:
        hdr = data[pos:pos + 512]
        if hdr.count(0) == len(hdr):
            return keys, False  # the end-of-archive block (or zero padding cut short)
        if len(hdr) < 512:
            return keys, True  # a header cut short
        fields = [_field(hdr[a:b]) for a, b in _NUMBERS + ((148, 156),)]
        if not all(_OCTAL.match(f) for f in fields):
            return None  # base-256, signs, junk: readers differ on what that means
        want = int(fields[-1].strip() or b"0", 8)
        if want not in (256 + sum(hdr[:148]) + sum(hdr[156:]),
                        256 + sum(b - 256 * (b > 127) for b in hdr[:148] + hdr[156:])):
            return keys, True  # a bad checksum
        size = int(fields[3].strip() or b"0", 8)
        kind, prefix = hdr[156:157], _field(hdr[345:500])
        try:
            name = _field(hdr[:100]).decode("utf-8")
            pre = prefix.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if (kind in b"xgLKS7" or (size and (kind in b"123456" or (kind == b"\0" and name.endswith("/"))))
                or (prefix and hdr[257:263] != b"ustar\0")):
            return None  # pax / GNU extensions, sparse, contiguous; data after a link or a v7 folder
            # (tarfile does not skip it, others do); a prefix without the ustar magic
        if hdr[257:262] != b"ustar" and (not name or kind not in b"0123456\0" or hdr[257:].strip(b"\0")):
            return None  # no magic: a clean v7 header, or damage (tarfile reads these, others not)
        if pre:
            name = pre + "/" + name
        data_end = pos + 512 + size
        if data_end > n:
            return keys, True  # the member's data is cut short
        if kind in (b"0", b"\0") and not name.endswith("/"):
            hit = _WDS_KEY.match(name)
            if hit:
                keys.add(hit.group(1))
        pos = pos + 512 + -(-size // 512) * 512  # links, folders, devices: size 0 here
    return keys, False


def test_one_input(data: bytes) -> None:
    path = _common.input_file(data, ".tar")
    try:
        got = _common.check_input(path, "tar", MAX_BYTES, zlib.crc32(data))
        walked = _walk(data) if got is not None else None
        if got is not None and walked is not None:
            keys, damaged = walked
            ids = {s.id for s in got}
            lost = sorted(keys - ids)
            assert not lost, f"members with whole data gave no sample\nkeys {lost[:5]} (samples: {got[:4]})"
            assert not damaged or any(s.error for s in got), (
                f"a damaged tar gave no error sample\nheaders walked: {sorted(keys)[:5]}; samples: {got[:4]}")
    finally:
        os.unlink(path)


if __name__ == "__main__":
    _common.main(test_one_input, instrument=("vlmprep.batch.sources", "tarfile", "gzip"), funcs=(_walk,))
