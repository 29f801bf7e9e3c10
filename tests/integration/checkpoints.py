"""Tiny local checkpoints for the real engines (no model hub here): config.json + processor files.

Each builder writes a directory that vLLM's ``ModelConfig(model=dir)`` and SGLang's processors load
offline: the family's transformers config with tiny text / vision towers (hidden 32, one layer; the
vision geometry of the real checkpoint: patch size, tile size, merge), its transformers processor
with the image processor of vlmprep's packaged checkpoint config (tests/hfref.py) and a word-level
tokenizer holding the family's special tokens. No weights: nothing here runs a model.

    build(family, root) -> Checkpoint(path, image_token, image_token_id, hidden_size, tokenizer)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: hidden size of every tiny text model (the embeddings' last dim)
HIDDEN = 32
WORDS = ("describe", "the", "images", "a", "b", "c", "and", "user", "assistant")

#: family -> the vlmprep preset whose packaged config gives the image processor
PRESETS = {"qwen2-vl": "qwen2-vl", "llava-next": "llava-next", "internvl": "internvl",
           "idefics3": "idefics3", "pixtral": "pixtral", "gemma3": "gemma3",
           # Qwen2.5-VL's preprocessor_config.json is Qwen2-VL's; SmolVLM's is a packaged
           # checkpoint config of the idefics3 pipeline (SmolVLMImageProcessor)
           "qwen2.5-vl": "qwen2-vl", "qwen3-vl": "qwen3-vl", "llava-1.5": "llava-1.5",
           "llava-onevision": "llava-onevision", "smolvlm": "smolvlm", "glm4v": "glm4v",
           "lfm2-vl": "lfm2-vl", "llama4": "llama4",
           "minicpm-v": "minicpm-v"}


@dataclass(frozen=True)
class Checkpoint:
    family: str
    path: Path
    image_token: str       # the prompt's one-per-image token (what vLLM expands)
    image_token_id: int    # the id of the token that carries an embedding row
    hidden_size: int
    tokenizer: Any

    def ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


def _tokenizer(special=(), extra_special_tokens=None, bos_eos=("<s>", "</s>")):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"[UNK]": 0, "[PAD]": 1, bos_eos[0]: 2, bos_eos[1]: 3}
    for k in range(1, 5):
        vocab["\n" * k] = len(vocab)
    for w in WORDS:
        vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    # words split on spaces; a run of up to 4 newlines is one token (as the Llama 3 / SmolLM2 / Gemma
    # tokenizers do: vlmprep's Idefics3 token count and vLLM's Gemma 3 newline merge assume it)
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\n{1,4}"), behavior="isolated"),
        pre_tokenizers.Split(Regex(r"[ \t]+"), behavior="removed")])
    kw = {"extra_special_tokens": extra_special_tokens} if extra_special_tokens else {}
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]",
                                  bos_token=bos_eos[0], eos_token=bos_eos[1], **kw)
    if special:
        tok.add_tokens(list(special), special_tokens=True)
    return tok


def _text(tok, model_type: str, **extra) -> dict:
    return dict(model_type=model_type, vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=64,
                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                max_position_embeddings=32768, bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **extra)


def _image_processor(family: str, **fields):
    from tests.hfref import hf_processor
    try:
        base = hf_processor(PRESETS[family], "pil")
    except AttributeError:  # no Pillow backend in transformers (LFM2-VL): its torchvision one
        base = hf_processor(PRESETS[family], "torchvision")
    return type(base)(**{**base.to_dict(), **fields}) if fields else base


#: the Qwen families' one-per-image prompt token (vLLM expands <|image_pad|>)
QWEN_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


def _qwen_tokenizer():
    return _tokenizer(["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"],
                      bos_eos=("<|endoftext|>", "<|im_end|>"))


def _qwen_token_ids(tok) -> dict:
    """The Qwen configs' special token ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL)."""
    i = tok.convert_tokens_to_ids
    return dict(image_token_id=i("<|image_pad|>"), video_token_id=i("<|video_pad|>"),
                vision_start_token_id=i("<|vision_start|>"), vision_end_token_id=i("<|vision_end|>"))


