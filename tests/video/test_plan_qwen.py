"""Qwen video plans (``vlmprep.plan.video.plan_video``) against transformers 5.24, the oracle.

The oracle is the real thing: ``AutoVideoProcessor.from_pretrained`` on a local checkpoint folder
holding the checkpoint's configs (Qwen2-VL / Qwen2.5-VL: preprocessor_config.json only, Qwen3-VL:
plus video_preprocessor_config.json), inside the family's transformers Processor with a tiny
word-level tokenizer holding the special tokens. Each case feeds it synthetic frames (a THWC uint8
array: only the geometry matters) with ``VideoMetadata``; the plan must give the same frame
indices (plus the temporal padding), video_grid_thw, pixel_values_videos rows, the exact prompt
expansion (``text_replacement_offsets``) and token count, Qwen2.5-VL's second_per_grid_ts; where
transformers raises, the plan carries an ImageError instead.
"""
from __future__ import annotations

import importlib.util
import json
import math
from dataclasses import dataclass, replace

import numpy as np
import pytest
from _support.video_plan import frames_of, pixel_frames, plan_video_of

from tests.hfref import config
from vlmprep import presets
from vlmprep.errors import ImageError
from vlmprep.io.video import Video, VideoMeta
from vlmprep.plan import video as pv
from vlmprep.plan.qwen import (
    VIDEO_TOKEN,
    smart_resize_qwen_vl_utils,
    smart_resize_video,
)
from vlmprep.plan.video import VideoOptions, plan_video
from vlmprep.presets import qwen as preset_qwen
from vlmprep.presets import video_defaults

_HF = importlib.util.find_spec("transformers") is not None


def hf_test(fn):
    """A test whose oracle is transformers (skipped where it is not installed, e.g. the engines
    venv, which runs only the vLLM comparison below)."""
    return pytest.mark.hf(pytest.mark.skipif(not _HF, reason="needs transformers (the oracle)")(fn))


FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl")
SPECIAL = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
PROMPT = "a <|vision_start|><|video_pad|><|vision_end|> b"


Meta = VideoMeta


@dataclass(frozen=True)
class Item:
    """vlmprep.Video's sampling fields without its constructor's checks (a hostile caller)."""

    fps: float | None = None
    num_frames: int | None = None
    start: float | None = None
    end: float | None = None


def meta(total: int, fps: float, h: int, w: int) -> Meta:
    return Meta(total, fps, total / fps if fps else 0.0, h, w)


# -- the oracle ---------------------------------------------------------------------------------
def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "a": 2, "b": 3}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]")
    tok.add_tokens(SPECIAL, special_tokens=True)
    return tok


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """family -> a checkpoint folder with the configs the public checkpoint ships."""
    root = tmp_path_factory.mktemp("qwen_ckpt")
    out = {}
    for fam, cfg in preset_qwen.video_configs().items():
        d = root / fam
        d.mkdir()
        image = config("qwen3-vl" if fam == "qwen3-vl" else "qwen2-vl")
        image["processor_class"] = cfg["processor_class"]
        (d / "preprocessor_config.json").write_text(json.dumps(image))
        if "video_processor_type" in cfg:
            (d / "video_preprocessor_config.json").write_text(json.dumps(cfg))
        out[fam] = d
    return out


_PROCS: dict = {}


def processor(folders, fam: str, **init):
    """The family's transformers Processor (checkpoint configs; ``init``: video processor
    construction overrides, e.g. max_video_tokens, which its resize reads from ``self``)."""
    key = (fam, tuple(sorted(init.items())))
    if key not in _PROCS:
        import transformers as T

        from tests.hfref import hf_processor
        vp = T.AutoVideoProcessor.from_pretrained(str(folders[fam]), **init)
        cls = {"qwen2-vl": T.Qwen2VLProcessor, "qwen2.5-vl": T.Qwen2_5_VLProcessor,
               "qwen3-vl": T.Qwen3VLProcessor}[fam]
        ip = hf_processor("qwen3-vl" if fam == "qwen3-vl" else "qwen2-vl", "pil")
        _PROCS[key] = cls(image_processor=ip, tokenizer=_tokenizer(), video_processor=vp)
    return _PROCS[key]


