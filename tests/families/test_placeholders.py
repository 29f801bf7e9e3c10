"""Prompt placeholders of every family against its real transformers processor (the family issue:
"the placeholder strings against the family's transformers processor with a small stand-in
tokenizer (no hub downloads)").

Each processor is built offline: the checkpoint's PIL image processor (tests/hfref.py), the
checkpoint's processor_config values, and a word-level tokenizer holding the family's special
tokens. It runs on a text with one image token and one real photo sized so the family tiles it;
the expanded text must be ``text.replace(image_token, plan.images[0].placeholder)`` (checked as
the processor's own ``text_replacement_offsets`` and as its input_ids), and the image tokens in
input_ids must be what vlmprep's ``num_tokens`` says for the family: InternVL counts ``<img>`` and
``</img>``, Pixtral its break/end tokens, Gemma 3 only the soft tokens, Mllama 1, Idefics3 every
token of the placeholder with ``"\\n\\n"`` as one token.
"""
from __future__ import annotations

import functools

import pytest
import torch
from _support.imgdata import crop, tiled
from hfref import CONFIGS, hf_processor

import vlmprep

pytestmark = pytest.mark.hf

WORDS = ("describe", "the", "image", "a", "b")
TEXT = "describe {} the image a"


def _tokenizer(special=(), extra=None, **kw):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"[UNK]": 0, "[PAD]": 1, "<s>": 2}
    for w in WORDS:
        vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if extra:
        kw["extra_special_tokens"] = extra
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", **kw)
    if special:
        tok.add_tokens(list(special), special_tokens=True)
    return tok


def _video(mod: str, cls: str):
    import importlib
    return getattr(importlib.import_module(f"transformers.models.{mod}"), cls)()


# preset -> (build the processor, the text's image token, the tokens num_tokens counts, image)
def _llava():
    import transformers as T
    return T.LlavaProcessor(image_processor=hf_processor("llava-1.5", "pil"),
                            tokenizer=_tokenizer(["<image>"]), patch_size=14,
                            vision_feature_select_strategy="default",
                            num_additional_image_tokens=1)


def _llava_next():
    import transformers as T
    return T.LlavaNextProcessor(image_processor=hf_processor("llava-next", "pil"),
                                tokenizer=_tokenizer(["<image>"]), patch_size=14,
                                vision_feature_select_strategy="default",
                                num_additional_image_tokens=1)


def _llava_onevision():
    import transformers as T
    return T.LlavaOnevisionProcessor(
        image_processor=hf_processor("llava-onevision", "pil"),
        tokenizer=_tokenizer(["<image>", "<video>"]),
        video_processor=_video("llava_onevision.video_processing_llava_onevision",
                               "LlavaOnevisionVideoProcessor"),
        num_image_tokens=729, vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9")


def _internvl():
    import transformers as T
    tok = _tokenizer(extra={"start_image_token": "<img>", "end_image_token": "</img>",
                            "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"})
    return T.InternVLProcessor(
        image_processor=hf_processor("internvl", "pil"), tokenizer=tok,
        video_processor=_video("internvl.video_processing_internvl", "InternVLVideoProcessor"),
        image_seq_length=256)


def _mllama():
    import transformers as T
    return T.MllamaProcessor(image_processor=hf_processor("mllama", "pil"),
                             tokenizer=_tokenizer(["<|image|>", "<|python_tag|>"],
                                                  bos_token="<|begin_of_text|>"))


IDEFICS3_TOKENS = (["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]
                   + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)])


def _idefics3():
    import transformers as T
    # "\n\n" and "\n" as tokens: Llama 3's / SmolLM2's tokenizers make one token of "\n\n".
    return T.Idefics3Processor(image_processor=hf_processor("idefics3", "pil"),
                               tokenizer=_tokenizer(IDEFICS3_TOKENS + ["\n\n", "\n"]),
                               image_seq_len=169)


def _pixtral():
    import transformers as T
    return T.PixtralProcessor(image_processor=hf_processor("pixtral", "pil"),
                              tokenizer=_tokenizer(["[IMG]", "[IMG_BREAK]", "[IMG_END]"]),
                              patch_size=16, spatial_merge_size=1)


def _gemma3():
    import transformers as T
    tok = _tokenizer(extra={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                            "image_token": "<image_soft_token>"})
    return T.Gemma3Processor(image_processor=hf_processor("gemma3", "pil"), tokenizer=tok,
                             image_seq_length=256)


def _qwen2():
    import transformers as T
    tok = _tokenizer(["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"])
    return T.Qwen2VLProcessor(
        image_processor=hf_processor("qwen2-vl", "pil"), tokenizer=tok,
        video_processor=_video("qwen2_vl.video_processing_qwen2_vl", "Qwen2VLVideoProcessor"))


