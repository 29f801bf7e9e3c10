"""Videos through the Processor (issue 19, V3a): ``proc(images, videos=[...])``, ``proc.plan(videos=)``,
``batch.videos`` and ``to_hf()``'s video keys, against transformers 5.24's real video processors.

The oracle: each family's transformers video processor given every frame of the clip as decoded by
``vlmprep.io.video.decode_frames`` and its metadata, sampling itself (``do_sample_frames``); vlmprep
decodes only the frames it planned. Pixels are compared with ``torch.equal`` (bit-exact, CPU float32):
transformers' video processors are torchvision-based, and vlmprep runs the same torchvision ops.
"""
from __future__ import annotations

import json
import pickle
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import vlmprep
from vlmprep import ImageError
from vlmprep.io.video import Video, decode_frames, probe_video
from vlmprep.presets import idefics3, internvl, llava_next, qwen, video_defaults

transformers = pytest.importorskip("transformers")
from transformers.video_utils import VideoMetadata  # noqa: E402

CHECKPOINTS = Path(vlmprep.__file__).parent / "presets" / "checkpoints"


def _smolvlm_folder(tmp: Path) -> Path:
    """A SmolVLM2 checkpoint folder: its image config and video config (the one from_pretrained reads)."""
    (tmp / "preprocessor_config.json").write_text((CHECKPOINTS / "smolvlm.json").read_text())
    (tmp / "video_preprocessor_config.json").write_text(json.dumps(idefics3.video_configs()["idefics3"]))
    return tmp


#: case -> (how to make the Processor, the transformers class, its config, per-item fps, the
#: transformers call's sampling kwargs)
CASES = {
    "qwen2-vl_all_frames": ("qwen2-vl", "Qwen2VLVideoProcessor", qwen.video_configs()["qwen2-vl"],
                            None, {"cap_pixels_per_frame": False}),
    "qwen2-vl_fps2": ("qwen2-vl", "Qwen2VLVideoProcessor", qwen.video_configs()["qwen2-vl"], 2.0,
                      {"do_sample_frames": True, "fps": 2.0, "cap_pixels_per_frame": False}),
    "qwen3-vl": ("qwen3-vl", "Qwen3VLVideoProcessor", qwen.video_configs()["qwen3-vl"], None,
                 {"cap_pixels_per_frame": False}),
    "llava-onevision_fps2": ("llava-onevision", "LlavaOnevisionVideoProcessor",
                             llava_next.video_configs()["llava-onevision"], 2.0,
                             {"do_sample_frames": True, "fps": 2.0}),
    "internvl_fps2": ("internvl", "InternVLVideoProcessor", internvl.video_configs()["internvl"], 2.0,
                      {"do_sample_frames": True, "fps": 2.0}),
    "smolvlm": ("smolvlm", "SmolVLMVideoProcessor", idefics3.video_configs()["idefics3"], None,
                {"do_sample_frames": True, "fps": 1, "num_frames": 64}),
}


def _processor(kind: str, tmp_path: Path, **kw) -> vlmprep.Processor:
    if kind == "smolvlm":
        return vlmprep.Processor.from_pretrained(_smolvlm_folder(tmp_path), **kw)
    return vlmprep.Processor(kind, **kw)


