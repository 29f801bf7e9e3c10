"""A parquet file's structure read by us, without pyarrow: the footer's column chunks
(``footer_chunks``) and a column chunk's page headers (``chunk_pages``), both thrift compact
protocol (``_Thrift``). The parquet reader checks every page's uncompressed size against the
read bound before pyarrow decompresses a row group (``vlmprep.batch.sources.parquet``).
Every read is bounded (the footer's and the chunk's end, item counts, nesting depth); what does
not parse is a ValueError.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = ["Chunk", "footer_chunks", "chunk_pages"]

_PARQUET_MAX_PAGES = 1 << 20    # pages walked per column chunk, at most
_THRIFT_MAX_ITEMS = 1 << 16     # thrift fields and list items read per page header, at most


@dataclass(frozen=True)
class Chunk:
    """One column chunk of a row group, as the footer's ColumnMetaData says."""
    path: str                # path_in_schema, dotted ("image.bytes")
    num_values: int
    compressed: int          # total_compressed_size: the chunk's bytes in the file
    data_at: int             # data_page_offset
    dict_at: int | None      # dictionary_page_offset, when the chunk has one


_FOOTER_MAX = 64 << 20          # a parquet footer larger than this is damage (pyarrow's own cap is 2 GiB)
_FOOTER_MAX_ITEMS = 1 << 22     # thrift fields and list items read from a footer, at most


def footer_chunks(fd: int) -> list[list[Chunk]] | str:
    """The column chunks of each row group, read from the file's footer (FileMetaData, thrift
    compact), or why they cannot be. Read here, not through pyarrow's metadata objects: pyarrow
    26 aborts the process (std::terminate, no Python exception) when a column chunk's size
    statistics do not match its levels (found by fuzz/fuzz_parquet.py)."""
    size = os.fstat(fd).st_size
    tail = os.pread(fd, 8, size - 8) if size >= 12 else b""
    if len(tail) != 8 or tail[4:] != b"PAR1":
        return "no PAR1 footer at the end of the file"
    n = int.from_bytes(tail[:4], "little")
    if not 0 < n <= min(_FOOTER_MAX, size - 12):
        return f"a footer of {n:,} bytes in a file of {size:,}"
    try:
        meta = _Thrift(fd, size - 8 - n, size - 8, keep=True, max_items=_FOOTER_MAX_ITEMS).struct()
        return [[_chunk_of(c) for c in _list_of(g, 1)] for g in _list_of(meta, 4)]
    except ValueError as e:
        return str(e)


def _list_of(struct: dict[int, Any], fid: int) -> list[dict[int, Any]]:
    v = struct.get(fid)
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise ValueError(f"expected a list of structs in footer field {fid}")
    return v


def _chunk_of(cc: dict[int, Any]) -> Chunk:
    md = cc.get(3)  # ColumnChunk.meta_data
    if not isinstance(md, dict):
        raise ValueError("a column chunk without its metadata")
    parts = md.get(3)
    nums = [md.get(k) for k in (5, 7, 9)]
    dict_at = md.get(11)
    if (not isinstance(parts, list) or not all(isinstance(x, bytes) for x in parts)
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in nums)
            or not (dict_at is None or isinstance(dict_at, int) and not isinstance(dict_at, bool))):
        raise ValueError("a column chunk's path, value count, size or offsets are missing or "
                         "negative")
    path = ".".join(x.decode("utf-8", "backslashreplace") for x in parts)
    return Chunk(path, nums[0], nums[1], nums[2], dict_at)  # type: ignore[arg-type]


