"""GLM-4.1V video plans (``plan/glm4v.py``'s ``@video_rule("glm4v")``) and pixels against
transformers 5.24's ``Glm4vVideoProcessor`` inside ``Glm4vProcessor`` (offline: a word-level
tokenizer holding GLM's special tokens; the checkpoint's video config).

The sweep feeds the processor synthetic frames (frame k flat with R = k % 256, G = k // 256, so
each temporal slice of ``pixel_values_videos`` names its source frame) with ``VideoMetadata``: the
plan must give the same frame indices (its ``sample_frames``, plus the temporal padding),
video_grid_thw, rows, the exact prompt expansion of ``<|video|>`` and the image-token count; where
transformers raises, the plan carries an ImageError. Pixels: a real clip written with OpenCV's
VideoWriter (tests/_support/videos.py), through the Processor on every backend that runs videos,
bit for bit against the video processor given every decoded frame.
"""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
from _support.video_plan import frames_of, pixel_frames, plan_video_of

from vlmprep import presets
from vlmprep.errors import ImageError
from vlmprep.io.video import Video, VideoMeta
from vlmprep.plan.glm4v import IMAGE_TOKEN, glm4v_frame_indices

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.hf

PROMPT = "a <|begin_of_video|><|video|><|end_of_video|> b"


def meta(total: int, fps: float, h: int, w: int) -> VideoMeta:
    return VideoMeta(total, fps, total / fps if fps else 0.0, h, w)


def _tokenizer():
    from hfref import tiny_tokenizer
    return tiny_tokenizer(["<|image|>", "<|video|>", "<|begin_of_image|>", "<|end_of_image|>",
                           "<|begin_of_video|>", "<|end_of_video|>"], words=("a", "b"))


@pytest.fixture(scope="module")
def hf():
    from hfref import hf_processor
    vp = transformers.Glm4vVideoProcessor.from_dict(presets.glm4v.video_configs()["glm4v"])
    return transformers.Glm4vProcessor(image_processor=hf_processor("glm4v", "pil"),
                                       tokenizer=_tokenizer(), video_processor=vp)


def run_hf(proc, m: VideoMeta, frames: np.ndarray, **kw):
    """-> (sampled indices, output, replacement text) or the exception transformers raised."""
    from transformers.video_utils import VideoMetadata
    md = VideoMetadata(**m.to_hf(), frames_indices=list(range(m.total_num_frames)))
    vp = proc.video_processor
    seen: list = []
    vp.sample_frames = lambda *a, **k: seen.append(type(vp).sample_frames(vp, *a, **k)) or seen[-1]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = proc(text=[PROMPT], videos=[frames], video_metadata=[md], return_tensors="pt",
                       return_text_replacement_offsets=True, **kw)
    except (ValueError, IndexError, ZeroDivisionError) as e:
        return e
    finally:
        del vp.sample_frames
    (rep,) = out["text_replacement_offsets"][0]
    idx = [int(i) for i in seen[0]] if seen else list(range(m.total_num_frames))
    return idx, out, rep["replacement"]


def check_same(plan, res, proc) -> None:
    if isinstance(res, Exception):
        assert isinstance(plan.error, ImageError), (plan, res)
        assert "expected" in str(plan.error) and "got" in str(plan.error)
        return
    assert plan.error is None, (plan.error, res[1]["video_grid_thw"])
    idx, out, rep = res
    assert plan.frame_indices == idx + [idx[-1]] * (len(idx) % 2)
    assert pixel_frames(out, proc) == plan.frame_indices
    assert [tuple(plan.grid_thw[0])] == [tuple(int(v) for v in out["video_grid_thw"][0])]
    assert tuple(out["pixel_values_videos"].shape) == (plan.num_patches, 3 * 2 * 14 * 14)
    assert plan.placeholder == rep
    n = sum(int(t == proc.image_token_id) for t in out["input_ids"][0])
    assert plan.num_tokens == plan.num_embeddings == n == plan.placeholder.count(IMAGE_TOKEN)


# -- the sweep ----------------------------------------------------------------------------------
#: (total frames, source fps; 0.0: unknown). 3100 at 10 fps and 700 at 2 fps run past
#: max_duration (300 s): linspace sampling, or every frame when 300 * fps >= total.
CLIPS = [(1, 10.0), (2, 24.0), (3, 24.0), (17, 10.0), (48, 24.0), (151, 29.97), (60, 0.0),
         (250, 25.0), (700, 2.0), (3100, 10.0), (7, 0.5)]
#: (H, W): below the factor, landscape, portrait, wide
SIZES = [(24, 40), (90, 160), (120, 64), (37, 300)]
#: None: the checkpoint's 2 fps; else a per-item fps
FPS = [None, 1.0, 0.5, 7.5, 30.0]


@pytest.mark.parametrize("fps", FPS)
def test_sweep_equals_transformers(hf, fps):
    for k, (total, src) in enumerate(CLIPS):
        h, w = SIZES[k % len(SIZES)]
        m = meta(total, src, h, w)
        item = Video("x", fps=fps) if fps else None
        plan = plan_video_of("glm4v", m, per_item=item)
        kw = {"fps": fps} if fps else {}
        check_same(plan, run_hf(hf, m, frames_of(total, h, w), **kw), hf)