def _reference(cls_name: str, cfg: dict, path: Path, call_kw: dict, **more):
    """The transformers video processor's output for every decoded frame of ``path``."""
    meta = probe_video(path)
    frames = decode_frames(path, range(meta.total_num_frames))
    cls = getattr(transformers, cls_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proc = cls.from_dict(dict(cfg))
        return proc(videos=[frames], video_metadata=[VideoMetadata(**meta.to_hf())],
                    return_tensors="pt", **call_kw, **more)


def _assert_same(got: dict, ref) -> None:
    assert set(got) == set(ref.keys()), (sorted(got), sorted(ref.keys()))
    for k in ref.keys():
        assert got[k].dtype == ref[k].dtype, k
        assert got[k].shape == ref[k].shape, (k, got[k].shape, ref[k].shape)
        assert torch.equal(got[k], ref[k]), (k, (got[k].float() - ref[k].float()).abs().max())


@pytest.mark.parametrize("case", sorted(CASES))
def test_pixels_equal_transformers_video_processor(case, videos, tmp_path):
    kind, cls_name, cfg, fps, call_kw = CASES[case]
    clip = videos.get("mjpg_avi")  # 30 frames of 160x120 at 10 fps
    proc = _processor(kind, tmp_path)
    item = Video(clip.path, fps=fps) if fps else clip.path
    batch = proc(videos=[item])
    ref = _reference(cls_name, cfg, clip.path, call_kw)
    _assert_same(dict(batch.to_hf()), ref)
    # plan == processor geometry, from container metadata only
    plan = proc.plan(videos=[item]).videos[0]
    v = batch.videos
    assert v.num_tokens == [plan.num_tokens] and v.num_embeddings == [plan.num_embeddings]
    assert v.grid_thw.tolist() == [list(g) for g in plan.grid_thw]
    assert v.placeholders == [plan.placeholder]
    if "video_grid_thw" in ref:
        assert ref["video_grid_thw"].tolist() == [list(g) for g in plan.grid_thw]
        assert plan.grid_thw[0][0] > 1  # T > 1
        assert v.seqlens == [plan.num_patches] and v.cu_seqlens.tolist() == [0, plan.num_patches]
    else:
        frames = ref["pixel_values_videos" if "pixel_values_videos" in ref else "pixel_values"]
        assert frames.shape[1] == len(plan.frame_indices) == v.num_seqs


def test_other_clip_sizes_and_codecs_qwen(videos):
    """Two more containers / sizes through qwen2-vl (fps sampling) and qwen3-vl (defaults)."""
    for name in ("xvid_avi", "vp80_webm"):
        clip = videos.get(name)
        for kind, cls_name, fps, kw in (
                ("qwen2-vl", "Qwen2VLVideoProcessor", 2.0,
                 {"do_sample_frames": True, "fps": 2.0, "cap_pixels_per_frame": False}),
                ("qwen3-vl", "Qwen3VLVideoProcessor", None, {"cap_pixels_per_frame": False})):
            proc = vlmprep.Processor(kind)
            batch = proc(videos=[Video(clip.path, fps=fps) if fps else clip.path])
            _assert_same(dict(batch.to_hf()), _reference(cls_name, qwen.video_configs()[kind],
                                                         clip.path, kw))


def test_dtypes_bfloat16_and_uint8(videos):
    clip = videos.get("mjpg_avi")
    item = Video(clip.path, fps=2.0)
    f32 = vlmprep.Processor("qwen2-vl")(videos=[item]).videos.pixel_values
    bf16 = vlmprep.Processor("qwen2-vl", dtype="bfloat16")(videos=[item]).videos.pixel_values
    assert bf16.dtype == torch.bfloat16 and torch.equal(bf16, f32.to(torch.bfloat16))
    u8 = vlmprep.Processor("qwen2-vl", dtype="uint8")(videos=[item]).videos.pixel_values
    ref = _reference("Qwen2VLVideoProcessor", qwen.video_configs()["qwen2-vl"], clip.path,
                     {"do_sample_frames": True, "fps": 2.0, "cap_pixels_per_frame": False},
                     do_rescale=False, do_normalize=False)["pixel_values_videos"]
    assert u8.dtype == torch.uint8 and torch.equal(u8.to(ref.dtype), ref)
    tiles = vlmprep.Processor("internvl", dtype="uint8")(videos=[item]).videos.pixel_values
    assert tiles.dtype == torch.uint8 and tiles.shape == (6, 3, 448, 448)


@pytest.mark.parametrize("fused", [True, False])
def test_kernel_paths_and_threads_equal_transformers(fused, videos, monkeypatch, kernels):
    """Both compiled paths of a Qwen video give transformers' pixels on 1 and 2 threads: the fused
    one (backends/video._fused_rows: each temporal group resized band by band straight into its
    rows; the one a qwen2-vl video takes here, checked) and the frames resized first, then
    normalize_patchify over (2, h, w, 3) groups (_kernel_rows)."""
    from vlmprep.backends import video as vx
    from vlmprep.kernels.threads import local_threads
    clip = videos.get("mjpg_avi")
    item = Video(clip.path, fps=2.0)
    proc = vlmprep.Processor("qwen2-vl")
    taken = []
    fuse = vx._fusable
    monkeypatch.setattr(vx, "_fusable", lambda *a: taken.append(fuse(*a)) or (fused and taken[-1]))
    ref = _reference("Qwen2VLVideoProcessor", qwen.video_configs()["qwen2-vl"], clip.path,
                     {"do_sample_frames": True, "fps": 2.0, "cap_pixels_per_frame": False})
    for n in (1, 2):
        with local_threads(n):
            got = proc(videos=[item]).videos.pixel_values
        assert torch.equal(got, ref["pixel_values_videos"]), n
        with local_threads(n):
            bf16 = vlmprep.Processor("qwen2-vl", dtype="bfloat16")(videos=[item]).videos.pixel_values
        assert torch.equal(bf16, got.to(torch.bfloat16)), n
    assert taken and all(taken)  # the fused path applies to this video


@pytest.mark.parametrize("frames, threads, pooled", [(12, 2, True), (6, 2, False), (12, 1, False)])
def test_fused_groups_on_the_pool_equal_transformers(frames, threads, pooled, monkeypatch, kernels, seed):
    """The fused path splits whole temporal groups over the videos' kept pool when there are at
    least two per thread (one wake-up of the other threads per video), else each group's bands.
    Oracle: transformers' Qwen2VLVideoProcessor on the same frames, bit for bit."""
    from vlmprep.backends import base
    from vlmprep.backends import video as vx
    from vlmprep.bench.video import hf_video_processor
    proc = vlmprep.Processor("qwen2-vl")
    rng = np.random.default_rng(seed)
    thwc = torch.from_numpy(rng.integers(0, 256, (frames, 90, 150, 3), dtype=np.uint8))
    plan = proc.plan(videos=[Video(list(thwc.numpy()), source_fps=2.0)]).videos[0]
    assert len(plan.frame_indices) == frames and vx._fusable(plan, proc.pipeline, "bicubic")
    used = []
    real_pool = base.video_pool
    monkeypatch.setattr(base, "video_pool", lambda n: used.append(n) or real_pool(n))
    got = vx.frames_to_rows(thwc, plan, proc.pipeline, "float32", threads)
    assert used == ([threads] if pooled else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = hf_video_processor("qwen2-vl")(videos=[thwc.permute(0, 3, 1, 2)], do_sample_frames=False,
                                              return_tensors="pt")
    assert ref["video_grid_thw"].tolist() == [list(g) for g in plan.grid_thw]
    assert torch.equal(got, ref["pixel_values_videos"])


def test_video_work_never_queues_on_the_image_pool(monkeypatch, kernels):
    """A clip's groups and frames go to a kept pool of their own: a Batcher runs videos beside
    its image batches (serve/videos.py), and a clip's hundreds of tasks queued on the images'
    pool would hold every image request behind them. Oracle: the images' pool stays untouched
    while a 2-thread video runs, and the two pools are distinct."""
    from vlmprep.backends import base
    from vlmprep.kernels.threads import local_threads
    assert base.video_pool(2) is not base.image_pool(2) and base.video_pool(2) is base.video_pool(2)
    monkeypatch.setattr(base, "image_pool", lambda n: pytest.fail("a video used the images' pool"))
    frames = np.random.default_rng(0).integers(0, 256, (12, 60, 90, 3), dtype=np.uint8)
    for kind in ("qwen2-vl", "llava-onevision"):  # groups (fused) and frames (_resize_frames)
        with local_threads(2):
            out = vlmprep.Processor(kind)(videos=[Video(list(frames), source_fps=2.0)])
        assert out.videos.pixel_values.numel() > 0


@pytest.mark.parametrize("kind", ["qwen2-vl", "qwen3-vl", "internvl", "llava-onevision"])
def test_without_kernels_same_pixels(kind, videos, monkeypatch):
    """The op-by-op torch path (no compiled kernels) gives the compiled path's bits, every dtype."""
    from vlmprep.backends import video as vx
    item = Video(videos.get("mjpg_avi").path, fps=2.0)
    for dtype in ("float32", "bfloat16", "uint8"):
        proc = vlmprep.Processor(kind, dtype=dtype)
        fused = proc(videos=[item]).videos.pixel_values
        with monkeypatch.context() as m:
            m.setattr(vx, "_kernels_loaded", lambda: False)
            plain = proc(videos=[item]).videos.pixel_values
        assert fused.dtype == plain.dtype and torch.equal(fused, plain), (kind, dtype)


def test_qwen2_5_vl_second_per_grid_ts(videos):
    clip = videos.get("mjpg_avi")
    proc = vlmprep.Processor("qwen2-vl", video_options=video_defaults("qwen2.5-vl"))
    batch = proc(videos=[Video(clip.path, fps=2.0), clip.path])
    out = batch.to_hf()
    plan = proc.plan(videos=[Video(clip.path, fps=2.0), clip.path]).videos
    md = []
    for p in plan:  # transformers' VideoMetadata.sampled_fps over the sampled (unpadded) frames
        m = VideoMetadata(**probe_video(clip.path).to_hf())
        n = p.num_frames if p.num_frames % 2 == 0 else p.num_frames - 1
        m.frames_indices = p.frame_indices[:n]
        md.append(2 / m.sampled_fps)
    assert out["second_per_grid_ts"].dtype == torch.float32
    assert out["second_per_grid_ts"].tolist() == pytest.approx(md, rel=1e-6)
    assert "second_per_grid_ts" not in vlmprep.Processor("qwen2-vl")(videos=[clip.path]).to_hf()


def test_mixed_images_and_videos(videos, seed):
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (90, 130, 3), dtype=np.uint8), rng.integers(0, 256, (64, 64, 3),
                                                                              dtype=np.uint8)]
    clips = [Video(videos.get("mjpg_avi").path, fps=2.0), videos.get("vp90_webm").path]
    for kind in ("qwen2-vl", "internvl"):
        proc = vlmprep.Processor(kind)
        both = proc(imgs, videos=clips)
        only_i, only_v = proc(imgs), proc(videos=clips)
        for f in ("pixel_values", "cu_seqlens", "grid_thw", "image_index"):
            assert torch.equal(getattr(both, f), getattr(only_i, f))
            assert torch.equal(getattr(both.videos, f), getattr(only_v.videos, f))
        assert both.num_tokens == only_i.num_tokens and both.videos.num_tokens == only_v.videos.num_tokens
        assert only_i.videos is None and only_v.num_images == 0
        hf, hi, hv = both.to_hf(), only_i.to_hf(), only_v.to_hf()
        assert set(hf) == set(hi) | set(hv) and not set(hi) & set(hv)
        plan = proc.plan(imgs, videos=clips)
        assert plan.num_tokens == both.num_tokens
        assert [p.num_tokens for p in plan.videos] == both.videos.num_tokens
    # images-only calls are unchanged: no videos, same keys
    assert vlmprep.Processor("qwen2-vl")(imgs).videos is None