def run_hf(proc, m: Meta, frames: np.ndarray, **kw):
    """-> (the indices its sample_frames returned (None: not sampled), BatchFeature, replacement
    text) or the exception transformers raised."""
    from transformers.video_utils import VideoMetadata
    md = VideoMetadata(total_num_frames=m.total_num_frames, fps=m.fps or None,
                       frames_indices=list(range(m.total_num_frames)), height=m.height, width=m.width)
    kw.setdefault("cap_pixels_per_frame", False)
    vp = proc.video_processor
    seen: list = []
    vp.sample_frames = lambda *a, **k: seen.append(type(vp).sample_frames(vp, *a, **k)) or seen[-1]
    try:
        out = proc(text=[PROMPT], videos=[frames], video_metadata=[md],
                   return_text_replacement_offsets=True, **kw)
    except (ValueError, IndexError, ZeroDivisionError, TypeError) as e:
        return e
    finally:
        del vp.sample_frames
    (rep,) = out["text_replacement_offsets"][0]
    idx = [int(i) for i in seen[0]] if seen else list(range(m.total_num_frames))
    return idx, out, rep["replacement"]


def check_same(plan, hf, proc, tps: int = 2, offset: int = 0) -> None:
    """The plan equals the oracle's output (or both fail)."""
    if isinstance(hf, Exception):
        assert isinstance(plan.error, ImageError), (plan, hf)
        assert "expected" in str(plan.error) and "got" in str(plan.error)
        return
    assert plan.error is None, (plan.error, hf[1]["video_grid_thw"])
    idx, out, rep = hf
    pad = -len(idx) % tps
    assert plan.frame_indices == [i + offset for i in idx + [idx[-1]] * pad]
    assert [i + offset for i in pixel_frames(out, proc, tps)] == plan.frame_indices
    assert [tuple(plan.grid_thw[0])] == [tuple(int(v) for v in out["video_grid_thw"][0])]
    pvv = out["pixel_values_videos"]
    p = proc.video_processor.patch_size
    assert tuple(pvv.shape) == (plan.num_patches, 3 * tps * p * p)
    assert plan.placeholder == rep
    n_video = sum(int(t == proc.video_token_id) for t in out["input_ids"][0])
    assert plan.num_tokens == plan.num_embeddings == n_video == plan.placeholder.count(VIDEO_TOKEN)
    if "second_per_grid_ts" in out:
        assert plan.second_per_grid_ts == out["second_per_grid_ts"][0]
    else:
        assert plan.second_per_grid_ts is None


# -- the sweep ----------------------------------------------------------------------------------
#: (total frames, source fps; 0.0: unknown)
CLIPS = [(1, 10.0), (3, 24.0), (17, 10.0), (48, 24.0), (151, 29.97), (451, 30.0), (60, 0.0),
         (250, 25.0), (34, 10.0)]
#: (H, W) of the source frames: below the factor, landscape, portrait, wide
SIZES = [(24, 40), (90, 160), (120, 64), (37, 300)]
#: sampling: checkpoint default, fps, num_frames
SPECS = [None, ("fps", 2.0), ("fps", 0.5), ("fps", 7.5), ("num", 4), ("num", 7), ("num", 14)]


def spec_args(spec):
    """-> (vlmprep.Video options, transformers call kwargs)"""
    if spec is None:
        return None, {}
    kind, v = spec
    if kind == "fps":
        return Video("x", fps=v), dict(do_sample_frames=True, fps=v, num_frames=None)
    return Video("x", num_frames=v), dict(do_sample_frames=True, num_frames=v, fps=None)


