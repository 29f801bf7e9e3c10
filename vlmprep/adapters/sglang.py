"""SGLang adapter: a PackedBatch -> an ``image_data`` item of SGLang's ``Engine.generate``.

SGLang takes pre-processed images as ONE dict item for all images of a request (its docs,
``docs/advanced_features/vlm_query.ipynb``: ``image_data=[dict(processor_output,
format="processor_output")]``), together with ``input_ids`` that are already expanded (the
docs require ``input_ids``, not a text prompt, for these formats; SGLang finds the image spans
by the image token id)::

    llm.generate(input_ids=ids, image_data=[processor_output(batch, ids)])

- ``processor_output``: ``{"format": "processor_output", <batch.to_hf() keys>}``, e.g. Qwen:
  ``pixel_values (sum t*h*w, 1176)`` float, ``image_grid_thw (N, 3)`` int64. Full rows always:
  a compact batch is expanded on ``device=`` (default: the batch's device).
- ``precomputed_embedding``: ``{"format": "precomputed_embedding", "feature": (sum
  num_embeddings, hidden), "input_ids"}`` (+ ``image_grid_thw`` for Qwen's M-RoPE). SGLang
  0.5.23 hands ``feature`` to the model's ``get_image_feature``, which for most models runs the
  vision tower on it again; only the architectures in ``PRECOMPUTED_ARCHITECTURES`` use it as
  embeddings, and only those are built (Qwen2.5-VL, InternVLChatModel, Gemma 3).
One format per request; formats cannot be mixed.

Videos (``batch.videos``): ``processor_output`` carries their ``to_hf()`` keys beside the
images' (Qwen: ``pixel_values_videos``, ``video_grid_thw``, Qwen2.5-VL ``second_per_grid_ts``),
in the same single dict: SGLang 0.5.23 splits one processor_output dict into one item per
modality by key (``base_processor.ATTR_NAME_TO_MODALITY``: ``pixel_values_videos``,
``video_grid_thw``, ``second_per_grid_ts`` -> video) and its Qwen processor reads
``video_grid_thw`` / ``second_per_grid_ts`` for M-RoPE. Pass it once (``image_data=[item]``, or
``video_data=[item]`` for a videos-only request), with ids holding the expanded video
placeholders too. ``precomputed_embedding`` refuses videos (no SGLang model was checked to pass
video features through).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .. import presets
from ..hf_forms import hf_output
from ._embeds import concat_embeds
from .transformers import prompt_video_token

if TYPE_CHECKING:
    import torch

    from ..pack import PackedBatch

__all__ = ["processor_output", "precomputed_embedding", "PRECOMPUTED_ARCHITECTURES"]  # noqa: F822 (module __getattr__)


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


def _check_video_ids(ids: list[int], batch: "PackedBatch", video_token_id: int | None) -> None:
    """The pre-expanded ids hold exactly the videos' video tokens (when the id is known)."""
    vids = getattr(batch, "videos", None)
    if video_token_id is None or vids is None:
        return
    tok = prompt_video_token(vids) if vids.num_images else ""
    want = sum(p.count(tok) for i, p in enumerate(vids.placeholders) if i not in vids.errors) \
        if tok else 0
    got = sum(1 for x in ids if x == video_token_id)
    if got != want:
        raise _fail("input_ids video tokens", f"{want} ids {video_token_id} (the expanded "
                    f"placeholders of {vids.num_images - len(vids.errors)} videos)", f"{got}",
                    "tokenize the text expanded by vlmprep.adapters.transformers.model_inputs / "
                    "expand_video_prompts")


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
                     image_token_id: int | None = None, video_token_id: int | None = None,
                     device: "str | torch.device | None" = None) -> dict:
    """SGLang's ``{"format": "processor_output", ...}`` item for ``image_data=[item]``.

    Args:
        batch: the request's images.
        input_ids: the request's pre-expanded ids (``list[int]``, ``(L,)`` or ``(1, L)``).
        image_token_id: if given, the count of this id in ``input_ids`` must equal the batch's
            expanded image tokens (e.g. Qwen ``<|image_pad|>`` = 151655: sum of num_tokens).
        video_token_id: the same for the videos (Qwen ``<|video_pad|>`` = 151656).
        device: where the pixel tensors are made (default: the batch's device). SGLang takes the
            full rows: a compact batch (``row_form="compact"``) is moved there and expanded
            there (``batch.full_rows(device)``: no full-size host copy for a GPU device); video
            rows are moved.

    Returns ``{"format": "processor_output", "input_ids": list[int], **batch.to_hf()}`` (video
    keys included when the batch has videos; full rows whatever the batch's row form).
    """
    if getattr(batch, "modality", "image") == "video":
        raise _fail("batch", "the Processor's batch (videos in batch.videos)", "its .videos part",
                    "pass the batch proc(images, videos=...) returned")
    ids = _ids_list(input_ids)
    _check_ids(ids, batch, image_token_id)
    _check_video_ids(ids, batch, video_token_id)
    return {"format": "processor_output", "input_ids": ids, **batch.to_hf(device=device)}