def _qwen2_vl():
    import transformers as T
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    tok = _qwen_tokenizer()
    proc = T.Qwen2VLProcessor(image_processor=_image_processor("qwen2-vl"), tokenizer=tok,
                              video_processor=Qwen2VLVideoProcessor())
    cfg = T.Qwen2VLConfig(
        text_config=_text(tok, "qwen2_vl_text", rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=HIDDEN, num_heads=2, mlp_ratio=2,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        **_qwen_token_ids(tok))
    cfg.architectures = ["Qwen2VLForConditionalGeneration"]
    return proc, cfg, QWEN_IMAGE, tok.convert_tokens_to_ids("<|image_pad|>")


def _llava_next():
    import transformers as T
    tok = _tokenizer(["<image>"])
    proc = T.LlavaNextProcessor(image_processor=_image_processor("llava-next"), tokenizer=tok,
                                patch_size=14, vision_feature_select_strategy="default",
                                num_additional_image_tokens=1)
    ip = proc.image_processor
    cfg = T.LlavaNextConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=2, image_size=336, patch_size=14,
                           projection_dim=32),
        text_config=_text(tok, "llama"), image_token_id=tok.convert_tokens_to_ids("<image>"),
        image_grid_pinpoints=[list(p) for p in ip.image_grid_pinpoints],
        vision_feature_layer=-1, vision_feature_select_strategy="default")
    cfg.architectures = ["LlavaNextForConditionalGeneration"]
    return proc, cfg, "<image>", tok.convert_tokens_to_ids("<image>")


def _internvl():
    import transformers as T
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor
    tok = _tokenizer(extra_special_tokens={
        "start_image_token": "<img>", "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"})
    # the model's processor forces crop_to_patches (tests/hfref.py); 448 tiles, 256 tokens each
    proc = T.InternVLProcessor(image_processor=_image_processor("internvl"), tokenizer=tok,
                               video_processor=InternVLVideoProcessor(), image_seq_length=256)
    cfg = T.InternVLConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, image_size=[448, 448], patch_size=[14, 14]),
        text_config=_text(tok, "qwen2"), image_token_id=tok.context_image_token_id,
        image_seq_length=256, downsample_ratio=0.5, vision_feature_layer=-1)
    cfg.architectures = ["InternVLForConditionalGeneration"]
    return proc, cfg, "<IMG_CONTEXT>", tok.context_image_token_id


def _idefics3():
    import transformers as T
    special = (["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]
               + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)])
    tok = _tokenizer(special)
    # Idefics3-8B: 364 tiles, scale factor 2, 169 tokens per tile
    proc = T.Idefics3Processor(image_processor=_image_processor("idefics3"), tokenizer=tok,
                               image_seq_len=169)
    cfg = T.Idefics3Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, image_size=364, patch_size=14),
        text_config=_text(tok, "llama"), image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=2)
    cfg.architectures = ["Idefics3ForConditionalGeneration"]
    return proc, cfg, "<image>", tok.convert_tokens_to_ids("<image>")


def _pixtral():
    import transformers as T
    tok = _tokenizer(["[IMG]", "[IMG_BREAK]", "[IMG_END]"])
    proc = T.PixtralProcessor(image_processor=_image_processor("pixtral"), tokenizer=tok,
                              patch_size=16, spatial_merge_size=1, image_token="[IMG]",
                              image_break_token="[IMG_BREAK]", image_end_token="[IMG_END]")
    cfg = T.LlavaConfig(
        vision_config=dict(model_type="pixtral", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=2, image_size=1024,
                           patch_size=16, head_dim=16),
        text_config=_text(tok, "mistral", head_dim=16),
        image_token_id=tok.convert_tokens_to_ids("[IMG]"), vision_feature_layer=-1,
        vision_feature_select_strategy="full", projector_hidden_act="gelu")
    cfg.architectures = ["LlavaForConditionalGeneration"]
    return proc, cfg, "[IMG]", tok.convert_tokens_to_ids("[IMG]")


