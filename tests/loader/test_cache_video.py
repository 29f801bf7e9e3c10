"""vlmprep.cache.OutputCache with videos (issue 29 item 3): a video's key is its content plus its
sampling (``vlmprep.Video``'s fps, num_frames, start, end) and the Processor's video options,
so the same file sampled two ways never hits the other's entry; a hit is bit-exact.

Oracle for pixels: the Processor on the same video, uncached."""
from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

import vlmprep
from vlmprep import Video
from vlmprep.cache import OutputCache
from vlmprep.loader import DataLoader


@pytest.fixture(scope="module")
def proc():
    return vlmprep.Processor("qwen2-vl", errors="skip")


def test_keys_follow_sampling_options_and_video_config(clips, proc, tmp_path):
    cache = OutputCache(1 << 20)
    path = str(clips["pan.mp4"])
    data = clips["pan.mp4"].read_bytes()
    samplings = [Video(path), Video(path, fps=2.0), Video(path, fps=1.0), Video(path, num_frames=4),
                 Video(path, num_frames=6), Video(path, fps=2.0, start=0.5),
                 Video(path, fps=2.0, end=1.5), Video(path, fps=2.0, start=0.5, end=1.5)]
    keys = [cache.key_for(v, proc) for v in samplings]
    assert None not in keys and len(set(keys)) == len(keys)  # no sampling hits another's entry
    assert cache.key_for(data, proc) not in keys  # the same bytes as an image: another entry
    # the same content and sampling: one key (path or bytes; 2 or 2.0)
    assert cache.key_for(Video(data, fps=2), proc) == keys[1]
    copy = tmp_path / "copy.bin"
    copy.write_bytes(data)
    assert cache.key_for(Video(str(copy), fps=2.0), proc) == keys[1]
    # the Processor's video options and decoder decide the frames too
    opts = dataclasses.replace(proc.video_options, max_pixels=50_000)
    assert cache.key_for(Video(path, fps=2.0), proc.clone(video_options=opts)) != keys[1]
    assert cache.key_for(Video(path, fps=2.0), proc.clone(video_decoder="pyav")) != keys[1]
    other = clips["zoom.mkv"]
    assert cache.key_for(Video(str(other), fps=2.0), proc) != keys[1]
    # not hashable -> None (processed uncached): a family without videos, a missing file
    assert cache.key_for(Video(path, fps=2.0), vlmprep.Processor("siglip")) is None
    assert cache.key_for(Video(str(tmp_path / "missing.mp4")), proc) is None


class Counting:
    """A Processor that counts the videos it decodes."""

    def __init__(self, proc):
        self._proc = proc
        self._lock = threading.Lock()
        self.videos = 0

    def __getattr__(self, name):
        return getattr(self._proc, name)

    def __call__(self, images, videos=None):
        with self._lock:
            self.videos += len(videos or [])
        return self._proc(images, videos=videos) if videos is not None else self._proc(images)


@pytest.mark.parametrize("nw", [0, 2])
def test_loader_cache_hits_per_sampling_bit_exact(clips, proc, nw):
    path = str(clips["pan.mp4"])
    items = [Video(path, fps=2.0), Video(path, num_frames=4), Video(path, fps=2.0), path,
             Video(path, num_frames=4), str(clips["garbage.mp4"])]
    counting = Counting(proc)
    cache = OutputCache(1 << 30)
    loader = DataLoader(items, counting, batch_size=3, num_workers=nw, cache=cache)
    first = list(loader)
    # fps=2, num_frames=4, bare, garbage; the repeats are hits (with two workers the second
    # batch may run before the first one's entries are in: docs/how-to/loader.md "Cache")
    assert counting.videos == 4 if nw == 0 else 4 <= counting.videos <= 5
    before = counting.videos
    again = list(loader)  # a second epoch: every good video a hit, the bad one tried again
    assert counting.videos == before + 1 and cache.stats()["entries"] == 3
    for (_, a), (_, b), k in zip(first, again, range(0, 6, 3)):
        want = proc([], videos=[v for v in items[k:k + 3]])
        for got in (a, b):
            assert got.num_images == 0 and sorted(got.videos.errors) == sorted(want.videos.errors)
            assert torch.equal(got.videos.pixel_values, want.videos.pixel_values)
            assert torch.equal(got.videos.grid_thw, want.videos.grid_thw)
            assert got.videos.num_tokens == want.videos.num_tokens
            x, y = got.to_hf(), want.to_hf()
            assert sorted(x) == sorted(y) and all(torch.equal(x[key], y[key]) for key in x)