def test_smolvlm_images_and_videos_share_keys(videos, tmp_path):
    proc = _processor("smolvlm", tmp_path)
    img = np.zeros((40, 50, 3), np.uint8)
    batch = proc([img], videos=[videos.get("mjpg_avi").path])
    with pytest.raises(ValueError, match="separate calls"):
        batch.to_hf()


def test_frame_counts_differ_give_a_list(videos):
    """LLaVA-OneVision / InternVL: the processor cannot stack videos of different lengths."""
    clip = videos.get("mjpg_avi")
    proc = vlmprep.Processor("llava-onevision")
    out = proc(videos=[Video(clip.path, num_frames=3), Video(clip.path, num_frames=5)]).to_hf()
    pv = out["pixel_values_videos"]
    assert isinstance(pv, list) and [t.shape[0] for t in pv] == [3, 5]


@pytest.mark.parametrize("kind", ["qwen2-vl", "llava-onevision"])
def test_bad_videos_isolated(kind, videos, bad_videos):
    good = videos.get("mjpg_avi").path
    bad = ["garbage.mp4", "zero_frames.avi", "truncated.avi", "absurd_count.avi"]
    items = [Video(good, fps=2.0)] + [bad_videos[b].path for b in bad] + [Video(good, num_frames=4)]
    proc = vlmprep.Processor(kind, errors="skip")
    batch = proc(videos=items)
    v = batch.videos
    assert sorted(v.errors) == [1, 2, 3, 4]
    for i, b in enumerate(bad, 1):
        assert isinstance(v.errors[i], ImageError) and v.errors[i].index == i
        assert b in str(v.errors[i]), str(v.errors[i])  # names the item
        assert str(v.errors[i]).startswith(f"video {i} "), str(v.errors[i])  # not "image i"
        assert str(pickle.loads(pickle.dumps(v.errors[i]))) == str(v.errors[i])  # worker processes
        assert v.num_tokens[i] == 0
    alone = [proc(videos=[items[0]]).videos, proc(videos=[items[-1]]).videos]
    assert torch.equal(v.pixel_values, torch.cat([a.pixel_values for a in alone]))
    assert v.num_tokens[0] == alone[0].num_tokens[0] and v.num_tokens[5] == alone[1].num_tokens[0]
    assert v.image_index.unique().tolist() == [0, 5]
    parts = list(v.split())
    assert len(parts) == 6 and parts[1].errors and parts[5].num_tokens == alone[1].num_tokens
    assert str(parts[1].errors[0]).startswith("video 0 ")  # re-indexed within the part
    # plan: the header-level failures are known before decoding (truncated.avi fails at decode)
    planned = vlmprep.Processor(kind, errors="skip").plan(videos=items).videos
    assert [p.error is not None for p in planned] == [False, True, True, False, True, False]
    assert str(planned[1].error).startswith("video 1 ")
    with pytest.raises(ImageError) as e:
        vlmprep.Processor(kind)(videos=items)
    assert e.value.index == 1 and "garbage.mp4" in str(e.value)
    with pytest.raises(ImageError) as e:  # a decode-time failure raises too, naming the item
        vlmprep.Processor(kind)(videos=[items[0], bad_videos["truncated.avi"].path])
    assert e.value.index == 1 and "truncated.avi" in str(e.value)
    assert str(e.value).startswith("video 1 ") and e.value.item == "video"