def _gemma3():
    import transformers as T
    tok = _tokenizer(extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                           "image_token": "<image_soft_token>"})
    proc = T.Gemma3Processor(image_processor=_image_processor("gemma3"), tokenizer=tok, image_seq_length=256)
    i = tok.convert_tokens_to_ids
    cfg = T.Gemma3Config(
        text_config=_text(tok, "gemma3_text", head_dim=16),
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=2, image_size=896, patch_size=14),
        mm_tokens_per_image=256, boi_token_index=i("<start_of_image>"), eoi_token_index=i("<end_of_image>"),
        image_token_index=i("<image_soft_token>"))
    cfg.architectures = ["Gemma3ForConditionalGeneration"]
    return proc, cfg, "<start_of_image>", i("<image_soft_token>")


def _qwen2_5_vl():
    import transformers as T
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    tok = _qwen_tokenizer()
    proc = T.Qwen2_5_VLProcessor(image_processor=_image_processor("qwen2.5-vl"), tokenizer=tok,
                                 video_processor=Qwen2VLVideoProcessor())
    cfg = T.Qwen2_5_VLConfig(
        text_config=_text(tok, "qwen2_5_vl_text", rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=HIDDEN,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=[0]),
        **_qwen_token_ids(tok))
    cfg.architectures = ["Qwen2_5_VLForConditionalGeneration"]
    return proc, cfg, QWEN_IMAGE, tok.convert_tokens_to_ids("<|image_pad|>")


def _qwen3_vl():
    import transformers as T
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    tok = _qwen_tokenizer()
    # Qwen3-VL's image processor is Qwen2VLImageProcessor with patch 16 (vlmprep's qwen3-vl)
    proc = T.Qwen3VLProcessor(image_processor=_image_processor("qwen3-vl"), tokenizer=tok,
                              video_processor=Qwen3VLVideoProcessor())
    cfg = T.Qwen3VLConfig(
        text_config=_text(tok, "qwen3_vl_text", head_dim=16,
                          rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                           "mrope_section": [2, 3, 3], "mrope_interleaved": True}),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=HIDDEN,
                           patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                           num_position_embeddings=2304, deepstack_visual_indexes=[0]),
        **_qwen_token_ids(tok))
    cfg.architectures = ["Qwen3VLForConditionalGeneration"]
    return proc, cfg, QWEN_IMAGE, tok.convert_tokens_to_ids("<|image_pad|>")


def _llava_1_5():
    import transformers as T
    tok = _tokenizer(["<image>"])
    proc = T.LlavaProcessor(image_processor=_image_processor("llava-1.5"), tokenizer=tok, patch_size=14,
                            vision_feature_select_strategy="default", num_additional_image_tokens=1)
    cfg = T.LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=2, image_size=336, patch_size=14,
                           projection_dim=32),
        text_config=_text(tok, "llama"), image_token_id=tok.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-1, vision_feature_select_strategy="default")
    cfg.architectures = ["LlavaForConditionalGeneration"]
    return proc, cfg, "<image>", tok.convert_tokens_to_ids("<image>")


