"""Harness (a): ``vlmprep.io.probe.probe`` on arbitrary bytes.

Guarantee: only ImageError escapes, and its message says what was expected; a result is
self-consistent (a known format, sides >= 1, orientation 1..8, size_hw the sides in some
order) and the same bytes given as a memoryview give the same answer.

    .venv/bin/python fuzz/fuzz_probe.py fuzz/corpus/probe fuzz/seeds/probe -max_total_time=60
    .venv/bin/python fuzz/fuzz_probe.py fuzz/crashes/probe-crash-<sha>     # reproduce one input
"""
from __future__ import annotations

import _common  # noqa: F401  (sys.path)

_FORMATS = {"jpeg", "png", "webp", "bmp", "gif", "tiff"}


def test_one_input(data: bytes) -> None:
    from vlmprep.errors import ImageError
    from vlmprep.io.probe import probe
    try:
        r = probe(data)
    except ImageError as e:
        assert "expected" in str(e), f"ImageError without 'expected': {e}"
        r2 = None
        try:
            r2 = probe(memoryview(data))
        except ImageError:
            pass
        assert r2 is None, f"bytes raised ({e}) but memoryview gave {r2}"
        return
    assert r.format in _FORMATS, r
    assert r.width >= 1 and r.height >= 1, r
    assert 1 <= r.orientation <= 8, r
    h, w = r.size_hw
    assert {h, w} == {r.width, r.height}, r
    assert probe(memoryview(data)) == r


if __name__ == "__main__":
    _common.main(test_one_input, instrument=("vlmprep.io.probe",))