@hf_test
@pytest.mark.parametrize("fam", FAMILIES)
def test_sweep_equals_transformers(folders, fam):
    proc = processor(folders, fam)
    k = 0
    for total, fps in CLIPS:
        for spec in SPECS:
            h, w = SIZES[k % len(SIZES)]
            k += 1
            m = meta(total, fps, h, w)
            item, kw = spec_args(spec)
            hf = run_hf(proc, m, frames_of(total, h, w), **kw)
            plan = plan_video_of(fam, m, per_item=item, index=3)
            check_same(plan, hf, proc)
            if plan.ok:
                assert plan.timestamps == ([i / fps for i in plan.frame_indices] if fps else [])
                # the count vLLM schedules with (transformers' metadata-only path)
                n = len(hf[0])
                mm = proc._get_num_multimodal_tokens(video_sizes=[(n, h, w)])
                assert mm["num_video_tokens"] == [plan.num_tokens]
            else:
                assert plan.error.index == 3 and plan.num_tokens == 0


@hf_test
@pytest.mark.parametrize("fam", FAMILIES)
def test_pixel_bounds_and_cap(folders, fam):
    """Small min/max pixels (so frames hit the max and min branches) and cap_pixels_per_frame."""
    tps = 2
    cases = [((3136 * 2, 28 * 28 * 6), None), ((1024, 50_000), None), ((40_000, 60_000), None),
             (None, 64), (None, 8)]
    for (pixels, mvt), (total, fps), (h, w) in zip(cases * 2, CLIPS[2:] * 2, SIZES * 3):
        m = meta(total, fps, h, w)
        opts = video_defaults(fam)
        kw: dict = dict(do_sample_frames=True, fps=2.0, num_frames=None)
        init: dict = {}
        if pixels is not None:
            opts = replace(opts, min_pixels=pixels[0], max_pixels=pixels[1])
            kw["size"] = {"shortest_edge": pixels[0], "longest_edge": pixels[1]}
        if mvt is not None:
            opts = replace(opts, cap_pixels_per_frame=True, max_video_tokens=mvt)
            kw["cap_pixels_per_frame"] = True
            init["max_video_tokens"] = mvt
        proc = processor(folders, fam, **init)
        hf = run_hf(proc, m, frames_of(total, h, w), **kw)
        check_same(plan_video_of(fam, m, opts, Video("x", fps=2.0)), hf, proc, tps)


@hf_test
@pytest.mark.parametrize("fam", FAMILIES)
def test_window_is_a_trimmed_clip(folders, fam):
    """Video(start, end): the frames ceil(start*fps)..floor(end*fps), sampled as transformers
    samples that trimmed clip (indices offset back to the source; Qwen3's prompt times are the
    trimmed clip's, as transformers given the trimmed frames writes them)."""
    m = meta(50, 10.0, 90, 160)
    plan = plan_video_of(fam, m, per_item=Video("x", start=1.04, end=3.0))
    assert plan.ok
    first, last = 11, 30
    trimmed = meta(last - first + 1, 10.0, 90, 160)
    proc = processor(folders, fam)
    hf = run_hf(proc, trimmed, frames_of(trimmed.total_num_frames, 90, 160))
    assert not isinstance(hf, Exception)
    check_same(plan, hf, proc, offset=first)
    assert plan.timestamps[0] == plan.frame_indices[0] / 10.0


@hf_test
def test_checkpoint_defaults_match_transformers(folders):
    """video_defaults(family) == what AutoVideoProcessor reads from the checkpoint folder."""
    import transformers as T
    for fam in FAMILIES:
        vp = T.AutoVideoProcessor.from_pretrained(str(folders[fam]))
        o = video_defaults(fam)
        assert (o.min_pixels, o.max_pixels) == (vp.size.shortest_edge, vp.size.longest_edge)
        assert (o.fps, o.num_frames, o.min_frames, o.max_frames, o.do_sample_frames,
                o.max_video_tokens) == (vp.fps, vp.num_frames, vp.min_frames, vp.max_frames,
                                        vp.do_sample_frames, vp.max_video_tokens)
        assert o.family == fam and o.sampling == "transformers"
        assert bool(vp.cap_pixels_per_frame) is o.cap_pixels_per_frame is False
    # the class defaults fill an empty config, as transformers' do
    for cls in (T.Qwen2VLVideoProcessor, T.Qwen3VLVideoProcessor):
        vp = cls()
        o = preset_qwen.video_from_config({"video_processor_type": cls.__name__})
        assert (o.min_pixels, o.max_pixels, o.fps, o.do_sample_frames, o.max_video_tokens) == (
            vp.size.shortest_edge, vp.size.longest_edge, vp.fps, vp.do_sample_frames,
            vp.max_video_tokens)