def test_frame_sequences_and_concat(videos):
    case = videos.get("ffv1_mkv")  # lossless: the decoded frames are the written ones
    proc = vlmprep.Processor("qwen3-vl")
    from_file = proc(videos=[case.path]).videos
    from_array = proc(videos=[Video(np.ascontiguousarray(case.frames), source_fps=case.fps)]).videos
    assert torch.equal(from_file.pixel_values, from_array.pixel_values)
    joined = vlmprep.pack.concat([proc([np.zeros((32, 32, 3), np.uint8)], videos=[case.path]),
                                  proc(videos=[case.path])])
    assert joined.num_images == 1 and joined.videos is not None and joined.videos.num_images == 2
    assert torch.equal(joined.videos.pixel_values, torch.cat([from_file.pixel_values] * 2))
    assert joined.videos.image_index.tolist() == [0, 1]


def test_refusals():
    with pytest.raises(ValueError, match="video rule"):
        vlmprep.Processor("siglip")(videos=[np.zeros((4, 32, 32, 3), np.uint8)])
    with pytest.raises(TypeError, match="list of videos"):
        vlmprep.Processor("qwen2-vl")(videos="clip.mp4")
    with pytest.raises(TypeError, match="video_options"):
        vlmprep.Processor("qwen2-vl", video_options={"fps": 2})
    with pytest.raises(ValueError, match="decoder"):
        vlmprep.Processor("qwen2-vl", video_decoder="nvdec")
    p = vlmprep.Processor("qwen2-vl", video_options=replace(video_defaults("qwen2-vl"), fps=1.0,
                                                            do_sample_frames=True))
    assert p.clone(errors="skip").video_options == p.video_options
    assert p.clone(max_pixels=1_003_520).video_options == p.video_options
    assert p.clone(pipeline="internvl").video_options == video_defaults("internvl")


