"""vlmprep's SGLang adapter against the REAL SGLang 0.5.23 processors (CPU, no weights).

A request's ``image_data=[item]`` with pre-expanded ``input_ids`` goes through the model's
multimodal processor exactly as the TokenizerManager calls it (``process_mm_data_async`` with a
``GenerateReqInput``); for precomputed embeddings the items then go through the scheduler's
``get_embedding_and_mask`` with the SGLang model's own ``get_image_feature`` (a model object without
weights: a vision tower that records calls instead of running). Tiny local checkpoints:
tests/integration/checkpoints.py.
"""
from __future__ import annotations

import asyncio
import functools
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.engines

from requires import engine  # noqa: E402

engine("sglang.srt.multimodal.processors.qwen_vl", "SGLang")
import torch  # noqa: E402
from _support.imgdata import photo  # noqa: E402

import vlmprep  # noqa: E402
from tests.integration.checkpoints import build  # noqa: E402
from vlmprep.adapters import sglang as sg  # noqa: E402
from vlmprep.adapters import transformers as tfa  # noqa: E402

MIXED = ["chelsea", "astronaut"]


def _pil(names):
    from PIL import Image
    return [Image.fromarray(photo(n)) for n in names]


class VisionTower:
    """Stands in for the vision tower: records what it is asked to encode (it must not be)."""

    dtype = torch.float32

    def __init__(self):
        self.calls: list = []

    def __call__(self, *args, **kwargs):
        self.calls.append(args)
        raise AssertionError("the vision tower ran on a precomputed feature")


class Engine:
    """One family's SGLang processor (as the TokenizerManager builds it) and its model class."""

    def __init__(self, family: str, root, server_args):
        from sglang.srt.multimodal.transport import determine_tensor_transport_mode
        from transformers import AutoConfig, AutoProcessor
        self.ck = build(family, root)
        mode = determine_tensor_transport_mode()
        if family == "qwen2-vl":
            from sglang.srt.multimodal.processors.qwen_vl import QwenVLImageProcessor
            self.config = AutoConfig.from_pretrained(str(self.ck.path))
            self.processor = QwenVLImageProcessor(self.config, server_args,
                                                  AutoProcessor.from_pretrained(str(self.ck.path)), mode)
            self.prompt_token = "<|vision_start|><|image_pad|><|vision_end|>"
        elif family == "gemma3":
            from sglang.srt.multimodal.processors.gemma3 import Gemma3SGLangImageProcessor
            self.config = AutoConfig.from_pretrained(str(self.ck.path))
            self.processor = Gemma3SGLangImageProcessor(self.config, server_args,
                                                        AutoProcessor.from_pretrained(str(self.ck.path)), mode)
            self.prompt_token = self.ck.image_token
        else:
            # SGLang serves InternVL as the original InternVLChatModel (its own config class); the
            # processor gets the tokenizer, as for that remote-code checkpoint
            from sglang.srt.configs.internvl import InternVLChatConfig
            from sglang.srt.multimodal.processors.internvl import InternVLProcessor
            self.config = InternVLChatConfig(
                vision_config=dict(architectures=["InternVisionModel"], image_size=448, patch_size=14,
                                   hidden_size=32),
                llm_config=dict(architectures=["Qwen2ForCausalLM"], hidden_size=self.ck.hidden_size,
                                vocab_size=len(self.ck.tokenizer)),
                downsample_ratio=0.5, template="internvl2_5")
            self.config.architectures = ["InternVLChatModel"]
            self.processor = InternVLProcessor(self.config, server_args, self.ck.tokenizer, mode)
            self.prompt_token = self.ck.image_token

    def expanded_ids(self, batch) -> list[int]:
        prompt = " a ".join([self.prompt_token] * batch.num_images)
        return self.ck.ids(tfa.expand_prompt(prompt, batch))

    def process(self, item: dict, ids: list[int]):
        """``process_mm_data_async`` as the TokenizerManager calls it for ``input_ids=`` requests."""
        from sglang.srt.managers.io_struct import GenerateReqInput
        req = GenerateReqInput(input_ids=ids, image_data=[item])
        return asyncio.run(self.processor.process_mm_data_async(
            image_data=[item], audio_data=None, input_text=ids, request_obj=req, max_req_input_len=100000))

    def model(self, arch: str):
        """The SGLang model class of ``arch`` without weights: config + a recording vision tower."""
        import importlib
        module = {"Qwen2VLForConditionalGeneration": "qwen2_vl",
                  "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
                  "InternVLChatModel": "internvl",
                  "Gemma3ForConditionalGeneration": "gemma3_mm"}[arch]
        cls = getattr(importlib.import_module(f"sglang.srt.models.{module}"), arch)
        model = cls.__new__(cls)
        torch.nn.Module.__init__(model)
        model.config = self.config
        model.visual = VisionTower()
        model.use_data_parallel = False
        model.language_model = SimpleNamespace(device=torch.device("cpu"))  # Gemma 3 moves the feature there
        return model

    def embed(self, out, model) -> tuple["torch.Tensor", "torch.Tensor"]:
        """The scheduler's ``get_embedding_and_mask`` over one request's items."""
        from sglang.srt.managers.mm_schedule import get_embedding_and_mask
        ids = torch.tensor(out.input_ids)
        offsets = [tuple(o) for item in out.mm_items for o in item.offsets]
        emb, mask, _ = get_embedding_and_mask(
            model.get_image_feature, out.mm_items, torch.tensor([self.ck.image_token_id]), ids,
            [0, len(out.mm_items)], [0], [len(ids)], [offsets])
        return emb, mask