# preset, overrides (vlmprep / processor call), builder, token in the text, tokens num_tokens
# counts (None: every token of the placeholder), the photo (sized so the family tiles it)
CASES = {
    "llava-1.5": ({}, _llava, "<image>", ["<image>"], lambda: crop("astronaut", 301, 453)),
    "llava-next": ({}, _llava_next, "<image>", ["<image>"], lambda: tiled("rocket", 331, 1010)),
    "llava-onevision": ({}, _llava_onevision, "<image>", ["<image>"],
                        lambda: tiled("rocket", 331, 1010)),
    "internvl": ({}, _internvl, "<IMG_CONTEXT>", ["<IMG_CONTEXT>", "<img>", "</img>"],
                 lambda: crop("chelsea", 299, 451)),
    "mllama": ({}, _mllama, "<|image|>", ["<|image|>"], lambda: tiled("rocket", 610, 1190)),
    "idefics3": ({}, _idefics3, "<image>", None, lambda: crop("coffee", 399, 537)),
    "pixtral": ({}, _pixtral, "[IMG]", ["[IMG]", "[IMG_BREAK]", "[IMG_END]"],
                lambda: crop("hopper", 477, 389)),
    "gemma3": ({}, _gemma3, "<start_of_image>", ["<image_soft_token>"],
               lambda: crop("astronaut", 301, 453)),
    "gemma3-pan-and-scan": ({"do_pan_and_scan": True}, _gemma3, "<start_of_image>",
                            ["<image_soft_token>"], lambda: tiled("rocket", 290, 1010)),
    "qwen2-vl": ({}, _qwen2, "<|image_pad|>", ["<|image_pad|>"],
                 lambda: crop("astronaut", 301, 453)),
}


@functools.lru_cache(maxsize=None)
def _built(builder):
    return builder()


@pytest.mark.parametrize("case", list(CASES))
def test_placeholder_equals_processor_expansion(case):
    from PIL import Image
    kw, builder, token, counted, image = CASES[case]
    preset = case.removesuffix("-pan-and-scan")
    arr = image()
    plan = vlmprep.Processor.from_pretrained(str(CONFIGS / f"{preset}.json"),
                                             **kw).plan([arr]).images[0]
    proc = _built(builder)
    tok = proc.tokenizer
    text = TEXT.format(token)
    out = proc(text=[text], images=[Image.fromarray(arr)], return_text_replacement_offsets=True,
               **kw)
    # The processor's replacement for the one image token is vlmprep's placeholder (Mllama
    # expands nothing and reports no offsets: its placeholder is the token itself) ...
    if "text_replacement_offsets" not in out:
        assert case == "mllama" and plan.placeholder == token
    else:
        reps = [o["replacement"] for o in out["text_replacement_offsets"][0]]
        assert len(reps) == 1
        assert reps[0] == plan.placeholder, (case, len(reps[0]), len(plan.placeholder))
    # ... and its input_ids are the stand-in tokenizer's ids of the replaced text.
    expect = text.replace(token, plan.placeholder)
    ids = torch.as_tensor(out["input_ids"][0]).tolist()
    # (Mllama prepends its bos token to the text: the only other change the processor makes.)
    bos = tok.bos_token if case == "mllama" else ""
    assert ids == tok(bos + expect, add_special_tokens=False)["input_ids"], case
    # The image tokens in input_ids are what num_tokens says for the family.
    if counted is None:  # Idefics3: every token of the placeholder; S <image> per tile
        n = len(tok(plan.placeholder, add_special_tokens=False)["input_ids"])
        assert ids.count(tok.convert_tokens_to_ids("<image>")) == 169 * len(plan.tiles)
    else:
        want_ids = {tok.convert_tokens_to_ids(t) for t in counted}
        assert tok.unk_token_id not in want_ids
        n = sum(i in want_ids for i in ids)
    assert n == plan.num_tokens, (case, n, plan.num_tokens)
    # The case tiles (or, for the fixed/one-sequence families, is resized) as intended.
    tiles = len(plan.tiles)
    print(f"{case}: {tuple(arr.shape[:2])} -> {tiles} tiles, num_tokens {plan.num_tokens}")
    if case not in ("llava-1.5", "gemma3", "qwen2-vl", "pixtral"):
        assert tiles > 1, case


@pytest.mark.parametrize("preset", ["siglip", "siglip2-naflex"])
def test_contrastive_families_have_no_placeholder(preset):
    p = vlmprep.Processor.from_pretrained(str(CONFIGS / f"{preset}.json")).plan(
        [crop("astronaut", 301, 453)]).images[0]
    assert p.placeholder == "" and p.num_tokens > 0