def _word_tokenizer(special: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "a": 2, "b": 3}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]")
    tok.add_tokens(special, special_tokens=True)
    return tok


def test_qwen2_5_vl_full_processor_mixed_batch(videos, tmp_path, seed):
    """The real Qwen2_5_VLProcessor (a tiny tokenizer; torchvision image processor) on an image and
    a video, once per video sampling (fps 2, 6 frames): every pixel key bit for bit, the grids,
    second_per_grid_ts and the video token counts equal one mixed vlmprep call's to_hf()."""
    from tests.hfref import config, hf_processor
    image_cfg = {**config("qwen2-vl"), "processor_class": "Qwen2_5_VLProcessor"}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(image_cfg))
    proc = vlmprep.Processor.from_pretrained(tmp_path, match="torchvision")  # image bits too
    assert proc.video_options.family == "qwen2.5-vl"
    clip = videos.get("mjpg_avi")
    items = [Video(clip.path, fps=2.0), Video(clip.path, num_frames=6)]
    img = np.random.default_rng(seed).integers(0, 256, (100, 150, 3), dtype=np.uint8)
    ours = proc([img], videos=items)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vp = transformers.AutoVideoProcessor.from_pretrained(str(tmp_path))
        special = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
        ref_proc = transformers.Qwen2_5_VLProcessor(
            image_processor=hf_processor("qwen2-vl", "torchvision"), tokenizer=_word_tokenizer(special),
            video_processor=vp)
        meta = probe_video(clip.path)
        frames = decode_frames(clip.path, range(meta.total_num_frames))
        text = "a <|vision_start|><|image_pad|><|vision_end|> b <|vision_start|><|video_pad|><|vision_end|>"
        # the two videos sample differently (fps 2, 6 frames): one processor call per video
        outs = [ref_proc(text=[text], images=[img], videos=[frames],
                         video_metadata=[VideoMetadata(**meta.to_hf())], do_sample_frames=True,
                         cap_pixels_per_frame=False, return_tensors="pt", **kw)
                for kw in ({"fps": 2.0}, {"num_frames": 6})]
    hf = ours.to_hf()
    keys = {"pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw",
            "second_per_grid_ts"}
    assert set(hf) == keys and keys <= set(outs[0].keys())
    for k in ("pixel_values", "image_grid_thw"):
        assert torch.equal(hf[k], outs[0][k])
    assert torch.equal(hf["pixel_values_videos"],
                       torch.cat([o["pixel_values_videos"] for o in outs]))
    assert torch.equal(hf["video_grid_thw"], torch.cat([o["video_grid_thw"] for o in outs]))
    assert torch.equal(hf["second_per_grid_ts"],
                       torch.cat([torch.as_tensor(o["second_per_grid_ts"]) for o in outs]).float())
    tok = ref_proc.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert [int((o["input_ids"] == tok).sum()) for o in outs] == ours.videos.num_tokens


