"""vlmprep.loader.DataLoader over videos (issue 29 item 3): video samples from the same sources
(``vlmprep.Video``, paths with a video extension, dicts with ``video_key``), token budgets that
count video tokens from the container metadata (no frame decoded), ids in order, exact resume.

Oracle: the Processor on each batch's samples in one call, ``proc(images, videos=videos)``, bit
for bit (the loader only batches). Clips: tests/_support/clips.py (tiny mp4v MP4 / MKV).
"""
from __future__ import annotations

import pytest
import torch
from _support.imgdata import encode, tiled

import vlmprep
from vlmprep import ImageError, Video
from vlmprep.loader import DataLoader
from vlmprep.loader.batching import Sample, pack_greedy


@pytest.fixture(scope="module")
def proc():
    return vlmprep.Processor("qwen2-vl", errors="skip")


@pytest.fixture(scope="module")
def sources(clips):
    """id -> sample: images and videos mixed, one bad video."""
    return {
        0: encode(tiled("coffee", 90, 120), "png"),
        1: Video(str(clips["pan.mp4"]), fps=2.0),
        "z": {"video": str(clips["zoom.mkv"]), "id": "z"},
        3: str(clips["garbage.mp4"]),
        4: Video(clips["pan.mp4"].read_bytes(), num_frames=2),
        "i": {"image": encode(tiled("rocket", 70, 50), "jpeg"), "id": "i"},
        6: str(clips["zoom.mkv"]),
    }


def _item(s):
    if isinstance(s, dict):
        return s.get("image", s.get("video"))
    return s


def _is_video(s) -> bool:
    return isinstance(s, Video) or (isinstance(s, dict) and "video" in s) or (
        isinstance(s, str) and s.endswith((".mp4", ".mkv")))


def _want(proc, sources, ids):
    """The Processor's batch for these samples: images and videos as two lists, in order."""
    imgs = [_item(sources[i]) for i in ids if not _is_video(sources[i])]
    vids = [_item(sources[i]) for i in ids if _is_video(sources[i])]
    return proc(imgs, videos=vids) if vids else proc(imgs)


def _same(got, want) -> None:
    for x, y in ((got, want), (got.videos, want.videos)):
        assert (x is None) == (y is None)
        if y is None:
            continue
        assert torch.equal(x.pixel_values, y.pixel_values) and torch.equal(x.grid_thw, y.grid_thw)
        assert torch.equal(x.cu_seqlens, y.cu_seqlens)
        assert x.num_tokens == y.num_tokens and x.placeholders == y.placeholders
        assert sorted(x.errors) == sorted(y.errors)
    a, b = got.to_hf(), want.to_hf()
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a if torch.is_tensor(a[k]))


@pytest.mark.parametrize("nw", [0, 2])
def test_mixed_stream_equals_the_processor_per_batch(proc, sources, nw):
    loader = DataLoader(list(sources.values()), proc, batch_size=2, num_workers=nw)
    got = list(loader)
    ids = [i for b, _ in got for i in b]
    assert ids == list(sources)
    for bids, batch in got:
        _same(batch, _want(proc, sources, bids))
    (skipped,) = loader.skipped
    assert skipped[0] == 3 and skipped[1].item == "video" and "sample 3:" in str(skipped[1])
    assert "expected a video file FFmpeg can open" in skipped[1].reason


def test_token_budget_counts_video_tokens_before_decode(proc, sources, monkeypatch):
    items = list(sources.values())
    tokens = []
    for s in items:
        plan = proc.plan(videos=[_item(s)]) if _is_video(s) else proc.plan([_item(s)])
        tokens.append(plan.videos[0].num_tokens if _is_video(s) else plan.total_tokens)
    assert tokens[1] > 0 and tokens[3] == 0  # the bad video: 0, batched and skipped later
    budget = max(tokens) - 1  # the largest video alone is over it: its own batch
    want = [[s.pos for s in b] for b in pack_greedy(
        [Sample(k, k, k, None, t) for k, t in enumerate(tokens)], None, budget)]
    calls = []
    real = type(proc).execute_videos
    monkeypatch.setattr(type(proc), "execute_videos", lambda self, *a: calls.append(1) or real(self, *a))
    loader = DataLoader(items, proc, max_batch_tokens=budget, num_workers=0)
    assert len(loader) == len(want) and not calls  # counted from container metadata only
    got = list(loader)
    ids = list(sources)
    assert [b for b, _ in got] == [[ids[k] for k in w] for w in want]
    assert [i for i, _ in loader.oversize] == [ids[k] for k, t in enumerate(tokens) if t > budget]
    for bids, batch in got:
        _same(batch, _want(proc, sources, bids))


def test_resume_is_exact(proc, sources):
    items = list(sources.values())
    kw = dict(max_batch_tokens=60, shuffle=True, seed=7, num_workers=1)  # tokens 12..150: 5+ batches
    full = list(DataLoader(items, proc, **kw))
    first = DataLoader(items, proc, **kw)
    it = iter(first)
    head = [next(it), next(it)]
    state = first.state_dict()
    again = DataLoader(items, proc, **kw)
    again.load_state_dict(state)
    rest = list(again)
    assert [b for b, _ in head + rest] == [b for b, _ in full]
    for (_, x), (_, y) in zip(head + rest, full, strict=True):
        _same(x, y)


def test_errors_raise_names_the_video_sample(clips):
    strict = vlmprep.Processor("qwen2-vl")
    items = [encode(tiled("coffee", 40, 40), "png"), {"video": str(clips["cut.mp4"]), "id": "cut"}]
    with pytest.raises(ImageError, match="sample 'cut' \\(index 1\\)") as e:
        list(DataLoader(items, strict, batch_size=2, num_workers=0))
    assert e.value.item == "video"
    bad = list(DataLoader([{"caption": "x"}], vlmprep.Processor("qwen2-vl", errors="skip"), batch_size=1,
                          num_workers=0))
    assert "or a video under 'video'" in bad[0][1].errors[0].reason
