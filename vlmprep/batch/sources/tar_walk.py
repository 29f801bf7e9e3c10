"""Our own tar header walker (``walk``), not tarfile: tarfile stops at the first bad header as
if the archive ended, so a damaged shard lost every later member without a word.

Headers: ustar, GNU (long names), pax (``path``, ``size``; global headers ignored), v7. The walk
reads each header and skips member data by its size (member data is read later, by offset).
What it finds is a list of ``Entry`` in file order: a member, or a region it could not read
(the damage rules: ``walk``'s docstring and ``vlmprep.batch.sources.tar``).
"""
from __future__ import annotations

from dataclasses import dataclass

from .sample import safe_text
from .tar_bytes import BLOCK, ZERO_BLOCK, PlainTar, StreamTar, checksum_ok, number_field, scan_forward

__all__ = ["Member", "Entry", "walk", "parse_header", "pax_records"]

_TAR_META_MAX = 1 << 20   # a pax header or GNU long name larger than this is damage (not read)
_REGULAR = (b"0", b"\0", b"7")
_NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")  # links, devices, folders, FIFOs (as tarfile)
_META = (b"x", b"g", b"L", b"K")  # pax (local, global) and GNU long-name / long-link headers


@dataclass(frozen=True)
class Member:
    """A regular tar member: its name and where its data lies in the tar's bytes."""
    name: str
    offset: int
    size: int


@dataclass
class Entry:
    """A walk's finding, in file order: a member (``name`` set) or an unreadable region."""
    at: int
    name: str | None
    member: Member | None = None
    error: str | None = None
    damaged: bool = True  # the error is damage (not an unsupported member kind)
    link: str | None = None  # a link member: what it is ("a symbolic link (to '...')")


@dataclass
class _Prev:
    """The header whose data ends where the walk stands: a false size shows up here."""
    at: int
    data: int
    size: int
    entry: Entry | None
    what: str
    from_pax: bool = False


