"""vlmprep's vLLM adapter against the REAL vLLM 0.33 input path (no weights, no GPU).

For each family (Qwen2-VL, LLaVA-NeXT, InternVL, Idefics3, Pixtral, Gemma 3) a tiny local
checkpoint (tests/integration/checkpoints.py) is loaded by vLLM's own ``ModelConfig``; then,
exactly as vLLM's renderer and GPU model runner do:

    prompt dict -> processor.info.parse_mm_data -> processor.apply (placeholders, mm kwargs)
    -> group_and_batch_mm_kwargs -> Model.embed_multimodal (its _parse_and_validate_image_input /
    TensorSchema; a model object without weights: only the embedding path is run)
    -> sanity_check_mm_encoder_outputs -> _merge_multimodal_embeddings into the prompt.

The oracle for placeholders and embedding counts is vLLM's own image path (the same photos given to
vLLM as PIL images). Engine facts the adapter relies on (what vLLM rejects, with its message) are
tested directly against vLLM, so a vLLM that changes them fails here first.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.engines

from requires import engine  # noqa: E402

engine("vllm", "vLLM")
import torch  # noqa: E402
from _support.imgdata import photo  # noqa: E402

import vlmprep  # noqa: E402
from tests.integration.checkpoints import build  # noqa: E402
from vlmprep.adapters import transformers as tfa  # noqa: E402
from vlmprep.adapters import vllm as vl  # noqa: E402

FAMILIES = ["qwen2-vl", "llava-next", "internvl", "idefics3", "pixtral", "gemma3"]
#: families with an embedding input in vLLM 0.33, and how a request holds several images
EMBEDDING_FAMILIES = {"qwen2-vl": "flat", "llava-next": "stacked", "internvl": "stacked"}
#: two photos of one size (chelsea is 300x451: coffee cropped to it), and two of different sizes
SAME = ["chelsea", "coffee@300x451"]
MIXED = ["chelsea", "astronaut"]


def _pil(names):
    """PIL photos by name; ``name@HxW`` is the photo's top-left crop."""
    from PIL import Image
    out = []
    for n in names:
        name, _, hw = n.partition("@")
        a = photo(name)
        if hw:
            h, w = map(int, hw.split("x"))
            a = a[:h, :w]
        out.append(Image.fromarray(a.copy()))
    return out


class Engine:
    """One family's vLLM input path: processor, model class (no weights) and tokenizer."""

    def __init__(self, family: str, root):
        from vllm.config import ModelConfig
        from vllm.model_executor.models.registry import ModelRegistry
        from vllm.multimodal import MULTIMODAL_REGISTRY
        self.ck = build(family, root)
        self.config = ModelConfig(model=str(self.ck.path), enable_mm_embeds=True, max_model_len=32768)
        self.processor = MULTIMODAL_REGISTRY.create_processor(self.config)
        cls, _ = ModelRegistry.resolve_model_cls(self.config.architectures, model_config=self.config)
        self.model_cls = cls
        # embed_multimodal on embeddings reads only the config (Qwen: visual.dtype / merge size)
        model = cls.__new__(cls)
        torch.nn.Module.__init__(model)
        model.config = self.config.hf_config
        vision = getattr(self.config.hf_config, "vision_config", None)
        model.visual = SimpleNamespace(dtype=torch.float32,
                                       spatial_merge_size=getattr(vision, "spatial_merge_size", 2))
        self.model = model

    def prompt(self, n: int) -> str:
        return " a ".join([self.ck.image_token] * n)

    def apply(self, request: dict) -> dict:
        """``processor.apply`` on a prompt dict as the renderer calls it (text tokenized first)."""
        from vllm.multimodal.processing.context import TimingContext
        from vllm.multimodal.processing.inputs import ProcessorInputs
        items = self.processor.info.parse_mm_data(request["multi_modal_data"])
        return self.processor.apply(ProcessorInputs(self.ck.ids(request["prompt"]), items), TimingContext())

    def encode(self, outputs: list[dict]) -> list:
        """The model runner's encoder step over the requests' items, scheduled together."""
        from vllm.multimodal.utils import group_and_batch_mm_kwargs
        from vllm.v1.worker.utils import sanity_check_mm_encoder_outputs
        kwargs = [("image", item) for o in outputs for item in o["mm_kwargs"]["image"]]
        embeddings: list = []
        for _, n, batch in group_and_batch_mm_kwargs(kwargs):
            got = self.model.embed_multimodal(**batch)
            sanity_check_mm_encoder_outputs(got, expected_num_items=n)
            embeddings.extend(got)
        return embeddings

    def merge(self, output: dict, embeddings: list) -> "torch.Tensor":
        """``_merge_multimodal_embeddings`` into a zero prompt: raises vLLM's count error."""
        from vllm.model_executor.models.utils import _merge_multimodal_embeddings
        n = len(output["prompt_token_ids"])
        mask = torch.zeros(n, dtype=torch.bool)
        for p in output["mm_placeholders"]["image"]:
            is_embed = torch.ones(p.length, dtype=torch.bool) if p.is_embed is None else p.is_embed
            mask[p.offset:p.offset + p.length] = is_embed
        merged = _merge_multimodal_embeddings(torch.zeros(n, self.ck.hidden_size), embeddings, mask)
        return merged[mask]

    def run(self, request: dict) -> tuple[dict, "torch.Tensor"]:
        out = self.apply(request)
        return out, self.merge(out, self.encode([out]))


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    return functools.lru_cache(maxsize=None)(lambda family: Engine(family, root))


