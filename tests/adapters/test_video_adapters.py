"""Video items through the adapters (issue 19): vit.encode, transformers.model_inputs, vLLM, SGLang.

Oracles:
- transformers: the real Qwen2VLProcessor (checkpoint video config via AutoVideoProcessor, a
  word-level tokenizer holding the special tokens) on the same frames and text: model_inputs must
  give the same keys and equal tensors; Qwen vision towers (tiny, random weights) run on the
  transformers video processor's ``pixel_values_videos`` / ``video_grid_thw`` as its
  ``get_video_features`` does, compared with ``vit.encode(tower, batch.videos)`` for equality.
- vLLM 0.33 / SGLang 0.5.23 (not installed here): the video input schemas read from their source,
  written below as constants with the file they come from (schema level only).
Frames are random uint8 frame sequences (no decode), small so the file is fast.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

pytestmark = pytest.mark.hf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vlmprep  # noqa: E402
from vlmprep.adapters import sglang as sg  # noqa: E402
from vlmprep.adapters import transformers as tfa  # noqa: E402
from vlmprep.adapters import vit  # noqa: E402
from vlmprep.adapters import vllm as vl  # noqa: E402
from vlmprep.bench.video import hf_video_processor  # noqa: E402
from vlmprep.io.video import Video  # noqa: E402
from vlmprep.presets import video_defaults  # noqa: E402

# -- schemas the released engines accept for videos ----------------------------------------------
# vLLM 0.33.0 vllm/model_executor/models/qwen2_vl.py Qwen2VLMultiModalDataParser.embedding_fields
# ["video"] = {"video_embeds": values, "video_grid_thw": metadata}; qwen3_vl.py adds
# "timestamps": metadata (one list per video, len == grid t: qwen3_vl.py get_video_replacement).
VLLM_QWEN_VIDEO_EMBEDS = {"video_embeds": (2, "float"), "video_grid_thw": (2, "int64")}
# SGLang 0.5.23 sglang/srt/multimodal/processors/base_processor.py ATTR_NAME_TO_MODALITY (video
# rows): the keys a processor_output dict may carry for videos.
SGLANG_VIDEO_KEYS = {"pixel_values_videos", "second_per_grid_ts", "video_grid_thw"}

QWEN_SPECIAL = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"
IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


def _frames(t: int, h: int, w: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (t, h, w, 3), dtype=np.uint8)


def _tchw(frames: np.ndarray) -> "torch.Tensor":
    return torch.from_numpy(frames).permute(0, 3, 1, 2)


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"[UNK]": 0, "[PAD]": 1, "describe": 2, "a": 3, "b": 4}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]")
    tok.add_tokens(QWEN_SPECIAL, special_tokens=True)
    return tok


def _qwen2_processor():
    from tests.hfref import hf_processor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vp = hf_video_processor("qwen2-vl")  # AutoVideoProcessor on the checkpoint's config
    return transformers.Qwen2VLProcessor(image_processor=hf_processor("qwen2-vl", "pil"),
                                         tokenizer=_tokenizer(), video_processor=vp)


def _qwen_batch(frames_list, images=(), preset="qwen2-vl", fps=2.0, **kw):
    proc = vlmprep.Processor(preset, backend="reference", **kw)
    return proc(list(images), videos=[Video(f, source_fps=fps) for f in frames_list])


def _check_schema(mm: dict, schema: dict):
    for k, (ndim, kinds) in schema.items():
        v = mm[k]
        assert torch.is_tensor(v) and v.ndim == ndim, (k, getattr(v, "shape", v))
        kind = "float" if v.is_floating_point() else str(v.dtype).replace("torch.", "")
        assert kind in kinds.split("|"), (k, v.dtype)


# -- transformers ---------------------------------------------------------------------------------
def test_model_inputs_image_and_videos_equal_qwen2vl_processor(seed):
    proc = _qwen2_processor()
    vids = [_frames(6, 56, 84, seed), _frames(4, 84, 56, seed + 1)]
    img = _frames(1, 56, 84, seed + 2)[0]
    texts = [f"describe {IMAGE} a {VIDEO}", f"{VIDEO} b"]
    from PIL import Image
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = proc(text=texts, images=[Image.fromarray(img)], videos=[_tchw(v) for v in vids],
                   return_tensors="pt", padding=True)
    batch = _qwen_batch(vids, [img])
    got = tfa.model_inputs(proc, texts, batch)
    assert sorted(got) == sorted(ref)
    for k in ref:
        assert torch.equal(torch.as_tensor(got[k]), torch.as_tensor(ref[k])), k
    assert int((got["input_ids"] == proc.video_token_id).sum()) == sum(batch.videos.num_tokens)
    assert (torch.as_tensor(got["mm_token_type_ids"]) == 2).sum() == sum(batch.videos.num_tokens)
    # compact image rows (videos stay full): the same inputs, the images' rows expanded
    compact = tfa.model_inputs(proc, texts, _qwen_batch(vids, [img], row_form="compact"))
    assert sorted(compact) == sorted(got)
    for k in got:
        assert torch.equal(torch.as_tensor(compact[k]), torch.as_tensor(got[k])), k
    # videos only, one text
    only = _qwen_batch(vids[:1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref1 = proc(text=[f"a {VIDEO}"], videos=[_tchw(vids[0])], return_tensors="pt")
    got1 = tfa.model_inputs(proc, [f"a {VIDEO}"], only)
    assert sorted(got1) == sorted(ref1)
    for k in ref1:
        assert torch.equal(torch.as_tensor(got1[k]), torch.as_tensor(ref1[k])), k


def test_model_inputs_qwen3vl_video_with_timestamps_equals_processor(seed):
    """Qwen3-VL samples itself (checkpoint: 2 fps) and writes '<t seconds>' per temporal group:
    the real Qwen3VLProcessor given every frame and its metadata == model_inputs on vlmprep's
    batch (which decoded only the sampled frames)."""
    from transformers.video_utils import VideoMetadata

    from tests.hfref import hf_processor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proc = transformers.Qwen3VLProcessor(image_processor=hf_processor("qwen3-vl", "pil"),
                                             tokenizer=_tokenizer(),
                                             video_processor=hf_video_processor("qwen3-vl"))
        f = _frames(12, 64, 96, seed)
        md = VideoMetadata(total_num_frames=12, fps=4.0, frames_indices=list(range(12)),
                           height=64, width=96)
        texts = [f"describe {VIDEO}"]
        ref = proc(text=texts, videos=[_tchw(f)], video_metadata=[md], return_tensors="pt")
    b = _qwen_batch([f], preset="qwen3-vl", fps=4.0)
    got = tfa.model_inputs(proc, texts, b)
    assert sorted(got) == sorted(ref)
    for k in ref:
        assert torch.equal(torch.as_tensor(got[k]), torch.as_tensor(ref[k])), k
    # frames 0 and 2 of a 4 fps clip: mean 0.25 s, written "<0.2 seconds>" (f"{0.25:.1f}")
    assert b.videos.placeholders[0].startswith("<0.2 seconds><|vision_start|>")


def test_expand_video_prompts_counts_and_plans(seed):
    vids = [_frames(4, 56, 56, seed), _frames(4, 56, 84, seed + 1)]
    batch = _qwen_batch(vids)
    plan = vlmprep.Processor("qwen2-vl").plan(videos=[Video(f, source_fps=2.0) for f in vids])
    out, counts = tfa.expand_video_prompts([f"a {VIDEO}", f"{VIDEO}"], batch)
    assert counts == [1, 1]
    assert out == tfa.expand_video_prompts([f"a {VIDEO}", f"{VIDEO}"], plan)[0]
    assert out[0] == f"a <|vision_start|>{batch.videos.placeholders[0]}<|vision_end|>"
    with pytest.raises(ValueError, match="expected 2 '<\\|video_pad\\|>' tokens"):
        tfa.expand_video_prompts([f"a {VIDEO}"], batch)
    with pytest.raises(ValueError, match="its .videos part"):
        tfa.model_inputs(_tokenizer(), [VIDEO, VIDEO], batch.videos)


def _word_tokenizer(special: list[str], **kw):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "describe": 2, "a": 3},
                                    unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", **kw)
    if special:
        tok.add_tokens(special, special_tokens=True)
    return tok


def _video_processor(module: str, cls: str, configs: dict, family: str):
    import importlib
    vp = getattr(importlib.import_module(f"transformers.models.{module}"), cls)
    return vp(**{k: v for k, v in configs[family].items()
                 if k not in ("video_processor_type", "processor_class")})


def _internvl_processor():
    from tests.hfref import hf_processor
    from vlmprep.presets import internvl
    tok = _word_tokenizer([], extra_special_tokens={
        "start_image_token": "<img>", "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"})
    vp = _video_processor("internvl.video_processing_internvl", "InternVLVideoProcessor",
                          internvl.video_configs(), "internvl")
    return transformers.InternVLProcessor(image_processor=hf_processor("internvl", "pil"),
                                          tokenizer=tok, video_processor=vp, image_seq_length=256)


def _onevision_processor():
    from tests.hfref import hf_processor
    from vlmprep.presets import llava_next
    vp = _video_processor("llava_onevision.video_processing_llava_onevision",
                          "LlavaOnevisionVideoProcessor", llava_next.video_configs(),
                          "llava-onevision")
    return transformers.LlavaOnevisionProcessor(
        image_processor=hf_processor("llava-onevision", "pil"),
        tokenizer=_word_tokenizer(["<image>", "<video>"]), video_processor=vp,
        num_image_tokens=729, vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9")


@pytest.mark.parametrize("preset, image_token, hw", [
    ("internvl", "<IMG_CONTEXT>", (448, 448)), ("llava-onevision", "<image>", (384, 384))])
def test_model_inputs_tile_families_image_and_video_equal_processor(preset, image_token, hw,
                                                                     seed):
    """The real InternVLProcessor / LlavaOnevisionProcessor (checkpoint video configs, every frame:
    the checkpoints' do_sample_frames is off) on an image and a video, in both prompt orders:
    InternVL merges tiles and frames into one pixel_values in prompt order (model_inputs too)."""
    from PIL import Image
    proc = _internvl_processor() if preset == "internvl" else _onevision_processor()
    img = _frames(1, *hw, seed)[0]
    vid = _frames(3, 64, 96, seed + 1)
    batch = vlmprep.Processor(preset, backend="reference")(
        [img], videos=[Video(vid, source_fps=1.0)])
    for text in (f"<video> a {image_token}", f"{image_token} a <video>"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = proc(text=[text], images=[Image.fromarray(img)], videos=[_tchw(vid)],
                       return_tensors="pt")
        got = tfa.model_inputs(proc, [text], batch)
        assert sorted(got) == sorted(ref), (sorted(got), sorted(ref))
        for k in ref:
            assert torch.equal(torch.as_tensor(got[k]), torch.as_tensor(ref[k])), (text, k)


def test_model_inputs_smolvlm_video_equals_processor(seed, tmp_path):
    """SmolVLM2 (a checkpoint folder: its image config + video config): the real SmolVLMProcessor
    sampling the video itself (fps 1 x duration) == model_inputs (intro text with the frame
    timestamps, pixel_values + pixel_attention_mask)."""
    pytest.importorskip("num2words")  # SmolVLMProcessor requires it
    import json
    from pathlib import Path

    from transformers.video_utils import VideoMetadata

    from tests.hfref import hf_processor
    from vlmprep.presets import idefics3
    ckpt = Path(vlmprep.__file__).parent / "presets" / "checkpoints" / "smolvlm.json"
    (tmp_path / "preprocessor_config.json").write_text(ckpt.read_text())
    (tmp_path / "video_preprocessor_config.json").write_text(
        json.dumps(idefics3.video_configs()["idefics3"]))
    tok = _word_tokenizer(["<fake_token_around_image>", "<image>", "<global-img>",
                           "<end_of_utterance>", "<video>"]
                          + [f"<row_{i}_col_{j}>" for i in range(1, 5) for j in range(1, 5)])
    vp = _video_processor("smolvlm.video_processing_smolvlm", "SmolVLMVideoProcessor",
                          idefics3.video_configs(), "idefics3")
    proc = transformers.SmolVLMProcessor(image_processor=hf_processor("smolvlm", "pil"),
                                         tokenizer=tok, video_processor=vp, image_seq_len=64)
    f = _frames(8, 64, 96, seed)
    md = VideoMetadata(total_num_frames=8, fps=2.0, duration=4.0, frames_indices=list(range(8)),
                       height=64, width=96)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = proc(text=["describe <video>"], videos=[_tchw(f)], video_metadata=[md],
                   return_tensors="pt")
    batch = vlmprep.Processor.from_pretrained(tmp_path, backend="reference")(
        [], videos=[Video(f, source_fps=2.0)])
    got = tfa.model_inputs(proc, ["describe <video>"], batch)
    assert sorted(got) == sorted(ref)
    for k in ref:
        assert torch.equal(torch.as_tensor(got[k]), torch.as_tensor(ref[k])), k
    assert ref["pixel_values"].shape[:2] == (1, 4)  # 4 s at 1 fps


# -- vit.encode -----------------------------------------------------------------------------------
def _qwen_tower(name):
    torch.manual_seed(0)
    if name == "qwen2-vl":
        from transformers.models.qwen2_vl.modeling_qwen2_vl import (
            Qwen2VisionTransformerPretrainedModel,
        )
        cfg = transformers.Qwen2VLVisionConfig(depth=1, embed_dim=32, hidden_size=48, num_heads=2,
                                               mlp_ratio=2, patch_size=14, temporal_patch_size=2,
                                               spatial_merge_size=2)
        return Qwen2VisionTransformerPretrainedModel(cfg).eval()
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        Qwen2_5_VisionTransformerPretrainedModel,
    )
    cfg = transformers.Qwen2_5_VLVisionConfig(depth=2, hidden_size=32, out_hidden_size=48,
                                              intermediate_size=64, num_heads=2, window_size=56,
                                              fullatt_block_indexes=[1])
    return Qwen2_5_VisionTransformerPretrainedModel(cfg).eval()


@pytest.mark.parametrize("name", ["qwen2-vl", "qwen2.5-vl"])
def test_vit_encode_videos_equal_get_video_features(name, seed):
    """vit.encode(tower, batch.videos) == the tower on the transformers video processor's output
    (what Qwen2VLModel.get_video_features runs), split per video; t > 1 grids, two sizes."""
    vids = [_frames(6, 56, 112, seed), _frames(4, 112, 56, seed + 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_in = hf_video_processor("qwen2-vl")(videos=[_tchw(v) for v in vids],
                                                return_tensors="pt")
    batch = _qwen_batch(vids)
    v = batch.videos
    assert torch.equal(v.pixel_values, ref_in["pixel_values_videos"])  # the oracle's own input
    assert torch.equal(v.grid_thw, ref_in["video_grid_thw"]) and v.grid_thw[:, 0].tolist() == [3, 2]
    tower = _qwen_tower(name)
    with torch.no_grad():
        ref = tower(ref_in["pixel_values_videos"], grid_thw=ref_in["video_grid_thw"])
        got = vit.encode(tower, v)
    sizes = (ref_in["video_grid_thw"].prod(-1) // 4).tolist()
    assert len(got) == 2 and sizes == v.num_embeddings
    for g, r in zip(got, ref.pooler_output.split(sizes)):
        assert g.shape == r.shape and torch.equal(g, r)
    with pytest.raises(ValueError, match="call encode\\(vision_tower, batch.videos\\)"):
        vit.encode(tower, batch)  # an image batch with 0 images and 2 videos
    # A compact Processor's videos keep full rows (their frames differ): the same embeddings.
    comp = _qwen_batch(vids, row_form="compact")
    assert comp.videos.row_form == "full" and torch.equal(comp.videos.pixel_values, v.pixel_values)
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(vit.encode(tower, comp.videos), got))


def test_vit_encode_video_frames_on_a_tile_tower(seed):
    """InternVL: a video's frames are tiles; encode gives (frames, L, D) per video, the tower's
    output on the to_hf frames."""
    cfg = transformers.InternVLVisionConfig(hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=1, num_attention_heads=2)
    torch.manual_seed(0)
    tower = transformers.InternVLVisionModel(cfg).eval()
    vids = [_frames(2, 64, 96, seed), _frames(3, 96, 64, seed + 1)]
    batch = vlmprep.Processor("internvl", backend="reference")(
        [], videos=[Video(f, source_fps=1.0) for f in vids])
    frames = batch.videos.to_hf()["pixel_values_videos"]  # a list: 2 and 3 frames
    with torch.no_grad():
        got = vit.encode(tower, batch.videos)
        for g, f in zip(got, frames):
            ref = tower(pixel_values=f).last_hidden_state
            assert g.shape == ref.shape and torch.equal(g, ref)
    assert [g.shape[0] for g in got] == [len(f) for f in frames]


# -- vLLM -----------------------------------------------------------------------------------------
def test_vllm_video_embeds_qwen2(seed):
    vids = [_frames(6, 56, 84, seed), _frames(4, 84, 56, seed + 1)]
    img = _frames(1, 56, 84, seed + 2)[0]
    b = _qwen_batch(vids, [img])
    rows = b.videos.num_embeddings
    per = [torch.randn(n, 32) for n in rows]
    img_e = torch.randn(b.num_embeddings[0], 32)
    prompt = f"{IMAGE} a {VIDEO} b {VIDEO}"
    out = vl.prompt_inputs(prompt, b, embeds=[img_e], video_embeds=per)
    mm = out["multi_modal_data"]
    assert set(mm) == {"image", "video"} and out["prompt"] == prompt
    _check_schema(mm["video"], VLLM_QWEN_VIDEO_EMBEDS)
    assert set(mm["video"]) == set(VLLM_QWEN_VIDEO_EMBEDS)
    assert torch.equal(mm["video"]["video_embeds"], torch.cat(per))
    # vLLM's split sizes: grid.prod // merge**2 per video
    assert (mm["video"]["video_grid_thw"].prod(-1) // 4).tolist() == rows
    assert torch.equal(mm["image"]["image_embeds"], img_e)
    # videos only: no image entry
    bv = _qwen_batch(vids)
    only = vl.prompt_inputs(f"{VIDEO} {VIDEO}", bv, video_embeds=torch.cat(per))
    assert set(only["multi_modal_data"]) == {"video"}
    # the PR #50160 pixel form, only when asked
    px = vl.prompt_inputs(f"{VIDEO} {VIDEO}", bv, processed_pixels=True)["multi_modal_data"]
    assert torch.equal(px["video"]["pixel_values_videos"], bv.videos.pixel_values)
    with pytest.raises(ValueError, match="video_embeds: expected the videos' embeddings"):
        vl.prompt_inputs(f"{VIDEO} {VIDEO}", bv)
    with pytest.raises(ValueError, match="prompt video placeholders: expected 2"):
        vl.prompt_inputs(f"{VIDEO}", bv, video_embeds=per)
    with pytest.raises(ValueError, match="embeds: expected shape"):
        vl.prompt_inputs(f"{VIDEO} {VIDEO}", bv, video_embeds=torch.randn(sum(rows) + 1, 32))
    with pytest.raises(ValueError, match="video_embeds: expected a batch with videos"):
        vl.prompt_inputs(IMAGE, _qwen_batch([], [img]), embeds=[img_e], video_embeds=per)
    with pytest.raises(ValueError, match="videos: expected a batch of images only"):
        vl.prompt_inputs_per_image(IMAGE, b, [img_e])
    with pytest.raises(ValueError, match="batch: expected the Processor's batch"):
        vl.prompt_inputs(f"{VIDEO} {VIDEO}", bv.videos, video_embeds=per)


def test_vllm_video_qwen3_timestamps(seed):
    """Qwen3-VL: vLLM requires ``timestamps`` (one per temporal group) and builds the
    ``<t seconds>`` text from them: vLLM's _calculate_timestamps on the sampled indices."""
    f = _frames(8, 64, 96, seed)
    b = _qwen_batch([f], preset="qwen3-vl", fps=4.0)
    (plan,) = b.videos.video_plans
    idx = plan.frame_indices
    want = [(idx[i] / 4.0 + idx[i + 1] / 4.0) / 2 for i in range(0, len(idx), 2)]
    with pytest.raises(ValueError, match="hidden_size: expected the width"):  # no deepstack width
        vl.prompt_inputs(VIDEO, b, video_embeds=torch.randn(b.videos.num_embeddings[0], 32))
    mm = vl.prompt_inputs(VIDEO, b, video_embeds=torch.randn(b.videos.num_embeddings[0], 128),
                          hidden_size=128)  # merger output + 3 deepstack levels
    item = mm["multi_modal_data"]["video"]
    assert item["timestamps"] == [pytest.approx(want)]
    assert len(item["timestamps"][0]) == int(item["video_grid_thw"][0, 0])
    # the same text vLLM writes (get_video_repl: f"<{t:.1f} seconds>") is in our placeholder
    assert all(f"<{t:.1f} seconds>" in plan.placeholder for t in want)


def test_vllm_video_refusals(seed):
    f = _frames(4, 56, 56, seed)
    # Qwen2.5-VL: second_per_grid_ts != 1.0 cannot reach vLLM through embeddings
    opts = video_defaults("qwen2.5-vl")
    b = _qwen_batch([f], fps=4.0, video_options=opts)
    assert b.videos.video_plans[0].second_per_grid_ts == 0.5
    e = torch.randn(b.videos.num_embeddings[0], 32)
    with pytest.raises(ValueError, match="second_per_grid_ts: expected 1.0"):
        vl.prompt_inputs(VIDEO, b, video_embeds=e)
    ok = _qwen_batch([f], fps=2.0, video_options=opts)
    assert vl.prompt_inputs(VIDEO, ok, video_embeds=e)["multi_modal_data"]["video"]
    for preset, why in (("llava-onevision", "reads only pixel_values_videos"),
                        ("internvl", "video_num_patches")):
        vb = vlmprep.Processor(preset, backend="reference")(
            [], videos=[Video(_frames(2, 64, 64, seed), source_fps=1.0)])
        with pytest.raises(ValueError, match=why):
            vl.prompt_inputs("<video>", vb, video_embeds=torch.randn(10, 32))


# -- SGLang ---------------------------------------------------------------------------------------
def test_sglang_processor_output_carries_video_keys(seed):
    proc = _qwen2_processor()
    vids = [_frames(6, 56, 84, seed)]
    img = _frames(1, 56, 84, seed + 1)[0]
    b = _qwen_batch(vids, [img])
    ids = tfa.model_inputs(proc, [f"{IMAGE} a {VIDEO}"], b)["input_ids"]
    item = sg.processor_output(b, ids, image_token_id=proc.image_token_id,
                               video_token_id=proc.video_token_id)
    video_keys = {k for k in item if "video" in k or k == "second_per_grid_ts"}
    assert video_keys and video_keys <= SGLANG_VIDEO_KEYS
    assert torch.equal(item["pixel_values_videos"], b.videos.pixel_values)
    assert torch.equal(item["video_grid_thw"], b.videos.grid_thw)
    assert item["input_ids"].count(proc.video_token_id) == sum(b.videos.num_tokens)
    with pytest.raises(ValueError, match="input_ids video tokens: expected"):
        sg.processor_output(b, [x for x in item["input_ids"] if x != proc.video_token_id],
                            video_token_id=proc.video_token_id)
    with pytest.raises(ValueError, match="precomputed_embedding: expected images only"):
        sg.precomputed_embedding(torch.randn(b.num_embeddings[0], 32), b, ids,
                                 architecture="Qwen2_5_VLForConditionalGeneration")