@hf_test
def test_smart_resize_video_equals_transformers():
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize as ref
    rng = np.random.default_rng(0)
    for _ in range(3000):
        t = int(rng.integers(2, 800))
        h, w = (int(v) for v in rng.integers(1, 5000, 2))
        if max(h, w) / min(h, w) > 150:
            continue
        lo, hi = 4096, int(rng.choice([25165824, 786432, 16777216 * 4]))
        assert smart_resize_video(t, h, w, 2, 32, lo, hi) == ref(t, h, w, 2, 32, lo, hi)


def test_qwen_vl_utils_sampling():
    """sampling='qwen_vl_utils': smart_nframes, torch.linspace (float32) indices, the per-frame
    budget and qwen_vl_utils' smart_resize variant (0.0.14)."""
    torch = pytest.importorskip("torch")
    m = meta(300, 30.0, 720, 1280)
    opts = replace(video_defaults("qwen2.5-vl"), sampling="qwen_vl_utils")
    plan = plan_video_of("qwen2-vl", m, opts)
    assert plan.ok
    # n = 300 / 30 * 2 = 20; per frame max(min(768*784, 128000*784*0.9/20*2), 1.05*128*784)
    assert plan.frame_indices == torch.linspace(0, 299, 20).round().long().tolist()
    assert plan.resized_hw == (560, 1008) == smart_resize_qwen_vl_utils(720, 1280, 28, 100352,
                                                                        602112)
    assert plan.grid_thw == [(10, 40, 72)] and plan.num_tokens == 7200
    assert plan.second_per_grid_ts == 1.0
    # qwen_vl_utils' variant differs from transformers on a thin frame (PEERS.md §2.1)
    assert smart_resize_qwen_vl_utils(10, 2000, 28, 3136, 12845056) == (28, 1988)
    # indices: float32 torch.linspace, both ends kept, inside a start/end window too
    for total, fps, item in ((451, 30.0, None), (1000, 29.97, Video("x", fps=1.0)),
                             (250, 25.0, Video("x", start=2.0, end=7.5)), (77, 10.0, Video("x", num_frames=9))):
        p = plan_video_of("qwen3-vl", meta(total, fps, 90, 160),
                       replace(video_defaults("qwen3-vl"), sampling="qwen_vl_utils"), item)
        assert p.ok, p.error
        first, count = (0, total) if item is None or item.start is None else (
            math.ceil(item.start * fps), math.floor(item.end * fps) - math.ceil(item.start * fps) + 1)
        n = len(p.frame_indices)
        assert n % 2 == 0
        assert p.frame_indices == torch.linspace(first, first + count - 1, n).round().long().tolist()
    assert plan_video_of("qwen2-vl", meta(300, 0.0, 90, 160), opts).error is not None  # needs fps


@hf_test
def test_qwen_vl_utils_frames_through_processor(folders):
    """qwen_vl_utils' frames and size, fed as its README does (do_sample_frames=False, Qwen3-VL
    do_resize=False, its metadata), give the plan's grid, placeholder and second_per_grid_ts."""
    from transformers.video_utils import VideoMetadata
    for fam in FAMILIES:
        m = meta(151, 29.97, 90, 160)
        plan = plan_video_of(fam, m, replace(video_defaults(fam), sampling="qwen_vl_utils"))
        assert plan.ok
        n = len(plan.frame_indices)
        md = VideoMetadata(total_num_frames=151, fps=29.97, frames_indices=plan.frame_indices)
        frames = np.zeros((n, *plan.resized_hw, 3), np.uint8)
        kw = dict(do_resize=False) if fam == "qwen3-vl" else {}
        out = processor(folders, fam)(text=[PROMPT], videos=[frames], video_metadata=[md],
                                      do_sample_frames=False, cap_pixels_per_frame=False,
                                      return_text_replacement_offsets=True, **kw)
        assert [tuple(int(v) for v in out["video_grid_thw"][0])] == plan.grid_thw
        assert out["text_replacement_offsets"][0][0]["replacement"] == plan.placeholder
        if fam == "qwen2.5-vl":
            assert out["second_per_grid_ts"][0] == plan.second_per_grid_ts