def _batch(family, names):
    return vlmprep.Processor(family)(_pil(names))


def _embeds(batch, hidden, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, hidden, generator=g) for n in batch.num_embeddings]


# -- vLLM's own image path is the oracle for the placeholders ---------------------------------------
GEMMA3_TOKENS = pytest.mark.xfail(
    strict=True, reason="vlmprep's Gemma 3 num_tokens is the 256 soft tokens (tests/data/golden_families.json "
    "freezes it); vLLM's placeholder is 260: \\n\\n<start_of_image> + 256 + <end_of_image>\\n\\n (the "
    "expanded prompt and num_embeddings are equal)")


@pytest.mark.parametrize("family", [pytest.param(f, marks=GEMMA3_TOKENS) if f == "gemma3" else f
                                    for f in FAMILIES])
def test_placeholders_equal_vllm_image_path(engines, family):
    """vLLM processing the photos itself: its expanded prompt equals vlmprep's expand_prompt, its
    placeholder lengths are ``num_tokens`` and its embedding positions ``num_embeddings``."""
    eng = engines(family)
    names = MIXED
    batch = _batch(family, names)
    prompt = eng.prompt(len(names))
    out = eng.apply({"prompt": prompt, "multi_modal_data": {"image": _pil(names)}})
    ph = out["mm_placeholders"]["image"]
    got = {"num_tokens": [p.length for p in ph], "num_embeddings": [p.get_num_embeds() for p in ph],
           "expanded prompt equal": out["prompt_token_ids"] == eng.ck.ids(tfa.expand_prompt(prompt, batch))}
    want = {"num_tokens": batch.num_tokens, "num_embeddings": batch.num_embeddings,
            "expanded prompt equal": True}
    assert got == want


# -- embeddings: accepted end to end ----------------------------------------------------------------
@pytest.mark.parametrize("family", list(EMBEDDING_FAMILIES))
def test_embeddings_accepted(engines, family):
    """prompt_inputs(embeds=one (num_embeddings_i, H) per image) passes vLLM's parser, processor,
    model validator and merge; every row lands at its image's embedding positions, in order."""
    eng = engines(family)
    names = MIXED if EMBEDDING_FAMILIES[family] == "flat" else SAME
    batch = _batch(family, names)
    per = _embeds(batch, eng.ck.hidden_size)
    for embeds in (per, torch.cat(per)):
        req = vl.prompt_inputs(eng.prompt(len(names)), batch, embeds=embeds)
        out, merged = eng.run(req)
        ph = out["mm_placeholders"]["image"]
        assert [p.length for p in ph] == batch.num_tokens
        assert [p.get_num_embeds() for p in ph] == batch.num_embeddings
        assert torch.equal(merged, torch.cat(per))


