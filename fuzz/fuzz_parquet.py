"""Harness (e): a parquet file read by the batch source reader.

Seeds: small pyarrow files with a binary or a ``struct<bytes, path>`` image column (the Hugging
Face datasets layout), snappy and zstd pages, v1 and v2 data pages, dictionary pages, nulls and
several row groups; the fuzzer mutates their bytes (footer, page headers, compressed pages).
The bytes are written to a fresh ``.parquet`` file and given to
``vlmprep.batch.sources.discover``; then ``count()`` and ``samples()``. Guarantees as for tar:
a ValueError from discover naming the file, or ``count()`` samples each with data (at most
max_bytes) or an error, ``samples(a, b)`` = ``samples()[a:b]``, no other exception (pyarrow's
own exceptions included); the per-input bound is run.py's ``-timeout`` and ``-rss_limit_mb``.

    .venv/bin/python fuzz/fuzz_parquet.py fuzz/corpus/parquet fuzz/seeds/parquet -max_total_time=60
"""
from __future__ import annotations

import os
import zlib

import _common

MAX_BYTES = 256  # some seed values are larger: the size cap is on the fuzzed path too


def test_one_input(data: bytes) -> None:
    path = _common.input_file(data, ".parquet")
    try:
        _common.check_input(path, "parquet", MAX_BYTES, zlib.crc32(data))
    finally:
        os.unlink(path)


if __name__ == "__main__":
    def warm():
        import pyarrow.parquet  # noqa: F401  (imported once, not in the first input's time)
    _common.main(test_one_input, instrument=("vlmprep.batch.sources",), warm=warm)