def test_vllm_sampling():
    """sampling='vllm' (vLLM 0.33's Qwen2VLVideoBackend / Qwen3VLVideoBackend): fps only
    (default 2, at most 30), Qwen2 indices clamped to the last frame."""
    torch = pytest.importorskip("torch")
    o2 = replace(video_defaults("qwen2-vl"), sampling="vllm")
    # 17 frames at 10 fps, fps 8.5 -> n 14: transformers' float32 arange reaches index 17
    assert plan_video_of("qwen2-vl", meta(17, 10.0, 90, 160), per_item=Video("x", fps=8.5)).error
    p = plan_video_of("qwen2-vl", meta(17, 10.0, 90, 160), o2, Video("x", fps=8.5))
    ref = torch.clamp(torch.arange(0, 17, 17 / 14).int(), max=16).tolist()
    assert p.frame_indices == ref + [ref[-1]] * (len(ref) % 2) and len(ref) == 15
    # num_frames is ignored, fps capped at 30
    p = plan_video_of("qwen2-vl", meta(600, 60.0, 90, 160), o2, Video("x", fps=60.0))
    assert len(p.frame_indices) == 300
    p3 = plan_video_of("qwen3-vl", meta(300, 30.0, 90, 160),
                    replace(video_defaults("qwen3-vl"), sampling="vllm"))
    assert p3.frame_indices == plan_video_of("qwen3-vl", meta(300, 30.0, 90, 160)).frame_indices


@hf_test
def test_samplers_equal_torch():
    torch = pytest.importorskip("torch")
    for total in (17, 30, 34, 451, 1000, 4999):
        for n in (2, 4, 14, 26, 100, 768):
            if n > total:
                continue
            ref = torch.arange(0, total, total / n).int().tolist()
            assert pv.arange_indices_f32(total, n).tolist() == ref
            assert pv.linspace_indices_f32(3, total - 1, n) == (
                torch.linspace(3, total - 1, n).round().long().tolist())
            assert pv.linspace_indices(0, total - 1, n) == (
                np.linspace(0, total - 1, n).round().astype(int).tolist())
    from transformers.video_utils import VideoMetadata, default_sample_indices_fn
    for total, n in ((10, 3), (451, 32), (7, 7)):
        ref = default_sample_indices_fn(VideoMetadata(total_num_frames=total), num_frames=n)
        assert pv.uniform_indices(total, n) == ref.tolist()


