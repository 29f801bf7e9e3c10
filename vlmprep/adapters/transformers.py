"""transformers adapter: a PackedBatch + prompts -> what ``model(**inputs)`` / ``generate`` take.

The family's transformers processor does two things with a prompt: it replaces each image token
(the one the chat template writes, once per image) by that image's expanded placeholder, then
tokenizes. ``expand_prompt`` does the first with the plan's exact ``placeholder`` strings;
``model_inputs`` does both and adds ``batch.to_hf()``.

Expansion, a tiny example (qwen2-vl, two images of 4 and 6 tokens)::

    Given  texts ["a <|image_pad|> b", "<|image_pad|> c"], placeholders ["<|image_pad|>" * 4,
           "<|image_pad|>" * 6]
    Output ["a " + "<|image_pad|>" * 4 + " b", "<|image_pad|>" * 6 + " c"]

Images are consumed in order across texts: ``texts[i]`` holds sample i's image tokens, and the
batch's images are the samples' images concatenated. Skipped images (``errors="skip"``) are not
in the batch's output: the texts must not hold a token for them.

Videos (``proc(images, videos=[...])``: ``batch.videos``) work the same way with the family's
video token (``prompt_video_token``: ``<|video_pad|>`` for Qwen, ``<video>`` for LLaVA-OneVision,
InternVL and SmolVLM), replaced by each video's plan ``placeholder`` after the images' tokens
(InternVL and SmolVLM video placeholders hold image tokens themselves).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping, Sequence, cast

from .. import presets
from ..hf_forms import hf_output

if TYPE_CHECKING:
    import torch

    from ..pack import PackedBatch
    from ..plan import Plan

__all__ = ["PROMPT_IMAGE_TOKENS", "PROMPT_VIDEO_TOKENS",  # noqa: F822 (module __getattr__)
           "expand_prompt", "expand_prompts",
           "expand_video_prompts", "model_inputs", "prompt_image_token", "prompt_video_token",
           "placeholders_of"]

# The prompt-token tables, derived from the families' declarations (``vlmprep.presets.forms()``:
# ``FormSpec.prompt_image_token`` / ``prompt_video_token`` in each ``presets/<family>.py``), on
# access (a family added with ``presets.register`` is in them):
#
# - ``PROMPT_IMAGE_TOKENS``: ``pack.hf_output`` form -> the image token a prompt holds once per
#   image, where it is not the expanded ``pack.image_token`` itself (Gemma 3 writes
#   ``<start_of_image>`` = ``boi_token``; the processor turns it into
#   ``\n\n<start_of_image><image_soft_token>*256<end_of_image>\n\n``).
# - ``PROMPT_VIDEO_TOKENS``: form -> the video token a prompt holds once per video (the
#   processor's ``video_token``, which its ``replace_video_token`` replaces by the placeholder).
_TABLES = {"PROMPT_IMAGE_TOKENS": "prompt_image_token", "PROMPT_VIDEO_TOKENS": "prompt_video_token"}


def _table(name: str) -> dict[str, str]:
    attr = _TABLES[name]
    return {f.name: getattr(f, attr) for f in presets.forms().values() if getattr(f, attr)}


def __getattr__(name: str) -> Any:
    if name in _TABLES:
        return _table(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def placeholders_of(batch_or_plan: "PackedBatch | Plan | Sequence[str]") -> list[str]:
    """The placeholder strings of the good images, in order (skipped images left out)."""
    if isinstance(batch_or_plan, (list, tuple)) and all(isinstance(s, str) for s in batch_or_plan):
        return list(batch_or_plan)
    images = getattr(batch_or_plan, "images", None)
    if images is not None:  # a Plan
        return [p.placeholder for p in images if p.error is None]
    placeholders = getattr(batch_or_plan, "placeholders", None)
    if placeholders is None:
        raise TypeError(f"expected a PackedBatch, a Plan or a list of placeholder strings, got "
                        f"{type(batch_or_plan).__name__}")
    errors = getattr(batch_or_plan, "errors", {}) or {}
    num_images = cast("PackedBatch", batch_or_plan).num_images  # has placeholders: a PackedBatch
    if len(placeholders) != num_images:
        raise ValueError(f"expected one placeholder per image ({num_images}), got "
                         f"{len(placeholders)}; make the batch with vlmprep.Processor")
    return [s for i, s in enumerate(placeholders) if i not in errors]


def prompt_image_token(batch_or_plan: Any) -> str:
    """The token a prompt holds once per image for this batch's family (its processor's
    ``image_token``): ``<|image_pad|>`` (Qwen), ``<IMG_CONTEXT>`` (InternVL-hf), ``<image>``
    (LLaVA, Idefics3), ``[IMG]`` (Pixtral), ``<|image|>`` (Mllama), ``<start_of_image>`` (Gemma 3).
    """
    pipeline = getattr(batch_or_plan, "pipeline", None)
    if pipeline is None:
        raise ValueError("prompt image token: the batch/plan carries no pipeline; pass "
                         "image_token= (the token your prompt holds once per image)")
    tok = _table("PROMPT_IMAGE_TOKENS").get(hf_output(pipeline), pipeline.pack.image_token)
    if not tok:
        raise ValueError(f"prompt image token: pipeline {pipeline.name!r} has no LLM image token "
                         f"(a vision-only family); pass image_token=")
    return tok


def prompt_video_token(batch: Any) -> str:
    """The token a prompt holds once per video for this batch's family (``PROMPT_VIDEO_TOKENS``);
    ``batch`` is a PackedBatch (its ``videos`` or itself) or a Plan."""
    pipeline = getattr(batch, "pipeline", None)
    form = hf_output(pipeline) if pipeline is not None else None
    tokens = _table("PROMPT_VIDEO_TOKENS")
    tok = tokens.get(form or "")
    if tok is None:
        raise ValueError(f"prompt video token: expected a family with video input (forms "
                         f"{sorted(tokens)}), got form {form!r}; pass video_token=")
    return tok


def _video_batch(batch: Any) -> Any:
    """``batch.videos`` (a ``"video"`` PackedBatch), the batch itself when it is one, or None."""
    if getattr(batch, "modality", "image") == "video":
        return batch
    return getattr(batch, "videos", None)


def expand_video_prompts(texts: Sequence[str], batch: Any, video_token: str | None = None
                         ) -> tuple[list[str], list[int]]:
    """Replace each video token in ``texts`` by that video's exact ``placeholder``, in order across
    texts -> ``(expanded texts, videos per text)``. ``batch``: a PackedBatch with ``videos``, a
    ``"video"`` PackedBatch, a Plan with ``videos`` or the placeholder strings. Raises ValueError
    (expected / got / fix) when the texts' video tokens do not match the good videos one to one."""
    owner = batch  # what carries the pipeline (the family's video token)
    if isinstance(batch, (list, tuple)):
        placeholders = list(batch)
    elif getattr(batch, "images", None) is not None and hasattr(batch, "videos"):  # a Plan
        placeholders = [p.placeholder for p in batch.videos if p.error is None]
    else:
        owner = _video_batch(batch)
        placeholders = placeholders_of(owner) if owner is not None else []
    token = video_token if video_token is not None else (
        prompt_video_token(owner) if placeholders else "")
    counts = [t.count(token) if token else 0 for t in texts]
    if sum(counts) != len(placeholders):
        raise ValueError(
            f"expand_prompt (videos): expected {len(placeholders)} {token!r} tokens in the texts "
            f"(one per processed video, in order), got {sum(counts)} (per text: {counts}); write "
            f"the family's video token once per video (skipped videos have none), or pass "
            f"video_token= if your prompt uses another")
    if not placeholders:
        return list(texts), counts
    pattern = re.compile(re.escape(token))
    it = iter(placeholders)
    return [pattern.sub(lambda _m: next(it), t) for t in texts], counts


