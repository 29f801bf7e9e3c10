"""LLaVA-OneVision video plans == transformers 5.24's LlavaOnevisionVideoProcessor + LlavaOnevisionProcessor.

The oracle: the video processor built from the checkpoint's video config
(``vlmprep.presets.llava_next.video_configs()``), its own ``sample_frames`` for a sweep of clip
lengths, source rates and fps / num_frames requests, and the real processor (checkpoint image
processor, an offline word-level tokenizer holding ``<image>`` / ``<video>``) on synthetic frames with
``VideoMetadata``: sampled frame indices, ``pixel_values_videos`` shape, the expanded prompt, the
video-token count of ``input_ids`` and ``_get_num_multimodal_tokens``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

pytestmark = pytest.mark.hf

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from _support.video_plan import plan_video_of  # noqa: E402

from vlmprep import presets  # noqa: E402
from vlmprep.errors import ImageError  # noqa: E402
from vlmprep.io.video import Video, VideoLimits, VideoMeta  # noqa: E402
from vlmprep.plan.anyres import VIDEO_TOKEN  # noqa: E402
from vlmprep.plan.video import VideoOptions  # noqa: E402
from vlmprep.presets import video_defaults  # noqa: E402
from vlmprep.presets.llava_next import video_configs  # noqa: E402

FAMILY = "llava-onevision"
TOTALS = (1, 2, 7, 16, 31, 100, 299, 1001, 3001)
RATES = (1.0, 10.0, 23.976, 29.97, 60.0)
REQUESTS = [("fps", f) for f in (0.25, 1.0, 2.0, 3.0, 30.0)] + [
    ("num_frames", n) for n in (1, 4, 8, 17, 64)]


def _meta(total: int, fps: float, hw=(720, 1280), duration: float | None = None) -> VideoMeta:
    return VideoMeta(total_num_frames=total, fps=fps,
                     duration=duration if duration is not None else (total / fps if fps else 0.0),
                     height=hw[0], width=hw[1])


@pytest.fixture(scope="module")
def video_processor():
    from transformers.models.llava_onevision.video_processing_llava_onevision import (
        LlavaOnevisionVideoProcessor,
    )
    cfg = {k: v for k, v in video_configs()[FAMILY].items()
           if k not in ("video_processor_type", "processor_class")}
    return LlavaOnevisionVideoProcessor(**cfg)


@pytest.fixture(scope="module")
def processor(video_processor):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from tests.hfref import hf_processor
    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "describe": 2}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]")
    tok.add_tokens(["<image>", "<video>"], special_tokens=True)
    return transformers.LlavaOnevisionProcessor(
        image_processor=hf_processor(FAMILY, "pil"), tokenizer=tok, video_processor=video_processor,
        num_image_tokens=729, vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9")


def _hf_indices(vp, meta: VideoMeta, kind: str, value) -> list[int] | Exception:
    from transformers.video_utils import VideoMetadata
    try:
        return [int(i) for i in vp.sample_frames(metadata=VideoMetadata(**meta.to_hf()),
                                                 **{kind: value})]
    except (ValueError, TypeError, ZeroDivisionError) as e:
        return e


def test_defaults_are_the_checkpoint_config():
    opts = video_defaults(FAMILY)
    assert (opts.do_sample_frames, opts.fps, opts.num_frames) == (False, None, None)
    # every frame of the clip, each 384x384, 196 pooled tokens per frame + 1 newline
    p = plan_video_of(FAMILY, _meta(12, 24.0))
    assert p.ok and p.frame_indices == list(range(12))
    assert p.resized_hw == (384, 384) and p.grid_thw == [(1, 27, 27)] * 12
    assert p.num_tokens == p.num_embeddings == 12 * 196 + 1 == len(p.placeholder) // len(VIDEO_TOKEN)
    assert p.num_patches == 12 * 729
    assert (p.second_per_grid_ts, p.group_timestamps, p.first_resize_hw) == (None, None, None)


@pytest.mark.parametrize("kind,value", REQUESTS)
def test_sampling_sweep_equals_sample_frames(video_processor, kind, value):
    """Frame indices (or the refusal) over clip lengths x source rates, as transformers samples
    (vlmprep's own pixel budget lifted: it is tested below)."""
    pipe, big = presets.get(FAMILY), VideoLimits(max_total_pixels=1 << 62)
    for total in TOTALS:
        for rate in RATES:
            meta = _meta(total, rate)
            want = _hf_indices(video_processor, meta, kind, value)
            got = plan_video_of(pipe, meta, per_item=Video("x", **{kind: value}), limits=big)
            where = f"total={total} fps={rate} {kind}={value}"
            if isinstance(want, Exception):
                assert isinstance(got.error, ImageError), (where, want, got)
                assert got.num_tokens == 0
                continue
            assert got.ok, (where, got.error)
            assert got.frame_indices == want, where
            n = len(want)
            assert got.num_tokens == n * 196 + 1 and got.grid_thw == [(1, 27, 27)] * n
            assert got.timestamps == [i / rate for i in want]


def test_unknown_source_fps(video_processor):
    meta = _meta(40, 0.0)  # a frame sequence without source_fps
    assert isinstance(_hf_indices(video_processor, meta, "fps", 2.0), ValueError)
    assert isinstance(plan_video_of(FAMILY, meta, per_item=Video("x", fps=2.0)).error, ImageError)
    p = plan_video_of(FAMILY, meta, per_item=Video("x", num_frames=5))
    assert p.frame_indices == _hf_indices(video_processor, meta, "num_frames", 5)
    assert p.timestamps == []


# (total, src fps, (H, W), request) through the whole processor
PROCESSOR_CASES = [
    (12, 24.0, (24, 40), {}),                       # checkpoint default: every frame
    (90, 30.0, (48, 32), {"fps": 1.0}),
    (250, 25.0, (16, 16), {"num_frames": 8}),
    (7, 10.0, (30, 50), {"num_frames": 7}),
    (1, 30.0, (20, 20), {"num_frames": 1}),
]


@pytest.mark.parametrize("total,rate,hw,req", PROCESSOR_CASES)
def test_processor_equals_plan(processor, seed, total, rate, hw, req):
    """Indices, pixel_values_videos shape, the prompt expansion and token counts."""
    from transformers.video_utils import VideoMetadata
    meta = _meta(total, rate, hw)
    frames = np.random.default_rng(seed).integers(0, 256, (total, *hw, 3), dtype=np.uint8)
    plan = plan_video_of(presets.get(FAMILY), meta, per_item=Video(frames, **req))
    assert plan.ok, plan.error
    out = processor(text=["describe <video>"], videos=[frames],
                    video_metadata=[VideoMetadata(**meta.to_hf())], do_sample_frames=bool(req),
                    return_metadata=True, return_text_replacement_offsets=True,
                    return_tensors="pt", **req)
    got_idx = out["video_metadata"][0].frames_indices
    want_idx = list(range(total)) if got_idx is None else [int(i) for i in got_idx]
    assert plan.frame_indices == want_idx
    assert tuple(out["pixel_values_videos"].shape) == (1, len(want_idx), 3, *plan.resized_hw)
    [[rep]] = out["text_replacement_offsets"]
    assert rep["type"] == "video" and rep["replacement"] == plan.placeholder
    vid = processor.tokenizer.convert_tokens_to_ids(VIDEO_TOKEN)
    assert int((out["input_ids"][0] == vid).sum()) == plan.num_tokens == plan.num_embeddings
    mm = processor._get_num_multimodal_tokens(video_sizes=[(len(want_idx), *hw)])
    assert mm["num_video_tokens"] == [plan.num_tokens]


def test_window_samples_inside_it(video_processor):
    """start/end (seconds): the window's frames are sampled as a clip of their own."""
    from transformers.video_utils import VideoMetadata
    meta = _meta(300, 30.0)
    p = plan_video_of(FAMILY, meta, per_item=Video("x", num_frames=4, start=2.0, end=6.0))
    first, count = 60, 121  # frames 60..180
    sub = VideoMetadata(total_num_frames=count, fps=30.0, duration=count / 30.0)
    assert p.frame_indices == [first + int(i) for i in video_processor.sample_frames(sub, num_frames=4)]


@pytest.mark.parametrize("meta,why", [
    (VideoMeta(0, 30.0, 0.0, 720, 1280), "at least 1 frame"),
    (VideoMeta(10, float("nan"), 1.0, 720, 1280), "fps"),
    (VideoMeta(10, 30.0, 1.0, 0, 1280), "1x1"),
    (VideoMeta(2 ** 40, 30.0, 1.0, 720, 1280), "frames"),
    (VideoMeta(10, 30.0, float("inf"), 720, 1280), "duration"),
    (VideoMeta(10, 30.0, 1.0, 100_000, 100_000), "pixels"),
])
def test_hostile_metadata_is_an_error(meta, why):
    p = plan_video_of(FAMILY, meta)
    assert isinstance(p.error, ImageError) and why in str(p.error)
    assert p.frame_indices == [] and p.placeholder == "" and p.num_tokens == 0


def test_every_frame_of_a_long_video_is_refused_before_any_list():
    """The default takes every frame: a 10-hour 60 fps clip (2.16 M frames) is refused from its
    counts, with a fix (sample), not planned into a 3-billion-character placeholder."""
    p = plan_video_of(FAMILY, _meta(2_160_000, 60.0))
    assert isinstance(p.error, ImageError) and "fps=" in str(p.error)
    ok = plan_video_of(FAMILY, _meta(2_160_000, 60.0), per_item=Video("x", num_frames=32))
    assert ok.ok and len(ok.frame_indices) == 32
    assert ok.num_tokens == 32 * math.ceil(27 / 2) ** 2 + 1


def _vllm_loader_sampler():
    """vLLM's default video loader sampler (``VideoBackend.compute_frames_index_to_sample`` of
    vllm/multimodal/video.py), taken from an installed vLLM's source (importing vLLM needs its
    CUDA torch): the function's own code, compiled alone. Skips without a vLLM on disk."""
    import ast
    import glob
    import importlib.util
    spec = importlib.util.find_spec("vllm")
    paths = ([f"{spec.submodule_search_locations[0]}/multimodal/video.py"] if spec else []) + sorted(
        glob.glob("build/engines/venv/lib/python3*/site-packages/vllm/multimodal/video.py"))
    if not paths:
        pytest.skip("no vLLM installed (make test-engines builds build/engines/venv)")
    tree = ast.parse(open(paths[0]).read())
    fn = next(b for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == "VideoBackend"
              for b in node.body if getattr(b, "name", "") == "compute_frames_index_to_sample")
    fn.decorator_list, fn.returns = [], None
    for a in fn.args.args:
        a.annotation = None
    ns = {"math": math, "np": np}
    exec(compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), paths[0], "exec"), ns)
    return ns["compute_frames_index_to_sample"]


def test_vllm_sampling_equals_vllm_loader():
    """sampling='vllm': vLLM's loader picks the frames (32 by default, fps caps them), the
    processor keeps them: == vLLM's own sampler over the sweep."""
    from types import SimpleNamespace as NS
    sampler = _vllm_loader_sampler()
    big = VideoLimits(max_total_pixels=1 << 62)
    for total in TOTALS + (32, 33):
        for rate in RATES:
            for num, fps in ((None, None), (8, None), (1, None), (64, None), (None, 0.5), (None, 2.0),
                             (None, 30.0)):
                want = [int(i) for i in sampler(None, NS(total_frames_num=total, duration=total / rate),
                                                NS(num_frames=num or 32, fps=fps or -1))]
                opts = VideoOptions(num_frames=num, fps=fps, sampling="vllm", family=FAMILY)
                p = plan_video_of(FAMILY, _meta(total, rate), opts, limits=big)
                assert p.frame_indices == want, (total, rate, num, fps)
                assert p.num_tokens == len(want) * 196 + 1
