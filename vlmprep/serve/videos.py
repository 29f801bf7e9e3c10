"""The Batcher's video lane: a request's videos run beside the image batches, never in them.

A clip costs seconds of decode where an image costs milliseconds, so videos do not join the
image batches (a long clip would hold every image request queued behind it): each request's
videos are probed and planned at submit (container metadata only: the token count is known for
admission before any frame is decoded), then decoded and processed on a thread of their own
(``Processor.execute_videos``, each video bounded by ``VideoLimits.timeout_s`` and its planned
pixels), while the request's images go through the batches as usual.

    Given  request A = 2 images + 1 clip (2 s to decode), request B = 1 image, max_delay_ms=5
    Output A's images and B run in one image batch at once; A's clip runs on the video thread;
           B is answered in milliseconds, A when its clip is done
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from ..pack import PackedBatch
    from ..processor import Processor

__all__ = ["VideoLane"]


class VideoLane:
    """One worker thread for videos, and the runs still in flight (``drain`` waits for them)."""

    def __init__(self, proc: "Processor"):
        self._proc = proc
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vlmprep-video")
        self._pending: set[asyncio.Future] = set()

    def start(self, videos: Sequence[Any], plans: Sequence[Any], empty_images: bool
              ) -> "asyncio.Future[tuple[PackedBatch | None, PackedBatch]]":
        """Run ``videos`` (``prepare_videos``' output) on the video thread -> a future of
        (the empty image batch when ``empty_images`` (a request of videos only), the videos'
        batch)."""
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.executor, self._run, list(videos), list(plans), empty_images)
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)
        return fut

    def _run(self, videos: list, plans: list, empty_images: bool) -> tuple[Any, Any]:
        images = self._proc([]) if empty_images else None
        return images, self._proc.execute_videos(videos, plans)

    async def drain(self) -> None:
        """Wait for every run in flight (their requests get their results), then stop."""
        if self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
        self.executor.shutdown(wait=False)