def test_every_frame_and_pixel_budget(hf):
    """do_sample_frames=False (every frame; an odd count padded, one frame refused) and small
    min/max pixels (the clip budget's max and min branches)."""
    opts = presets.video_defaults("glm4v")
    m = meta(61, 0.0, 90, 160)  # unknown fps, every frame: timestamps at 24 fps, as transformers
    plan = plan_video_of("glm4v", m, options=replace(opts, do_sample_frames=False))
    check_same(plan, run_hf(hf, m, frames_of(61, 90, 160), do_sample_frames=False), hf)
    assert plan.placeholder.endswith("<|end_of_image|>2")
    cases = [(dict(do_sample_frames=False), {}), (dict(min_pixels=200_000, max_pixels=400_000),
                                                  {"min_pixels": 200_000, "max_pixels": 400_000}),
             (dict(min_pixels=784, max_pixels=50_000), {"min_pixels": 784, "max_pixels": 50_000})]
    for (o, pixels), (total, src), (h, w) in zip(cases * 3, CLIPS[:3] + CLIPS[3:6] + CLIPS[7:10],
                                                 SIZES * 3):
        kw: dict = {"do_sample_frames": False} if "do_sample_frames" in o else {}
        if pixels:
            kw["size"] = {"shortest_edge": pixels["min_pixels"], "longest_edge": pixels["max_pixels"]}
        plan = plan_video_of("glm4v", meta(total, src, h, w), options=replace(opts, **o))
        check_same(plan, run_hf(hf, meta(total, src, h, w), frames_of(total, h, w), **kw), hf)


def test_sample_frames_port_equals_transformers():
    """glm4v_frame_indices equals Glm4vVideoProcessor.sample_frames, long clips included."""
    from transformers.video_utils import VideoMetadata
    vp = transformers.Glm4vVideoProcessor.from_dict(presets.glm4v.video_configs()["glm4v"])
    rng = np.random.default_rng(7)
    for total, src, dur in [(30, 10.0, 3.0), (30, 10.0, None), (9001, 30.0, 300.03),
                            (9000, 30.0, 300.0), (12000, 29.97, None), (5, 60.0, 0.0833)] + [
            (int(t), float(f), None) for t, f in zip(rng.integers(1, 20000, 40),
                                                       rng.uniform(0.2, 120, 40))]:
        for req in (2.0, 0.5, 3.7):
            md = VideoMetadata(total_num_frames=total, fps=src, duration=dur)
            want = [int(i) for i in vp.sample_frames(md, fps=req)]
            assert glm4v_frame_indices(total, src, dur, req) == want, (total, src, dur, req)


def test_defaults_and_refusals(hf):
    o = presets.video_defaults("glm4v")
    vp = hf.video_processor
    assert (o.min_pixels, o.max_pixels) == (vp.size.shortest_edge, vp.size.longest_edge) == (
        12544, 47_040_000)
    assert (o.fps, o.do_sample_frames, o.num_frames) == (vp.fps, vp.do_sample_frames, None) == (
        2, True, None)
    assert vp.max_duration == 300 and presets.video_pipeline("glm4v") == presets.get("glm4v")
    # transformers ignores num_frames (its sample_frames samples at the fps): refused here
    plan = plan_video_of("glm4v", meta(60, 10.0, 90, 160), per_item=Video("x", num_frames=8))
    assert isinstance(plan.error, ImageError) and "num_frames" in str(plan.error)
    with pytest.raises(ValueError, match="max_duration"):
        presets.glm4v.video_from_config({"max_duration": 60})
    with pytest.raises(ValueError, match="sampling"):
        presets.glm4v.video_from_config({}, sampling="vllm")


# -- pixels on a real clip ------------------------------------------------------------------------
@pytest.mark.parametrize("backend,match", [("reference", "pil"), ("torch", "pil"),
                                           ("torch", "torchvision")])
def test_clip_pixels_equal_video_processor(hf, videos, backend, match):
    """mjpg_avi (30 frames of 160x120 at 10 fps) and vp90_webm (24 frames, 24 fps): to_hf()
    equals the video processor given every decoded frame, bit for bit; the plan equals the
    processor's geometry and prompt."""
    import vlmprep
    from vlmprep.io.video import decode_frames, probe_video
    proc = vlmprep.Processor("glm4v", backend=backend, match=match)
    for name, fps in (("mjpg_avi", None), ("vp90_webm", 7.5)):
        clip = videos.get(name)
        item = Video(clip.path, fps=fps) if fps else clip.path
        batch = proc(videos=[item])
        got = dict(batch.to_hf())
        m = probe_video(clip.path)
        frames = decode_frames(clip.path, range(m.total_num_frames))
        res = run_hf(hf, m, np.asarray(frames), **({"fps": fps} if fps else {}))
        assert not isinstance(res, Exception), res
        idx, out, rep = res
        assert set(got) == {"pixel_values_videos", "video_grid_thw"}
        for k in got:
            assert got[k].dtype == out[k].dtype and got[k].shape == out[k].shape, k
            assert torch.equal(got[k], out[k]), (k, (got[k].float() - out[k].float()).abs().max())
        plan = proc.plan(videos=[item]).videos[0]
        assert plan.frame_indices[:len(idx)] == idx and plan.placeholder == rep
        assert batch.videos.placeholders == [rep] and batch.videos.num_tokens == [plan.num_tokens]


def test_from_pretrained_reads_the_video_config(tmp_path, videos):
    """A checkpoint folder (image + video configs) gives the preset and its video defaults."""
    import json

    from hfref import config

    import vlmprep
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(config("glm4v")))
    vcfg = {**presets.glm4v.video_configs()["glm4v"], "fps": 1}
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps(vcfg))
    proc = vlmprep.Processor.from_pretrained(tmp_path, backend="reference")
    assert proc.pipeline == presets.get("glm4v")
    clip = videos.get("mjpg_avi")  # 3 s at 10 fps: 1 fps -> frames 0, 10, 20 (+ 20)
    assert proc.plan(videos=[clip.path]).videos[0].frame_indices == [0, 10, 20, 20]