def expand_prompts(texts: Sequence[str], batch_or_plan: "PackedBatch | Plan | Sequence[str]",
                   image_token: str | None = None, image_ids: bool = True
                   ) -> tuple[list[str], list[int]]:
    """Expand every text; returns ``(expanded texts, images per text)``.

    ``image_ids``: for a family whose processor numbers the images of each text
    (``FormSpec.prompt_image_ids``: MiniCPM-V's ``<image_id>k</image_id>``, its checkpoint's
    ``use_image_id``), write that number before each placeholder, ``k`` counting from 0 in each
    text; False: leave it out (the processor's ``use_image_id=False``).

    Raises ValueError (expected / got / fix) when the texts' image tokens do not match the
    batch's good images one to one.
    """
    if isinstance(texts, str):
        raise TypeError("expected a list of texts, got one str; wrap it: [text]")
    placeholders = placeholders_of(batch_or_plan)
    token = image_token if image_token is not None else prompt_image_token(batch_or_plan)
    counts = [t.count(token) for t in texts]
    if sum(counts) != len(placeholders):
        raise ValueError(
            f"expand_prompt: expected {len(placeholders)} {token!r} tokens in the texts (one per "
            f"processed image, in order), got {sum(counts)} (per text: {counts}); write the "
            f"family's image token once per image (skipped images have none), or pass "
            f"image_token= if your prompt uses another")
    ids = _image_ids(batch_or_plan) if image_ids else ()
    if ids:  # numbered per text, as the processor's _prepend_local_ids
        firsts = [sum(counts[:b]) for b in range(len(counts))]
        placeholders = [f"{ids[0]}{k - firsts[b]}{ids[1]}{placeholders[k]}"
                        for b, n in enumerate(counts) for k in range(firsts[b], firsts[b] + n)]
    pattern = re.compile(re.escape(token))
    it = iter(placeholders)
    out = [pattern.sub(lambda _m: next(it), t) for t in texts]
    return out, counts


