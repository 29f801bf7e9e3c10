"""The ``tar`` input kind: a WebDataset shard (``.tar``, ``.tar.gz``, ``.tgz``; gzip, bz2 or xz
detected by content), its members grouped by key.

Regular members are grouped by key, as webdataset does: key = the member path up to the first
"." of its base name ("d/000001" for "d/000001.seg.png"), extension = the rest, lower-cased;
members without a "." in the base name are ignored. Id = key. Order: the order in which keys
first appear in the tar. The image is the group's member with the first extension of
``IMAGE_EXTENSIONS`` present, else (for a unit that takes videos) of ``VIDEO_EXTENSIONS``: a
video sample; a group without one is an error sample, and so is one whose image or video member
is a symbolic or hard link (never followed). A repeated member (same key and extension)
keeps the first. The headers are read by our own walker (``tar_walk.walk``, once per file
version, cached), member data by offset; ``tar_verify`` is discover()'s independent count of the
tar's headers. The damage rules: ``vlmprep.batch.sources``.
"""
from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from .sample import Sample, is_video_name, media_extensions, safe_text
from .tar_bytes import BLOCK, TAR_CHUNK, PlainTar, StreamTar, headers_in, open_tar
from .tar_walk import Entry, Member, walk
from .unit import Unit, register_reader

__all__ = ["tar_index", "tar_verify"]

# webdataset's base_plus_ext: key = path up to the first dot of the base name, ext = the rest.
_WDS_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


@dataclass(frozen=True)
class _Group:
    key: str
    member: Member | None
    error: str | None
    damaged: bool = False  # the error is a part of the tar that could not be read


@dataclass(frozen=True)
class _TarIndex:
    groups: tuple[_Group, ...]
    headers: frozenset[int]                   # offsets of the ustar headers the walk read
    spans: tuple[tuple[int, int, str], ...]   # (data offset, size, name) of each member read
    stream: str | None                        # "gzip" | "bz2" | "xz"; None: not compressed
    scanned: tuple[int, ...] | None           # compressed: every valid ustar header in the stream


def _tar_groups(entries: list[Entry], videos: bool) -> tuple[_Group, ...]:
    """WebDataset groups (first-seen key order) and unreadable regions, in file order."""
    order: list[str | Entry] = []
    groups: dict[str, dict[str, Member | str]] = {}
    damage: dict[str, tuple[str, bool]] = {}
    for e in entries:
        hit = _WDS_KEY.match(e.name) if e.name is not None else None
        if hit is None:
            if e.error:  # a region, or a damaged member without a key: still an error row
                order.append(e)
            continue
        key = safe_text(hit.group(1))
        if key not in groups:
            groups[key] = {}
            order.append(key)
        if e.error is not None:
            damage.setdefault(key, (e.error, e.damaged))
        elif e.member is not None or e.link is not None:
            groups[key].setdefault(hit.group(2).lower(), e.member or e.link or "")
    out: list[_Group] = []
    for o in order:
        if isinstance(o, Entry):
            out.append(_Group(f"@{o.at}", None, o.error, o.damaged))
        elif o in damage:
            out.append(_Group(o, None, *damage[o]))
        else:
            members = groups[o]
            exts = media_extensions(videos)
            ext = next((x for x in exts if x in members), None)
            what = "image or video" if videos else "image"
            if ext is None:
                nor = " (nor a video member)" if videos else ""
                out.append(_Group(o, None, f"no image member in group{nor} (members: "
                                           f"{', '.join(sorted(members))}); expected one named "
                                           f"KEY.<{'|'.join(exts)}>"))
            elif isinstance(image := members[ext], str):
                out.append(_Group(o, None, f"expected the {what} member {o}.{ext} to be a regular "
                                           f"file, got {image}; links in a shard are never "
                                           f"followed; fix: store the image itself"))
            else:
                out.append(_Group(o, image, None))
    return tuple(out)


def tar_index(path: str, videos: bool = True) -> _TarIndex:
    try:
        st = os.stat(path)
    except OSError as e:
        raise ValueError(f"expected a readable tar file at {path!r}, got {e.strerror or e}; "
                         f"check the path") from None
    return _tar_index_cached(path, st.st_size, st.st_mtime_ns, videos)


