"""LLM-side adapters (transformers, vLLM, SGLang) against independent oracles.

- transformers: the family's transformers processor (built offline: PIL image processor from the
  checkpoint config, a word-level tokenizer holding the family's special tokens) is the oracle
  for the expanded text and the token ids; a tiny random-weight model (seeded, from a config)
  compares its logits on ``model_inputs(...)`` (vlmprep's reference backend) with its logits on
  the processor's own inputs for the same images and text.
- vLLM / SGLang (not installed here): the input schemas the released engines accept (vLLM 0.33.0,
  SGLang 0.5.23, read from their source), written below as constants with the file they come
  from; tests/integration/ feeds the same outputs to the real engines.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.hf

torch = pytest.importorskip("torch")

from llm_compare import compare_model_inputs  # noqa: E402

import vlmprep  # noqa: E402
from vlmprep.adapters import sglang as sg  # noqa: E402
from vlmprep.adapters import transformers as tfa  # noqa: E402
from vlmprep.adapters import vllm as vl  # noqa: E402

# -- schemas the released engines accept ---------------------------------------------------------
# vLLM 0.33.0, Qwen2-VL / 2.5 / 3 (vllm/model_executor/models/qwen2_vl.py: Qwen2VLMultiModalDataParser.
# embedding_fields = {"image_embeds": values, "image_grid_thw": metadata}: a dict must hold exactly
# these; _qwen2vl_field_config: image_embeds flat_from_sizes(grid.prod // merge^2), image_grid_thw
# batched (num_images, 3) int64). name -> (ndim, dtype kinds).
VLLM_QWEN_EMBEDS = {"image_embeds": (2, "float"), "image_grid_thw": (2, "int64")}
# NOT accepted by vLLM 0.33 ("The data should contain the fields: {'image_grid_thw', 'image_embeds'}");
# only by a vLLM with PR #50160 (pre-computed processor outputs): built with processed_pixels=True.
VLLM_QWEN_PIXELS_PR50160 = {"pixel_values": (2, "float|uint8"), "image_grid_thw": (2, "int64")}
VLLM_PROMPT_KEYS = {"prompt", "multi_modal_data"}  # vllm.inputs.TextPrompt
# SGLang 0.5.23 (base_processor.process_mm_data_async: format "processor_output" -> the HF keys;
# "precomputed_embedding" -> MultimodalDataItem(feature=dict["feature"], model_specific_data=the
# rest); qwen_vl.py reads image_grid_thw from model_specific_data for M-RoPE).
SGLANG_PROCESSOR_OUTPUT = {"format": "processor_output", "pixel_values": None, "image_grid_thw": None}
SGLANG_PRECOMPUTED_QWEN = {"format", "feature", "image_grid_thw", "input_ids"}

SIZES = [(56, 84), (84, 56)]  # (H, W): small so the file is fast


def _images(sizes=SIZES, seed=0):
    from PIL import Image
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


def _tokenizer(special: list[str], words=("describe", "the", "images", "a", "b", "c", "and")):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"[UNK]": 0, "[PAD]": 1}
    for w in words:
        vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]")
    tok.add_tokens(special, special_tokens=True)
    return tok


def _pil(preset):
    from tests.hfref import hf_processor
    return hf_processor(preset, "pil")


# -- per-family oracles ---------------------------------------------------------------------------
def _qwen(preset):
    import transformers as T
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    tok = _tokenizer(["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"])
    ip = _pil(preset)
    if preset == "qwen2-vl":
        proc = T.Qwen2VLProcessor(image_processor=ip, tokenizer=tok, video_processor=Qwen2VLVideoProcessor())
    else:
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
        proc = T.Qwen3VLProcessor(image_processor=ip, tokenizer=tok, video_processor=Qwen3VLVideoProcessor())
    ids = {t: tok.convert_tokens_to_ids(t)
           for t in ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]}
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1)
    if preset == "qwen2-vl":
        cfg = T.Qwen2VLConfig(
            text_config=dict(text, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
            vision_config=dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2,
                               patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
            image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
        model_cls = T.Qwen2VLForConditionalGeneration
    else:
        cfg = T.Qwen3VLConfig(
            text_config=dict(text, head_dim=16, rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3],
                                                               "mrope_interleaved": True}),
            vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32,
                               patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                               num_position_embeddings=64, deepstack_visual_indexes=[0]),
            image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
        model_cls = T.Qwen3VLForConditionalGeneration
    texts = ["describe <|vision_start|><|image_pad|><|vision_end|> a",
             "<|vision_start|><|image_pad|><|vision_end|> b c"]
    return proc, model_cls, cfg, texts


def _llava(preset):
    import transformers as T
    tok = _tokenizer(["<image>"])
    proc = T.LlavaProcessor(image_processor=_pil(preset), tokenizer=tok, patch_size=14,
                            vision_feature_select_strategy="default", num_additional_image_tokens=1)
    cfg = T.LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=2, image_size=336, patch_size=14,
                           projection_dim=32),
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1),
        image_token_id=tok.convert_tokens_to_ids("<image>"), vision_feature_layer=-1)
    texts = ["describe <image> a", "<image> b c"]
    return proc, T.LlavaForConditionalGeneration, cfg, texts


FAMILIES = {"qwen2-vl": _qwen, "qwen3-vl": _qwen, "llava-1.5": _llava}


@pytest.mark.parametrize("preset", list(FAMILIES))
def test_model_inputs_logits_equal_processor(preset):
    # Measured: exactly equal (the reference backend reproduces the PIL processor bit for bit on
    # these images, and the ids are identical); compare_model_inputs allows fp32 noise only.
    proc, model_cls, cfg, texts = FAMILIES[preset](preset)
    compare_model_inputs(proc, model_cls, cfg, vlmprep.Processor(preset, backend="reference"),
                         texts, _images(), preset)


@pytest.mark.parametrize("preset", list(FAMILIES))
def test_expand_prompt_equals_processor_text(preset):
    proc, _, _, texts = FAMILIES[preset](preset)
    images = _images()
    ref = proc(images=images, text=list(texts), return_text_replacement_offsets=True)
    want = [[o["replacement"] for o in offs] for offs in ref["text_replacement_offsets"]]
    batch = vlmprep.Processor(preset, backend="reference")(images)
    plan = vlmprep.Processor(preset, backend="reference").plan(images)
    singles = list(batch.split())  # text i holds image i
    tok = proc.image_token
    for i, t in enumerate(texts):
        expect = t.replace(tok, want[i][0])  # the processor's replacement, in place
        assert tfa.expand_prompt(t, singles[i]) == expect
        assert tfa.expand_prompt(t, [plan[i].placeholder], tok) == expect  # plan strings too
    assert tfa.expand_prompts(list(texts), batch)[0] == [t.replace(proc.image_token, w[0])
                                                         for t, w in zip(texts, want)]


def test_expand_prompt_multi_image_sample_and_count_mismatch():
    proc, _, _, _ = _qwen("qwen2-vl")
    images = _images([(56, 84), (84, 56), (56, 56)])
    texts = ["<|image_pad|> a <|image_pad|>", "b <|image_pad|>"]
    ref = proc(images=images, text=list(texts), return_tensors="pt", padding=True)
    batch = vlmprep.Processor("qwen2-vl", backend="reference")(images)
    ours = tfa.model_inputs(proc, texts, batch)
    assert torch.equal(ours["input_ids"], ref["input_ids"])
    assert torch.equal(ours["mm_token_type_ids"], torch.as_tensor(ref["mm_token_type_ids"]))
    with pytest.raises(ValueError, match="expected 3 '<\\|image_pad\\|>' tokens"):
        tfa.expand_prompts(["<|image_pad|>", "b"], batch)


# -- vLLM -----------------------------------------------------------------------------------------
def _check_schema(mm: dict, schema: dict):
    assert set(mm) == set(schema), (sorted(mm), sorted(schema))
    for k, (ndim, kinds) in schema.items():
        v = mm[k]
        assert torch.is_tensor(v) and v.ndim == ndim, (k, getattr(v, "shape", v))
        kind = "float" if v.is_floating_point() else str(v.dtype).replace("torch.", "")
        assert kind in kinds.split("|"), (k, v.dtype)


def _qwen_batch(dtype="float32"):
    return vlmprep.Processor("qwen2-vl", backend="reference", dtype=dtype)(_images())


PROMPT = "<|vision_start|><|image_pad|><|vision_end|> a <|vision_start|><|image_pad|><|vision_end|>"


def test_vllm_embeds_schema_is_the_default():
    b = _qwen_batch()
    per = [torch.randn(n, 32) for n in b.num_embeddings]
    out = vl.prompt_inputs(PROMPT, b, embeds=per)
    assert set(out) == VLLM_PROMPT_KEYS and out["prompt"] == PROMPT
    e1 = out["multi_modal_data"]["image"]
    e2 = vl.prompt_inputs(PROMPT, b, embeds=torch.cat(per))["multi_modal_data"]["image"]
    _check_schema(e1, VLLM_QWEN_EMBEDS)
    assert torch.equal(e1["image_embeds"], e2["image_embeds"])
    # vLLM's split sizes (grid.prod // merge**2) are the rows: num_embeddings (= num_tokens for Qwen)
    assert (e1["image_grid_thw"].prod(-1) // 4).tolist() == b.num_embeddings == b.num_tokens
    # no embeds: the pixel dict vLLM 0.33 rejects is not built unless asked
    with pytest.raises(ValueError, match="embeds: expected the images' embeddings.*PR #50160"):
        vl.prompt_inputs(PROMPT, b)


def test_vllm_pixel_form_only_when_asked():
    b = _qwen_batch()
    mm = vl.prompt_inputs(PROMPT, b, processed_pixels=True)["multi_modal_data"]["image"]
    _check_schema(mm, VLLM_QWEN_PIXELS_PR50160)
    assert mm["pixel_values"].shape[0] == int(mm["image_grid_thw"].prod(-1).sum())
    assert mm["image_grid_thw"].shape == (2, 3)
    # uint8 path (mm_device_do_normalize on)
    bu = _qwen_batch("uint8")
    mu = vl.prompt_inputs(PROMPT, bu, processed_pixels=True,
                          device_normalize=True)["multi_modal_data"]["image"]
    _check_schema(mu, VLLM_QWEN_PIXELS_PR50160)
    assert mu["pixel_values"].dtype == torch.uint8
    with pytest.raises(ValueError, match="processed_pixels: expected False with embeds"):
        vl.prompt_inputs(PROMPT, b, embeds=torch.randn(sum(b.num_embeddings), 32),
                         processed_pixels=True)


def test_vllm_mismatches_are_caught():
    b, bu = _qwen_batch(), _qwen_batch("uint8")
    with pytest.raises(ValueError, match="dtype: expected uint8"):
        vl.prompt_inputs(PROMPT, b, processed_pixels=True, device_normalize=True)
    with pytest.raises(ValueError, match="dtype: expected one of"):
        vl.prompt_inputs(PROMPT, bu, processed_pixels=True)
    n = b.num_embeddings
    with pytest.raises(ValueError, match="placeholders: expected 2"):
        vl.prompt_inputs("<|image_pad|>", b, embeds=torch.randn(sum(n), 32))
    with pytest.raises(ValueError, match="placeholders: expected 2"):  # pre-expanded: wrong
        vl.prompt_inputs(tfa.expand_prompt(PROMPT, b), b, embeds=torch.randn(sum(n), 32))
    with pytest.raises(ValueError, match="embeds: expected shape"):
        vl.prompt_inputs(PROMPT, b, embeds=torch.randn(sum(n) + 1, 32))
    with pytest.raises(ValueError, match="embeds: expected 2 tensors"):
        vl.prompt_inputs(PROMPT, b, embeds=[torch.randn(n[0], 32)])
    with pytest.raises(ValueError, match=r"embeds\[1\]"):
        vl.prompt_inputs(PROMPT, b, embeds=[torch.randn(n[0], 32), torch.randn(n[1] - 1, 32)])
    with pytest.raises(ValueError, match="hidden size"):
        vl.prompt_inputs(PROMPT, b, embeds=torch.randn(sum(n), 32), hidden_size=64)
    with pytest.raises(ValueError, match="embeds dtype"):
        vl.prompt_inputs(PROMPT, b, embeds=torch.zeros(sum(n), 32, dtype=torch.int64))
    llava = vlmprep.Processor("llava-1.5", backend="reference")(_images())
    with pytest.raises(ValueError, match="pixel form"):
        vl.prompt_inputs("<image> <image>", llava, processed_pixels=True)
    e = vl.prompt_inputs("<image> <image>", llava, embeds=torch.randn(2 * 576, 32))
    assert e["multi_modal_data"]["image"].shape == (2, 576, 32)  # LlavaImageEmbeddingInputs


# -- SGLang ---------------------------------------------------------------------------------------
def test_sglang_dicts_schema_and_mismatch():
    proc, _, _, _ = _qwen("qwen2-vl")
    images = _images()
    b = vlmprep.Processor("qwen2-vl", backend="reference")(images)
    text = PROMPT
    ref = proc(images=images, text=[text], return_tensors="pt")
    ids = tfa.model_inputs(proc, [text], b)["input_ids"]
    pad = proc.image_token_id
    item = sg.processor_output(b, ids, image_token_id=pad)
    for k, v in SGLANG_PROCESSOR_OUTPUT.items():
        assert k in item and (v is None or item[k] == v), k
    assert item["input_ids"] == ref["input_ids"][0].tolist()  # pre-expanded, as the docs ask
    assert torch.equal(item["image_grid_thw"], ref["image_grid_thw"])
    assert item["pixel_values"].shape == ref["pixel_values"].shape
    emb = torch.randn(sum(b.num_embeddings), 32)
    arch = "Qwen2_5_VLForConditionalGeneration"  # qwen2_5_vl.py passes a 2-D non-1176 feature
    pe = sg.precomputed_embedding(emb, b, ids, image_token_id=pad, architecture=arch)
    assert set(pe) == SGLANG_PRECOMPUTED_QWEN and pe["format"] == "precomputed_embedding"
    assert torch.equal(pe["feature"], emb)
    assert torch.equal(pe["image_grid_thw"], ref["image_grid_thw"])
    # Qwen2-VL / Qwen3-VL in SGLang 0.5.23 push the feature through the vision tower again
    for bad in ("Qwen2VLForConditionalGeneration", "Qwen3VLForConditionalGeneration"):
        with pytest.raises(ValueError, match="runs self.visual on the feature"):
            sg.precomputed_embedding(emb, b, ids, architecture=bad)
    with pytest.raises(ValueError, match="architecture: expected one of"):
        sg.precomputed_embedding(emb, b, ids)
    # mismatches
    short = ids[0].tolist()
    short.remove(pad)
    with pytest.raises(ValueError, match="image tokens: expected"):
        sg.processor_output(b, short, image_token_id=pad)
    with pytest.raises(ValueError, match="embeds: expected"):
        sg.precomputed_embedding(emb[:-1], b, ids, image_token_id=pad, architecture=arch)
    with pytest.raises(ValueError, match="embeds: expected 2 tensors"):
        sg.precomputed_embedding([emb], b, ids, architecture=arch)
    with pytest.raises(ValueError, match="embeds dtype"):
        sg.precomputed_embedding(emb.long(), b, ids, architecture=arch)


# -- compact rows: engines and models get the full rows, expanded on the consumer's device ------
def _spy_expand(monkeypatch):
    """Record the device of every rows tensor pack.expand_rows expands."""
    import vlmprep.pack as pack
    seen = []
    real = pack.expand_rows

    def spy(rows, *a, **kw):
        seen.append(rows.device.type)
        return real(rows, *a, **kw)
    monkeypatch.setattr(pack, "expand_rows", spy)
    return seen


def _same(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for k in a:
        if torch.is_tensor(a[k]):
            assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_compact_batches_give_engines_the_full_batch_rows(dtype, monkeypatch):
    images = _images()
    full = vlmprep.Processor("qwen2-vl", backend="reference", dtype=dtype)(images)
    comp = vlmprep.Processor("qwen2-vl", backend="reference", dtype=dtype,
                             row_form="compact")(images)
    assert comp.row_form == "compact" and comp.pixel_values.shape[1] == 588
    seen = _spy_expand(monkeypatch)
    dn = dtype == "uint8"
    # vLLM (processed pixels, PR #50160)
    mm = [vl.prompt_inputs(PROMPT, b, processed_pixels=True, device_normalize=dn)
          ["multi_modal_data"]["image"] for b in (full, comp)]
    _same(mm[1], mm[0])
    assert mm[0]["pixel_values"].shape[1] == 1176 and seen == ["cpu"]
    # SGLang processor_output
    proc, _, _, _ = _qwen("qwen2-vl")
    ids = tfa.model_inputs(proc, [PROMPT], full)["input_ids"]
    _same(sg.processor_output(comp, ids), sg.processor_output(full, ids))
    # transformers model_inputs: every key, two texts
    texts = ["describe <|vision_start|><|image_pad|><|vision_end|> a",
             "<|vision_start|><|image_pad|><|vision_end|> b c"]
    _same(tfa.model_inputs(proc, texts, comp), tfa.model_inputs(proc, texts, full))
    # device=: the rows are moved to the consumer's device, then expanded there ("meta" stands
    # in for a GPU here: no data, but every tensor's device is real)
    seen.clear()
    m = vl.prompt_inputs(PROMPT, comp, processed_pixels=True, device_normalize=dn,
                         device="meta")["multi_modal_data"]["image"]
    s = sg.processor_output(comp, ids, device="meta")
    t = tfa.model_inputs(proc, texts, comp, device="meta")
    assert seen == ["meta"] * 3
    for out in (m, s, t):
        assert out["pixel_values"].device.type == "meta"
        assert out["pixel_values"].shape == full.pixel_values.shape
        assert out["image_grid_thw"].device.type == "cpu"
    assert t["input_ids"].device.type == "cpu"
    # a full batch with device=: moved, nothing expanded
    f = vl.prompt_inputs(PROMPT, full, processed_pixels=True, device_normalize=dn,
                         device="meta")["multi_modal_data"]["image"]
    assert f["pixel_values"].device.type == "meta" and seen == ["meta"] * 3


def test_vllm_qwen3_vl_embeds_need_the_deepstack_width():
    """vLLM's Qwen3-VL splits each embedding row into the merger output and the deepstack levels;
    rows without them fail inside the engine (issue 32), so the width is required and checked."""
    b = vlmprep.Processor("qwen3-vl", backend="reference")(_images())
    n = b.num_embeddings
    with pytest.raises(ValueError, match=r"hidden_size: expected the width.*deepstack=True"):
        vl.prompt_inputs(PROMPT, b, embeds=torch.randn(sum(n), 32))
    with pytest.raises(ValueError, match="hidden size"):  # merger output only: refused
        vl.prompt_inputs(PROMPT, b, embeds=torch.randn(sum(n), 32), hidden_size=4 * 32)
    got = vl.prompt_inputs(PROMPT, b, embeds=torch.randn(sum(n), 4 * 32), hidden_size=4 * 32)
    assert got["multi_modal_data"]["image"]["image_embeds"].shape == (sum(n), 128)
    q2 = vlmprep.Processor("qwen2-vl", backend="reference")(_images())  # no deepstack: optional
    vl.prompt_inputs(PROMPT, q2, embeds=torch.randn(sum(q2.num_embeddings), 32))


def _anyres_model(preset):
    import transformers as T
    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64,
                  num_hidden_layers=1, num_attention_heads=2, image_size=336, patch_size=14)
    text = dict(model_type="llama", vocab_size=64, hidden_size=32, intermediate_size=64,
                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    if preset == "llava-next":
        cfg = T.LlavaNextConfig(vision_config=vision, text_config=text, image_token_id=5,
                                vision_feature_layer=-1,
                                image_grid_pinpoints=[[336, 672], [672, 336], [672, 672],
                                                      [1008, 336], [336, 1008]])
        return T.LlavaNextForConditionalGeneration(cfg).eval()
    vision.update(model_type="siglip_vision_model", image_size=384, patch_size=14)
    pins = [[384 * a, 384 * b] for a in range(1, 7) for b in range(1, 7)]
    cfg = T.LlavaOnevisionConfig(vision_config=vision, text_config=text, image_token_id=5,
                                 vision_feature_layer=-1, image_grid_pinpoints=pins)
    return T.LlavaOnevisionForConditionalGeneration(cfg).eval()


@pytest.mark.parametrize("preset", ["llava-next", "llava-onevision"])
def test_vit_encode_anyres_models_give_vllms_rows(preset):
    """vit.encode on LLaVA-NeXT / OneVision models (issue 32: it raised NotImplementedError while
    the vLLM embedding form was offered): one (num_embeddings_i, D) per image, what the model's
    own get_image_features packs from transformers' processor output for the same images, and
    vLLM's prompt dict takes them."""
    import torch

    from vlmprep.adapters import vit
    torch.manual_seed(0)
    model = _anyres_model(preset)
    imgs = _images()
    b = vlmprep.Processor(preset, backend="reference", errors="skip")(imgs + [b""])
    with torch.no_grad():
        got = vit.encode(model, b)
        hf = vlmprep.Processor(preset, backend="reference")(imgs).to_hf()
        kw = {"batch_num_images": torch.ones(len(imgs), dtype=torch.long)} if "onevision" in preset else {}
        want = model.get_image_features(pixel_values=hf["pixel_values"], image_sizes=hf["image_sizes"],
                                        return_dict=True, **kw).pooler_output
    assert [g.shape[0] for g in got] == list(b.num_embeddings) == [w.shape[0] for w in want] + [0]
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    if len(set(b.num_embeddings[:2])) == 1:
        vl.prompt_inputs("<image> <image>", vlmprep.Processor(preset, backend="reference")(imgs),
                         embeds=got[:2])
    else:
        vl.prompt_inputs_per_image("<image>", vlmprep.Processor(preset, backend="reference")(imgs),
                                   got[:2])