def _image_ids(batch_or_plan: Any) -> tuple[str, ...]:
    """The family's ``FormSpec.prompt_image_ids`` (() for placeholder strings given as such)."""
    pipeline = getattr(batch_or_plan, "pipeline", None)
    if pipeline is None:
        return ()
    spec = presets.forms().get(hf_output(pipeline))
    return spec.prompt_image_ids if spec is not None else ()


def expand_prompt(text: str, batch_or_plan: "PackedBatch | Plan | Sequence[str]",
                  image_token: str | None = None, image_ids: bool = True) -> str:
    """Replace each image token in ``text`` by that image's exact ``placeholder``, in order.

    Args:
        text: a prompt holding the family's image token once per image (e.g. from the chat
            template: ``<|vision_start|><|image_pad|><|vision_end|>`` for Qwen).
        batch_or_plan: a PackedBatch, a Plan, or the placeholder strings themselves.
        image_token: the token to replace; default: the family's processor ``image_token``
            (see ``prompt_image_token``).
        image_ids: as ``expand_prompts`` (MiniCPM-V's per-text ``<image_id>k</image_id>``).

    Returns the text the family's transformers processor tokenizes (its
    ``get_text_with_replacements`` output). Raises ValueError if the token count differs from
    the number of processed images.
    """
    return expand_prompts([text], batch_or_plan, image_token, image_ids)[0][0]


def _tokenizer_of(processor: Any) -> Any:
    return getattr(processor, "tokenizer", None) or processor


def _text_kwargs(processor: Any, tokenizer: Any, kwargs: dict) -> dict:
    """The processor's merged text kwargs (its defaults, then ``kwargs``), as its __call__ has."""
    merge = getattr(processor, "_merge_kwargs", None)
    if merge is not None and processor is not tokenizer:
        try:
            tk = dict(merge(tokenizer_init_kwargs=getattr(tokenizer, "init_kwargs", {}),
                            **kwargs)["text_kwargs"])
        except Exception:  # older/other processors: fall back to the plain kwargs
            tk = dict(kwargs)
    else:
        tk = dict(kwargs)
    for k in ("return_mm_token_type_ids", "return_text_replacement_offsets"):
        tk.pop(k, None)
    return tk