def server_args(root):
    """SGLang's ServerArgs for the TokenizerManager's processors (CPU), set as its globals."""
    from sglang.srt.managers.mm_schedule import init_mm_embedding_cache
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_tokenizer
    args = ServerArgs(model_path=str(build("qwen2-vl", root).path), device="cpu")
    set_global_server_args_for_tokenizer(args)
    init_mm_embedding_cache(0)
    return args


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    args = server_args(root)
    return functools.lru_cache(maxsize=None)(lambda family: Engine(family, root, args))


def _spans(out) -> list[int]:
    return [end - start + 1 for item in out.mm_items for start, end in item.offsets]


@pytest.mark.parametrize("family", ["qwen2-vl", "internvl"])
def test_processor_output_accepted(engines, family):
    """processor_output with the pre-expanded ids: SGLang keeps the ids, finds one span of
    num_embeddings image tokens per image, and carries our pixels as the items' feature."""
    eng = engines(family)
    batch = vlmprep.Processor(family)(_pil(MIXED))
    ids = eng.expanded_ids(batch)
    item = sg.processor_output(batch, ids, image_token_id=eng.ck.image_token_id)
    out = eng.process(item, ids)
    assert list(out.input_ids) == ids
    assert _spans(out) == batch.num_embeddings
    feature = torch.cat([i.feature for i in out.mm_items])
    assert torch.equal(feature, batch.pixel_values)
    if family == "qwen2-vl":
        # one item per image, split by SGLang with our grids
        assert len(out.mm_items) == 2
        grids = torch.cat([i.model_specific_data["image_grid_thw"] for i in out.mm_items])
        assert torch.equal(grids, batch.grid_thw)
    else:
        # SGLang's own count per tile (num_image_token) times our tiles is the tokens it fills
        assert eng.processor.num_image_token * feature.shape[0] == sum(batch.num_embeddings)


def test_processor_output_from_compact_rows_accepted(engines):
    """A compact batch (row_form="compact"): the adapter expands the rows, SGLang accepts the item
    and carries exactly the full batch's pixels, with the same spans and grids."""
    eng = engines("qwen2-vl")
    full = vlmprep.Processor("qwen2-vl")(_pil(MIXED))
    batch = vlmprep.Processor("qwen2-vl", row_form="compact")(_pil(MIXED))
    assert batch.row_form == "compact"
    ids = eng.expanded_ids(batch)
    out = eng.process(sg.processor_output(batch, ids, image_token_id=eng.ck.image_token_id), ids)
    assert list(out.input_ids) == ids and _spans(out) == full.num_embeddings
    assert torch.equal(torch.cat([i.feature for i in out.mm_items]), full.pixel_values)
    grids = torch.cat([i.model_specific_data["image_grid_thw"] for i in out.mm_items])
    assert torch.equal(grids, full.grid_thw)


@pytest.mark.parametrize("family, arch", [("qwen2-vl", "Qwen2_5_VLForConditionalGeneration"),
                                          ("internvl", "InternVLChatModel"),
                                          ("gemma3", "Gemma3ForConditionalGeneration")])
def test_precomputed_embedding_passed_through(engines, family, arch):
    """precomputed_embedding for the architectures whose get_image_feature passes the feature
    through: the scheduler places exactly our rows, in order, at the image tokens (no tower run)."""
    eng = engines(family)
    batch = vlmprep.Processor(family)(_pil(MIXED))
    ids = eng.expanded_ids(batch)
    emb = torch.randn(sum(batch.num_embeddings), eng.ck.hidden_size, generator=torch.Generator().manual_seed(0))
    item = sg.precomputed_embedding(emb, batch, ids, image_token_id=eng.ck.image_token_id, architecture=arch)
    assert "pixel_values" not in item
    out = eng.process(item, ids)
    assert list(out.input_ids) == ids and _spans(out) == batch.num_embeddings
    model = eng.model(arch)
    got, mask = eng.embed(out, model)
    assert model.visual.calls == []
    assert int(mask.sum()) == sum(batch.num_embeddings)
    assert torch.equal(got.reshape(emb.shape), emb)  # Gemma 3: the 3-D (num_seqs, 256, H) feature


def test_qwen2_vl_precomputed_would_be_reencoded(engines):
    """Engine fact behind the adapter's refusal: SGLang 0.5.23's Qwen2-VL model runs its vision
    tower on a precomputed feature; the adapter refuses that architecture."""
    eng = engines("qwen2-vl")
    batch = vlmprep.Processor("qwen2-vl")(_pil(MIXED))
    ids = eng.expanded_ids(batch)
    emb = torch.randn(sum(batch.num_embeddings), eng.ck.hidden_size)
    with pytest.raises(ValueError, match="architecture"):
        sg.precomputed_embedding(emb, batch, ids, image_token_id=eng.ck.image_token_id,
                                 architecture="Qwen2VLForConditionalGeneration")
    item = {"format": "precomputed_embedding", "feature": emb, "input_ids": ids,
            "image_grid_thw": batch.grid_thw}
    out = eng.process(item, ids)
    model = eng.model("Qwen2VLForConditionalGeneration")
    with pytest.raises(AssertionError, match="vision tower ran"):
        eng.embed(out, model)
    assert len(model.visual.calls) == 1 and torch.equal(model.visual.calls[0][0], emb)