@functools.lru_cache(maxsize=8)
def _tar_index_cached(path: str, size: int, mtime_ns: int, videos: bool) -> _TarIndex:
    """The tar's groups from one walk of its headers (member data is skipped: read by offset
    later; a compressed tar is decompressed once, in bounded pieces)."""
    try:
        src = open_tar(path, scan=True)
    except OSError as e:
        raise ValueError(f"expected a readable tar file at {path!r}, got {e.strerror or e}; "
                         f"check the path and its permissions") from None
    try:
        entries, headers = walk(src)
        scanned = tuple(src.seen) if isinstance(src, StreamTar) else None
    except OSError as e:
        raise ValueError(f"expected a readable tar file at {path!r}, got {e.strerror or e} "
                         f"while reading it; check the file and its file system") from None
    finally:
        src.close()
    if not headers and not any(e.name is not None for e in entries) and entries:
        raise ValueError(f"discover: expected a tar file (WebDataset shard) at {path!r}, got one "
                         f"that does not open (no tar header in it: {entries[0].error}); check or "
                         f"rebuild the file")
    spans = tuple((e.member.offset, e.member.size, e.member.name) for e in entries
                  if e.member is not None)
    return _TarIndex(_tar_groups(entries, videos), frozenset(headers), spans, src.stream, scanned)


def tar_verify(path: str, videos: bool = True) -> None:
    """The independent count: every valid ustar header in the tar's bytes (a plain scan that
    follows no size) must be one the walk read, else a ValueError naming the tar (a false size
    that lands on a later header hides the members between; so does an uncompressed tar stored
    inside the shard, which is refused the same way)."""
    idx = tar_index(path, videos)  # the unit's own index: cached for count and samples
    found = idx.scanned if idx.scanned is not None else _tar_block_scan(path)
    extra = sorted(set(found) - idx.headers)
    if not extra:
        return
    x = extra[0]
    inside = next((f"inside the data of member {n!r} (stated size {s:,}, from byte {o:,})"
                   for o, s, n in idx.spans if o <= x < o + s), "outside any member")
    raise ValueError(f"discover: expected the reader of {path!r} to read every tar header the file "
                     f"holds, got {len(extra)} header(s) that a plain scan finds and the walk does "
                     f"not (the first at byte {x:,}, {inside}): a member with a false size hides "
                     f"them, or an uncompressed tar is stored inside the shard; fix: rebuild the "
                     f"shard (compress archives stored inside it)")


def _tar_block_scan(path: str) -> list[int]:
    """Offsets of every valid ustar header in an uncompressed tar, by reading it end to end."""
    out: list[int] = []
    with open(path, "rb") as f:
        tail, at = b"", 0
        while True:
            chunk = f.read(TAR_CHUNK)
            if not chunk:
                return out
            window = tail + chunk
            out.extend(headers_in(window, at - len(tail), 0, len(window)))
            at += len(chunk)
            tail = window[-(BLOCK - 1):]


def _tar_count(unit: Unit) -> int:
    return len(tar_index(unit.path, unit.videos).groups)


def _tar_samples(unit: Unit, start: int, stop: int | None) -> Iterator[Sample]:
    idx = tar_index(unit.path, unit.videos)
    base = os.path.basename(unit.path)
    src: PlainTar | StreamTar | None = None
    try:
        for g in idx.groups[start:stop]:
            where = f"{base}#{g.key}"
            m = g.member
            if m is None:
                yield Sample(g.key, where, None, g.error, damaged=g.damaged)
                continue
            video = is_video_name(m.name)
            if m.size > unit.max_bytes:
                yield Sample(g.key, where, None, f"expected {'a video' if video else 'an image'} "
                                                 f"member of at most "
                                                 f"{unit.max_bytes:,} bytes (max_source_bytes), got "
                                                 f"{m.name!r} of {m.size:,} bytes; raise "
                                                 f"max_source_bytes if the shard is trusted",
                             video=video)
                continue
            try:
                if src is None:
                    src = open_tar(unit.path, scan=False)
                data = src.read(m.offset, m.size)
                why = src.error or "the file is shorter"
            except OSError as e:
                data, why = b"", f"{type(e).__name__}: {e.strerror or e}"
            if len(data) != m.size:
                yield Sample(g.key, where, None, f"expected {m.size:,} bytes of member {m.name!r} "
                                                 f"from byte {m.offset:,}, got {len(data):,} "
                                                 f"({why}); the shard changed or is damaged; fix: "
                                                 f"copy the shard again and rerun", damaged=True,
                             video=video)
                continue
            yield Sample(g.key, where, data, None, video=video)
    finally:
        if src is not None:
            src.close()


register_reader("tar", _tar_count, _tar_samples)