# -- hostile metadata ---------------------------------------------------------------------------
#: (metadata, vlmprep.Video options, a word of the message, qwen3-vl refuses it too)
HOSTILE = [
    (Meta(0, 30.0, 0.0, 90, 160), None, "at least 1 frame", True),
    (Meta(10**12, 30.0, 1e3, 90, 160), None, "frames", True),
    (Meta(100, float("nan"), 1.0, 90, 160), None, "fps", True),
    (Meta(100, float("inf"), 1.0, 90, 160), None, "fps", True),
    (Meta(100, -5.0, 1.0, 90, 160), None, "fps", True),
    (Meta(100, 1e12, 1.0, 90, 160), None, "fps", True),
    (Meta(100, 30.0, float("nan"), 90, 160), None, "duration", True),
    (Meta(100, 30.0, 1e300, 90, 160), None, "duration", True),
    (Meta(100, 30.0, 3.0, 0, 160), None, "1x1", True),
    (Meta(100, 30.0, 3.0, 100_000, 100_000), None, "pixels", True),
    # qwen2-vl keeps every frame (its checkpoint's do_sample_frames=False); qwen3-vl samples 2 fps
    (Meta(10**6, 30.0, 3e4, 90, 160), None, "sampled frames", False),
    # qwen3-vl's 768 frames of 1080p: exactly the decoder's max_total_pixels
    (Meta(10**6, 30.0, 3e4, 1080, 1920), None, "sampled frames", False),
    (Meta(3000, 30.0, 100.0, 4000, 4000), Video("x", num_frames=3000), "max_total_pixels", True),
    # unknown fps: Qwen2VLVideoProcessor cannot sample by fps; Qwen3 assumes 24
    (Meta(100, 0.0, 0.0, 90, 160), Video("x", fps=2.0), "known source fps", False),
    (Meta(100, 30.0, 3.0, 90, 160), Item(fps=float("nan")), "fps", True),
    (Meta(100, 30.0, 3.0, 90, 160), Item(fps=2.0, num_frames=8), "mutually exclusive", True),
    (Meta(100, 30.0, 3.0, 90, 160), Item(num_frames=10**9), "num_frames", True),
    (Meta(100, 30.0, 3.0, 90, 160), Item(start=5.0, end=1.0), "window", True),
    (Meta(100, 30.0, 3.0, 90, 160), Item(start=float("nan")), "start", True),
    (Meta(1, 30.0, 0.03, 90, 160), Video("x", fps=2.0), "frames", True),   # one frame, sampled
    (Meta(100, 30.0, 3.0, 2, 1000), None, "aspect ratio", True),
]


@pytest.mark.parametrize("m,item,word,q3", HOSTILE)
def test_hostile_metadata_is_an_error_not_an_exception(m, item, word, q3):
    plan = plan_video_of("qwen2-vl", m, per_item=item, index=5)
    assert isinstance(plan.error, ImageError), plan
    msg = str(plan.error)
    assert word in msg and "expected" in msg and "got" in msg and ";" in msg
    assert plan.error.index == 5 and plan.frame_indices == [] and plan.placeholder == ""
    assert plan.num_tokens == plan.num_patches == 0
    assert isinstance(plan_video_of("qwen3-vl", m, per_item=item).error, ImageError) is q3


@hf_test
def test_qwen3_one_frame_and_unknown_fps(folders):
    """One frame: transformers' Qwen3 resize refuses t < 2 (an ImageError here); unknown fps:
    Qwen3 assumes 24 for both sampling and prompt timestamps, as its processor does."""
    proc = processor(folders, "qwen3-vl")
    for total, fps in ((1, 10.0), (1, 0.0), (30, 0.0)):
        m = meta(total, fps, 90, 160)
        hf = run_hf(proc, m, frames_of(total, 90, 160))
        check_same(plan_video_of("qwen3-vl", m), hf, proc)