def chunk_pages(fd: int, col: Chunk) -> list[tuple[int, int, int, int, int]]:
    """(page type, first value, values, uncompressed bytes, compressed bytes) of each page of a
    column chunk, from its page headers (type 0 data, 2 dictionary, 3 data v2); ValueError
    when they do not parse or do not add up to the chunk's values."""
    start = col.data_at
    if col.dict_at is not None and 0 < col.dict_at < start:
        start = col.dict_at
    end = start + col.compressed
    size = os.fstat(fd).st_size
    if not 0 <= start <= end <= size:  # offsets are footer data: 2**65 overflowed os.pread
        raise ValueError(f"a column chunk of {col.compressed:,} bytes at byte {start:,}, not "
                         f"within the file's {size:,} bytes")
    pages: list[tuple[int, int, int, int, int]] = []
    pos, values = start, 0
    while pos < end and values < col.num_values:
        if len(pages) >= _PARQUET_MAX_PAGES:
            raise ValueError(f"more than {_PARQUET_MAX_PAGES:,} pages in one column chunk")
        th = _Thrift(fd, pos, end)
        h = th.struct()
        ptype, unc, comp = h.get(1), h.get(2), h.get(3)
        sub = h.get({0: 5, 2: 7, 3: 8}.get(ptype, -1)) if isinstance(ptype, int) else None
        nv = sub.get(1) if isinstance(sub, dict) else 0 if ptype == 1 else None
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                   for x in (ptype, unc, comp, nv)):
            raise ValueError(f"a page header at byte {pos:,} without its type, sizes or value "
                             f"count")
        assert isinstance(nv, int) and isinstance(comp, int)
        pages.append((ptype, values, nv, unc, comp))  # type: ignore[arg-type]
        if ptype in (0, 3):
            values += nv
        pos = th.pos + comp
    if values != col.num_values:
        raise ValueError(f"its data pages hold {values:,} values, its metadata says "
                         f"{col.num_values:,}")
    return pages


class _Thrift:
    """A thrift compact-protocol reader at a file offset (pread, small reads), enough for a
    parquet PageHeader and FileMetaData: ints, bools and nested structs are kept, and with
    ``keep`` binaries and lists too (else skipped); maps are skipped. Bounded by ``limit`` (the
    column chunk's or footer's end) and ``max_items``."""

    def __init__(self, fd: int, pos: int, limit: int, keep: bool = False,
                 max_items: int = _THRIFT_MAX_ITEMS) -> None:
        self.fd, self.pos, self.limit, self.keep, self.max_items = fd, pos, limit, keep, max_items
        self._buf, self._at, self._items = b"", pos, 0

    def _byte(self) -> int:
        i = self.pos - self._at
        if not 0 <= i < len(self._buf):
            if self.pos >= self.limit:
                raise ValueError("a thrift struct runs past its column chunk or footer")
            self._buf, self._at, i = os.pread(self.fd, min(4096, self.limit - self.pos), self.pos), self.pos, 0
            if not self._buf:
                raise ValueError("the file ends inside a thrift struct")
        self.pos += 1
        return self._buf[i]

    def _count(self) -> None:
        self._items += 1
        if self._items > self.max_items:
            raise ValueError(f"a thrift struct of more than {self.max_items:,} items")

    def _varint(self) -> int:
        v = shift = 0
        for _ in range(10):
            b = self._byte()
            v |= (b & 0x7F) << shift
            if b < 0x80:
                return v
            shift += 7
        raise ValueError("a thrift varint longer than 10 bytes")

    def _int(self) -> int:
        v = self._varint()
        return (v >> 1) ^ -(v & 1)

    def _skip(self, n: int) -> None:
        if n < 0 or self.pos + n > self.limit:
            raise ValueError("a page header field runs past its column chunk")
        self.pos += n

    def _value(self, t: int, depth: int, in_list: bool = False) -> Any:
        if t in (1, 2):
            if in_list:  # a bool inside a list or map is a byte of its own
                self._byte()
                return None
            return t == 1
        if t == 3:
            self._byte()
            return None
        if t in (4, 5, 6):
            return self._int()
        if t == 7:
            self._skip(8)
            return None
        if t == 8:
            n = self._varint()
            at = self.pos
            self._skip(n)
            if not self.keep:
                return None
            raw = os.pread(self.fd, n, at)
            if len(raw) != n:
                raise ValueError("the file ends inside a thrift binary")
            return raw
        if t in (9, 10):
            h = self._byte()
            n = h >> 4 if h >> 4 != 15 else self._varint()
            items = []
            for _ in range(n):
                self._count()
                items.append(self._value(h & 0x0F, depth + 1, True))
            return items if self.keep else None
        if t == 11:
            n = self._varint()
            kv = self._byte() if n else 0
            for _ in range(n):
                self._count()
                self._value(kv >> 4, depth + 1, True)
                self._value(kv & 0x0F, depth + 1, True)
            return None
        if t == 12:
            return self.struct(depth + 1)
        raise ValueError(f"an unknown thrift type {t}")

    def struct(self, depth: int = 0) -> dict[int, Any]:
        if depth > 16:
            raise ValueError("thrift structs nested more than 16 deep")
        out: dict[int, Any] = {}
        fid = 0
        while True:
            self._count()
            h = self._byte()
            if h == 0:
                return out
            fid = fid + (h >> 4) if h >> 4 else self._int()
            out[fid] = self._value(h & 0x0F, depth)