# -- backends: videos run on the Processor's backend (its registry.VIDEO lowering) --------------
#: (backend, match) of every backend that runs videos; each must give the pixels the tests above
#: compare with (transformers' video processor, bit for bit), every dtype the same bits.
VIDEO_BACKENDS = [("reference", "pil"), ("torch", "pil"), ("torch", "torchvision")]


@pytest.mark.parametrize("case", ["qwen2-vl_fps2", "qwen3-vl", "internvl_fps2", "smolvlm"])
def test_every_video_backend_gives_transformers_pixels(case, videos, tmp_path):
    from vlmprep.backends import registry
    from vlmprep.backends import video as vx
    kind, cls_name, cfg, fps, call_kw = CASES[case]
    clip = videos.get("mjpg_avi")
    item = Video(clip.path, fps=fps) if fps else clip.path
    ref = _reference(cls_name, cfg, clip.path, call_kw)
    by_dtype: dict[str, torch.Tensor] = {}
    for backend, match in VIDEO_BACKENDS:
        proc = _processor(kind, tmp_path, backend=backend, match=match)
        key = type(proc._backend).name
        assert registry.get_lowering(key, registry.VIDEO) is vx.run_video  # the shared lowering
        _assert_same(dict(proc(videos=[item]).to_hf()), ref)
        for dtype in ("bfloat16", "uint8"):
            got = proc.clone(dtype=dtype)(videos=[item]).videos.pixel_values
            want = by_dtype.setdefault(dtype, got)
            assert got.dtype == want.dtype and torch.equal(got, want), (backend, match, dtype)
        assert proc._video_run is vx.run_video and pickle.loads(pickle.dumps(proc))._video_run \
            is vx.run_video