def model_inputs(processor: Any, texts: Sequence[str] | str, batch: "PackedBatch", *,
                 image_token: str | None = None, video_token: str | None = None,
                 return_mm_token_type_ids: bool | None = None,
                 device: "str | torch.device | None" = None, **text_kwargs: Any) -> dict:
    """What ``model(**inputs)`` / ``model.generate(**inputs)`` take, built on a PackedBatch.

    Args:
        processor: the family's transformers processor (``AutoProcessor``), or a tokenizer. Its
            tokenizer tokenizes; its ``image_token`` (if any) is the token replaced in ``texts``.
        texts: one prompt per sample; ``texts[i]`` holds sample i's image tokens, and the
            batch's (good) images are the samples' images in order.
        batch: the PackedBatch of those images (any backend; ``dtype`` as the model wants).
        image_token: override the token to replace.
        video_token: override the video token (default: the processor's ``video_token``, else
            ``prompt_video_token``); used when the batch has videos (``batch.videos``).
        return_mm_token_type_ids: default: as the processor (``return_mm_token_type_ids``
            class attribute: True for Qwen2-VL, Qwen3-VL, Gemma 3).
        device: where the pixel tensors are made (default: the batch's device; the token tensors
            stay on the host, as the tokenizer returns them). Models take full rows: a compact
            batch (``row_form="compact"``) is moved there and expanded there
            (``batch.full_rows(device)``: no full-size host copy for a GPU device); video rows
            are moved.
        **text_kwargs: passed to the tokenizer (default ``return_tensors="pt"``,
            ``padding=True`` when there is more than one text); ``use_image_id`` (MiniCPM-V) is
            taken as its processor takes it (default: the processor's ``default_use_image_id``).

    Returns a dict:
        input_ids ``(B, L)`` int64, attention_mask ``(B, L)`` int64; the ``batch.to_hf(
        images_per_sample=...)`` keys the processor keeps (e.g. qwen2-vl: pixel_values
        ``(total_patches, 1176)``, image_grid_thw ``(N, 3)`` int64; llava-1.5: pixel_values
        ``(N, 3, 336, 336)``; internvl: pixel_values ``(total_tiles, 3, 448, 448)``, its
        ``num_patches`` consumed as the processor does); mm_token_type_ids ``(B, L)`` (1 on image
        tokens, 2 on video tokens) where the processor returns it (Gemma 3 names it
        ``token_type_ids``); Mllama: ``cross_attention_mask``. With videos, their ``to_hf`` keys
        too (Qwen ``pixel_values_videos`` + ``video_grid_thw`` (+ ``second_per_grid_ts``);
        LLaVA-OneVision ``pixel_values_videos``; SmolVLM ``pixel_values`` of the frames); InternVL
        gets one ``pixel_values`` holding image tiles and video frames in prompt order, as
        ``InternVLProcessor`` merges them.
    """
    import torch
    if isinstance(texts, str):
        texts = [texts]
    tokenizer = _tokenizer_of(processor)
    token = image_token or getattr(processor, "image_token", None) or None
    vids = _video_batch(batch)
    has_videos = vids is not None and vids.num_images > 0
    if getattr(batch, "modality", "image") == "video":
        raise ValueError("model_inputs: expected the Processor's batch (videos in batch.videos), "
                         "got its .videos part; pass the batch proc(images, videos=...) returned")
    vtoken = (video_token or getattr(processor, "video_token", None)
              or (prompt_video_token(vids) if has_videos else None))
    originals = list(texts)
    # MiniCPM-V's per-text image numbers: use_image_id= as its processor takes it, else its default
    ids = text_kwargs.pop("use_image_id", None)
    ids = getattr(processor, "default_use_image_id", True) if ids is None else bool(ids)
    expanded, counts = expand_prompts(texts, batch, token, ids)
    if has_videos:  # after the images: InternVL / SmolVLM video placeholders hold image tokens
        expanded, _ = expand_video_prompts(expanded, batch, vtoken)
    text_kwargs.setdefault("return_tensors", "pt")
    if len(expanded) > 1:
        text_kwargs.setdefault("padding", True)
    tk = _text_kwargs(processor, tokenizer, text_kwargs)
    enc = tokenizer(expanded, **tk)
    out: dict[str, Any] = dict(enc)

    want_types = (return_mm_token_type_ids if return_mm_token_type_ids is not None
                  else bool(getattr(processor, "return_mm_token_type_ids", False)))
    if want_types:
        out["mm_token_type_ids"] = _mm_token_type_ids(processor, enc, expanded, batch, token)

    # the model's layout: full rows, made on ``device`` (a compact batch expanded there)
    hf = batch.to_hf(images_per_sample=counts if len(counts) > 1 else None, device=device)
    if has_videos and type(processor).__name__.startswith("InternVL"):
        hf = _internvl_merge(dict(hf), originals, batch, token, vtoken)
    hf = _consume(processor, hf)
    out.update(hf)

    cls = type(processor).__name__
    if cls.startswith("Gemma3") and "mm_token_type_ids" in out:
        out["token_type_ids"] = out.pop("mm_token_type_ids")  # Gemma3Processor's name for it
    if cls.startswith("Mllama"):
        out["cross_attention_mask"] = _mllama_cross_attention_mask(processor, out, hf)
    if tk.get("return_tensors") == "pt":
        for k in ("mm_token_type_ids", "token_type_ids"):
            if k in out and not torch.is_tensor(out[k]):
                out[k] = torch.tensor(out[k], dtype=torch.int64)
    return out