def _llava_onevision():
    import transformers as T
    from transformers.models.llava_onevision.video_processing_llava_onevision import LlavaOnevisionVideoProcessor
    tok = _tokenizer(["<image>", "<video>"])
    # SigLIP 384 / 14: 729 tokens per tile, no CLS token
    proc = T.LlavaOnevisionProcessor(image_processor=_image_processor("llava-onevision"), tokenizer=tok,
                                     video_processor=LlavaOnevisionVideoProcessor(), num_image_tokens=729,
                                     vision_feature_select_strategy="full", vision_aspect_ratio="anyres_max_9")
    ip = proc.image_processor
    i = tok.convert_tokens_to_ids
    cfg = T.LlavaOnevisionConfig(
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=2, image_size=384, patch_size=14),
        text_config=_text(tok, "qwen2"), image_token_index=i("<image>"), video_token_index=i("<video>"),
        image_grid_pinpoints=[list(p) for p in ip.image_grid_pinpoints],
        vision_feature_layer=-1, vision_feature_select_strategy="full", vision_aspect_ratio="anyres_max_9")
    cfg.architectures = ["LlavaOnevisionForConditionalGeneration"]
    return proc, cfg, "<image>", i("<image>")


def _smolvlm():
    import transformers as T
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor
    special = (["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]
               + [f"<row_{i}_col_{j}>" for i in range(1, 9) for j in range(1, 9)])
    tok = _tokenizer(special)
    # SmolVLM-256M / 500M, SmolVLM2: 512 tiles, patch 16, scale factor 4, 64 tokens per tile
    # (SmolVLMProcessor needs num2words)
    proc = T.SmolVLMProcessor(image_processor=_image_processor("smolvlm"), tokenizer=tok,
                              video_processor=SmolVLMVideoProcessor(), image_seq_len=64)
    cfg = T.SmolVLMConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, image_size=512, patch_size=16),
        text_config=_text(tok, "llama"), image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=4)
    cfg.architectures = ["SmolVLMForConditionalGeneration"]
    return proc, cfg, "<image>", tok.convert_tokens_to_ids("<image>")


def _glm4v():
    import transformers as T
    from transformers.models.glm4v.video_processing_glm4v import Glm4vVideoProcessor
    marks = ["<|image|>", "<|video|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
             "<|end_of_video|>"]
    tok = _tokenizer(marks, bos_eos=("<|endoftext|>", "<|user|>"))
    proc = T.Glm4vProcessor(image_processor=_image_processor("glm4v"), tokenizer=tok,
                            video_processor=Glm4vVideoProcessor())
    i = tok.convert_tokens_to_ids
    cfg = T.Glm4vConfig(
        text_config=_text(tok, "glm4v_text", head_dim=16, partial_rotary_factor=0.5,
                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                           "mrope_section": [2, 3, 3]}),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=HIDDEN,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, image_size=336),
        image_token_id=i("<|image|>"), video_token_id=i("<|video|>"),
        image_start_token_id=i("<|begin_of_image|>"), image_end_token_id=i("<|end_of_image|>"),
        video_start_token_id=i("<|begin_of_video|>"), video_end_token_id=i("<|end_of_video|>"))
    cfg.architectures = ["Glm4vForConditionalGeneration"]
    return proc, cfg, "<|begin_of_image|><|image|><|end_of_image|>", i("<|image|>")


def _lfm2_vl():
    import transformers as T
    special = (["<image>", "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"]
               + [f"<|img_row_{i}_col_{j}|>" for i in range(1, 11) for j in range(1, 11)])
    tok = _tokenizer(special, bos_eos=("<|startoftext|>", "<|im_end|>"))
    # LFM2-VL-1.6B: SigLIP2 NaFlex, patch 16, 512 tiles, downsample 2
    proc = T.Lfm2VlProcessor(image_processor=_image_processor("lfm2-vl"), tokenizer=tok)
    cfg = T.Lfm2VlConfig(
        text_config=_text(tok, "lfm2", full_attn_idxs=[0]),
        vision_config=dict(model_type="siglip2_vision_model", hidden_size=32, intermediate_size=64,
                           num_hidden_layers=1, num_attention_heads=2, patch_size=16, num_patches=256),
        image_token_id=tok.convert_tokens_to_ids("<image>"), projector_hidden_size=32, downsample_factor=2)
    cfg.architectures = ["Lfm2VlForConditionalGeneration"]
    return proc, cfg, "<image>", tok.convert_tokens_to_ids("<image>")