def _refused(proc: vlmprep.Processor, item) -> str:
    with pytest.raises(ValueError) as e:
        proc(videos=[item])
    return str(e.value)


def test_a_backend_without_video_refuses_naming_those_with(videos, monkeypatch):
    """A backend with no video lowering refuses videos at the first video call (before any image
    runs), expected / got / fix naming the backends that run videos; never another executor."""
    from vlmprep.backends import registry
    from vlmprep.backends import video as vx
    item = Video(videos.get("mjpg_avi").path, fps=2.0)
    proc = vlmprep.Processor("qwen2-vl", backend="reference")
    monkeypatch.delitem(registry._LOWERINGS, ("reference", registry.VIDEO))
    msg = _refused(proc, item)
    assert msg.startswith("videos on backend 'reference': expected a backend that runs videos, "
                          "one of ['torch']"), msg
    assert "got backend='reference'" in msg and "fix: process videos with a Processor(..., " \
        "backend='torch')" in msg
    ran = []
    monkeypatch.setattr(proc, "execute", lambda *a: ran.append(a))
    with pytest.raises(ValueError, match="runs videos"):
        proc([np.zeros((32, 32, 3), np.uint8)], videos=[item])
    assert not ran  # the images did not run either
    assert proc.plan(videos=[item]).videos[0].ok  # planning needs no backend
    assert vx.video_backends() == ["torch"]


@pytest.mark.skipif("dali" not in vlmprep.backends.available(), reason="DALI is not installed")
def test_dali_refuses_videos(videos):
    item = Video(videos.get("mjpg_avi").path, fps=2.0)
    proc = vlmprep.Processor("qwen2-vl", backend="dali")
    msg = _refused(proc, item)
    assert msg.startswith("videos on backend 'dali': expected a backend that runs videos, one of "
                          "['torch', 'reference']"), msg
    assert "got backend='dali', which has no video lowering" in msg and "fix:" in msg
    with pytest.raises(ValueError, match="runs videos"):
        proc.execute_videos(*proc.prepare_videos([item]))
    assert proc.plan(videos=[item]).videos[0].ok


def test_auto_picks_a_backend_that_runs_videos():
    """``backend="auto"``: the videos' lowering is the image backend's when it has one, else the
    first usable backend's that has one (dali picked for the images on a GPU: torch)."""
    from vlmprep.backends import registry
    from vlmprep.backends import video as vx
    assert registry.resolve_auto("cpu", op=registry.VIDEO) == "torch"
    assert vx.lowering_for("auto", "dali", "dali", "cpu", "pil") is vx.run_video
    with pytest.raises(ValueError, match="backend='dali'"):
        vx.lowering_for("dali", "dali", "dali", "cpu", "pil")
    proc = vlmprep.Processor("qwen2-vl")
    assert proc.backend_name == "torch" and proc._video_lowering() is vx.run_video
    assert proc.clone(errors="skip")._backend_asked == "auto"