def precomputed_embedding(embeds: "torch.Tensor | Sequence[torch.Tensor]", batch: "PackedBatch",
                          input_ids: Any, *, image_token_id: int | None = None,
                          architecture: str | None = None) -> dict:
    """SGLang's ``{"format": "precomputed_embedding", "feature": ...}`` item, only for the models
    whose SGLang 0.5.23 code uses the feature as embeddings (``PRECOMPUTED_ARCHITECTURES``);
    for the others it would run the embeddings through the vision tower again: refused.

    Args:
        embeds: one ``(num_embeddings_i, hidden)`` tensor per image or all of them concatenated
            (``batch.num_embeddings``: the image-context tokens of each placeholder).
        batch, input_ids, image_token_id: as ``processor_output``.
        architecture: the served model's ``config.architectures[0]`` (what SGLang dispatches
            on); required for Qwen-style batches (one preset serves Qwen2-VL, Qwen2.5-VL and
            Qwen3-VL, and only Qwen2.5-VL passes the feature through), checked for the others.

    Returns ``{"format": "precomputed_embedding", "feature": ..., "input_ids": list[int]}`` plus
    ``image_grid_thw`` for Qwen (its M-RoPE positions); ``feature`` is ``(sum num_embeddings,
    hidden)``, for Gemma 3 ``(num_seqs, 256, hidden)`` (the 3-D form its model passes through).
    No ``pixel_values``: SGLang would carry them unread.
    """
    ids = _ids_list(input_ids)
    vids: Any = getattr(batch, "videos", None)
    if getattr(batch, "modality", "image") == "video" or (vids is not None and vids.num_images):
        raise _fail("precomputed_embedding", "images only (no SGLang 0.5.23 model was checked to "
                    "pass video features through)", "a batch with videos",
                    "send videos with processor_output(batch, input_ids) (SGLang runs the vision "
                    "tower)")
    _check_ids(ids, batch, image_token_id)
    form = hf_output(batch.pipeline)
    precomputed = _table("PRECOMPUTED_ARCHITECTURES")
    archs = precomputed.get(form, ())
    if not archs:
        raise _fail("precomputed_embedding", f"a family whose SGLang 0.5.23 model uses the feature "
                    f"as embeddings (forms {sorted(precomputed)})",
                    f"form {form!r}: "
                    f"{_table('_NOT_PASSED').get(form, 'no pass-through in its model')}",
                    "use processor_output(batch, input_ids) (SGLang runs the vision tower)")
    if architecture is None and form == "qwen2_vl":
        raise _fail("architecture", f"one of {list(archs)} (the served config.architectures[0])",
                    "None", "pass architecture=; SGLang 0.5.23's Qwen2VLForConditionalGeneration "
                    "and Qwen3VLForConditionalGeneration re-encode the feature with the vision "
                    "tower: use processor_output for those")
    if architecture is not None and architecture not in archs:
        why = _table("_REENCODED").get(architecture, "its SGLang 0.5.23 model runs the vision "
                                                     "tower on the feature")
        raise _fail("architecture", f"one of {list(archs)} for form {form!r}",
                    f"{architecture!r} ({why})", "use processor_output(batch, input_ids)")
    per = _good(batch.num_embeddings, batch)
    feature = concat_embeds(embeds, per, "sglang")
    out: dict[str, Any] = {"format": "precomputed_embedding", "input_ids": ids}
    if form == "qwen2_vl":
        out["image_grid_thw"] = batch.grid_thw.to("cpu")
    elif form == "gemma3":
        # gemma3_mm.get_image_feature passes a 3-D (n, tokens, hidden) feature; 2-D goes to
        # the vision tower. Every Gemma 3 sequence (image or crop) has the same tokens.
        seqs = batch.num_seqs
        feature = feature.reshape(seqs, feature.shape[0] // max(seqs, 1), feature.shape[-1])
    out["feature"] = feature
    return out


def _good(values: list[int], batch: "PackedBatch") -> list[int]:
    return [n for i, n in enumerate(values) if i not in batch.errors]


# The family tables, derived from the families' declarations (``vlmprep.presets.forms()``:
# ``FormSpec.sglang_*`` in each ``presets/<family>.py``, read from sglang/srt/models/*.py), on
# access (a family added with ``presets.register`` is in them):
#
# - ``PRECOMPUTED_ARCHITECTURES``: ``to_hf`` form -> the SGLang 0.5.23 architectures whose
#   ``get_image_feature`` passes a precomputed feature through: Qwen2.5-VL (a 2-D feature whose
#   last dim is not the 1176 of pixel rows), InternVLChatModel (any non-4-D feature), Gemma 3 (a
#   3-D feature of the text hidden size).
# - ``_REENCODED``: architecture -> why its SGLang model runs the vision tower on the feature.
# - ``_NOT_PASSED``: form -> why no SGLang architecture of it passes the feature through.
_TABLE_NAMES = ("PRECOMPUTED_ARCHITECTURES", "_REENCODED", "_NOT_PASSED")


def _table(name: str) -> dict[str, Any]:
    """One of ``_TABLE_NAMES``, from ``presets.forms()``."""
    forms = presets.forms().values()
    if name == "PRECOMPUTED_ARCHITECTURES":
        return {f.name: f.sglang_precomputed for f in forms if f.sglang_precomputed}
    if name == "_REENCODED":
        return {arch: why for f in forms for arch, why in f.sglang_reencoded.items()}
    return {f.name: f.sglang_not_passed for f in forms if f.sglang_not_passed}


def __getattr__(name: str) -> Any:
    if name in _TABLE_NAMES:
        return _table(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