def _consume(processor: Any, hf: Mapping[str, Any]) -> dict:
    """Drop the image-processor keys the family's processor consumes (not model inputs)."""
    hf = dict(hf)
    cls = type(processor).__name__
    if cls.startswith("InternVL"):
        hf.pop("num_patches", None)  # InternVLProcessor pops it after expanding the prompt
    unused = getattr(processor, "unused_input_names", None) or []
    for k in unused:
        hf.pop(k, None)
    return hf


def _internvl_merge(hf: dict, texts: list[str], batch: "PackedBatch", image_token: str | None,
                    video_token: str | None) -> dict:
    """``InternVLProcessor.__call__``'s merge: image tiles and video frames in one ``pixel_values``,
    in the order their tokens appear in the (unexpanded) texts."""
    import torch
    img_tok = image_token or prompt_image_token(batch)
    vid_tok = video_token or "<video>"
    pattern = re.compile(f"(?P<image>{re.escape(img_tok)})|(?P<video>{re.escape(vid_tok)})")
    order = [m.lastgroup for t in texts for m in pattern.finditer(t)]
    vids = batch.videos
    assert vids is not None
    frames = hf.pop("pixel_values_videos")
    per_video = list(frames) if isinstance(frames, (list, tuple)) else list(frames.unbind(0))
    image_tiles: list = []
    if "pixel_values" in hf:
        num: Any = hf.get("num_patches")
        counts = [int(n) for n in (num.tolist() if hasattr(num, "tolist") else num or [])]
        pv = hf["pixel_values"]
        row = 0
        for n in counts:
            image_tiles.append(pv[row:row + n])
            row += n
    parts, i, v = [], iter(image_tiles), iter(per_video)
    for kind in order:
        parts.append(next(i) if kind == "image" else next(v))
    hf["pixel_values"] = torch.cat(parts) if parts else hf.get("pixel_values")
    return hf


def _mm_token_type_ids(processor: Any, enc: Any, expanded: list[str], batch: "PackedBatch",
                       token: str | None) -> list[list[int]]:
    """1 on image tokens, as the processor's ``create_mm_token_type_ids`` marks them."""
    import inspect
    ids = enc["input_ids"]
    rows = [r.tolist() if hasattr(r, "tolist") else list(r) for r in ids]
    create = getattr(processor, "create_mm_token_type_ids", None)
    if create is not None and len(inspect.signature(create).parameters) == 1:
        return create(rows)
    # Idefics3-style (create_mm_token_type_ids(input_ids, seq_lengths)) or a bare tokenizer:
    # mark every token inside each placeholder span.
    placeholders = placeholders_of(batch)
    out, k = [], 0
    for b, text in enumerate(expanded):
        types = [0] * len(rows[b])
        pos = 0
        while k < len(placeholders):
            start = text.find(placeholders[k], pos)
            if start < 0 or not placeholders[k]:
                break
            end = start + len(placeholders[k])
            t0, t1 = enc.char_to_token(b, start), enc.char_to_token(b, end - 1)
            if t0 is not None and t1 is not None:
                for t in range(t0, t1 + 1):
                    types[t] = 1
            pos, k = end, k + 1
        out.append(types)
    return out


def _mllama_cross_attention_mask(processor: Any, out: dict, hf: dict):
    """MllamaProcessor's ``cross_attention_mask (B, L, max_images, max_tiles)``."""
    import torch
    from transformers.models.mllama.processing_mllama import (
        convert_sparse_cross_attention_mask_to_dense,
        get_cross_attention_token_mask,
    )
    ids = out["input_ids"]
    rows = [r.tolist() if hasattr(r, "tolist") else list(r) for r in ids]
    sparse = [get_cross_attention_token_mask(r, processor.image_token_id) for r in rows]
    mask = convert_sparse_cross_attention_mask_to_dense(
        sparse, num_tiles=hf["num_tiles"], max_num_tiles=processor.image_processor.max_image_tiles,
        length=max(len(r) for r in rows))
    return torch.from_numpy(mask)