def test_minicpmv_sized_embeddings_accepted(engines):
    """MiniCPM-V 4.6 ("sized": one tensor per image + image_sizes): images of different sizes,
    one split into slices, in one request pass vLLM's parser (MiniCPMVImageEmbeddingItems),
    processor, model and merge; the placeholders equal vLLM's own image path on the same images
    and hold num_embeddings embedding positions each, the rows landing in order."""
    eng = engines("minicpm-v")
    names = ["chelsea", "astronaut", "coffee@300x451"]
    batch = _batch("minicpm-v", names)
    assert len(set(batch.num_embeddings)) > 1
    prompt = eng.prompt(len(names))
    own = eng.apply({"prompt": prompt, "multi_modal_data": {"image": _pil(names)}})
    per = _embeds(batch, eng.ck.hidden_size)
    for embeds in (per, torch.cat(per)):
        req = vl.prompt_inputs(prompt, batch, embeds=embeds)
        item = req["multi_modal_data"]["image"]
        assert sorted(item) == ["image_embeds", "image_sizes"]
        out, merged = eng.run(req)
        assert out["prompt_token_ids"] == own["prompt_token_ids"]
        ph, want = out["mm_placeholders"]["image"], own["mm_placeholders"]["image"]
        assert [(p.offset, p.length) for p in ph] == [(p.offset, p.length) for p in want]
        assert [p.get_num_embeds() for p in ph] == batch.num_embeddings
        assert torch.equal(merged, torch.cat(per))
    # one request per image works too
    for req, e in zip(vl.prompt_inputs_per_image(eng.prompt(1), batch, per), per):
        _, merged = eng.run(req)
        assert torch.equal(merged, e)


def test_qwen_compact_batch_embeddings_accepted(engines):
    """A compact batch (row_form="compact"; what vit.encode folds) hands vLLM the same request as
    the full batch: the embeddings input does not depend on the row form."""
    eng = engines("qwen2-vl")
    full = _batch("qwen2-vl", MIXED)
    batch = vlmprep.Processor("qwen2-vl", row_form="compact")(_pil(MIXED))
    assert batch.row_form == "compact" and torch.equal(batch.full_rows(), full.pixel_values)
    per = _embeds(batch, eng.ck.hidden_size)
    out, merged = eng.run(vl.prompt_inputs(eng.prompt(2), batch, embeds=per))
    ph = out["mm_placeholders"]["image"]
    assert [p.length for p in ph] == full.num_tokens
    assert torch.equal(merged, torch.cat(per))


def test_internvl_vit_encode_shape_accepted(engines):
    """The issue's case: vit.encode's (tiles, 256, H) per InternVL image (7 tiles -> 1792 rows,
    not num_tokens 1794) is what vLLM takes; 1794 rows would make vLLM expand 1796 tokens."""
    eng = engines("internvl")
    batch = _batch("internvl", SAME)
    tiles = [len(p.tiles) for p in vlmprep.Processor("internvl").plan(_pil(SAME))]
    assert tiles == [7, 7] and batch.num_embeddings == [1792, 1792] and batch.num_tokens == [1794, 1794]
    H = eng.ck.hidden_size
    per = [torch.randn(t, 256, H) for t in tiles]
    out, merged = eng.run(vl.prompt_inputs(eng.prompt(2), batch, embeds=per))
    assert [p.length for p in out["mm_placeholders"]["image"]] == [1794, 1794]
    assert torch.equal(merged, torch.cat([e.flatten(0, 1) for e in per]))
    # engine fact: rows sized by num_tokens are taken as 1794 embeddings -> 1796 prompt tokens
    wrong = eng.apply({"prompt": eng.prompt(1), "multi_modal_data": {"image": torch.randn(1, 1794, H)}})
    assert wrong["mm_placeholders"]["image"][0].length == 1796


