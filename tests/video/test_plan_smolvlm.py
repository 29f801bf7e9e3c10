"""SmolVLM video plans == transformers 5.24's SmolVLMVideoProcessor + SmolVLMProcessor.

The oracle: the video processor built as SmolVLM2 checkpoints configure it
(``vlmprep.presets.idefics3.video_configs()``: video_sampling fps 1 / max_frames 64, 2048 / 512),
its own ``sample_frames`` (fps x duration, the 1 s skip at both ends, linspace + unique) over a
sweep of clip lengths, source rates, container durations and fps / num_frames, its resize rule,
and the real processor (SmolVLM image processor from the checkpoint config, an offline word-level
tokenizer holding the family's special tokens; needs num2words) on synthetic frames with
``VideoMetadata``: sampled indices, ``pixel_values`` / ``pixel_attention_mask`` shapes, the
prompt with its frame count in words and timestamps, and the token counts of ``input_ids``.
The plan is made with the SmolVLM checkpoint's pipeline (``presets/checkpoints/smolvlm.json``).
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.hf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from _support.video_plan import plan_video_of  # noqa: E402

from tests.hfref import config, hf_processor  # noqa: E402
from vlmprep import presets  # noqa: E402
from vlmprep.errors import ImageError  # noqa: E402
from vlmprep.io.video import Video, VideoLimits, VideoMeta  # noqa: E402
from vlmprep.plan.idefics3 import english_number  # noqa: E402
from vlmprep.plan.video import VideoOptions  # noqa: E402
from vlmprep.presets import video_defaults  # noqa: E402
from vlmprep.presets.idefics3 import video_configs  # noqa: E402

FAMILY = "idefics3"
SEQ = 64  # SmolVLM 512 tiles: (512 / 16)^2 / 4^2
TOTALS = (1, 2, 7, 31, 100, 299, 1001, 3001)
RATES = (1.0, 10.0, 23.976, 29.97, 60.0)
REQUESTS = [(f, n) for f in (0.5, 1.0, 2.0, 8.0) for n in (1, 8, 64)]


def _meta(total: int, fps: float, hw=(720, 1280), extra: float = 0.0) -> VideoMeta:
    """``extra``: seconds the container's duration differs from total / fps (it often does)."""
    return VideoMeta(total_num_frames=total, fps=fps,
                     duration=max(0.0, total / fps + extra) if fps else 0.0, height=hw[0],
                     width=hw[1])


@pytest.fixture(scope="module")
def pipe():
    return presets.from_config(config("smolvlm"))


@pytest.fixture(scope="module")
def video_processor():
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor
    cfg = {k: v for k, v in video_configs()[FAMILY].items()
           if k not in ("video_processor_type", "processor_class")}
    cfg["video_sampling"] = dict(cfg["video_sampling"], video_size=cfg["size"])
    return SmolVLMVideoProcessor(**cfg)


@pytest.fixture(scope="module")
def processor(video_processor):
    pytest.importorskip("num2words")  # SmolVLMProcessor requires it
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "describe": 2}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]")
    tok.add_tokens(["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>",
                    "<video>"] + [f"<row_{i}_col_{j}>" for i in range(1, 5) for j in range(1, 5)],
                   special_tokens=True)
    return transformers.SmolVLMProcessor(image_processor=hf_processor("smolvlm", "pil"),
                                         tokenizer=tok, video_processor=video_processor,
                                         image_seq_len=SEQ)


def _hf_indices(vp, meta: VideoMeta, **kw) -> list[int] | Exception:
    from transformers.video_utils import VideoMetadata
    try:
        return [int(i) for i in vp.sample_frames(metadata=VideoMetadata(**meta.to_hf()), **kw)]
    except (ValueError, TypeError, ZeroDivisionError) as e:
        return e


def test_defaults_and_english_numbers(video_processor):
    opts = video_defaults(FAMILY)
    assert (opts.do_sample_frames, opts.fps, opts.num_frames) == (True, 1.0, 64)
    assert (video_processor.fps, video_processor.num_frames) == (opts.fps, opts.num_frames)
    num2words = pytest.importorskip("num2words").num2words
    for n in list(range(0, 1200)) + [1234, 2001, 10010, 65536, 100000, 999999]:
        assert english_number(n) == num2words(n), n


