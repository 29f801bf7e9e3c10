"""LLM-side transformers adapter for the tiling families (InternVL, Idefics3), against the oracle.

As tests/adapters/test_llm_adapters.py: the family's transformers processor (PIL image processor
from the checkpoint config via tests/hfref.py, an offline word-level tokenizer holding the family's
special tokens) is the oracle for the expanded text and the token ids; a tiny seeded random-weight
model compares its logits on ``model_inputs(...)`` (vlmprep's reference backend) with its logits on
the processor's own inputs for the same PIL images and text.

Speed: the checkpoints' tiles (InternVL 448, Idefics3 364) are overridden to small tiles on BOTH
sides (``vlmprep.Processor(preset, **overrides)`` and the transformers image processor / processor /
model config), keeping each checkpoint's structure: InternVL 1..12 tiles + thumbnail; Idefics3
``longest_edge = 5 * tile`` (as 1820 = 5 * 364), row-major tiles + global image.
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.hf

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from llm_compare import compare_model_inputs  # noqa: E402

import vlmprep  # noqa: E402
from vlmprep.adapters import transformers as tfa  # noqa: E402

# InternVL: tile 56 = 4 x 4 patches of 14 -> 2 x 2 after the 0.5 pixel shuffle = 4 tokens per tile.
INTERNVL_TILE = 56
INTERNVL_SEQ = (INTERNVL_TILE // 14) ** 2 // 4
# Idefics3: tile 56 (patch 14, shuffle 2) -> 4 tokens per tile; longest_edge 5 * tile as the checkpoint.
IDEFICS3_TILE = 56
IDEFICS3_EDGE = 5 * IDEFICS3_TILE
IDEFICS3_SEQ = (IDEFICS3_TILE // 14) ** 2 // 4

SIZES = [(56, 84), (84, 40)]  # (H, W): InternVL -> 3x2 / 1x2 grids (+ thumbnail); Idefics3 -> multi-tile
WORDS = ("describe", "the", "images", "a", "b", "c", "and")


def _images(sizes=SIZES, seed=0):
    from PIL import Image
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sizes]


def _word_tokenizer(special=(), extra_special_tokens=None):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"[UNK]": 0, "[PAD]": 1}
    for w in WORDS:
        vocab[w] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    kw = {"extra_special_tokens": extra_special_tokens} if extra_special_tokens else {}
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", **kw)
    if special:
        tok.add_tokens(list(special), special_tokens=True)
    return tok


def _hf_image_processor(preset, **fields):
    """The checkpoint's PIL image processor (tests/hfref.py) with ``fields`` overridden."""
    from tests.hfref import hf_processor
    base = hf_processor(preset, "pil")
    return type(base)(**{**base.to_dict(), **fields})


# -- per-family oracles ---------------------------------------------------------------------------
def _internvl():
    import transformers as T
    tok = _word_tokenizer(extra_special_tokens={
        "start_image_token": "<img>", "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"})
    ip = _hf_image_processor("internvl", size={"height": INTERNVL_TILE, "width": INTERNVL_TILE})
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor
    proc = T.InternVLProcessor(image_processor=ip, tokenizer=tok, video_processor=InternVLVideoProcessor(),
                               image_seq_length=INTERNVL_SEQ)
    cfg = T.InternVLConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, image_size=[INTERNVL_TILE] * 2, patch_size=[14, 14]),
        text_config=dict(model_type="qwen2", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1),
        image_token_id=tok.context_image_token_id, image_seq_length=INTERNVL_SEQ,
        downsample_ratio=0.5, vision_feature_layer=-1)
    vp = vlmprep.Processor("internvl", backend="reference", tile_size=INTERNVL_TILE)
    texts = ["describe <IMG_CONTEXT> a", "<IMG_CONTEXT> b c"]
    return proc, T.InternVLForConditionalGeneration, cfg, vp, texts


def _idefics3_tokens():
    return (["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]
            + [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)])


def _idefics3():
    import transformers as T
    tok = _word_tokenizer(special=_idefics3_tokens())
    ip = _hf_image_processor("idefics3", size={"longest_edge": IDEFICS3_EDGE},
                             max_image_size={"longest_edge": IDEFICS3_TILE})
    proc = T.Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=IDEFICS3_SEQ)
    cfg = T.Idefics3Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, image_size=IDEFICS3_TILE, patch_size=14),
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         pad_token_id=tok.pad_token_id),
        image_token_id=tok.convert_tokens_to_ids("<image>"), scale_factor=2)
    vp = vlmprep.Processor("idefics3", backend="reference", longest_edge=IDEFICS3_EDGE,
                           tile_size=IDEFICS3_TILE, image_seq_len=IDEFICS3_SEQ)
    texts = ["describe <image> a", "<image> b c"]
    return proc, T.Idefics3ForConditionalGeneration, cfg, vp, texts