def test_options_validation():
    with pytest.raises(ValueError, match="sampling"):
        VideoOptions(sampling="decord")
    with pytest.raises(ValueError, match="fps"):
        VideoOptions(fps=float("nan"))
    with pytest.raises(ValueError, match="min_frames"):
        VideoOptions(min_frames=0)
    with pytest.raises(ValueError, match="video rule"):
        plan_video(presets.get("siglip"), meta(10, 10.0, 90, 160), VideoOptions())
    with pytest.raises(TypeError, match=r"family name 'qwen3-vl'.*presets\.video_pipeline"):
        plan_video("qwen3-vl", meta(10, 10.0, 90, 160), video_defaults("qwen3-vl"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected options: a VideoOptions, got NoneType"):
        plan_video(presets.get("qwen3-vl"), meta(10, 10.0, 90, 160), None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="video defaults.*got 'siglip'"):
        plan_video_of("siglip", meta(10, 10.0, 90, 160))
    p = plan_video_of("qwen3-vl", meta(300, 30.0, 720, 1280))
    assert "chars)" in repr(p) and len(repr(p)) < 2000


# -- the other references, where installed (vLLM: build/engines/venv, `make test-engines`) ----------
def test_vllm_sampling_equals_vllm_loaders():
    """sampling='vllm' == vLLM's own Qwen2VLVideoBackend / Qwen3VLVideoBackend indices (plus the
    temporal padding). Measured in build/engines/venv (vLLM 0.33): 2825 of 3000 random clips
    equal, the other 175 refused by both, except a 1-frame Qwen3 clip (vLLM samples [0]; its HF
    processor then refuses t < 2, as the plan does)."""
    vv = pytest.importorskip("vllm.multimodal.video", reason="vLLM is not installed here")
    import random
    rng = random.Random(1)
    for _ in range(300):
        fam = rng.choice(["qwen2-vl", "qwen3-vl"])
        total = rng.randint(2, 3000)
        fps = rng.choice([0.0, 10.0, 23.976, 25.0, 29.97, 60.0])
        want = rng.choice([None, 0.5, 2.0, 45.0])
        src = vv.VideoSourceMetadata(total, fps, total / fps if fps else 0.0)
        backend = vv.Qwen3VLVideoBackend if fam == "qwen3-vl" else vv.Qwen2VLVideoBackend
        try:
            ref = backend.compute_frames_index_to_sample(
                src, vv.VideoTargetMetadata(num_frames=-1, fps=want or 2, max_duration=300))
        except (ValueError, ZeroDivisionError):
            ref = None
        plan = plan_video_of(fam, meta(total, fps, 90, 160),
                          replace(video_defaults(fam), sampling="vllm"),
                          Video("x", fps=want) if want else None)
        if ref is None:
            assert plan.error is not None
        else:
            assert plan.frame_indices == list(ref) + [ref[-1]] * (len(ref) % 2)


def test_qwen_vl_utils_equals_package():
    """sampling='qwen_vl_utils' == the package's smart_nframes, torch.linspace indices and
    smart_resize with fetch_video's per-frame budget. Measured with qwen-vl-utils 0.0.14 (not a
    dependency): 2979 of 3000 random clips equal, the rest refused by both or above the decoder's
    max_total_pixels."""
    Q = pytest.importorskip("qwen_vl_utils.vision_process", reason="qwen-vl-utils is not installed")
    import random

    torch = pytest.importorskip("torch")
    rng = random.Random(0)
    for _ in range(500):
        fam = rng.choice(["qwen2-vl", "qwen3-vl"])
        f = 32 if fam == "qwen3-vl" else 28
        total, fps = rng.randint(1, 600), rng.choice([10.0, 23.976, 30.0, 60.0])
        h, w = rng.randint(16, 1500), rng.randint(16, 1500)
        ele: dict = {}
        if rng.random() < 0.3:
            ele["fps"] = rng.choice([0.5, 1.0, 4.0])
        elif rng.random() < 0.3:
            ele["nframes"] = rng.randint(1, 64)
        item = (Video("x", fps=ele["fps"]) if "fps" in ele else
                Video("x", num_frames=ele["nframes"]) if "nframes" in ele else None)
        plan = plan_video_of(fam, meta(total, fps, h, w),
                          replace(video_defaults(fam), sampling="qwen_vl_utils"), item)
        try:
            n = Q.smart_nframes(dict(ele), total_frames=total, video_fps=fps)
            lo = Q.VIDEO_MIN_TOKEN_NUM * f * f
            hi = max(min(Q.VIDEO_MAX_TOKEN_NUM * f * f, Q.MODEL_SEQ_LEN * f * f * 0.9 / n * 2),
                     int(lo * 1.05))
            hw = Q.smart_resize(h, w, factor=f, min_pixels=lo, max_pixels=hi)
        except (ValueError, AssertionError):
            assert plan.error is not None
            continue
        idx = torch.linspace(0, total - 1, n).round().long().tolist()
        assert plan.frame_indices == idx and plan.resized_hw == hw