@pytest.mark.parametrize("fps,num", REQUESTS)
def test_sampling_sweep_equals_sample_frames(video_processor, pipe, fps, num):
    """Frame indices over clip lengths x source rates x container durations, as SmolVLM samples
    (vlmprep's own pixel budget lifted: it is tested below)."""
    big = VideoLimits(max_total_pixels=1 << 62)
    opts = VideoOptions(fps=fps, num_frames=num, do_sample_frames=True, family=FAMILY)
    for total in TOTALS:
        for rate in RATES:
            for extra in (0.0, 0.37, -0.2):
                meta = _meta(total, rate, extra=extra)
                want = _hf_indices(video_processor, meta, fps=fps, num_frames=num)
                got = plan_video_of(pipe, meta, opts, limits=big)
                where = f"total={total} rate={rate} duration={meta.duration} fps={fps} n={num}"
                if isinstance(want, Exception):
                    assert isinstance(got.error, ImageError), (where, want, got)
                    continue
                assert got.ok, (where, got.error)
                assert got.frame_indices == want, where
                assert got.num_tokens == len(want) * (SEQ + 3)
                assert got.num_embeddings == len(want) * SEQ


@pytest.mark.parametrize("hw", [(720, 1280), (1280, 720), (17, 900), (900, 17), (1, 1), (333, 777)])
def test_first_resize_equals_transformers(pipe, hw):
    from transformers.models.smolvlm.video_processing_smolvlm import get_resize_output_image_size
    p = plan_video_of(pipe, _meta(30, 30.0, hw))
    assert p.first_resize_hw == get_resize_output_image_size(torch.empty(1, 3, *hw), 2048)
    assert p.resized_hw == (512, 512) and p.grid_thw == [(1, 32, 32)] * len(p.frame_indices)


# (total, src fps, (H, W), sampling request, container duration offset)
PROCESSOR_CASES = [
    (90, 30.0, (24, 40), {"fps": 1.0, "num_frames": 64}, 0.0),   # the checkpoint's sampling
    (130, 10.0, (32, 24), {"fps": 1.0, "num_frames": 64}, 0.4),  # 13 s: the 1 s skip applies
    (250, 25.0, (16, 16), {"fps": 2.0, "num_frames": 5}, 0.0),
    (6, 24.0, (20, 30), None, 0.0),                              # no sampling: every frame
    (3700, 1.0, (8, 8), {"fps": 0.02, "num_frames": 3}, 0.0),    # > 1 hour: timestamps past 60 min
]


@pytest.mark.parametrize("total,rate,hw,req,extra", PROCESSOR_CASES)
def test_processor_equals_plan(processor, pipe, seed, total, rate, hw, req, extra):
    from transformers.video_utils import VideoMetadata
    meta = _meta(total, rate, hw, extra)
    frames = np.random.default_rng(seed).integers(0, 256, (total, *hw, 3), dtype=np.uint8)
    opts = (VideoOptions(**req, do_sample_frames=True, family=FAMILY) if req
            else VideoOptions(do_sample_frames=False, family=FAMILY))
    plan = plan_video_of(pipe, meta, opts)
    assert plan.ok, plan.error
    hf_meta = VideoMetadata(**meta.to_hf())
    if req is None:  # frames given as they are: the processor's own frame indices (all)
        hf_meta.frames_indices = list(range(total))
    out = processor(text=["describe <video>"], videos=[frames], video_metadata=[hf_meta],
                    do_sample_frames=req is not None, return_text_replacement_offsets=True,
                    return_tensors="pt", **(req or {}))
    # SmolVLMProcessor drops video_metadata: the indices from its video processor's own call
    hf_meta = VideoMetadata(**meta.to_hf())
    if req is None:
        hf_meta.frames_indices = list(range(total))
    vout = processor.video_processor(videos=[frames], video_metadata=[hf_meta],
                                     do_sample_frames=req is not None, return_metadata=True,
                                     return_tensors="pt", **(req or {}))
    want_idx = [int(i) for i in vout["video_metadata"][0].frames_indices]
    assert plan.frame_indices == want_idx
    n = len(want_idx)
    assert tuple(out["pixel_values"].shape) == (1, n, 3, *plan.resized_hw)
    assert tuple(out["pixel_attention_mask"].shape) == (1, n, *plan.resized_hw)
    assert torch.equal(out["pixel_values"], vout["pixel_values"])
    [[rep]] = out["text_replacement_offsets"]
    assert rep["type"] == "video" and rep["replacement"] == plan.placeholder
    assert f" {english_number(n)} frames " in plan.placeholder
    tok = processor.tokenizer
    ids = out["input_ids"][0]
    img = int((ids == tok.convert_tokens_to_ids("<image>")).sum())
    wrap = int(sum((ids == tok.convert_tokens_to_ids(t)).sum()
                   for t in ("<fake_token_around_image>", "<global-img>")))
    assert img == plan.num_embeddings == n * SEQ and img + wrap == plan.num_tokens


