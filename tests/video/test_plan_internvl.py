"""InternVL video plans == transformers 5.24's InternVLVideoProcessor + InternVLProcessor.

The oracle: the video processor built from the checkpoint's video config
(``vlmprep.presets.internvl.video_configs()``), its own ``sample_frames`` (initial_shift, float32
``torch.arange``) over a sweep of clip lengths, source rates and fps / num_frames requests, and the
real processor (checkpoint image processor, an offline word-level tokenizer holding
``<img>`` / ``</img>`` / ``<IMG_CONTEXT>`` / ``<video>``) on synthetic frames with ``VideoMetadata``:
sampled indices, the frames moved into ``pixel_values``, the "FrameK: <img>...</img>" expansion
and the token counts of ``input_ids``.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.hf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from _support.video_plan import plan_video_of  # noqa: E402

from vlmprep import presets  # noqa: E402
from vlmprep.errors import ImageError  # noqa: E402
from vlmprep.io.video import Video, VideoLimits, VideoMeta  # noqa: E402
from vlmprep.plan.internvl import _torch_arange_f32  # noqa: E402
from vlmprep.presets import video_defaults  # noqa: E402
from vlmprep.presets.internvl import video_configs  # noqa: E402

FAMILY = "internvl"
TOTALS = (1, 2, 7, 16, 31, 100, 299, 1001, 3001)
RATES = (1.0, 10.0, 23.976, 29.97, 60.0)
REQUESTS = [("fps", f) for f in (0.05, 0.5, 1.0, 2.0, 30.0)] + [
    ("num_frames", n) for n in (1, 3, 8, 17, 64, 500)]
SEQ = 256  # (448 / 14)^2 / 4


def _meta(total: int, fps: float, hw=(720, 1280)) -> VideoMeta:
    return VideoMeta(total_num_frames=total, fps=fps, duration=total / fps if fps else 0.0,
                     height=hw[0], width=hw[1])


@pytest.fixture(scope="module")
def video_processor():
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor
    cfg = {k: v for k, v in video_configs()[FAMILY].items()
           if k not in ("video_processor_type", "processor_class")}
    return InternVLVideoProcessor(**cfg)


@pytest.fixture(scope="module")
def processor(video_processor):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from tests.hfref import hf_processor
    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "describe": 2}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]",
                                  extra_special_tokens={
                                      "start_image_token": "<img>", "end_image_token": "</img>",
                                      "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"})
    return transformers.InternVLProcessor(image_processor=hf_processor(FAMILY, "pil"), tokenizer=tok,
                                          video_processor=video_processor, image_seq_length=SEQ)


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
    p = plan_video_of(FAMILY, _meta(5, 24.0))
    assert p.ok and p.frame_indices == list(range(5))
    assert p.resized_hw == (448, 448) and p.grid_thw == [(1, 32, 32)] * 5
    assert p.num_embeddings == 5 * SEQ and p.num_tokens == 5 * (SEQ + 2)
    assert p.placeholder.split("\n")[1] == "Frame2: <img>" + "<IMG_CONTEXT>" * SEQ + "</img>"


@pytest.mark.parametrize("kind,value", REQUESTS)
def test_sampling_sweep_equals_sample_frames(video_processor, kind, value):
    """Frame indices (or the refusal) over clip lengths x source rates, as InternVL samples
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
            assert got.num_tokens == n * (SEQ + 2) and got.num_embeddings == n * SEQ
            assert got.placeholder.count("\n") == n - 1


def test_torch_arange_emulation_is_bit_exact():
    """The float32 torch.arange InternVL samples with, over lengths that reach torch's vectorized
    blocks (>= 16 values): values equal bit for bit, so .int() truncates identically."""
    for total in list(range(1, 120)) + [997, 4096, 18197, 29999]:
        for n in {1, 2, 3, 7, 16, 17, 33, 64, min(total, 100), min(total, 512)}:
            if n > total:
                continue
            start, step = total / n / 2, total / n
            want = torch.arange(start, total, step).numpy()
            got = _torch_arange_f32(start, total, step)
            assert got.dtype == want.dtype and np.array_equal(got, want), (total, n)
            want0 = torch.arange(0, total, step).numpy()
            assert np.array_equal(_torch_arange_f32(0, total, step), want0), (total, n)