FAMILIES = {"internvl": _internvl, "idefics3": _idefics3}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_model_inputs_logits_equal_processor(family):
    proc, model_cls, cfg, vp, texts = FAMILIES[family]()
    images = _images()
    ours, ref = compare_model_inputs(proc, model_cls, cfg, vp, texts, images, family)
    tiles = [len(p.tiles) for p in vp.plan(images)]
    if family == "internvl":
        # 3x2 and 1x2 grids, each + thumbnail: 7 + 3 tiles in one flat (total_tiles, 3, M, M)
        assert tiles == [7, 3]
        assert "num_patches" not in ours  # consumed, as InternVLProcessor does
        assert ours["pixel_values"].shape == (10, 3, INTERNVL_TILE, INTERNVL_TILE)
        # InternVLProcessor pads on the left; the shorter (3-tile) row shows it
        assert ref["attention_mask"][1, 0] == 0 and ref["attention_mask"][1, -1] == 1
    else:
        # 4x5 and 5x3 grids + the global image; one sample per text, zero-padded to 21 tiles
        assert tiles == [21, 16]
        assert ours["pixel_values"].shape == (2, 21, 3, IDEFICS3_TILE, IDEFICS3_TILE)
        assert ours["pixel_attention_mask"][:, :, 0, 0].sum(1).tolist() == tiles


@pytest.mark.parametrize("family", list(FAMILIES))
def test_mm_token_type_ids_equal_processor(family):
    proc, _, _, vp, texts = FAMILIES[family]()
    images = _images()
    ref = proc(images=images, text=list(texts), return_tensors="pt", padding=True,
               return_mm_token_type_ids=True)
    ours = tfa.model_inputs(proc, texts, vp(images), return_mm_token_type_ids=True)
    a, b = ours["mm_token_type_ids"], torch.as_tensor(ref["mm_token_type_ids"])
    assert a.shape == b.shape == ref["input_ids"].shape
    assert torch.equal(a, b)
    assert a.sum().item() > 0


@pytest.mark.parametrize("family", list(FAMILIES))
def test_expand_prompt_equals_processor_text(family):
    proc, _, _, vp, texts = FAMILIES[family]()
    images = _images()
    ref = proc(images=images, text=list(texts), return_text_replacement_offsets=True)
    want = [[o["replacement"] for o in offs] for offs in ref["text_replacement_offsets"]]
    assert [len(w) for w in want] == [1, 1]
    batch = vp(images)
    plan = vp.plan(images)
    singles = list(batch.split())  # text i holds image i
    tok = proc.image_token
    assert tok == ("<IMG_CONTEXT>" if family == "internvl" else "<image>")
    for i, t in enumerate(texts):
        expect = t.replace(tok, want[i][0])  # the processor's replacement, in place
        assert tfa.expand_prompt(t, singles[i]) == expect
        assert tfa.expand_prompt(t, [plan[i].placeholder], tok) == expect  # plan strings too
        if family == "internvl":
            assert want[i][0].startswith("<img><IMG_CONTEXT>") and want[i][0].endswith("</img>")
        else:
            assert "<global-img>" in want[i][0] and "<row_1_col_2>" in want[i][0]
    assert tfa.expand_prompts(list(texts), batch)[0] == [t.replace(tok, w[0]) for t, w in zip(texts, want)]


def test_idefics3_multi_image_samples(monkeypatch):
    """Idefics3 reads a flat image list as one sample: a 2-image text alone (B = 1), and a batch of
    a 2-image and a 1-image text (B = 2, nested by ``to_hf(images_per_sample=[2, 1])``)."""
    proc, model_cls, cfg, vp, _ = _idefics3()
    images = _images([(56, 84), (84, 40), (60, 60)])
    from vlmprep.pack import PackedBatch
    calls = []
    to_hf = PackedBatch.to_hf

    def spy(self, images_per_sample=None, **kw):
        calls.append(None if images_per_sample is None else list(images_per_sample))
        return to_hf(self, images_per_sample, **kw)

    monkeypatch.setattr(PackedBatch, "to_hf", spy)
    ours, ref = compare_model_inputs(proc, model_cls, cfg, vp, ["describe <image> and <image> a"], images[:2],
                         "idefics3 1 sample x 2 images")
    assert ours["pixel_values"].shape[:2] == (1, 21 + 16)
    assert calls == [None], calls  # one text: the flat reading (B = 1), as the processor's
    ours, ref = compare_model_inputs(proc, model_cls, cfg, vp, ["<image> a <image>", "b <image>"], images,
                         "idefics3 2 samples (2 + 1 images)")
    # the 60x60 image: 5x5 tiles + global = 26, zero-padded to the 37 of sample 0
    assert [len(p.tiles) for p in vp.plan(images)] == [21, 16, 26]
    assert ours["pixel_values"].shape[:2] == (2, 21 + 16)
    assert ours["pixel_attention_mask"][:, :, 0, 0].sum(1).tolist() == [21 + 16, 26]
    assert ours["pixel_values"][1, 26:].abs().sum().item() == 0
    assert calls[-1] == [2, 1], calls
    # the flat (one-sample) reading of the same 3 images is not what the processor gives here
    flat = vp(images).to_hf()
    assert flat["pixel_values"].shape[0] == 1 != ref["pixel_values"].shape[0]
