"""DataLoader: batches of processed images for batch jobs and training, resumable mid-epoch.

Three stages, each single-purpose:

    feeder thread      sources -> Samples (id, image or video, header-only token count) -> batches
    worker threads     batch -> Processor (or OutputCache hits) -> PackedBatch (videos in
                       ``batch.videos``: ``loader/videos.py``)
    consumer (caller)  takes batches strictly in stream order: ``for ids, batch in loader``

The feeder and workers run ahead by at most ``prefetch`` batches; the consumer always waits for
the next batch in order, so what is yielded never depends on thread timing.
"""
from __future__ import annotations

import logging
import math
import os
import queue
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence, cast

from ..errors import ImageError
from ..pack import concat
from ..progress import bar as progress_bar
from .batching import Sample, group_by_tokens, pack_greedy, stream_from
from .documents import check_page, is_document_item, page_tokens, prepare_with_pages, raise_first
from .videos import as_video, by_kind, empty_images, error_part, is_video_item, video_tokens

if TYPE_CHECKING:
    from ..batch.shards import ShardSource
    from ..cache import OutputCache
    from ..pack import PackedBatch
    from ..processor import Processor

__all__ = ["DataLoader"]

logger = logging.getLogger("vlmprep.loader")

_STATE_VERSION = 1
_END = object()


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _is_single_image(x: Any) -> bool:
    if isinstance(x, (str, bytes, bytearray, memoryview, os.PathLike)):
        return True
    if (type(x).__module__ or "").startswith("PIL"):
        return True
    shape = getattr(x, "shape", None)
    return shape is not None and str(getattr(x, "dtype", "")) not in ("object", "|O")


def _is_map_style(sources: Any) -> bool:
    if isinstance(sources, Mapping):
        raise TypeError("sources: expected a sequence or iterable of samples, got a dict; pass a "
                        "list of dicts (one per sample) or list(d.values())")
    if _is_single_image(sources):
        raise TypeError(f"sources: expected a sequence or iterable of images, got one image "
                        f"({type(sources).__name__}); wrap it in a list: [image]")
    names = {c.__name__ for c in type(sources).__mro__}
    if "IterableDataset" in names:  # torch / HF streaming datasets: iterate, never index
        return False
    t = type(sources)
    if hasattr(t, "__len__") and hasattr(t, "__getitem__"):
        return True
    if hasattr(t, "__iter__"):
        return False
    raise TypeError(f"sources: expected a sequence (len + index) or an iterable, got "
                    f"{type(sources).__name__}")


def _shard_source(sources: Any) -> "ShardSource | None":
    """``sources`` when it is a ``vlmprep.batch.shards.ShardSource`` (already processed
    samples), else None. A ShardSource exists only once its module is imported, so the check
    imports nothing."""
    mod = sys.modules.get("vlmprep.batch.shards")
    return sources if mod is not None and isinstance(sources, mod.ShardSource) else None


def _record_streams(batch: "PackedBatch") -> None:
    """A batch made on a worker's stream: keep its memory until the consumer's stream is done
    with it (images' and videos' tensors)."""
    import torch
    cur = torch.cuda.current_stream(batch.pixel_values.device)
    for part in (batch, batch.videos):
        if part is not None:
            part.pixel_values.record_stream(cur)
            part.cu_seqlens.record_stream(cur)


def _skipped(samples: list[Sample], batch: "PackedBatch") -> list[tuple[Any, ImageError]]:
    """(id, error) of the batch's skipped samples, images' and videos', in stream order."""
    images, videos = by_kind(samples, range(len(samples)))
    found = [(images[j], e) for j, e in batch.errors.items()]
    if batch.videos is not None:
        found += [(videos[j], e) for j, e in batch.videos.errors.items()]
    return [(samples[k].sid, e) for k, e in sorted(found, key=lambda ke: ke[0])]


def _check_int(name: str, v: Any, lo: int, none_ok: bool = False) -> None:
    if v is None and none_ok:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        more = " or None" if none_ok else ""
        raise ValueError(f"DataLoader: {name} expected an int >= {lo}{more}, got {v!r}")