PROCESSOR_CASES = [
    (5, 24.0, (24, 40), {}),                        # checkpoint default: every frame
    (90, 30.0, (48, 32), {"fps": 1.0}),
    (250, 25.0, (16, 16), {"num_frames": 6}),
    (3, 10.0, (30, 50), {"num_frames": 3}),
]


@pytest.mark.parametrize("total,rate,hw,req", PROCESSOR_CASES)
def test_processor_equals_plan(processor, seed, total, rate, hw, req):
    """Indices, the frames in pixel_values, the prompt expansion and token counts."""
    from transformers.video_utils import VideoMetadata
    meta = _meta(total, rate, hw)
    frames = np.random.default_rng(seed).integers(0, 256, (total, *hw, 3), dtype=np.uint8)
    plan = plan_video_of(presets.get(FAMILY), meta, per_item=Video(frames, **req))
    assert plan.ok, plan.error
    hf_meta = [VideoMetadata(**meta.to_hf())]
    out = processor(text=["describe <video>"], videos=[frames], video_metadata=hf_meta,
                    do_sample_frames=bool(req), return_text_replacement_offsets=True,
                    return_tensors="pt", **req)
    # InternVLProcessor drops video_metadata: the indices from its video processor's own call
    vout = processor.video_processor(videos=[frames], video_metadata=[VideoMetadata(**meta.to_hf())],
                                     do_sample_frames=bool(req), return_metadata=True,
                                     return_tensors="pt", **req)
    got_idx = vout["video_metadata"][0].frames_indices
    want_idx = list(range(total)) if got_idx is None else [int(i) for i in got_idx]
    assert plan.frame_indices == want_idx
    # InternVLProcessor moves the frames into pixel_values (no pixel_values_videos key)
    assert "pixel_values_videos" not in out
    assert tuple(out["pixel_values"].shape) == (len(want_idx), 3, *plan.resized_hw)
    assert torch.equal(out["pixel_values"], vout["pixel_values_videos"][0])
    [[rep]] = out["text_replacement_offsets"]
    assert rep["type"] == "video" and rep["replacement"] == plan.placeholder
    tok = processor.tokenizer
    ids = out["input_ids"][0]
    ctx = int((ids == tok.convert_tokens_to_ids("<IMG_CONTEXT>")).sum())
    brackets = int(sum((ids == tok.convert_tokens_to_ids(t)).sum() for t in ("<img>", "</img>")))
    assert ctx == plan.num_embeddings and ctx + brackets == plan.num_tokens


def test_unknown_source_fps(video_processor):
    meta = _meta(40, 0.0)
    assert isinstance(plan_video_of(FAMILY, meta, per_item=Video("x", fps=2.0)).error, ImageError)
    p = plan_video_of(FAMILY, meta, per_item=Video("x", num_frames=5))
    assert p.frame_indices == _hf_indices(video_processor, meta, "num_frames", 5)
    assert p.timestamps == []


@pytest.mark.parametrize("meta,why", [
    (VideoMeta(0, 30.0, 0.0, 720, 1280), "at least 1 frame"),
    (VideoMeta(10, -1.0, 1.0, 720, 1280), "fps"),
    (VideoMeta(2 ** 40, 30.0, 1.0, 720, 1280), "frames"),
    (VideoMeta(10, 30.0, 1.0, 100_000, 100_000), "pixels"),
])
def test_hostile_metadata_is_an_error(meta, why):
    p = plan_video_of(FAMILY, meta)
    assert isinstance(p.error, ImageError) and why in str(p.error)
    assert p.frame_indices == [] and p.placeholder == "" and p.num_tokens == 0


def test_every_frame_of_a_long_video_is_refused_before_any_list():
    p = plan_video_of(FAMILY, _meta(2_160_000, 60.0))
    assert isinstance(p.error, ImageError) and "fps=" in str(p.error)
    ok = plan_video_of(FAMILY, _meta(2_160_000, 60.0), per_item=Video("x", num_frames=16))
    assert ok.ok and len(ok.frame_indices) == 16 and ok.num_tokens == 16 * (SEQ + 2)
