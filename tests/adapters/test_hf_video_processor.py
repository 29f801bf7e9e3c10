"""The engines' video hook (vlmprep.integrations.hf_video_processor) against transformers' own Qwen
video processors, called the way vLLM 0.33 calls them (no vLLM needed; the real-engine check is
tests/integration/test_vllm_plugin.py).

Oracle: the same transformers video processor object before the hook is installed (its torchvision
code). Each call must return the same keys, the same tensors (values and dtype) and, for
``return_metadata``, the same ``video_metadata``, and vlmprep must have answered it.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
from _support.imgdata import photo  # noqa: E402
from hfref import hf_processor  # noqa: E402

from vlmprep.integrations import hf_video_processor as hv  # noqa: E402
from vlmprep.integrations.hf_image_processor import STATS  # noqa: E402


def _clip(t: int, h: int, w: int, seed: int) -> np.ndarray:
    """``t`` frames of a photo panned by a few pixels a frame (so the frames differ)."""
    a = photo("astronaut")
    return np.ascontiguousarray(np.stack([
        a[(5 * i) % 40:(5 * i) % 40 + h, (7 * i + seed) % 60:(7 * i + seed) % 60 + w] for i in range(t)]))


def _meta(v: np.ndarray, fps: float = 2.0) -> dict:
    t, h, w = v.shape[:3]
    return {"total_num_frames": t, "fps": fps, "duration": t / fps, "video_backend": "opencv",
            "frames_indices": list(range(t)), "height": h, "width": w}


def _pair(family: str):
    """(the video processor as transformers builds it, a deep copy with vlmprep's hook on)."""
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    vp = Qwen3VLVideoProcessor() if family == "qwen3-vl" else Qwen2VLVideoProcessor()
    hooked = copy.deepcopy(vp)
    assert hv.install_video(hooked, hf_processor(family, "torchvision"), lambda: True)
    return vp, hooked


def _same(got, want) -> None:
    assert sorted(got) == sorted(want)
    for k in want:
        x, y = got[k], want[k]
        if torch.is_tensor(y):
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), k
        else:
            assert x == y, k


# vLLM's calls (0.33): Qwen3-VL one video at a time, nested as [[frames]] with [[metadata]], the
# sampling already done (do_sample_frames=False) and return_metadata (its prompt's timestamps);
# Qwen2-VL all videos in one list. uint8: vLLM's mm_device_do_normalize.
CASES = [
    ("qwen3-vl", lambda v, m: dict(videos=[[v[0]]], video_metadata=[[m[0]]], do_sample_frames=False,
                                   return_metadata=True)),
    ("qwen3-vl", lambda v, m: dict(videos=[[v[0]]], video_metadata=[[m[0]]], do_sample_frames=False,
                                   return_metadata=True, fps=None, num_frames=8)),
    ("qwen2-vl", lambda v, m: dict(videos=v, video_metadata=m)),
]


@pytest.mark.parametrize("uint8", [False, True], ids=["float32", "uint8"])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("shape", [(8, 240, 320), (5, 97, 333), (16, 240, 320), (2, 30, 440)])
def test_hook_equals_the_video_processor(case, shape, uint8):
    """Clips of 8, 5 (an odd count: the last frame repeated), 16 (over Qwen3-VL's whole-clip
    budget of 786,432 pixels: the frame count changes the resize) and 2 frames."""
    family, call = CASES[case]
    vp, hooked = _pair(family)
    videos = [_clip(*shape, seed=3)]
    kw = call(videos, [_meta(v) for v in videos])
    if uint8:
        kw.update(do_rescale=False, do_normalize=False)
    kw["return_tensors"] = "pt"
    want = vp(**copy.deepcopy(kw))
    before = dict(STATS)
    got = hooked(**kw)
    assert STATS["vlmprep"] == before["vlmprep"] + 1 and STATS["fallback"] == before["fallback"]
    _same(got, want)


def test_what_the_hook_does_not_take_goes_to_the_video_processor():
    """Sampling asked of the processor, frames as a list of images, height 3 (transformers reads
    channels first), float frames: each is transformers' own answer (and counted a fallback)."""
    vp, hooked = _pair("qwen3-vl")
    v = _clip(8, 240, 320, 0)
    calls = [
        dict(videos=[v], video_metadata=[_meta(v, fps=4.0)], do_sample_frames=True),
        dict(videos=[[v[i] for i in range(4)]], do_sample_frames=False),
        dict(videos=[_clip(4, 3, 320, 0)], do_sample_frames=False),
        dict(videos=[v.astype(np.float32)], do_sample_frames=False),
    ]
    for kw in calls:
        want = vp(**copy.deepcopy(kw), return_tensors="pt")
        before = dict(STATS)
        got = hooked(**kw, return_tensors="pt")
        _same(got, want)
        took = STATS["vlmprep"] - before["vlmprep"]
        if kw is calls[1]:  # frames as images: transformers stacks them into one (T, H, W, 3) video
            assert took == 1
        else:
            assert took == 0 and STATS["fallback"] == before["fallback"] + 1
