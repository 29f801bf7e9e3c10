"""vLLM / SGLang adapter forms for the non-Qwen families, as the released engines take them.

The rules (read from vLLM 0.33.0 and SGLang 0.5.23; tests/integration/ feeds the same outputs to
the real engines):

- vLLM sizes an image's embeddings by its image-context tokens (``num_embeddings``), not by the
  placeholder's wrappers; InternVL (interns1.py ``InternS1ImageEmbeddingInputs ("ni", "tifs",
  "hs")``) and LLaVA-NeXT / OneVision / 1.5 (``("bn", "ifs", "hs")``) take one stacked tensor per
  request, no dynamic size: mixed sizes fail ("data contains inconsistent shapes"), so they are
  refused in one request and sent one request per image.
- vLLM has no embedding input for Pixtral ("Pixtral-HF does not support image_embeds."), Idefics3
  (its processor takes ImageProcessorItems only: "Invalid type of data items"), Gemma 3 ("Gemma3
  does not support image_embeds.") or Mllama (removed in 0.10.2): refused.
- SGLang's ``precomputed_embedding`` feature goes to the model's ``get_image_feature``: InternVL
  passes a non-4-D feature through, Gemma 3 a 3-D one of the text hidden size; LLaVA, Pixtral run
  their vision tower on it: refused.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import vlmprep  # noqa: E402
from vlmprep.adapters import sglang as sg  # noqa: E402
from vlmprep.adapters import vllm as vl  # noqa: E402

H = 16  # hidden size of the stand-in embeddings


def _images(sizes):
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]


def _batch(preset, sizes):
    return vlmprep.Processor(preset, backend="reference")(_images(sizes))


def _embeds(batch):
    return [torch.randn(n, H) for n in batch.num_embeddings]


# one size, two images: the stacked form; mixed sizes: refused, then one request per image
TILED = {"internvl": ("<IMG_CONTEXT>", [(448, 448), (448, 448)], [(448, 448), (448, 1344)]),
         "llava-next": ("<image>", [(336, 336), (336, 336)], [(336, 336), (336, 1008)])}


@pytest.mark.parametrize("preset", list(TILED))
def test_vllm_stacked_families(preset):
    tok, same, mixed = TILED[preset]
    b = _batch(preset, same)
    n = b.num_embeddings
    assert n[0] == n[1] and n[0] > 0
    if preset == "internvl":
        assert b.num_tokens == [x + 2 for x in n]  # <img>, </img> are not embedding rows
    per = _embeds(b)
    img = vl.prompt_inputs(f"{tok} a {tok}", b, embeds=per)["multi_modal_data"]["image"]
    assert torch.is_tensor(img) and img.shape == (2, n[0], H)
    assert torch.equal(img[1], per[1])
    if preset == "internvl":  # sized by num_tokens (the bug): refused, naming the rows
        with pytest.raises(ValueError, match=r"embeds: expected shape \(%d, hidden\)" % sum(n)):
            vl.prompt_inputs(f"{tok} a {tok}", b, embeds=torch.randn(sum(b.num_tokens), H))

    bm = _batch(preset, mixed)
    nm = bm.num_embeddings
    assert nm[0] != nm[1], nm
    em = _embeds(bm)
    with pytest.raises(ValueError, match="embeds sizes: expected one num_embeddings per request.*"
                                         "inconsistent shapes.*prompt_inputs_per_image"):
        vl.prompt_inputs(f"{tok} {tok}", bm, embeds=em)
    reqs = vl.prompt_inputs_per_image([f"{tok} a", f"b {tok}"], bm, embeds=em)
    assert [r["prompt"] for r in reqs] == [f"{tok} a", f"b {tok}"]
    for r, e in zip(reqs, em):
        got = r["multi_modal_data"]["image"]
        assert got.shape == (1, e.shape[0], H) and torch.equal(got[0], e)
    # the concatenated form splits the same way; one text for all
    again = vl.prompt_inputs_per_image(tok, bm, embeds=torch.cat(em))
    assert all(torch.equal(a["multi_modal_data"]["image"], r["multi_modal_data"]["image"])
               for a, r in zip(again, reqs))
    with pytest.raises(ValueError, match="prompts: expected 2 texts"):
        vl.prompt_inputs_per_image([tok], bm, embeds=em)


def test_vllm_per_image_skips_bad_images_and_qwen_works_too():
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip")
    b = proc([_images([(56, 84)])[0], b"not an image", _images([(84, 56)])[0]])
    em = [torch.randn(n, H) for n in b.num_embeddings if n]
    tok = "<|vision_start|><|image_pad|><|vision_end|>"
    reqs = vl.prompt_inputs_per_image(tok, b, embeds=em)
    assert len(reqs) == 2
    for r, e in zip(reqs, em):
        img = r["multi_modal_data"]["image"]
        assert torch.equal(img["image_embeds"], e) and img["image_grid_thw"].shape == (1, 3)


@pytest.mark.parametrize("preset,tok,why", [
    ("pixtral", "[IMG]", "Pixtral-HF does not support image_embeds"),
    ("idefics3", "<image>", "Invalid type of data items"),
    ("gemma3", "<start_of_image>", "Gemma3 does not support image_embeds"),
    ("mllama", "<|image|>", "no Mllama model"),
])
def test_vllm_refuses_families_without_embedding_input(preset, tok, why):
    b = _batch(preset, [(64, 96)])
    with pytest.raises(ValueError, match=f"embeds: expected a family with an embedding input.*{why}"
                                         ".*give vLLM the images"):
        vl.prompt_inputs(f"a {tok}", b, embeds=_embeds(b))


def test_pixtral_and_idefics3_rows_leave_out_their_markers():
    b = _batch("pixtral", [(480, 640)])  # 30 x 40 patches of 16
    assert (b.num_tokens, b.num_embeddings) == ([30 * 41], [1200])
    i = _batch("idefics3", [(1080, 1920)])  # 3 x 5 tiles + global, 169 rows each
    assert (i.num_tokens, i.num_embeddings) == ([2740], [16 * 169])


def test_sglang_precomputed_internvl_and_gemma3_pass_through():
    b = _batch("internvl", [(448, 448), (448, 1344)])
    ids = [5] + [7] * sum(b.num_tokens)  # stand-in ids: the count check needs image_token_id
    e = _embeds(b)
    item = sg.precomputed_embedding(e, b, ids)
    assert set(item) == {"format", "feature", "input_ids"}  # no pixel_values to carry unread
    assert item["feature"].shape == (sum(b.num_embeddings), H)  # 2-D: internvl.py passes it
    assert sg.precomputed_embedding(e, b, ids, architecture="InternVLChatModel")["format"] == \
        "precomputed_embedding"
    with pytest.raises(ValueError, match="architecture: expected one of"):
        sg.precomputed_embedding(e, b, ids, architecture="Qwen2_5_VLForConditionalGeneration")
    g = _batch("gemma3", [(64, 96), (96, 64)])
    ge = _embeds(g)
    gi = sg.precomputed_embedding(ge, g, [1, 2, 3])
    # 3-D (num_seqs, 256, hidden): gemma3_mm.py passes it; a 2-D feature would be re-encoded
    assert gi["feature"].shape == (g.num_seqs, 256, H) and g.num_embeddings == [256, 256]
    assert torch.equal(gi["feature"][1], ge[1])


@pytest.mark.parametrize("preset,why", [
    ("llava-next", "llava.py get_image_feature runs the vision tower"),
    ("pixtral", "pixtral.py get_image_feature runs the vision encoder"),
    ("idefics3", "no Idefics3 model"),
])
def test_sglang_refuses_forms_it_reencodes(preset, why):
    b = _batch(preset, [(64, 96)])
    with pytest.raises(ValueError, match=f"precomputed_embedding: expected a family.*{why}.*"
                                         "processor_output"):
        sg.precomputed_embedding(_embeds(b), b, [1, 2])