def _pad(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


def _tar_str(b: bytes) -> str:
    return safe_text(b.decode("utf-8", "surrogateescape"))


def parse_header(blk: bytes) -> tuple[str, int, bytes, bool, str] | None:
    """(name, size, typeflag, ustar, link target) of a header block, else None: a ustar / GNU /
    pax header (magic and checksum), or a v7 one (checksum, a name, a known type, nothing after
    byte 257)."""
    ustar = blk[257:262] == b"ustar"
    t = blk[156:157]
    if not ustar and (blk[0] == 0 or t not in _REGULAR + _NO_DATA or blk[257:].strip(b"\0")):
        return None
    if not checksum_ok(blk):
        return None
    size = number_field(blk[124:136])
    if size is None:
        return None
    name = blk[:100].split(b"\0", 1)[0]
    prefix = blk[345:500].split(b"\0", 1)[0] if blk[257:263] == b"ustar\0" else b""
    if prefix:
        name = prefix + b"/" + name
    return _tar_str(name), size, t, ustar, _tar_str(blk[157:257].split(b"\0", 1)[0])


def pax_records(raw: bytes) -> dict[str, str] | None:
    """The records "LEN KEY=VALUE\\n" of a pax header's data (up to a NUL), None if malformed."""
    out: dict[str, str] = {}
    i = 0
    while i < len(raw) and raw[i] != 0:
        sp = raw.find(b" ", i, i + 21)
        if sp <= i or not raw[i:sp].isdigit():  # no length: malformed (n = 0 never moved i on)
            return None
        n = int(raw[i:sp])
        if n <= sp - i + 1 or i + n > len(raw) or raw[i + n - 1] != 0x0A:
            return None
        key, eq, value = raw[sp + 1:i + n - 1].partition(b"=")
        if not eq:
            return None
        out[_tar_str(key)] = _tar_str(value)
        i += n
    return out


def walk(src: PlainTar | StreamTar) -> tuple[list[Entry], list[int]]:
    """Walk the tar's headers: (entries in file order, offsets of the ustar headers read).

    Each header's size says where the next one starts. Where there is none (a bad checksum,
    bytes that are not a header, the end of the data): if a valid header starts inside the
    previous member's stated data or padding, that member is an error (a false size, or bytes
    cut out of it) and the walk goes on from that header; else the bytes up to the next valid
    header (found by scanning forward, any alignment) are one unreadable region, and a member
    before it whose size only a pax record gave is an error too (not confirmed). A member whose
    data runs past the end is an error (the tar is cut). Zero blocks end the archive; a valid
    header after them is read on (concatenated tars), other bytes after them are a region."""
    w = _Walk(src)
    while w.step():
        pass
    return w.finish()


class _Walk:
    """One walk's state: where it stands, the header before (``prev``), and what a pax or GNU
    long-name header said about the member after it."""

    def __init__(self, src: PlainTar | StreamTar) -> None:
        self.src = src
        self.entries: list[Entry] = []
        self.headers: list[int] = []
        self.pos = 0
        self.prev: _Prev | None = None
        self.pax: dict[str, str] = {}
        self.long_name: str | None = None
        self.meta_bad: str | None = None  # the pax header before the next member was unreadable

    # -- findings -------------------------------------------------------------------------------
    def region(self, at: int, why: str) -> Entry:
        e = Entry(at, None, None, why)
        self.entries.append(e)
        return e

    def fail(self, p: _Prev, why: str) -> None:
        target = p.entry if p.entry is not None else self.region(p.at, "")
        if not target.error or not target.damaged:
            target.error, target.damaged = f"{p.what}: {why}", True

    def resume(self, at: int) -> None:
        """Go on from the valid header at ``at``, with nothing carried over to it."""
        self.pos, self.prev, self.pax, self.long_name, self.meta_bad = at, None, {}, None, None

    # -- one step: a header, or what stands where one should ------------------------------------
    def step(self) -> bool:
        """Read at ``pos`` and move on; False when the walk ends."""
        blk = self.src.read(self.pos, BLOCK)
        hdr = parse_header(blk) if len(blk) == BLOCK and blk != ZERO_BLOCK else None
        if hdr is None:  # the end of the archive, or damage
            return self.no_header(blk)
        name, size, t, ustar, target = hdr
        if ustar:
            self.headers.append(self.pos)
        if t in _META:
            self.meta_header(t, size)
        else:
            self.member_header(name, size, t, target)
        return True

    def meta_header(self, t: bytes, size: int) -> None:
        """A pax or GNU long-name header: what it says applies to the next member."""
        pos, data = self.pos, self.pos + BLOCK
        what = f"the {'pax' if t in b'xg' else 'GNU long-name'} header at byte {pos:,}"
        p = _Prev(pos, data, size, None, what)
        if size > _TAR_META_MAX:
            self.fail(p, f"expected at most {_TAR_META_MAX:,} bytes of names and records, got "
                         f"{size:,}; it is not read (the member after it keeps its short name); "
                         f"fix: rebuild the shard")
        else:
            raw = self.src.read(data, size)
            if len(raw) == size and t == b"x":
                rec = pax_records(raw)
                self.pax = rec or {}
                if rec is None:
                    self.meta_bad = (f"its pax header at byte {pos:,} does not parse (expected "
                                     f"records 'LEN KEY=VALUE'), so its name and size are not "
                                     f"known; fix: rebuild the shard")
            elif len(raw) == size and t == b"L":
                self.long_name = _tar_str(raw.split(b"\0", 1)[0])
        self.prev, self.pos = p, data + _pad(size)

    def member_header(self, name: str, size: int, t: bytes, target: str) -> None:
        """A member's header: a regular member, a link (kept to be named, never followed), a
        GNU sparse member (an error), or a kind without data (skipped)."""
        pos, data = self.pos, self.pos + BLOCK
        if self.long_name is not None:
            name = self.long_name
        name = self.pax.get("path", name)
        if t == b"\0" and name.endswith("/"):
            t = b"5"  # a v7 folder
        dsize, from_pax, err = self.data_size(size, t)
        what = f"member {name!r} (header at byte {pos:,})"
        entry = None
        if t in _REGULAR:
            entry = Entry(pos, name, None if err else Member(name, data, dsize),
                          err and f"{what}: {err}")
        elif t in (b"1", b"2"):  # kept to be named if a group's image is one: never followed
            kind = "hard" if t == b"1" else "symbolic"
            entry = Entry(pos, name, link=f"a {kind} link (to {self.pax.get('linkpath', target)!r})")
        elif t == b"S":
            entry = Entry(pos, name, None, f"{what}: a GNU sparse member (its stored data is "
                                           f"not the file); fix: rebuild the shard without "
                                           f"--sparse", damaged=False)
        if entry is not None:
            self.entries.append(entry)
        self.prev = _Prev(pos, data, dsize, entry, what, from_pax)
        self.pos = data + _pad(dsize)
        self.pax, self.long_name, self.meta_bad = {}, None, None

    def data_size(self, size: int, t: bytes) -> tuple[int, bool, str | None]:
        """(the member's data size, whether only a pax record gave it, why the member is not
        read or None) from its header's size and the pax records before it."""
        dsize = 0 if t in _NO_DATA else size
        err = self.meta_bad
        from_pax = False
        if "size" in self.pax and t not in _NO_DATA:
            v = self.pax["size"]
            if not (v.isascii() and v.isdigit()):
                err = f"its pax size record {v!r} is not a number; fix: rebuild the shard"
            elif size and int(v) != size:  # writers set both alike when the header can hold it
                err = (f"its pax size record ({int(v):,}) disagrees with its header's size "
                       f"({size:,}): a false size; it is not read; fix: rebuild the shard")
            elif not size:  # a size too large for the header: only the next header confirms it
                dsize, from_pax = int(v), int(v) != 0
        return dsize, from_pax, err

    # -- no header where one should be ----------------------------------------------------------
    def no_header(self, blk: bytes) -> bool:
        """The block at ``pos`` is not a header: a false size before it, the cut end of the data,
        the end-of-archive marker or a damaged region. False when the walk ends."""
        prev, src = self.prev, self.src
        inside = src.header_in(prev.data, self.pos) if prev is not None and prev.data < self.pos else None
        if prev is not None and inside is not None:
            self.false_size(prev, inside)
            self.resume(inside)
            return True
        cut_note = f" ({src.error})" if src.error else ""
        if len(blk) < BLOCK:  # the data ends here: the tar is cut
            self.cut(blk, cut_note)
            return False
        if blk == ZERO_BLOCK:  # the end-of-archive marker: only zeros may follow
            return self.end_marker(cut_note)
        return self.damaged_region(blk, cut_note)

    def false_size(self, prev: _Prev, inside: int) -> None:
        """A valid header at ``inside`` lies within ``prev``'s stated data or padding."""
        if inside < prev.data + prev.size:
            self.fail(prev, f"expected its stated size of {prev.size:,} bytes to end where a tar "
                            f"header begins, got it running over the valid header at byte "
                            f"{inside:,}: a false size (pax or ustar); it is not read; fix: "
                            f"rebuild the shard")
        else:  # in its padding: bytes were cut out of it or of its data (no telling which)
            self.fail(prev, f"expected its data and padding to end at byte {self.pos:,}, got the "
                            f"valid header at byte {inside:,} inside the padding: bytes are missing "
                            f"in it or after it (cut out); it is not read; fix: rebuild the shard")

    def cut(self, blk: bytes, cut_note: str) -> None:
        """The data ends before a whole block at ``pos``: the tar is cut."""
        pos, prev = self.pos, self.prev
        end = self.src.end if self.src.end is not None else pos + len(blk)
        if prev is not None and prev.data + prev.size > end:
            self.fail(prev, f"expected {prev.size:,} bytes of data from byte {prev.data:,}, got "
                            f"{max(0, end - prev.data):,}: the tar ends inside it{cut_note}, so "
                            f"the shard is damaged (cut) and every member after it is lost; fix: "
                            f"copy or download the shard again")
        else:
            self.region(min(pos, end), f"expected a tar header or the end-of-archive marker "
                                       f"(zero blocks) at byte {min(pos, end):,}, got the end of "
                                       f"the data{cut_note}: the tar is cut (members after it are "
                                       f"lost); fix: copy or download the shard again")

    def end_marker(self, cut_note: str) -> bool:
        """Zero blocks at ``pos``: the end, unless a valid header follows (concatenated tars);
        other bytes after them are a region. False when the walk ends."""
        pos = self.pos
        nxt, nz = scan_forward(self.src, pos)
        if nz is not None:
            upto = f"the valid header at byte {nxt:,}" if nxt is not None else "the end"
            self.region(nz, f"expected zero blocks after the end-of-archive marker at byte "
                            f"{pos:,}, got other bytes from byte {nz:,} to {upto}{cut_note}: a "
                            f"damaged header or data, not read; fix: rebuild the shard")
        if nxt is None:
            return False
        self.resume(nxt)
        return True

    def damaged_region(self, blk: bytes, cut_note: str) -> bool:
        """Bytes that are not a header at ``pos``: a region up to the next valid header (found
        by scanning forward). False when none follows."""
        pos, prev = self.pos, self.prev
        if prev is not None and prev.from_pax:
            self.fail(prev, f"expected a tar header after its data (pax size {prev.size:,}) at "
                            f"byte {pos:,}, got unreadable bytes: the size is not confirmed, it is "
                            f"not read; fix: rebuild the shard")
        nxt, _ = scan_forward(self.src, pos + 1)
        got = ("a header with a bad checksum or number field" if blk[257:262] == b"ustar"
               else "bytes that are not a tar header")
        upto = f"the next valid header at byte {nxt:,}" if nxt is not None else "the end"
        self.region(pos, f"expected a tar header at byte {pos:,}, got {got}; the bytes up to {upto} "
                         f"are not read (members there are lost){cut_note}; fix: rebuild the shard")
        if nxt is None:
            return False
        self.resume(nxt)
        return True

    def finish(self) -> tuple[list[Entry], list[int]]:
        """Decompress a compressed tar to its end (every header counted, the stream's end
        checked), name a stream that ended early, and sort the findings by offset."""
        src = self.src
        if isinstance(src, StreamTar):
            src.drain()  # every header counted (tar_verify), the stream's end checked
        if src.error is not None and not any(src.error in (e.error or "") for e in self.entries):
            self.region(src.error_at or 0, f"expected the whole {src.stream} stream, got "
                                           f"{src.error}; the members after it are lost; fix: "
                                           f"copy or download the shard again")
        self.entries.sort(key=lambda e: e.at)
        return self.entries, self.headers