def _llama4():
    import transformers as T
    marks = ["<|image|>", "<|image_start|>", "<|image_end|>", "<|patch|>", "<|tile_x_separator|>",
             "<|tile_y_separator|>"]
    tok = _tokenizer(marks, bos_eos=("<|begin_of_text|>", "<|eot|>"))
    # Llama 4 Scout / Maverick: 336 tiles, patch 14, pixel shuffle 0.5 (144 tokens per tile)
    proc = T.Llama4Processor(image_processor=_image_processor("llama4"), tokenizer=tok, patch_size=14,
                             pixel_shuffle_ratio=0.5)
    i = tok.convert_tokens_to_ids
    cfg = T.Llama4Config(
        text_config=_text(tok, "llama4_text", head_dim=16, intermediate_size_mlp=64, num_local_experts=1,
                          moe_layers=[], no_rope_layers=[1], attention_chunk_size=8192),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=336, patch_size=14, pixel_shuffle_ratio=0.5, vision_output_dim=32,
                           projector_input_dim=32, projector_output_dim=32),
        boi_token_index=i("<|image_start|>"), eoi_token_index=i("<|image_end|>"),
        image_token_index=i("<|patch|>"))
    cfg.architectures = ["Llama4ForConditionalGeneration"]
    return proc, cfg, "<|image|>", i("<|patch|>")


def _minicpm_v():
    import transformers as T
    from transformers.models.minicpmv4_6.video_processing_minicpmv4_6 import MiniCPMV4_6VideoProcessor
    names = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "image_start_token": "<image>",
             "image_end_token": "</image>", "slice_start_token": "<slice>", "slice_end_token": "</slice>",
             "image_id_start_token": "<image_id>", "image_id_end_token": "</image_id>"}
    tok = _tokenizer(extra_special_tokens=names, bos_eos=("<|endoftext|>", "<|im_end|>"))
    proc = T.MiniCPMV4_6Processor(image_processor=_image_processor("minicpm-v"), tokenizer=tok,
                                  video_processor=MiniCPMV4_6VideoProcessor())
    i = tok.convert_tokens_to_ids
    cfg = T.MiniCPMV4_6Config(
        text_config=_text(tok, "qwen3_5_text", head_dim=16, layer_types=["full_attention"]),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=980, patch_size=14, insert_layer_id=0),
        image_token_id=i("<|image_pad|>"), video_token_id=i("<|video_pad|>"), insert_layer_id=0)
    cfg.architectures = ["MiniCPMV4_6ForConditionalGeneration"]
    return proc, cfg, "<|image_pad|>", i("<|image_pad|>")


BUILDERS = {"qwen2-vl": _qwen2_vl, "llava-next": _llava_next, "internvl": _internvl,
            "idefics3": _idefics3, "pixtral": _pixtral, "gemma3": _gemma3,
            "qwen2.5-vl": _qwen2_5_vl, "qwen3-vl": _qwen3_vl, "llava-1.5": _llava_1_5,
            "llava-onevision": _llava_onevision, "smolvlm": _smolvlm, "glm4v": _glm4v,
            "lfm2-vl": _lfm2_vl, "llama4": _llama4,
            "minicpm-v": _minicpm_v}


def build(family: str, root: Path) -> Checkpoint:
    """Write the tiny checkpoint of ``family`` under ``root / family`` (once) and describe it."""
    proc, cfg, image_token, image_token_id = BUILDERS[family]()
    path = Path(root) / family
    if not (path / "config.json").exists():
        path.mkdir(parents=True, exist_ok=True)
        cfg.save_pretrained(path)
        proc.save_pretrained(path)
    return Checkpoint(family, path, image_token, image_token_id, HIDDEN, proc.tokenizer)