class DataLoader:
    """Iterate ``(ids, batch)`` over ``sources``, processed by ``proc``, in deterministic order.

    Yields:
        ids: ``list``, the sample ids of this batch in order, skipped samples included: a dict
            sample's ``id_key`` field, else its position (index into a sequence, or count in an
            iterable, from 0).
        batch: ``PackedBatch`` of those samples in the same order (``pixel_values``
            ``(total_patches, patch_dim)`` on ``proc.device``, ...). With ``proc.errors="skip"``
            ``batch.errors[k]`` names the k-th sample of the batch when it was skipped (its
            ``num_tokens[k]`` is 0 and it has no rows); the message names the sample id.
            Videos (``vlmprep.Video`` items, paths with a video extension, bytes of a video
            container, dicts with ``video_key``) are ``batch.videos``' items, as
            ``proc(images, videos=videos)`` returns them: a batch's images are ``batch``'s
            items and its videos ``batch.videos``' items, each in stream order (``errors[k]``:
            the k-th of its kind), so a stream of one kind keeps ``ids[k]`` <-> item ``k``.

    Args:
        sources: a sequence (``len`` + index: map-style, shuffled and resumed exactly) or an
            iterable (streaming) of images (paths, bytes, PIL images, HWC uint8 arrays, CHW
            uint8 tensors) or of dicts holding one under ``image_key`` (an HF
            ``{"bytes", "path"}`` struct is accepted there); or a
            ``vlmprep.loader.ShardSource(output_dir)``: the samples ``vlmprep run`` already
            processed, read from its shards without decoding (then no ``proc``; ids are the
            job's sample ids, token counts come from the shards, batches are on the CPU and
            bit-exact with the Processor's; skipped samples appear only with the source's
            ``include_errors=True``, in ``batch.errors``).
        proc: the ``vlmprep.Processor``; its ``errors`` policy decides skip or raise (None
            for a ShardSource).
        batch_size: this many images per batch, as in torch (None: no count limit).
        max_batch_tokens: a token budget, only when asked: at most this many LLM tokens per
            batch, counted header-only with ``proc.plan`` (default None: no token limit; e.g.
            16384). Both limits apply when both are set; at least one is required. A sample
            alone above the budget forms its own batch and is listed in ``loader.oversize``; it
            is never dropped.
        shuffle: map-style only: the order is ``numpy.random.default_rng(seed + epoch)
            .permutation(len(sources))``.
        seed: int >= 0.
        num_workers: processing threads (0: process in the caller's thread).
        drop_last: drop the epoch's final batch unless it is full (``batch_size`` images, or at
            least ``max_batch_tokens`` tokens).
        group_by_size: within each window of ``group_window`` consecutive samples, order by
            token count (largest first) so that batches pack similar sizes (deterministic).
        group_window: samples per sorting window (default ``64 * batch_size``, else 1024).
        prefetch: batches processed ahead of the consumer (default ``2 * num_workers``).
        image_key, id_key: the fields of dict samples.
        video_key: the field of a dict sample that holds a video (used when ``image_key`` is
            absent; None: dicts hold images only).
        cache: an optional ``vlmprep.cache.OutputCache``; a hit skips processing that image
            (or video: keyed with its sampling options).
        progress: a tqdm bar over the epoch's samples on stderr: None (default) when stderr is
            a terminal and tqdm is installed, False never, True also when not a terminal; the
            environment variable ``VLMPREP_PROGRESS=0`` turns it off (see ``vlmprep.progress``).

    Epochs: a complete pass advances ``epoch``; ``set_epoch(e)`` sets it (either style works).
    A new ``iter(loader)`` restarts the current epoch unless ``load_state_dict`` armed a resume
    point. ``state_dict()`` holds the samples yielded so far; a loader given it with
    ``load_state_dict`` yields exactly the remaining samples. For iterable sources, resuming
    iterates past the consumed items again (no decode, no header read: just ``next()``), so
    resume costs one pass over the consumed prefix of the stream.
    """

    def __init__(self, sources: Iterable[Any], proc: "Processor | None" = None,
                 batch_size: int | None = None,
                 max_batch_tokens: int | None = None, shuffle: bool = False, seed: int = 0,
                 num_workers: int = 2, drop_last: bool = False, *, group_by_size: bool = False,
                 group_window: int | None = None, prefetch: int | None = None,
                 image_key: str = "image", id_key: str | None = "id",
                 cache: "OutputCache | None" = None, progress: bool | None = None,
                 video_key: str | None = "video"):
        self._shards = _shard_source(sources)
        if self._shards is not None:
            if proc is not None:
                hint = (f"; pass it by name: batch_size={proc}" if isinstance(proc, int)
                        else "; drop proc")
                raise TypeError(f"DataLoader: proc expected None for a ShardSource (its samples "
                                f"are already processed by the job's pipeline), got "
                                f"{type(proc).__name__}{hint}")
            if cache is not None:
                raise ValueError("DataLoader: cache expected None for a ShardSource (reading a "
                                 "shard is the cached form), got an OutputCache; drop cache")
        elif not (callable(proc) and hasattr(proc, "plan") and hasattr(proc, "errors")):
            raise TypeError(f"DataLoader: proc expected a vlmprep.Processor, got "
                            f"{type(proc).__name__}; e.g. vlmprep.Processor('qwen2-vl'), or "
                            f"read preprocessed shards with vlmprep.loader.ShardSource(dir)")
        _check_int("batch_size", batch_size, 1, none_ok=True)
        _check_int("max_batch_tokens", max_batch_tokens, 1, none_ok=True)
        if batch_size is None and max_batch_tokens is None:
            raise ValueError("DataLoader: expected batch_size or max_batch_tokens (or both), got "
                             "neither; e.g. batch_size=32 or max_batch_tokens=16384")
        _check_int("seed", seed, 0)
        _check_int("num_workers", num_workers, 0)
        _check_int("prefetch", prefetch, 1, none_ok=True)
        _check_int("group_window", group_window, 1, none_ok=True)
        self._map = _is_map_style(sources)
        if shuffle and not self._map:
            raise ValueError(f"DataLoader: shuffle=True expected a sequence (len + index), got an "
                             f"iterable ({type(sources).__name__}); shuffle the stream upstream "
                             f"(e.g. a shuffle buffer) or pass list(sources)")
        if cache is not None and not all(hasattr(cache, m) for m in ("key_for", "get", "put")):
            raise TypeError(f"DataLoader: cache expected a vlmprep.cache.OutputCache, got "
                            f"{type(cache).__name__}")
        self.sources = sources
        # None only with a ShardSource, whose path never calls it
        self.proc: "Processor" = cast("Processor", proc)
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.shuffle = bool(shuffle)
        self.seed = seed
        self.num_workers = num_workers
        self.drop_last = bool(drop_last)
        self.group_by_size = bool(group_by_size)
        self.group_window = group_window or (64 * batch_size if batch_size else 1024)
        self.prefetch = prefetch or max(1, 2 * num_workers)
        self.image_key, self.id_key, self.video_key = image_key, id_key, video_key
        self.cache = cache
        self.progress = progress
        self.skipped: list[tuple[Any, ImageError]] = []
        self.oversize: list[tuple[Any, int]] = []
        self._need_tokens = max_batch_tokens is not None or self.group_by_size
        self._cuda = str(getattr(proc, "device", "cpu")).startswith("cuda")
        self._tls = threading.local()
        self._tokens: dict[int, int] = {}  # map-style: index -> tokens (headers read once)
        if self._shards is not None:  # the shards hold the counts: no header to read
            self._tokens = dict(enumerate(self._shards.num_tokens))
        self._order_cache: tuple[tuple[int, int], Any] | None = None  # ((epoch, seed), order)
        self._len_cache: tuple[tuple[int, int], int] | None = None  # ((epoch, seed), batches)
        self._epoch = 0
        self._yielded = 0
        self._resume = False
        self._gen = 0

    @property
    def _seq(self) -> Sequence[Any]:
        """``sources`` of a map-style loader (len + index; only used when ``self._map``)."""
        return cast(Sequence[Any], self.sources)

    def __repr__(self) -> str:
        kind = f"{len(self._seq)} samples" if self._map else "iterable"
        return (f"DataLoader({kind}, batch_size={self.batch_size}, "
                f"max_batch_tokens={self.max_batch_tokens}, shuffle={self.shuffle}, "
                f"seed={self.seed}, num_workers={self.num_workers}, epoch={self._epoch})")

    # -- epochs and resume ----------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (its shuffle order) from its first sample on the next iter."""
        _check_int("epoch", epoch, 0)
        self._epoch = epoch
        self._yielded = 0
        self._resume = False

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: ``{"kind", "epoch", "seed", "samples_yielded", ...}`` (JSON-safe).

        ``samples_yielded`` counts the samples of the batches already handed to the caller
        (prefetched batches are not counted: they are processed again on resume).
        """
        return {"version": _STATE_VERSION, "kind": "map" if self._map else "iterable",
                "epoch": self._epoch, "seed": self.seed, "samples_yielded": self._yielded,
                "num_samples": len(self._seq) if self._map else None,
                "shuffle": self.shuffle, "group_by_size": self.group_by_size,
                "group_window": self.group_window if self.group_by_size else None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()``: the next iteration yields exactly the samples not yet
        yielded (epoch and seed are taken from ``state``; the sample order must be the same:
        same sources, shuffle and size grouping)."""
        if not isinstance(state, Mapping) or state.get("version") != _STATE_VERSION:
            got = state.get("version") if isinstance(state, Mapping) else "-"
            raise ValueError(f"load_state_dict: expected a dict from DataLoader.state_dict() "
                             f"(version {_STATE_VERSION}), got {type(state).__name__} with "
                             f"version {got}")
        mine = self.state_dict()
        for k in ("kind", "num_samples", "shuffle", "group_by_size", "group_window"):
            if state.get(k) != mine[k]:
                raise ValueError(f"load_state_dict: {k} expected {mine[k]!r} (this loader), got "
                                 f"{state.get(k)!r} (the saved state); build the loader with the "
                                 f"same sources and options as the one that saved it")
        _check_int("samples_yielded", state.get("samples_yielded"), 0)
        _check_int("epoch", state.get("epoch"), 0)
        _check_int("seed", state.get("seed"), 0)
        self.seed = state["seed"]
        self._epoch = state["epoch"]
        self._yielded = state["samples_yielded"]
        self._resume = True
        self._order_cache = self._len_cache = None

    # -- the sample stream ----------------------------------------------------------------------
    def _order(self, epoch: int):
        if self._order_cache is None or self._order_cache[0] != (epoch, self.seed):
            n = len(self._seq)
            if self.shuffle:
                import numpy as np
                order = np.random.default_rng(self.seed + epoch).permutation(n).tolist()
            else:
                order = range(n)
            self._order_cache = ((epoch, self.seed), order)
        return self._order_cache[1]

    def _raw(self, epoch: int, start: int, fetch: bool = True) -> Iterator[tuple[int, Any]]:
        """``(index, item)`` of the epoch's order from position ``start`` (map-style with
        ``fetch=False``: ``(index, None)``)."""
        if self._map:
            order = self._order(epoch)
            fetch = fetch and self._shards is None  # a shard item is read by its worker
            for j in range(start, len(order)):
                i = order[j]
                yield i, (self._seq[i] if fetch else None)
        else:
            it = iter(self.sources)
            for _ in range(start):  # resume: skip consumed items without reading headers
                if next(it, _END) is _END:
                    return
            yield from enumerate(it, start)

    def _image_of(self, raw: Any) -> tuple[Any, Any, ImageError | None, bool]:
        """``raw`` sample -> (id or None, image or video, error, is it a video)."""
        if not isinstance(raw, Mapping):
            return None, raw, None, is_video_item(raw)
        sid = raw.get(self.id_key) if self.id_key is not None else None
        key = self.image_key
        if key not in raw and self.video_key is not None and self.video_key in raw:
            key = self.video_key
        if key not in raw:
            keys = sorted(map(str, raw))[:8]
            alt = f" or a video under {self.video_key!r}" if self.video_key is not None else ""
            return sid, None, ImageError(f"expected a dict with the image under "
                                         f"{self.image_key!r}{alt}, got keys {keys}; pass "
                                         f"image_key= (video_key=) to DataLoader",
                                         source="dict"), False
        image = raw[key]
        if isinstance(image, Mapping):  # HF datasets Image(decode=False): {"bytes", "path"}
            image = image.get("bytes") or image.get("path")
        return sid, image, None, key != self.image_key or is_video_item(image)

    def _tokens_of(self, image: Any, video: bool) -> int:
        if video:  # container metadata only, as images read headers only
            return video_tokens(self.proc, image)
        if is_document_item(image):  # the page tree only
            return page_tokens(self.proc, image)
        try:
            return int(self.proc.plan([image]).total_tokens)
        except ImageError:
            return 0  # raised or skipped when its batch is processed, naming the sample

    def _make_sample(self, pos: int, index: int, raw: Any) -> Sample:
        if self._shards is not None:  # image: the item's index in the source
            return Sample(pos, index, self._shards.ids[index], index, self._tokens[index],
                          video=self._shards.modalities[index] == "video")
        sid, image, err, video = self._image_of(raw)
        document = is_document_item(image)
        if document and err is None:
            err = check_page(image)
        s = Sample(pos, index, index if sid is None else sid, image, -1, err, video, document)
        if self._need_tokens:
            t = self._tokens.get(index) if self._map else None
            if t is None:
                t = 0 if err is not None else self._tokens_of(image, video)
                if self._map:
                    self._tokens[index] = t
            s.tokens = t
        return s

    def _samples(self, epoch: int, skip: int, make=None, fetch: bool = True
                 ) -> Iterator[Sample]:
        make = make or self._make_sample
        if not self.group_by_size:
            return stream_from(self._raw(epoch, skip, fetch), skip, make)
        w0 = skip - skip % self.group_window  # a window is re-sorted whole, then trimmed
        return group_by_tokens(stream_from(self._raw(epoch, w0, fetch), w0, make),
                               self.group_window, skip - w0)

    def _batches(self, epoch: int, skip: int, make=None, fetch: bool = True
                 ) -> Iterator[list[Sample]]:
        return pack_greedy(self._samples(epoch, skip, make, fetch), self.batch_size,
                           self.max_batch_tokens, self.drop_last)

    def __len__(self) -> int:
        """Batches in the current epoch (map-style only). With a token budget or size grouping
        this reads every sample's header once (cached) and packs the epoch's order."""
        if not self._map:
            raise TypeError("len(DataLoader): an iterable source has no length; pass a sequence "
                            "(len + index) to get one")
        n = len(self._seq)
        if not self._need_tokens:
            bs = self.batch_size
            assert bs is not None  # without a token budget, batch_size is required (__init__)
            return n // bs if self.drop_last else math.ceil(n / bs)
        if self._len_cache is None or self._len_cache[0] != (self._epoch, self.seed):

            def light(pos: int, index: int, raw: Any) -> Sample:
                # Token counts only: sources[index] is fetched on a header-cache miss alone.
                t = self._tokens.get(index)
                if t is None:
                    return self._make_sample(pos, index, self._seq[index])
                return Sample(pos, index, index, None, t)

            count = sum(1 for _ in self._batches(self._epoch, 0, light, fetch=False))
            self._len_cache = ((self._epoch, self.seed), count)
        return self._len_cache[1]

    # -- processing -----------------------------------------------------------------------------
    def _named(self, e: ImageError, s: Sample, k: int) -> ImageError:
        who = f"sample {s.sid!r}" if s.sid is s.index else f"sample {s.sid!r} (index {s.index})"
        err = ImageError(f"{who}: {e.reason}", index=k, source=e.source, item=e.item)
        err.__cause__ = e.__cause__
        return err

    def _call(self, samples: list[Sample], positions: list[int]) -> "PackedBatch":
        images, videos = by_kind(samples, positions)
        try:
            if any(samples[k].document for k in images):
                return self._call_pages(samples, images, videos)
            if not videos:
                return self.proc([samples[k].image for k in images])
            return self.proc([samples[k].image for k in images],
                             videos=[samples[k].image for k in videos])
        except ImageError as e:
            where = videos if e.item == "video" else images
            j = e.index if e.index is not None and 0 <= e.index < len(where) else 0
            k = where[j]
            raise self._named(e, samples[k], k) from e

    def _call_pages(self, samples: list[Sample], images: list[int], videos: list[int]
                    ) -> "PackedBatch":
        """``_call`` with document pages among the images (the Processor puts documents after
        the images: ``prepare_with_pages`` keeps the stream order); videos as ``proc()`` runs
        them: nothing decoded or rendered before every item is known good."""
        p = self.proc
        prepared = prepare_with_pages(p, [(samples[k].document, samples[k].image) for k in images])
        vids = p.prepare_videos([samples[k].image for k in videos]) if videos else None
        raise_first(p, prepared[1])
        if vids is not None:
            raise_first(p, vids[1])
        batch = p.execute(*p.render_documents(*prepared))
        return batch if vids is None else replace(batch, videos=p.execute_videos(*vids))

    def _renamed(self, batch: "PackedBatch", samples: list[Sample]) -> "PackedBatch":
        """``batch``'s errors (images', videos') renamed to name their samples' ids."""
        images, videos = by_kind(samples, range(len(samples)))
        for part, where in ((batch, images), (batch.videos, videos)):
            if part is not None:
                for j, e in list(part.errors.items()):
                    part.errors[j] = self._named(e, samples[where[j]], j)
        return batch

    def _run(self, samples: list[Sample]) -> "PackedBatch":
        """One batch of samples -> its PackedBatch (errors renamed to name the sample ids)."""
        pre = {k: s.error for k, s in enumerate(samples) if s.error is not None}
        if pre and self.proc.errors == "raise":
            k0 = min(pre)
            if k0:
                self._call(samples, list(range(k0)))  # an earlier bad image raises first
            raise self._named(pre[k0], samples[k0], k0)
        if self.cache is None and not pre:
            batch = self._call(samples, list(range(len(samples))))
        else:
            batch = self._run_parts(samples, pre)
        return self._renamed(batch, samples)

    def _run_parts(self, samples: list[Sample], pre: dict[int, ImageError]) -> "PackedBatch":
        """Item by item: cache hits, one Processor call for the misses, error placeholders. A
        video's part is no image and the video in ``videos`` (cached: the video's batch)."""
        parts: list[Any] = [None] * len(samples)
        keys: dict[int, str] = {}
        first: dict[str, int] = {}
        dup: dict[int, int] = {}
        todo: list[int] = []
        for k, s in enumerate(samples):
            if k in pre:
                parts[k] = error_part(self.proc, pre[k], s.video)
                continue
            cache = self.cache
            # a page is not cached: the cache keys images and videos by their bytes
            key = (cache.key_for(as_video(s.image) if s.video else s.image, self.proc)
                   if cache is not None and not s.document else None)
            if key is not None and cache is not None:
                if key in first:  # the same image twice in one batch: processed once
                    dup[k] = first[key]
                    continue
                first[key] = k
                hit = cache.get(key)
                if hit is not None:
                    if self._cuda:
                        # made on another worker's stream: an eviction must not free it while
                        # this stream still reads it
                        import torch
                        hit.pixel_values.record_stream(torch.cuda.current_stream())
                    parts[k] = replace(empty_images(self.proc), videos=hit) if s.video else hit
                    continue
                keys[k] = key
            todo.append(k)
        if todo:
            self._fill_parts(samples, todo, parts, keys)
        for k, j in dup.items():
            parts[k] = parts[j]
        return concat(parts)

    def _fill_parts(self, samples: list[Sample], todo: list[int], parts: list[Any],
                    keys: dict[int, str]) -> None:
        """Process ``todo`` in one call; each sample's part into ``parts`` (and the cache)."""
        out = self._call(samples, todo)
        images, videos = by_kind(samples, todo)
        for k, part in zip(images, out.split()):
            parts[k] = part
            if k in keys and self.cache is not None:
                self.cache.put(keys[k], part)
        if not videos or out.videos is None:
            return
        empty = empty_images(self.proc)
        for k, vpart in zip(videos, out.videos.split()):
            parts[k] = replace(empty, videos=vpart)
            if k in keys and self.cache is not None:
                self.cache.put(keys[k], vpart)

    def _read_shards(self, samples: list[Sample]) -> "PackedBatch":
        """A ShardSource's batch: its rows read back (no decode), errors named by sample id."""
        assert self._shards is not None
        return self._renamed(self._shards.read([s.image for s in samples]), samples)

    def _process(self, samples: list[Sample]) -> "PackedBatch":
        if self._shards is not None:
            return self._read_shards(samples)
        if not self._cuda:
            return self._run(samples)
        import torch
        stream = getattr(self._tls, "stream", None)
        if stream is None:  # one side stream per worker thread
            stream = self._tls.stream = torch.cuda.Stream(device=torch.device(self.proc.device))
        with torch.cuda.device(stream.device), torch.cuda.stream(stream):
            batch = self._run(samples)
        # Complete before it is handed on: the consumer, and other workers reading cache
        # entries, use it from other streams. The worker waits here, not the consumer.
        stream.synchronize()
        return batch

    # -- iteration ------------------------------------------------------------------------------
    def _threaded(self, batches: Iterator[list[Sample]]
                  ) -> Iterator[tuple[list[Sample], "PackedBatch"]]:
        slots = threading.Semaphore(self.prefetch)
        q: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        stop = threading.Event()
        pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix="vlmprep-loader")

        def feed() -> None:
            try:
                for samples in batches:
                    while not slots.acquire(timeout=0.05):
                        if stop.is_set():
                            return
                    if stop.is_set():
                        return
                    q.put((samples, pool.submit(self._process, samples)))
                q.put(_END)
            except BaseException as e:  # noqa: BLE001 (re-raised in the consumer, in order)
                q.put(_Failure(e))

        feeder = threading.Thread(target=feed, name="vlmprep-loader-feed", daemon=True)
        feeder.start()
        try:
            while True:
                msg = q.get()
                if msg is _END:
                    return
                if isinstance(msg, _Failure):
                    raise msg.exc
                samples, fut = msg
                batch = fut.result()  # waits for this batch only; later ones keep running
                slots.release()
                yield samples, batch
        finally:
            stop.set()
            while True:
                try:
                    msg = q.get_nowait()
                except queue.Empty:
                    break
                if isinstance(msg, tuple):
                    msg[1].cancel()
            pool.shutdown(wait=False, cancel_futures=True)

    def __iter__(self) -> Iterator[tuple[list[Any], "PackedBatch"]]:
        skip = self._yielded if self._resume else 0
        self._resume = False
        self._gen += 1
        self._yielded = skip
        if skip == 0:
            self.skipped, self.oversize = [], []
        return self._iterate(self._epoch, skip, self._gen)

    def _account(self, samples: list[Sample], batch: "PackedBatch") -> None:
        """A yielded batch into the loader's state: skipped and oversize samples, the count."""
        self.skipped.extend(_skipped(samples, batch))
        if self.max_batch_tokens is not None:
            for s in samples:
                if s.tokens > self.max_batch_tokens:
                    self.oversize.append((s.sid, s.tokens))
                    logger.warning("sample %r has %d tokens, above max_batch_tokens=%d:"
                                   " batched alone", s.sid, s.tokens, self.max_batch_tokens)
        self._yielded += len(samples)

    def _iterate(self, epoch: int, skip: int, gen: int
                 ) -> Iterator[tuple[list[Any], "PackedBatch"]]:
        batches = self._batches(epoch, skip)
        results: Iterator[tuple[list[Sample], PackedBatch]]
        if self.num_workers == 0:
            results = ((b, self._process(b)) for b in batches)
        else:
            results = self._threaded(batches)
        total = len(self._seq) - skip if self._map else None
        bar = progress_bar(total, f"vlmprep epoch {epoch}", unit="img", enabled=self.progress)
        try:
            for samples, batch in results:
                bar.update(len(samples))
                ids = [s.sid for s in samples]
                if self._cuda:
                    _record_streams(batch)
                if gen == self._gen:  # a newer iter() owns the loader's state
                    self._account(samples, batch)
                yield ids, batch
        finally:
            bar.close()
            close = getattr(results, "close", None)
            if close is not None:
                close()
        if gen == self._gen and self._epoch == epoch:
            self._epoch = epoch + 1
            self._yielded = 0