def test_per_item_options_keep_the_other_default(video_processor, pipe):
    """Video(fps=2) keeps SmolVLM's 64-frame cap, Video(num_frames=4) its fps 1, as transformers'
    sample_frames fills the one not passed from the processor's own values."""
    meta = _meta(3000, 30.0)
    p = plan_video_of(pipe, meta, per_item=Video("x", fps=2.0))
    assert p.frame_indices == _hf_indices(video_processor, meta, fps=2.0)
    q = plan_video_of(pipe, meta, per_item=Video("x", num_frames=4))
    assert q.frame_indices == _hf_indices(video_processor, meta, num_frames=4)


def test_unknown_source_fps_refuses_sampling_but_not_all_frames(pipe, video_processor):
    meta = _meta(40, 0.0, (24, 24))
    assert isinstance(_hf_indices(video_processor, meta, fps=1.0, num_frames=8), ValueError)
    assert isinstance(plan_video_of(pipe, meta).error, ImageError)
    p = plan_video_of(pipe, meta, VideoOptions(do_sample_frames=False, family=FAMILY))
    # the processor's fallback: 24 fps for the timestamps, int(last time) for the duration
    assert p.ok and p.frame_indices == list(range(40)) and p.timestamps == []
    assert "from a 0:00:01 [H:MM:SS] video" in p.placeholder
    assert p.placeholder.count("\nFrame from 00:01:") == 40 - 24


@pytest.mark.parametrize("meta,why", [
    (VideoMeta(0, 30.0, 0.0, 720, 1280), "at least 1 frame"),
    (VideoMeta(10, float("inf"), 1.0, 720, 1280), "fps"),
    (VideoMeta(10, 30.0, -5.0, 720, 1280), "duration"),
    (VideoMeta(2 ** 40, 30.0, 1.0, 720, 1280), "frames"),
    (VideoMeta(10, 30.0, 1.0, 100_000, 100_000), "pixels"),
])
def test_hostile_metadata_is_an_error(pipe, meta, why):
    p = plan_video_of(pipe, meta)
    assert isinstance(p.error, ImageError) and why in str(p.error)
    assert p.frame_indices == [] and p.placeholder == "" and p.num_tokens == 0


def test_huge_requests_are_refused_from_counts(pipe):
    """A 10-hour clip at 60 fps with every frame, or fps 60 x 10 h with num_frames 2**16: refused
    from the counts (max_total_pixels), never planned into lists."""
    meta = _meta(2_160_000, 60.0)
    p = plan_video_of(pipe, meta, VideoOptions(do_sample_frames=False, family=FAMILY))
    assert isinstance(p.error, ImageError)
    q = plan_video_of(pipe, meta, VideoOptions(fps=60.0, num_frames=1 << 16, do_sample_frames=True,
                                            family=FAMILY))
    assert isinstance(q.error, ImageError) and "sample fewer frames" in str(q.error)
    ok = plan_video_of(pipe, meta)  # the checkpoint's sampling: 64 frames
    assert ok.ok and len(ok.frame_indices) == 64


def test_video_from_config_reads_video_sampling():
    """A 4.x SmolVLM2 preprocessor_config.json carries video_sampling: fps / max_frames become the
    processor's fps / num_frames (as SmolVLMVideoProcessor.__init__ does); sampling stays on."""
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    from vlmprep.presets.idefics3 import video_from_config
    cfg = dict(config("smolvlm"), video_sampling={"fps": 2, "max_frames": 16,
                                                  "video_size": {"longest_edge": 2048}})
    opts = video_from_config(cfg)
    vp = SmolVLMVideoProcessor(**{k: v for k, v in cfg.items()
                                  if k not in ("image_processor_type", "processor_class")})
    assert (opts.fps, opts.num_frames, opts.do_sample_frames) == (vp.fps, vp.num_frames, True)
    off = video_from_config(dict(cfg, do_sample_frames=False))
    assert off.do_sample_frames is False
