"""Batcher.submit(videos=...): videos beside the image batches (vlmprep/serve/videos.py).

Oracle: the Processor on the same request alone (``proc(images, videos=...)``), bit for bit.
A clip runs on the video lane: an image request submitted while a clip is being processed is
answered before it (the clip is held by a gate only the test opens, so no timing is asserted).
"""
from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
import torch
from _support.videos import pan_zoom, write_cv2

import vlmprep
from vlmprep.serve import Batcher, RequestTooLarge
from vlmprep.serve import videos as lane

WATCHDOG_S = 120  # a hang, not a speed bound


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("clips") / "pan.mp4"
    why = write_cv2(path, pan_zoom("astronaut", 24, (320, 240)), 12.0, "mp4v")
    if why:
        pytest.skip(why)
    return path.read_bytes()


def _proc(errors: str = "raise") -> vlmprep.Processor:
    return vlmprep.Processor("qwen2-vl", errors=errors)


def _same(got, want) -> None:
    a, b = got.to_hf(), want.to_hf()
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]) if torch.is_tensor(a[k]) else a[k] == b[k], k
    assert (got.videos is None) == (want.videos is None)
    if want.videos is not None:
        va, vb = got.videos.to_hf(), want.videos.to_hf()
        assert sorted(va) == sorted(vb)
        for k in va:
            assert torch.equal(va[k], vb[k]) if torch.is_tensor(va[k]) else va[k] == vb[k], k


def test_images_and_videos_equal_the_processor_alone(clip, seed):
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (90, 120, 3), np.uint8), rng.integers(0, 256, (300, 200, 3), np.uint8)]
    proc = _proc()

    async def main():
        async with Batcher(proc, max_delay_ms=1) as b:
            return await asyncio.wait_for(asyncio.gather(
                b.submit(imgs, videos=[clip]), b.submit(videos=[clip, clip]), b.submit(imgs[:1])), WATCHDOG_S)

    mixed, only, plain = asyncio.run(main())
    _same(mixed, proc(imgs, videos=[clip]))
    _same(only, proc([], videos=[clip, clip]))
    _same(plain, proc(imgs[:1]))
    assert only.num_images == 0 and only.videos.to_hf()["video_grid_thw"].shape[0] == 2


def test_a_clip_in_progress_does_not_hold_image_requests(clip, monkeypatch):
    """The clip's run waits on a gate; an image request submitted after it is answered first."""
    gate, started = threading.Event(), threading.Event()
    real = lane.VideoLane._run

    def held(self, *a):
        started.set()
        assert gate.wait(WATCHDOG_S)
        return real(self, *a)

    monkeypatch.setattr(lane.VideoLane, "_run", held)
    img = np.full((64, 64, 3), 7, np.uint8)

    async def main():
        async with Batcher(_proc(), max_delay_ms=1) as b:
            video = asyncio.ensure_future(b.submit(videos=[clip]))
            await asyncio.get_running_loop().run_in_executor(None, started.wait, WATCHDOG_S)
            image = await asyncio.wait_for(b.submit([img]), WATCHDOG_S)
            video_done_first = video.done()
            gate.set()
            return image, video_done_first, await asyncio.wait_for(video, WATCHDOG_S)

    image, video_done_first, video = asyncio.run(main())
    assert not video_done_first and image.num_images == 1 and video.videos is not None


def test_video_tokens_count_against_max_request_tokens(clip):
    proc = _proc()
    tokens = proc.plan(videos=[clip]).videos[0].num_tokens

    async def main():
        async with Batcher(proc, max_request_tokens=tokens - 1) as b:
            with pytest.raises(RequestTooLarge, match=r"got \d+ for 0 images and 1 videos"):
                await b.submit(videos=[clip])
            return b.metrics()["rejected"]

    assert asyncio.run(main()) == 1


def test_bad_video_is_the_requests_error_or_its_row(clip):
    """raise: the bad clip's ImageError at submit, before any decode; skip: an error in
    batch.videos.errors and the good clip's rows."""
    bad = b"\x00\x00\x00\x18ftypmp42" + b"\x00" * 64

    async def main(errors):
        async with Batcher(_proc(errors)) as b:
            return await asyncio.wait_for(b.submit(videos=[clip, bad]), WATCHDOG_S)

    with pytest.raises(vlmprep.ImageError, match="expected"):
        asyncio.run(main("raise"))
    got = asyncio.run(main("skip"))
    assert list(got.videos.errors) == [1] and got.videos.to_hf()["video_grid_thw"].shape[0] == 1


def test_close_waits_for_a_clip_in_flight(clip):
    async def main():
        b = Batcher(_proc())
        await b.start()
        task = asyncio.ensure_future(b.submit(videos=[clip]))
        await asyncio.sleep(0)
        deadline = asyncio.get_running_loop().time() + WATCHDOG_S
        # admitted: planned and started on the video lane (a request that failed first ends
        # the wait: its error is the test's failure, not a hang; CI once hung here)
        while not b._videos._pending and not task.done():
            assert asyncio.get_running_loop().time() < deadline, "the clip was never admitted"
            await asyncio.sleep(0.01)
        await asyncio.wait_for(b.close(), WATCHDOG_S)
        return task.done(), await task

    done, out = asyncio.run(main())
    assert done and out.videos is not None
