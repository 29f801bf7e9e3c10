"""OutputCache: processed single-image PackedBatches keyed by a hash of the image's content.

A key hashes what the image *is* (its encoded bytes, a file's bytes, an array's raw bytes with
shape and dtype, a PIL image's pixels with mode and size) together with everything that decides
the output (the resolved pipeline, backend, device, dtype, match and row_form), so a hit is
bit-exact to processing the image again. A ``vlmprep.Video`` item's key also holds its sampling
(``fps``, ``num_frames``, ``start``, ``end``, ``source_fps``) and the Processor's video options
and decoder: the same file sampled two ways has two entries, each the one-video ``"video"``
PackedBatch (``batch.videos``) of that sampling. Used by ``vlmprep.loader.DataLoader(cache=...)`` and
the async Batcher, both through ``key_for`` / ``get`` / ``put`` only::

    cache = OutputCache(max_bytes=2 << 30)
    key = cache.key_for(item, proc)          # str, or None when the item cannot be hashed
    hit = cache.get(key) if key else None    # PackedBatch of one image, or None
    if hit is None:
        one = proc([item]); cache.put(key, one)
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from .errors import ImageError
from .io.files import open_image_file
from .io.inputs import encoded_buffer, is_ndarray, is_torch_tensor
from .pack import PackedBatch

if TYPE_CHECKING:
    from . import ops
    from .pack import PackedBatch
    from .processor import Processor

__all__ = ["OutputCache"]

# Per-entry bookkeeping charged on top of the tensors (dataclass, lists, key, dict slot): an
# estimate, so that a cache of many tiny images still has a real bound.
_OVERHEAD = 512
_CHUNK = 1 << 20


def _batch_nbytes(b: "PackedBatch") -> int:
    t = (b.pixel_values, b.cu_seqlens, b.grid_thw, b.image_index)
    return sum(x.numel() * x.element_size() for x in t) + _OVERHEAD


def _config_fingerprint(proc: "Processor") -> bytes:
    return json.dumps({"pipeline": proc.pipeline.to_dict(), "backend": proc.backend_name,
                       "device": str(proc.device), "dtype": str(proc.dtype),
                       "match": proc.match, "row_form": proc.row_form},
                      sort_keys=True).encode()


def _video_of(item: Any) -> Any:
    """``item`` when it is a ``vlmprep.Video``, else None (a Video exists only once its module
    is imported: the check imports nothing)."""
    mod = sys.modules.get("vlmprep.io.video.types")
    return item if mod is not None and isinstance(item, mod.Video) else None


def _video_fingerprint(video: Any, proc: "Processor") -> bytes | None:
    """What decides a video's frames besides its content: its own sampling, the Processor's
    video options and decoder (decoders differ in levels); None for a Processor without
    video options (the Processor reports that video)."""
    opts = getattr(proc, "video_options", None)
    if opts is None:
        return None

    def num(v: Any) -> Any:
        return None if v is None else float(v)  # 2 and 2.0 sample the same frames

    return json.dumps({"fps": num(video.fps), "num_frames": video.num_frames,
                       "start": num(video.start), "end": num(video.end),
                       "source_fps": num(video.source_fps),
                       "options": dataclasses.asdict(opts), "decoder": proc.video_decoder},
                      sort_keys=True).encode()


def _feed_content(h: "hashlib.blake2b", item: Any, max_bytes: int, max_elems: int) -> bool:
    """Feed a type tag and the item's content into ``h``; False when the item is not hashable
    (unknown type, a path that is not a readable regular file, an encoded input above
    ``max_bytes``, an array of more than ``max_elems`` elements, which the Processor rejects
    from its shape): the caller then processes it uncached, and the Processor reports it.

    Reads at most ``max_bytes`` of a file and never opens anything but a regular file (a
    FIFO or ``/dev/zero`` would block or never end); hashes arrays row by row (a broadcast
    view with 0 strides is never made contiguous whole).
    """
    if isinstance(item, (bytes, bytearray, memoryview)):
        try:
            item = encoded_buffer(item, max_bytes)
        except ImageError:
            return False  # the Processor reports it (over the limit, released)
        # Encoded bytes and a file with the same bytes decode identically: one tag for both.
        h.update(b"encoded\0")
        h.update(item)
        return True
    if isinstance(item, (str, os.PathLike)):
        # The content, not path + mtime: a rewritten file with the same mtime must miss.
        try:
            f = open_image_file(item, max_bytes)
        except ImageError:
            return False  # the Processor reports what is there with a proper ImageError
        with f:
            h.update(b"encoded\0")
            left = max_bytes + 1
            while left > 0 and (chunk := f.read(min(_CHUNK, left))):
                h.update(chunk)
                left -= len(chunk)
        return left > 0  # a file that grew past the limit while read: not hashed
    mod = type(item).__module__ or ""
    if mod.startswith("PIL"):
        data = item.tobytes()
        h.update(f"pil\0{item.mode}\0{item.size}\0".encode())
        # Conversion to RGB reads the palette and tRNS transparency, not only the raw bands.
        if item.mode in ("P", "PA"):
            h.update(bytes(item.getpalette() or []))
        h.update(repr(item.info.get("transparency")).encode())
        h.update(data)
        return True
    if is_ndarray(item):
        import numpy as np
        a = np.asarray(item)
        if a.dtype.hasobject or a.ndim < 1 or a.size > max_elems:
            return False
        h.update(f"array\0{a.shape}\0{a.dtype.str}\0".encode())
        for row in a:  # one row contiguous at a time: memory bounded by a row
            h.update(np.ascontiguousarray(row).data)
        return True
    if is_torch_tensor(item):
        import torch
        t = item.detach()
        if t.is_complex() or t.layout != torch.strided or t.is_meta or t.numel() > max_elems:
            return False
        h.update(f"tensor\0{tuple(t.shape)}\0{t.dtype}\0".encode())
        # Row by row (a CUDA tensor's row is copied to the host: the input only).
        for row in (t if t.dim() else t.reshape(1)):
            r = row.contiguous().cpu().reshape(-1)
            if r.numel():
                h.update(r.view(torch.uint8).numpy().data)
        return True
    return False


class OutputCache:
    """A thread-safe LRU cache of single-image PackedBatches, bounded in bytes.

    Args:
        max_bytes: the bound on ``nbytes``: the sum over entries of their tensors' bytes
            (``pixel_values``, ``cu_seqlens``, ``grid_thw``, ``image_index``) plus a fixed
            per-entry overhead. An entry alone above ``max_bytes`` is not stored.

    Counters (read any time): ``hits``, ``misses`` (``get`` calls that found / did not find the
    key), ``evictions`` (entries dropped to respect the bound), ``nbytes``, ``len(cache)``;
    ``stats()`` returns all of them as a dict.

    Entries stay on the device they were produced on (a CUDA processor's cache holds GPU
    memory, up to ``max_bytes``). Batches returned by ``get`` share their tensors with the
    cache: treat them as read-only.
    """

    def __init__(self, max_bytes: int):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"OutputCache: max_bytes expected an int >= 0, got {max_bytes!r}; "
                             f"e.g. OutputCache(max_bytes=2 << 30) for 2 GiB")
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._nbytes = 0
        self._entries: "OrderedDict[str, tuple[PackedBatch, int]]" = OrderedDict()
        self._lock = threading.Lock()

    # -- keys -----------------------------------------------------------------------------------
    def key_for(self, item: Any, proc: "Processor") -> str | None:
        """A hex blake2b digest of ``item``'s content and ``proc``'s resolved configuration.

        ``item`` is one image as ``Processor`` accepts it, or one ``vlmprep.Video`` (its
        source's content, its sampling options and the Processor's video options and decoder;
        its entry is the video's one-video ``batch.videos``). Files are read in full (hashing the
        content is the price of never serving a stale output), up to the pipeline's
        ``decode.max_source_bytes`` (a video: ``proc.video_limits.max_source_bytes``); only
        regular files are opened. Never raises: returns None for an item it cannot hash
        (unknown type, a path that is not a readable regular file, an input over the byte
        limit, a broken buffer, a frame list, a video for a Processor without video options):
        process it uncached.
        """
        h = hashlib.blake2b(digest_size=20)
        h.update(_config_fingerprint(proc))
        h.update(b"\0item\0")
        dec = cast("ops.decode", proc.pipeline["decode"])
        max_bytes, max_elems = dec.max_source_bytes, 3 * dec.max_source_pixels
        try:
            video = _video_of(item)
            if video is not None:  # tagged apart from any image of the same bytes
                fp = _video_fingerprint(video, proc)
                if fp is None:
                    return None
                h.update(b"video\0")
                h.update(fp)
                lim = proc.video_limits
                item = video.source
                max_bytes, max_elems = lim.max_source_bytes, 3 * lim.max_source_pixels * lim.max_frames
            if not _feed_content(h, item, max_bytes, max_elems):
                return None
        except Exception:  # noqa: BLE001 (a released buffer, a closed PIL file, a meta tensor:
            return None    # the Processor reports the item with a proper ImageError)
        return h.hexdigest()

    # -- lookups --------------------------------------------------------------------------------
    def get(self, key: str) -> "PackedBatch | None":
        """The cached single-image batch for ``key`` (marked most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            b = entry[0]
        # A shallow copy: callers may edit the host lists / dict; tensors are shared.
        return replace(b, seqlens=list(b.seqlens), num_tokens=list(b.num_tokens), errors={},
                       placeholders=list(b.placeholders))

    def put(self, key: str, batch: "PackedBatch") -> bool:
        """Store ``batch`` (one image, no error; or the ``"video"`` batch of one video, under a
        video's key) under ``key``; returns whether it was stored.

        Not stored: a batch with an error (skipped image) or one larger than ``max_bytes``.
        Least recently used entries are evicted until ``nbytes <= max_bytes``.
        """
        if not isinstance(batch, PackedBatch) or batch.num_images != 1:
            got = (f"{batch.num_images} images" if isinstance(batch, PackedBatch)
                   else type(batch).__name__)
            raise ValueError(f"OutputCache.put: expected a PackedBatch of one image, got {got}; "
                             f"put each image of a batch: for k, b in zip(keys, batch.split())")
        if batch.errors:
            return False
        pv = batch.pixel_values
        if pv.untyped_storage().nbytes() > pv.numel() * pv.element_size():
            # A view from batch.split() would pin the whole batch's storage: own the rows.
            batch = replace(batch, pixel_values=pv.clone())
        size = _batch_nbytes(batch)
        if size > self.max_bytes:
            return False
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._nbytes -= old[1]
            self._entries[key] = (batch, size)
            self._nbytes += size
            while self._nbytes > self.max_bytes:
                _, (_, n) = self._entries.popitem(last=False)
                self._nbytes -= n
                self.evictions += 1
        return True

    # -- bookkeeping ----------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        return self._nbytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def clear(self) -> None:
        """Drop every entry (counters are kept)."""
        with self._lock:
            self._entries.clear()
            self._nbytes = 0

    def stats(self) -> dict[str, Any]:
        """``{"hits", "misses", "evictions", "entries", "nbytes", "max_bytes", "hit_rate"}``."""
        with self._lock:
            looked = self.hits + self.misses
            return {"hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                    "entries": len(self._entries), "nbytes": self._nbytes,
                    "max_bytes": self.max_bytes,
                    "hit_rate": self.hits / looked if looked else 0.0}

    def __repr__(self) -> str:
        s = self.stats()
        return (f"OutputCache(entries={s['entries']}, nbytes={s['nbytes']:,}/{self.max_bytes:,}, "
                f"hits={s['hits']}, misses={s['misses']}, evictions={s['evictions']})")