@pytest.mark.parametrize("family", ["llava-next", "internvl"])
def test_mixed_sizes_one_request_per_image(engines, family):
    """Stacked families: images of different num_embeddings cannot share a request (vLLM stacks
    them); prompt_inputs refuses them and prompt_inputs_per_image's requests each pass."""
    eng = engines(family)
    batch = _batch(family, MIXED)
    assert len(set(batch.num_embeddings)) == 2
    per = _embeds(batch, eng.ck.hidden_size)
    with pytest.raises(ValueError, match="embeds sizes"):
        vl.prompt_inputs(eng.prompt(2), batch, embeds=per)
    reqs = vl.prompt_inputs_per_image(eng.prompt(1), batch, per)
    assert len(reqs) == 2
    for req, e, n in zip(reqs, per, batch.num_tokens):
        out, merged = eng.run(req)
        assert [p.length for p in out["mm_placeholders"]["image"]] == [n]
        assert torch.equal(merged, e)
    # engine facts: a list of mixed sizes in one request, or two such requests encoded in one step
    H = eng.ck.hidden_size
    mixed = {"prompt": eng.prompt(2), "multi_modal_data": {"image": [e.clone() for e in per]}}
    with pytest.raises(ValueError, match="data contains inconsistent shapes"):
        eng.encode([eng.apply(mixed)])
    outs = [eng.apply({"prompt": eng.prompt(1), "multi_modal_data": {"image": torch.randn(1, n, H)}})
            for n in batch.num_embeddings]
    with pytest.raises(ValueError, match="data contains inconsistent shapes"):
        eng.encode(outs)


@pytest.mark.parametrize("family", ["idefics3", "pixtral", "gemma3"])
def test_no_embedding_input(engines, family):
    """vLLM 0.33 takes no embeddings for these families (its processor needs the image); the
    adapter refuses them rather than build a request vLLM rejects."""
    eng = engines(family)
    batch = _batch(family, SAME)
    H = eng.ck.hidden_size
    with pytest.raises(ValueError):
        vl.prompt_inputs(eng.prompt(2), batch, embeds=_embeds(batch, H))
    stacked = torch.randn(2, batch.num_embeddings[0], H)
    with pytest.raises(TypeError, match="Invalid type of data items for modality='image'"):
        eng.apply({"prompt": eng.prompt(2), "multi_modal_data": {"image": stacked}})


# -- Qwen pixels ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_qwen_default_is_a_form_vllm_accepts(engines, dtype):
    """Without embeds the adapter must not hand vLLM 0.33 the pixel dict it rejects: it either
    refuses (ValueError) or builds a request vLLM accepts. The pixel dict (processed_pixels=True)
    is rejected by vLLM 0.33, float and uint8 alike, with this message."""
    eng = engines("qwen2-vl")
    batch = vlmprep.Processor("qwen2-vl", dtype=dtype)(_pil(MIXED))
    prompt = eng.prompt(2)
    try:
        req = vl.prompt_inputs(prompt, batch)
    except ValueError:
        pass
    else:
        eng.run(req)
    pixels = vl.prompt_inputs(prompt, batch, processed_pixels=True, device_normalize=dtype == "uint8")
    assert set(pixels["multi_modal_data"]["image"]) == {"pixel_values", "image_grid_thw"}
    with pytest.raises(ValueError, match=r"The data should contain the fields: \{'image_(embeds|grid_thw)'"):
        eng.apply(pixels)
    # a compact batch's pixel dict holds the full rows (expanded by the adapter): the same dict
    compact = vlmprep.Processor("qwen2-vl", dtype=dtype, row_form="compact")(_pil(MIXED))
    cpix = vl.prompt_inputs(prompt, compact, processed_pixels=True,
                            device_normalize=dtype == "uint8")["multi_modal_data"]["image"]
    for k, v in pixels["multi_modal_data"]["image"].items():
        assert torch.equal(cpix[k], v), k
