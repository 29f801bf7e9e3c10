"""Batcher: coalesce concurrent requests into backend batches, off the event loop.

One request is one ``submit(images)`` call; one batch is one ``proc(images)`` call on the
worker thread over the images of several requests::

    Given  max_batch_images=4; requests A (2 images), B (1), C (3) queued in that order
    Output batch 1 = A + B (3 images; adding C would make 6 > 4), batch 2 = C
           A gets rows of its 2 images with image_index [0, 1]; B gets its 1 image as index 0

Timeline of a request: ``submit`` has it probed and planned from headers on a planning thread
(token count, limits, header errors; the event loop only awaits it) -> waits in a FIFO queue ->
the scheduler cuts a batch when the queue holds ``max_batch_images`` images or
``max_batch_tokens`` tokens, or the oldest request has waited ``max_delay_ms`` -> the worker
thread runs the batch from the probe results and plans made at submit (each item is probed once)
and splits it per request -> the future resolves on the event loop.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import ImageError
from ..io.inputs import as_image_list
from ..io.warm import warm_decoders
from ..kernels import get_num_threads
from ..pack import concat
from ..processor import Processor, _video_list
from .metrics import Metrics
from .videos import VideoLane

if TYPE_CHECKING:
    from ..pack import PackedBatch
    from ..plan import Plan

__all__ = ["Batcher", "RequestTooLarge"]

log = logging.getLogger("vlmprep.serve")


class RequestTooLarge(ValueError):
    """A request above ``max_request_images`` / ``max_request_tokens``; refused before queueing
    (an HTTP server maps it to 413)."""


@dataclass(eq=False)
class _Request:
    items: list                # the images= items (the cache keys them); pages follow in plans
    sources: list              # per item: its resolved Source (None if it failed to resolve);
                               # a document page's is a "page" Source, rendered by the worker
    plans: list                # per item, pages included: its ImagePlan (request-local index)
    tokens: int                # planned visual tokens (0 for images with a header error)
    future: asyncio.Future
    t0: float                  # loop.time() at submit: what latency counts from
    tq: float = 0.0            # loop.time() when queued (planned): the age max_delay_ms bounds
    state: str = "queued"      # queued -> running -> done
    cancelled: bool = False    # set on the loop thread; read by the worker (a stale read only
                               # costs processing images whose result is then dropped)

    @property
    def n(self) -> int:
        return len(self.plans)  # images, then the documents' pages


def _set_up(proc: Processor, *pools: ThreadPoolExecutor) -> None:
    """A Batcher's set-up, on a planning thread when it is made, so that neither its first
    request nor its event loop waits on it: every lazily loaded decoder (``io.warm``: a first
    import holds the GIL, 150-350 ms for OpenCV, Pillow's plugins and the kernels, and stalled
    the loop that long), the batcher's threads and the backend's image threads started (a thread
    started from the loop blocks it until the thread runs), and one small array planned and run
    through the backend (its first-use costs; CUDA's context on a GPU). Never raises."""
    try:
        import numpy as np

        from ..backends.base import image_pool  # deferred: imports torch
        for pool in pools:
            with contextlib.suppress(RuntimeError):  # closed already: nothing to start
                pool.submit(int)  # starts its (next) thread now
        warm_decoders()
        n = get_num_threads()
        if n > 1 and proc.device.startswith("cpu"):
            list(image_pool(n).map(int, range(n)))
        proc.execute(*proc.prepare([np.zeros((64, 64, 3), np.uint8)]))
    except Exception:  # noqa: BLE001 (an optimization: the requests report their own failures)
        log.warning("vlmprep.serve: the batcher's set-up failed; requests set up on first use",
                    exc_info=True)


def _check_count(name: str, value: Any, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fix = "None (no limit) or " if optional else ""
        raise ValueError(f"{name}: expected {fix}an int >= 1, got {value!r}")


class Batcher:
    """An async dynamic batcher in front of a ``Processor``.

    Args:
        proc: the Processor whose pipeline, backend, device, dtype and ``errors`` policy the
            requests get. The batcher runs its own clone in ``errors="skip"`` mode, so that a
            bad image only ever fails its own request.
        max_delay_ms: the longest the oldest queued request waits for others to join its
            batch (0: run whatever is queued as soon as the worker is free).
        max_batch_images: images per backend batch.
        max_batch_tokens: planned visual tokens (``plan.total_tokens``) per backend batch.
            A request above either batch limit on its own runs alone, in a batch of its own.
        max_request_images, max_request_tokens: per-request limits; ``submit`` raises
            ``RequestTooLarge`` (a ValueError) at once, without queueing. None: no limit.
        cache: optional object with ``key_for(item, proc) -> str | None``, ``get(key) ->
            PackedBatch | None`` and ``put(key, batch)`` (e.g. ``vlmprep.cache.OutputCache``),
            consulted per image on the worker thread (hashing never runs on the event loop).

    Use one Batcher per event loop (it binds to the loop of its first ``submit``). Its set-up
    begins on a thread when it is made, never on the loop (``start``: await it at server
    start-up, or let the first ``submit`` wait for it).
    ``submit`` returns the same PackedBatch ``proc(images)`` would return for that request
    alone: its own rows only, ``image_index`` and ``errors`` keyed by request-local indices.
    """

    def __init__(self, proc: Processor, max_delay_ms: float = 5.0, max_batch_images: int = 64,
                 max_batch_tokens: int = 65536, max_request_images: int | None = None,
                 max_request_tokens: int | None = None, cache: Any = None):
        if not isinstance(proc, Processor):
            raise TypeError(f"Batcher: proc expected a vlmprep.Processor, got "
                            f"{type(proc).__name__}; build one with vlmprep.Processor(preset, ...)")
        if isinstance(max_delay_ms, bool) or not isinstance(max_delay_ms, (int, float)) \
                or not math.isfinite(max_delay_ms) or max_delay_ms < 0:
            raise ValueError(f"max_delay_ms: expected a finite number >= 0, got {max_delay_ms!r}")
        _check_count("max_batch_images", max_batch_images)
        _check_count("max_batch_tokens", max_batch_tokens)
        _check_count("max_request_images", max_request_images, optional=True)
        _check_count("max_request_tokens", max_request_tokens, optional=True)
        if cache is not None:
            missing = [m for m in ("key_for", "get", "put") if not callable(getattr(cache, m, None))]
            if missing:
                raise TypeError(f"cache: expected an object with key_for(item, proc), get(key) and "
                                f"put(key, batch), got {type(cache).__name__} without "
                                f"{', '.join(missing)}; e.g. vlmprep.cache.OutputCache(max_bytes=...)")
        self.proc = proc
        self.max_delay_ms = float(max_delay_ms)
        self.max_batch_images = max_batch_images
        self.max_batch_tokens = max_batch_tokens
        self.max_request_images = max_request_images
        self.max_request_tokens = max_request_tokens
        self.cache = cache
        # Skip mode inside: a bad image of one request must not fail the batch it shares.
        self._proc = proc.clone(errors="skip")  # every setting kept (fetch, overrides)
        self._raise = proc.errors == "raise"
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vlmprep-serve")
        # Probing and planning run here, never on the event loop (a hostile header can take
        # seconds), and not on the worker (a request's plan must not wait behind a batch).
        self._planner = ThreadPoolExecutor(max_workers=2, thread_name_prefix="vlmprep-plan")
        # The set-up, begun now on a planning thread (never on the loop): the first submit
        # awaits it (``start``), so no request and no loop tick waits on a first import.
        # Videos run beside the image batches, on a thread of their own (serve/videos.py).
        self._videos = VideoLane(self._proc)
        self._ready = self._planner.submit(_set_up, self._proc, self._planner, self._executor,
                                           self._videos.executor)
        self._admitting = 0  # submits between their closed-check and their enqueue
        self._stream: Any = None  # the worker's torch.cuda.Stream, made on first use in the worker
        self._queue: deque[_Request] = deque()
        self._queued_images = 0
        self._queued_tokens = 0
        self._running = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Future | None = None
        self._closing = False
        self._metrics = Metrics()

    def __repr__(self) -> str:
        return (f"Batcher({self.proc!r}, max_delay_ms={self.max_delay_ms}, "
                f"max_batch_images={self.max_batch_images}, "
                f"max_batch_tokens={self.max_batch_tokens}, closed={self._closing})")

    # -- public API -----------------------------------------------------------------------------
    def plan(self, images: Sequence[Any] = (), videos: Sequence[Any] | None = None,
             documents: Sequence[Any] | None = None) -> "Plan":
        """Header-only plan of ``images`` (``videos``: container metadata only; ``documents``:
        the PDFs' page trees, nothing rasterized), now (no queueing):
        ``proc.plan(images, videos=videos, documents=documents)``.

        For KV-cache budgeting and placeholder expansion before any pixel is decoded.
        """
        return self.proc.plan(images, videos=videos, documents=documents)

    async def submit(self, images: Sequence[Any] = (), videos: Sequence[Any] | None = None,
                     documents: Sequence[Any] | None = None) -> "PackedBatch":
        """Process ``images`` (one request) in a shared batch -> this request's PackedBatch;
        ``videos`` (optional) beside it, on the video lane (``serve/videos.py``: a clip never
        holds image requests back), in ``batch.videos``; ``documents`` (optional
        ``vlmprep.Document`` items): each selected page is one more image item of the request,
        after its images, planned from the page tree at submit and rendered by the worker.

        Returns what ``proc(images, videos=videos, documents=documents)`` returns for this
        request alone:
        ``pixel_values`` ``(request_patches, patch_dim)``, ``image_index`` and ``errors`` in
        request-local indices. Raises ImageError (``proc.errors == "raise"``; ``index`` is
        request-local), RequestTooLarge (per-request limits, videos' planned tokens and
        documents' pages included, before queueing, decoding or rendering) or RuntimeError
        (closed). Cancelling the awaiting task withdraws the request (or drops its result if
        running). A bad page or document is its item's error, as in ``proc``'s own call.
        """
        loop = asyncio.get_running_loop()
        if self._closing:
            self._metrics.rejected += 1
            raise RuntimeError("closed: this Batcher was closed and takes no new requests; "
                               "create a new Batcher")
        items = as_image_list(images)
        clips = _video_list(videos) if videos is not None else None
        self._check_images(len(items))
        # The scheduler exists before planning starts, so that a close() meanwhile waits for
        # this request (admitted before close) instead of returning under it.
        self._start(loop)
        t0 = loop.time()
        self._admitting += 1
        try:
            if not self._ready.done():  # the set-up: awaited on a thread, never run on the loop
                await self.start()
            sources, plans, vids, vplans = await self._prepare(loop, items, clips, documents)
            tokens = sum(p.num_tokens for p in plans)
            self._check_tokens(tokens + sum(p.num_tokens for p in vplans if p.error is None),
                               len(plans), len(vplans))
            errs = [p.error for p in list(plans) + list(vplans) if p.error is not None]
            if self._raise and errs:
                self._metrics.failed += 1
                raise errs[0]  # planned on this request alone: the index is already local
            vfut = None if clips is None else self._videos.start(vids, vplans, empty_images=not plans)
            fut = None
            if plans or vfut is None:
                fut = loop.create_future()
                req = _Request(items, sources, plans, tokens, fut, t0, loop.time())
                fut.add_done_callback(lambda _f: self._on_done(req))
                self._queue.append(req)
                self._queued_images += req.n
                self._queued_tokens += req.tokens
        except asyncio.CancelledError:
            self._metrics.cancelled += 1  # cancelled while planned: never queued
            raise
        finally:
            self._admitting -= 1
            self._poke()
        if vfut is None:
            assert fut is not None
            return await fut
        return await self._with_videos(fut, vfut, t0)

    async def _prepare(self, loop: asyncio.AbstractEventLoop, items: list, clips: list | None,
                       documents: Sequence[Any] | None) -> tuple[list, list, list, list]:
        """Probe + plan once, off the loop -> (sources, plans, videos, video plans): the token
        count cuts batches before anything queues, header errors come before any decode (as
        proc() itself raises them), and the worker later runs these very sources and plans (no
        second probe). Documents: their page trees are read here (PDFium, on a planning thread);
        their pages are rendered only by the worker."""
        sources, plans = await loop.run_in_executor(self._planner, self._proc.prepare, items,
                                                    documents or ())
        if len(plans) > len(items):  # the pages count against max_request_images too
            self._check_images(len(plans), len(plans) - len(items))
        vids, vplans = ([], []) if clips is None else await loop.run_in_executor(
            self._planner, self._proc.prepare_videos, clips)
        return sources, plans, vids, vplans

    def _check_images(self, n: int, pages: int = 0) -> None:
        if self.max_request_images is not None and n > self.max_request_images:
            self._metrics.rejected += 1
            what = f" ({pages} of them document pages)" if pages else ""
            raise RequestTooLarge(
                f"request: expected at most {self.max_request_images} images "
                f"(max_request_images), got {n}{what}; split the request, select fewer pages "
                f"(Document(pages=...)) or raise max_request_images")

    def _check_tokens(self, tokens: int, images: int, videos: int) -> None:
        if self.max_request_tokens is not None and tokens > self.max_request_tokens:
            self._metrics.rejected += 1
            what = f"{images} images" + (f" and {videos} videos" if videos else "")
            raise RequestTooLarge(
                f"request: expected at most {self.max_request_tokens} visual tokens "
                f"(max_request_tokens), got {tokens} for {what}; split the request, lower "
                f"max_pixels (or the video options) on the Processor, or raise max_request_tokens")

    async def _with_videos(self, fut: "asyncio.Future | None", vfut: asyncio.Future,
                           t0: float) -> "PackedBatch":
        """A request's image batch (``fut``; None: videos only) joined with its videos' batch."""
        try:
            batch = await fut if fut is not None else None
            empty, vbatch = await vfut
        except BaseException:
            vfut.cancel()  # an image error or a cancelled caller: the videos' result is dropped
            if fut is None:
                self._metrics.failed += 1
            raise
        if self._raise and vbatch.errors:
            if fut is None:
                self._metrics.failed += 1
            raise vbatch.errors[min(vbatch.errors)]  # as proc() raises the first late error
        if fut is None:  # a request of videos only: counted here, the image lane never saw it
            self._metrics.requests += 1
            self._metrics.latency_ms.append((asyncio.get_running_loop().time() - t0) * 1000)
        return replace(batch if batch is not None else empty, videos=vbatch)

    async def close(self) -> None:
        """Refuse new requests, finish every queued and running one, stop the worker.

        Queued requests run at once (no more waiting for ``max_delay_ms``). Cancelling
        ``close()`` itself aborts the drain: pending requests are cancelled.
        """
        self._closing = True
        if self._task is not None and not self._task.done():
            self._poke()
            await self._task
        await self._videos.drain()
        self._executor.shutdown(wait=False)
        self._planner.shutdown(wait=False)

    async def start(self) -> None:
        """Wait for the set-up this Batcher began, on a thread, when it was made: every decoder
        an image may load lazily loaded (``vlmprep.io.warm``), the batcher's and the backend's
        threads started, one small image planned and run (the backend's first-use costs; on a
        GPU, its context). Optional: the first ``submit`` waits for it too; await it (or use
        ``async with``) at server start-up so that no request does. The event loop keeps
        running meanwhile. A set-up failure is logged, not raised (requests report their own).
        """
        # shielded: a cancelled waiter must not cancel the set-up for the others
        await asyncio.shield(asyncio.wrap_future(self._ready))

    async def __aenter__(self) -> "Batcher":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def metrics(self) -> dict:
        """Counters and recent percentiles, a plain dict:

        ``queue_depth`` (requests waiting), ``queued_images``, ``running`` (requests in the
        batch being processed), ``batches``, ``images``, ``requests``, ``failed``,
        ``rejected``, ``cancelled``, ``batch_size_p50/p99/max`` (images per batch),
        ``batch_requests_p50/p99/max``, ``batch_tokens_p50/max``,
        ``latency_ms_p50/p90/p99`` (submit to result, answered requests),
        and, only when a ``cache`` is configured, ``cache_hits``, ``cache_misses``,
        ``cache_errors``. Percentiles are over the last 4096 batches / requests, None before
        the first.
        """
        return self._metrics.snapshot(len(self._queue), self._queued_images, self._running,
                                      cache=self.cache is not None)

    # -- event loop side ------------------------------------------------------------------------
    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is not None and self._loop is not loop:
            raise RuntimeError("submit: expected the event loop this Batcher first ran on, got "
                               "another one; create one Batcher per event loop")
        self._loop = loop
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._schedule(), name="vlmprep-serve-scheduler")

    def _poke(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _sleep(self, timeout: float | None) -> None:
        """Until ``_poke`` or ``timeout`` seconds (None: no timeout)."""
        loop = asyncio.get_running_loop()
        self._wake = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, self._poke)
        try:
            await self._wake
        finally:
            if timer is not None:
                timer.cancel()
            self._wake = None

    def _on_done(self, req: _Request) -> None:
        if not req.future.cancelled():
            return
        req.cancelled = True
        self._metrics.cancelled += 1
        if req.state == "queued":
            self._queue.remove(req)
            self._queued_images -= req.n
            self._queued_tokens -= req.tokens

    def _full(self) -> bool:
        return (self._queued_images >= self.max_batch_images
                or self._queued_tokens >= self.max_batch_tokens)

    def _cut(self) -> list[_Request]:
        """The longest FIFO prefix within both batch limits; at least the head (so a request
        above the limits alone runs alone instead of waiting forever). FIFO, never
        skip-ahead: a big request at the head is not starved by small ones behind it."""
        batch: list[_Request] = []
        n = t = 0
        while self._queue:
            r = self._queue[0]
            if batch and (n + r.n > self.max_batch_images or t + r.tokens > self.max_batch_tokens):
                break
            self._queue.popleft()
            self._queued_images -= r.n
            self._queued_tokens -= r.tokens
            # Cancelled but its done-callback not yet run: drop it here; the callback then
            # only counts it.
            r.state = "running"
            if r.future.done():
                continue
            batch.append(r)
            n += r.n
            t += r.tokens
        return batch

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        batch: list[_Request] = []
        try:
            while True:
                if not self._queue:
                    if self._closing and not self._admitting:
                        return
                    await self._sleep(None)
                    continue
                if not self._closing and not self._full():
                    wait = self._queue[0].tq + self.max_delay_ms / 1000 - loop.time()
                    if wait > 0:
                        await self._sleep(wait)
                        continue  # re-evaluate: more joined, the head left, or time is up
                batch = self._cut()
                if batch:
                    await self._dispatch(batch)
                batch = []
        finally:
            # Only reached early when this task is cancelled (loop shutdown, close() cancelled):
            # nobody must wait forever on a future that no worker will resolve.
            for r in list(batch) + list(self._queue):
                if not r.future.done():
                    r.future.cancel()

    async def _dispatch(self, batch: list[_Request]) -> None:
        loop = asyncio.get_running_loop()
        self._running = len(batch)
        try:
            outcomes, hits, misses, cache_errors = await loop.run_in_executor(
                self._executor, self._work, batch)
        except Exception as e:  # noqa: BLE001 (the worker's own failure: fail this batch only)
            log.exception("vlmprep.serve: a batch of %d requests failed", len(batch))
            outcomes, hits, misses, cache_errors = [e] * len(batch), 0, 0, 0
        finally:
            self._running = 0
        m = self._metrics
        m.cache_hits += hits
        m.cache_misses += misses
        m.cache_errors += cache_errors
        m.record_batch(sum(r.n for r in batch), len(batch), sum(r.tokens for r in batch))
        now = loop.time()
        for r, out in zip(batch, outcomes):
            r.state = "done"
            if r.future.done():  # cancelled while running: its result is dropped
                continue
            if isinstance(out, BaseException):
                r.future.set_exception(out)
                m.failed += 1
            else:
                r.future.set_result(out)
            m.requests += 1
            m.latency_ms.append((now - r.t0) * 1000)

    # -- worker thread --------------------------------------------------------------------------
    def _stream_ctx(self):
        """A CUDA stream of the worker's own (no-op on the CPU): batches never serialize
        behind the model's kernels on the default stream."""
        if not self._proc.device.startswith("cuda"):
            return contextlib.nullcontext()
        import torch
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=self._proc.device)
        return torch.cuda.stream(self._stream)

    def _cached(self, r: _Request, i: int) -> tuple[Any, "PackedBatch | None", int]:
        """Item ``i`` of ``r`` -> (key or None, hit or None, 1 if the cache raised). A header
        error is never cached: no lookup (nor a read of its file); nor is a document page (its
        item is a Document, not the page)."""
        if self.cache is None or i >= len(r.items) or r.plans[i].error is not None:
            return None, None, 0
        return self._cache_lookup(r.items[i])

    def _cache_lookup(self, item: Any) -> tuple[Any, "PackedBatch | None", int]:
        """-> (key or None, hit or None, 1 if the cache raised)."""
        try:
            key = self.cache.key_for(item, self.proc)
            hit = self.cache.get(key) if key is not None else None
        except Exception:  # noqa: BLE001 (a cache is an optimization: process uncached)
            log.warning("vlmprep.serve: cache lookup failed; processing uncached", exc_info=True)
            return None, None, 1
        if hit is not None and hit.num_images != 1:
            log.warning("vlmprep.serve: cache returned %d images for one; ignoring it",
                        hit.num_images)
            hit = None
        return key, hit, 0

    def _work(self, batch: list[_Request]) -> tuple[list, int, int, int]:
        """Worker thread: one backend run over the batch's uncached images (from the sources and
        plans made at submit: nothing is probed again), split per request.

        Returns (one PackedBatch or exception per request (None if cancelled before the
        start), cache hits, cache misses, cache errors).
        """
        live = [r for r in batch if not r.cancelled]
        slots: dict[int, list] = {}       # id(request) -> per image: PackedBatch of one image
        keys: list = []                   # per missed image: its cache key (or None)
        sources: list = []                # the images to process: their Sources and plans,
        plans: list = []                  # renumbered to their place in this batch
        where: list[tuple[list, int]] = []
        hits = cache_errors = 0
        for r in live:
            s = slots[id(r)] = [None] * r.n
            for i in range(r.n):
                key, hit, err = self._cached(r, i)
                cache_errors += err
                if hit is not None:
                    s[i] = hit
                    hits += 1
                    continue
                sources.append(r.sources[i])
                plans.append(replace(r.plans[i], index=len(plans)))
                keys.append(key)
                where.append((s, i))
        with self._stream_ctx():
            if plans:
                # Document pages rendered here, on the worker (never on the loop; PDFium is
                # behind its lock): a page that fails is its item's error, as in proc().
                sources, plans = self._proc.render_documents(sources, plans)
                parts = list(self._proc.execute(sources, plans).split())
                for (s, i), key, part in zip(where, keys, parts):
                    s[i] = part
                    if key is not None and not part.errors:
                        cache_errors += self._cache_put(key, part)
            out: list = []
            for r in batch:
                if id(r) not in slots:
                    out.append(None)
                    continue
                try:
                    out.append(self._assemble(slots[id(r)], concat))
                except Exception as e:  # noqa: BLE001 (fails this request only)
                    out.append(e)
            if self._stream is not None:
                self._handoff(out)
        return out, hits, len(plans), cache_errors

    def _cache_put(self, key: str, part: "PackedBatch") -> int:
        pv = part.pixel_values
        if pv.untyped_storage().nbytes() > pv.numel() * pv.element_size():
            # A view from split() would pin the whole batch's memory in the cache.
            part = replace(part, pixel_values=pv.clone())
        try:
            self.cache.put(key, part)
        except Exception:  # noqa: BLE001
            log.warning("vlmprep.serve: cache put failed", exc_info=True)
            return 1
        return 0

    def _assemble(self, parts: list, concat) -> "PackedBatch | ImageError":
        """One request's single-image batches -> its PackedBatch, errors re-keyed locally."""
        errors: dict[int, ImageError] = {}
        for i, p in enumerate(parts):
            if p.errors:
                e = p.errors[0]
                # A fresh error: .at() would keep the batch-global index already set.
                local = ImageError(e.reason, index=i, source=e.source)
                local.__cause__ = e.__cause__
                errors[i] = local
        if errors and self._raise:
            return errors[min(errors)]  # as proc() raises the first late (decode) error
        # concat copies: the caller owns its rows, shares nothing with other requests or the
        # cache.
        out = concat(parts) if parts else self._proc([])
        out.errors = errors
        return out

    def _handoff(self, out: list) -> None:
        """Make the worker stream's results safe to use on the default stream."""
        import torch
        self._stream.synchronize()  # blocks this worker thread only
        consumer = torch.cuda.default_stream(self._stream.device)
        for b in out:
            if b is not None and not isinstance(b, BaseException):
                # Freed later by the consumer: the allocator waits for the consumer's stream
                # before handing the memory back to ours.
                b.pixel_values.record_stream(consumer)
                b.cu_seqlens.record_stream(consumer)
