"""SGLang adapter: a PackedBatch -> an ``image_data`` item of SGLang's ``Engine.generate``.

SGLang takes pre-processed images as ONE dict item for all images of a request (its docs,
``docs/advanced_features/vlm_query.ipynb``: ``image_data=[dict(processor_output,
format="processor_output")]``), together with ``input_ids`` that are already expanded (the
docs require ``input_ids``, not a text prompt, for these formats; SGLang finds the image spans
by the image token id)::

    llm.generate(input_ids=ids, image_data=[processor_output(batch, ids)])

- ``processor_output``: ``{"format": "processor_output", <batch.to_hf() keys>}``, e.g. Qwen:
  ``pixel_values (sum t*h*w, 1176)`` float, ``image_grid_thw (N, 3)`` int64.
- ``precomputed_embedding``: ``{"format": "precomputed_embedding", "feature": (sum tokens,
  hidden), <batch.to_hf() keys>}`` (the docs pass the processor output with ``feature`` added;
  Qwen reads ``image_grid_thw`` from it).
One format per request; formats cannot be mixed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ._embeds import concat_embeds

if TYPE_CHECKING:
    import torch

    from ..pack import PackedBatch

__all__ = ["processor_output", "precomputed_embedding"]


def _fail(what: str, expected: str, got: str, fix: str) -> ValueError:
    return ValueError(f"sglang: {what}: expected {expected}, got {got}; {fix}")


def _ids_list(input_ids: Any) -> list[int]:
    import torch
    if torch.is_tensor(input_ids):
        if input_ids.ndim == 2 and input_ids.shape[0] == 1:
            input_ids = input_ids[0]
        if input_ids.ndim != 1:
            raise _fail("input_ids", "one sequence (L,) or (1, L)", f"{tuple(input_ids.shape)}",
                        "send one request per sample")
        return [int(x) for x in input_ids.tolist()]
    if isinstance(input_ids, (list, tuple)) and all(isinstance(x, int) for x in input_ids):
        return list(input_ids)
    raise TypeError(f"sglang: expected input_ids: list[int] or a 1-D tensor, got "
                    f"{type(input_ids).__name__}")


def _check_ids(ids: list[int], batch: "PackedBatch", image_token_id: int | None) -> None:
    """The pre-expanded ids hold exactly the batch's image tokens (when the id is known)."""
    if image_token_id is None:
        return
    tok = batch.pipeline.pack.image_token if batch.pipeline is not None else "<|image_pad|>"
    want = sum(p.count(tok) for i, p in enumerate(batch.placeholders) if i not in batch.errors)
    got = sum(1 for x in ids if x == image_token_id)
    if got != want:
        raise _fail("input_ids image tokens", f"{want} ids {image_token_id} (the expanded "
                    f"placeholders of {batch.num_images - len(batch.errors)} images)", f"{got}",
                    "tokenize the text expanded by vlmprep.adapters.transformers.expand_prompt")


def processor_output(batch: "PackedBatch", input_ids: Any, *,
                     image_token_id: int | None = None) -> dict:
    """SGLang's ``{"format": "processor_output", ...}`` item for ``image_data=[item]``.

    Args:
        batch: the request's images.
        input_ids: the request's pre-expanded ids (``list[int]``, ``(L,)`` or ``(1, L)``).
        image_token_id: if given, the count of this id in ``input_ids`` must equal the batch's
            expanded image tokens (e.g. Qwen ``<|image_pad|>`` = 151655: sum of num_tokens).

    Returns ``{"format": "processor_output", "input_ids": list[int], **batch.to_hf()}``.
    """
    ids = _ids_list(input_ids)
    _check_ids(ids, batch, image_token_id)
    return {"format": "processor_output", "input_ids": ids, **batch.to_hf()}


def precomputed_embedding(embeds: "torch.Tensor | Sequence[torch.Tensor]", batch: "PackedBatch",
                          input_ids: Any, *, image_token_id: int | None = None) -> dict:
    """SGLang's ``{"format": "precomputed_embedding", "feature": ...}`` item.

    ``embeds``: one ``(tokens_i, hidden)`` tensor per image or all of them concatenated
    ``(sum tokens, hidden)``, where tokens_i is the image's embedded (LLM) tokens: for Qwen
    ``prod(grid_thw) // merge**2``. Returns ``{"format": "precomputed_embedding", "feature":
    (sum tokens, hidden), "input_ids": list[int], **batch.to_hf()}``.
    """
    ids = _ids_list(input_ids)
    _check_ids(ids, batch, image_token_id)
    tok = batch.pipeline.pack.image_token if batch.pipeline is not None else "<|image_pad|>"
    per = [p.count(tok) for i, p in enumerate(batch.placeholders) if i not in batch.errors]
    feature = concat_embeds(embeds, per, "sglang")
    return {"format": "precomputed_embedding", "feature": feature, "input_ids": ids,
            **batch.to_hf()}
