"""vLLM adapter: a PackedBatch's ViT embeddings -> the prompt dict ``LLM.generate`` takes.

vLLM expands the image placeholder itself, so the prompt keeps ONE image token per image (for
Qwen: ``<|vision_start|><|image_pad|><|vision_end|>``, ``Qwen2VLForConditionalGeneration.
get_placeholder_str``) and vLLM replaces it by the family's full placeholder. Embeddings fill only
the image-context tokens inside it (``batch.num_embeddings``: InternVL's ``<img>``/``</img>``,
Idefics3's row / global markers are not embedding rows).

What released vLLM 0.33.0 accepts (read from its ``vllm/multimodal/parse.py``,
``vllm/utils/tensor_schema.py`` and each model's ``_parse_and_validate_image_input``; needs
``LLM(..., enable_mm_embeds=True)``), by the batch's ``to_hf`` form:

- ``qwen2_vl`` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): one dict, images of any sizes::

      {"image": {"image_embeds": (sum_i num_embeddings_i, hidden) float,   # flat; vLLM splits
                 "image_grid_thw": (num_images, 3) int64}}                 # by grid.prod // merge**2

  Qwen3-VL's embeds carry the deepstack features concatenated on the last dim.
- ``got_ocr2`` (InternVL), ``llava_next``, ``llava_onevision``, ``images`` (LLaVA-1.5): a
  ``(num_images, num_embeddings, hidden)`` tensor under ``"image"``. vLLM stacks a request's images
  and the model's schema has no dynamic size there, so images of different ``num_embeddings``
  cannot share a request ("data contains inconsistent shapes"):
  ``prompt_inputs`` refuses them and ``prompt_inputs_per_image`` makes one request per image.
- ``minicpmv`` (MiniCPM-V 4.6): one dict, images of any sizes (``minicpmv.py``
  ``MiniCPMVMultiModalDataParser.embedding_fields``; vLLM sizes each placeholder from the image's
  size, as for the image itself)::

      {"image": {"image_embeds": [(num_embeddings_i, hidden) per image],  # the slices' rows
                 "image_sizes": (num_images, 2) int64}}                   # [width, height]

- ``pixtral``, ``idefics3``, ``gemma3``, ``mllama``, vision-only families: no embedding input in
  vLLM 0.33 (refused, with vLLM's reason): give vLLM the images.

The processed-pixel dict ``{"pixel_values", "image_grid_thw"}`` is NOT accepted by vLLM 0.33
(its Qwen2-VL parser requires ``{'image_grid_thw', 'image_embeds'}``); it needs a vLLM with the
pre-computed processor output parser (PR #50160) and is built only with ``processed_pixels=True``::

      {"image": {"pixel_values": (sum_i t*h*w, 3*T*P*P), "image_grid_thw": (num_images, 3) int64}}

  Full rows always (the engine's layout): a compact batch (``row_form="compact"``) is expanded
  on ``device=`` (default: the batch's device), once, there: ``batch.full_rows(device)``.

  ``pixel_values`` dtype follows the engine's ``mm_device_do_normalize`` (PR #50411): on ->
  uint8 (``vlmprep.Processor(..., dtype="uint8")``, ``device_normalize=True``); off ->
  normalized float. The dtype is checked against ``device_normalize``.

Videos (``batch.videos``, ``video_embeds=``): the prompt holds ONE video token per video
(``<|vision_start|><|video_pad|><|vision_end|>`` for Qwen) and vLLM 0.33 takes, for Qwen only
(``qwen2_vl.py`` ``Qwen2VLMultiModalDataParser.embedding_fields["video"]``; Qwen3-VL adds
``"timestamps": "metadata"`` in ``qwen3_vl.py``)::

      {"video": {"video_embeds": (sum_v num_embeddings_v, hidden) float,  # flat; split by
                 "video_grid_thw": (num_videos, 3) int64,                 # grid.prod // merge**2
                 "timestamps": [[seconds per temporal group] per video]}}  # Qwen3-VL only

  vLLM builds Qwen3-VL's ``<t seconds>`` prompt text from ``timestamps`` (the plan's
  ``group_timestamps``, the same values the transformers processor writes). Qwen2.5-VL's
  ``second_per_grid_ts`` is not an embedding field (vLLM drops it and places M-RoPE at 1.0 s per
  temporal group): refused unless it is 1.0 (2 fps sampling, the default). Other families have no
  video-embedding input vLLM 0.33 uses (``_NO_VIDEO_EMBEDDINGS`` says why): refused; give vLLM
  the frames.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .. import presets
from ..hf_forms import hf_output
from ._embeds import concat_embeds
from .transformers import prompt_image_token, prompt_video_token

if TYPE_CHECKING:
    import torch

    from ..pack import PackedBatch

__all__ = ["prompt_inputs", "prompt_inputs_per_image", "EMBEDDING_FORMS"]  # noqa: F822 (module __getattr__)

_FLOATS = ("float32", "float16", "bfloat16")

# The family tables are derived from the families' declarations (``vlmprep.presets.forms()``:
# each ``presets/<family>.py`` declares its forms' ``FormSpec``), on access, so a family added with
# ``presets.register`` is in them:
#
# - ``EMBEDDING_FORMS``: ``to_hf`` form -> how vLLM 0.33 takes the embeddings of one request:
#   ``"flat"`` (one concatenated tensor + ``image_grid_thw``; mixed sizes fine), ``"stacked"``
#   (one ``(num_images, num_embeddings, hidden)`` tensor: one size per request) or ``"sized"``
#   (one tensor per image + ``image_sizes``; mixed sizes fine) (``FormSpec.vllm_embeds``).
#   Forms absent there have no embedding input in vLLM 0.33.
# - ``_NO_EMBEDDINGS``: form -> why vLLM 0.33 takes no image embeddings (``vllm_no_embeds``).
# - ``_NO_VIDEO_EMBEDDINGS``: form -> why vLLM 0.33 cannot take this family's video embeddings
#   (``vllm_no_video_embeds``); Qwen (``qwen2_vl``) is the one form it takes.
_TABLES = {"EMBEDDING_FORMS": "vllm_embeds", "_NO_EMBEDDINGS": "vllm_no_embeds",
           "_NO_VIDEO_EMBEDDINGS": "vllm_no_video_embeds"}


def _table(name: str) -> dict[str, str]:
    """One of ``_TABLES``: form -> the declared value, for the forms that declare one."""
    attr = _TABLES[name]
    return {f.name: getattr(f, attr) for f in presets.forms().values() if getattr(f, attr)}


def __getattr__(name: str) -> Any:
    if name in _TABLES:
        return _table(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fail(what: str, expected: str, got: str, fix: str, where: str = "vllm.prompt_inputs"
          ) -> ValueError:
    return ValueError(f"{where}: {what}: expected {expected}, got {got}; {fix}")


def _form(batch: "PackedBatch") -> str:
    return hf_output(batch.pipeline)


def _good_grid(batch: "PackedBatch") -> "torch.Tensor":
    """``(num_good_images, 3)`` int64: one grid per image (Qwen-style: one sequence per image)."""
    return batch.grid_thw.to("cpu", dtype=__import__("torch").int64)


def _good(values: list[int], batch: "PackedBatch") -> list[int]:
    return [n for i, n in enumerate(values) if i not in batch.errors]


def _embedding_form(batch: "PackedBatch", where: str) -> str:
    """``"flat"``, ``"stacked"`` or ``"sized"`` for this batch's family; raises where vLLM 0.33
    takes none."""
    form = _form(batch)
    no_token = batch.pipeline is not None and not batch.pipeline.pack.image_token
    none = _table("_NO_EMBEDDINGS")
    layouts = _table("EMBEDDING_FORMS")
    if form in none or no_token:
        reason = none.get(form, "this family has no LLM image token (a vision encoder)")
        raise _fail("embeds", f"a family with an embedding input in vLLM 0.33 (forms "
                    f"{sorted(layouts)})", f"form {form!r}: {reason}",
                    "give vLLM the images themselves (multi_modal_data={'image': [PIL images]})",
                    where)
    return layouts.get(form, "stacked")


def _check_prompt(prompt: Any, batch: "PackedBatch", image_token: str | None,
                  where: str = "vllm.prompt_inputs") -> None:
    n = batch.num_images - len(batch.errors)
    if isinstance(prompt, str):
        tok = image_token if image_token is not None else prompt_image_token(batch)
        got = prompt.count(tok)
        if got != n:
            raise _fail("prompt placeholders", f"{n} {tok!r} (one per image; vLLM expands each)",
                        f"{got}", "write the image token once per image and do not pre-expand "
                        "it (expand_prompt is for transformers, not vLLM)", where)
    else:
        raise TypeError(f"{where}: expected prompt: str, got {type(prompt).__name__}")


def prompt_inputs(prompt: str, batch: "PackedBatch",
                  embeds: "torch.Tensor | Sequence[torch.Tensor] | None" = None,
                  *, video_embeds: "torch.Tensor | Sequence[torch.Tensor] | None" = None,
                  image_token: str | None = None, video_token: str | None = None,
                  hidden_size: int | None = None, processed_pixels: bool = False,
                  device_normalize: bool = False, device: "str | torch.device | None" = None
                  ) -> dict:
    """The vLLM prompt dict for ``LLM.generate(...)`` (one request).

    Args:
        prompt: text with ONE image token per processed image (vLLM expands it).
        batch: the request's images.
        embeds: the images' embeddings (vision tower + merger / projector output): one
            ``(num_embeddings_i, hidden)`` tensor per image, or all concatenated
            ``(sum num_embeddings, hidden)``; ``batch.num_embeddings`` gives the rows.
            ``vit.encode``'s ``(tiles_i, tokens_per_tile, hidden)`` per image is flattened.
        image_token: the prompt's image token (default: the family's).
        hidden_size: if given, the embeds' last dim is checked against it. Required for
            Qwen3-VL (``vision_config.out_hidden_size * (1 + len(deepstack_visual_indexes))``:
            vLLM splits the deepstack features off each row; ``vit.encode(..., deepstack=True)``).
        processed_pixels: build the pixel dict instead (Qwen-style batches, no ``embeds``). NOT
            accepted by vLLM 0.33: only by a vLLM with PR #50160 (pre-computed processor outputs).
        device_normalize: with ``processed_pixels``, the engine's ``mm_device_do_normalize``:
            True -> pixels must be uint8 (``dtype="uint8"`` batch), False -> normalized float.
        device: with ``processed_pixels``, where the ``pixel_values`` handed to vLLM are made
            (default: the batch's device). The engine takes full rows: a compact batch
            (``row_form="compact"``) is moved there and expanded there (``batch.full_rows(
            device)``: no full-size host copy for a GPU device); video rows are moved.
        video_embeds: the videos' embeddings (``batch.videos``; ``vit.encode(tower,
            batch.videos)``): one ``(num_embeddings_v, hidden)`` tensor per video or all
            concatenated (``batch.videos.num_embeddings``). Qwen families only (module doc).
        video_token: the prompt's video token (default: ``<|video_pad|>`` for Qwen).

    Returns ``{"prompt": prompt, "multi_modal_data": {"image": ..., "video": ...}}`` (see the
    module doc; ``"image"`` only when the batch has images or ``embeds`` is given, ``"video"``
    only when it has videos).
    Raises ValueError (expected / got / fix) on a shape, count, dtype or form vLLM rejects:
    no ``embeds`` without ``processed_pixels=True``; images of different ``num_embeddings``
    for a ``"stacked"`` family (use ``prompt_inputs_per_image``).
    """
    if getattr(batch, "modality", "image") == "video":
        raise _fail("batch", "the Processor's batch (videos in batch.videos)", "its .videos part",
                    "pass the batch proc(images, videos=...) returned")
    _check_prompt(prompt, batch, image_token)
    vids = getattr(batch, "videos", None)
    vids = vids if vids is not None and vids.num_images else None
    if vids is None and video_embeds is not None:
        raise _fail("video_embeds", "a batch with videos (proc(images, videos=[...]))",
                    "a batch without videos", "drop video_embeds=, or process the videos too")
    mm: dict[str, Any] = {}
    out = {"prompt": prompt, "multi_modal_data": mm}
    if vids is not None:
        mm["video"] = _video_item(prompt, vids, video_embeds, video_token, hidden_size,
                                  processed_pixels, device_normalize, device)
        if batch.num_images == len(batch.errors) and embeds is None:
            return out  # videos only
    mm["image"] = _image_item(batch, embeds, hidden_size, processed_pixels, device_normalize,
                              device)
    return out


def _image_item(batch: "PackedBatch", embeds: Any, hidden_size: int | None,
                processed_pixels: bool, device_normalize: bool, device: Any) -> Any:
    """``multi_modal_data["image"]`` of ``prompt_inputs``."""
    if embeds is None:
        if not processed_pixels:
            raise _fail("embeds", "the images' embeddings (the form vLLM 0.33 accepts, with "
                        "LLM(..., enable_mm_embeds=True))", "None",
                        "pass embeds=vlmprep.adapters.vit.encode(vision_tower, batch) (rows: "
                        "batch.num_embeddings); the pixel dict {'pixel_values', 'image_grid_thw'} "
                        "is rejected by vLLM 0.33 ('The data should contain the fields: "
                        "{'image_grid_thw', 'image_embeds'}') and needs a vLLM with PR #50160: "
                        "ask for it with processed_pixels=True")
        return _pixels(batch, device_normalize, device)
    if processed_pixels:
        raise _fail("processed_pixels", "False with embeds= (one form per request)", "True",
                    "drop embeds= for the pixel dict, or processed_pixels for embeddings")
    _need_deepstack_width(batch, hidden_size, "vllm.prompt_inputs")
    return _embeds_item(batch, embeds, hidden_size, "vllm.prompt_inputs")


def _need_deepstack_width(batch: "PackedBatch", hidden_size: int | None, where: str) -> None:
    """Qwen3-VL: vLLM splits each embedding row into the merger output and the deepstack
    features (``split_with_sizes``), so rows without them fail inside the engine at run time;
    the width is required up front to check them here."""
    name = batch.pipeline.name if batch.pipeline is not None else ""
    if name == "qwen3-vl" and hidden_size is None:
        raise _fail("hidden_size", "the width vLLM's Qwen3-VL splits each embedding row by: "
                    "vision_config.out_hidden_size * (1 + len(vision_config.deepstack_visual_indexes))",
                    "None", "encode with vit.encode(tower, batch, deepstack=True) and pass "
                    "hidden_size=cfg.vision_config.out_hidden_size * (1 + len(cfg.vision_config."
                    "deepstack_visual_indexes)) (without the deepstack features vLLM fails at run "
                    "time: 'split_with_sizes ... got split_sizes=[D, D]')", where)


def _video_item(prompt: str, vids: "PackedBatch", video_embeds: Any, video_token: str | None,
                hidden_size: int | None, processed_pixels: bool, device_normalize: bool,
                device: Any) -> dict:
    """``multi_modal_data["video"]`` for the good videos of ``vids`` (a ``"video"`` batch)."""
    where = "vllm.prompt_inputs (videos)"
    form = _form(vids)
    if form != "qwen2_vl":
        reason = _table("_NO_VIDEO_EMBEDDINGS").get(form, "no video input in vLLM 0.33")
        raise _fail("videos", "a Qwen-family batch (form 'qwen2_vl': the one video-embedding "
                    "input vLLM 0.33 uses)", f"form {form!r}: {reason}",
                    "give vLLM the decoded frames themselves (multi_modal_data={'video': ...}; "
                    "its own video processor runs)", where)
    tok = video_token if video_token is not None else prompt_video_token(vids)
    n = vids.num_images - len(vids.errors)
    if prompt.count(tok) != n:
        raise _fail("prompt video placeholders", f"{n} {tok!r} (one per video; vLLM expands "
                    f"each)", f"{prompt.count(tok)}", "write the video token once per video and "
                    "do not pre-expand it", where)
    plans = [p for p in vids.video_plans if p.index not in vids.errors]
    secs = [float(p.second_per_grid_ts) for p in plans if p.second_per_grid_ts is not None]
    if any(abs(x - 1.0) > 1e-9 for x in secs):
        raise _fail("second_per_grid_ts", "1.0 for every video (vLLM 0.33 drops it from embedding "
                    "inputs and places Qwen2.5-VL's M-RoPE at 1.0 s per temporal group)",
                    f"{secs}", "sample at fps=2.0 (temporal_patch_size / fps = 1.0), or give "
                    "vLLM the frames", where)
    grid = _good_grid(vids)
    if video_embeds is None:
        if not processed_pixels:
            raise _fail("video_embeds", "the videos' embeddings (vit.encode(tower, batch.videos); "
                        "LLM(..., enable_mm_embeds=True))", "None", "pass video_embeds=, or "
                        "processed_pixels=True for a vLLM with PR #50160", where)
        pix = _pixels(vids, device_normalize, device)
        item: dict[str, Any] = {"pixel_values_videos": pix["pixel_values"],
                                "video_grid_thw": pix["image_grid_thw"]}
    else:
        _need_deepstack_width(vids, hidden_size, where)
        rows = _good(vids.num_embeddings, vids)
        flat = concat_embeds(video_embeds, rows, where, hidden_size)
        merge = vids.pipeline.patchify.merge_size if vids.pipeline is not None else 2
        per = (grid.prod(-1) // merge ** 2).tolist()
        if per != rows:
            raise _fail("video_grid_thw", f"prod(grid) // {merge}**2 == num_embeddings {rows}",
                        f"{per}", "make the batch with vlmprep.Processor", where)
        item = {"video_embeds": flat, "video_grid_thw": grid}
    stamps = [p.group_timestamps for p in plans]
    if plans and all(t is not None for t in stamps):  # Qwen3-VL: a required field
        item["timestamps"] = [list(map(float, t)) for t in stamps if t is not None]
    return item


def prompt_inputs_per_image(prompts: "str | Sequence[str]", batch: "PackedBatch",
                            embeds: "torch.Tensor | Sequence[torch.Tensor]", *,
                            image_token: str | None = None,
                            hidden_size: int | None = None) -> list[dict]:
    """One vLLM request per processed image: what families whose requests hold one embedding
    size (``EMBEDDING_FORMS[form] == "stacked"``: InternVL, LLaVA-NeXT / OneVision) need for
    images of different ``num_embeddings``; works for every family with an embedding input.

    Args:
        prompts: one text per input image (``batch.num_images``; a skipped image's text is
            ignored) or one text for all, each with ONE image token.
        batch, embeds, image_token, hidden_size: as ``prompt_inputs``.

    Returns ``[prompt_inputs(prompt_i, image_i, embeds_i)]`` for the images not in
    ``batch.errors``, in input order. vLLM may still stack the images of requests scheduled in
    the same step (docs/how-to/vllm.md).
    """
    import torch
    where = "vllm.prompt_inputs_per_image"
    vids = getattr(batch, "videos", None)
    if vids is not None and vids.num_images:
        raise _fail("videos", "a batch of images only", f"{vids.num_images} videos in "
                    "batch.videos", "send videos with prompt_inputs(prompt, batch, "
                    "video_embeds=...) (Qwen), one request per video if needed", where)
    if isinstance(prompts, str):
        prompts = [prompts] * batch.num_images
    if len(prompts) != batch.num_images:
        raise _fail("prompts", f"{batch.num_images} texts (one per input image) or one str",
                    f"{len(prompts)}", "give one prompt per image, skipped ones included", where)
    rows = _good(batch.num_embeddings, batch)
    _embedding_form(batch, where)
    flat = concat_embeds(embeds, rows, where, hidden_size)
    parts = iter(torch.split(flat, rows))
    out = []
    for i, single in enumerate(batch.split()):
        if i in batch.errors:
            continue
        _check_prompt(prompts[i], single, image_token, where)
        out.append({"prompt": prompts[i], "multi_modal_data": {
            "image": _embeds_item(single, next(parts), hidden_size, where)}})
    return out


def _embeds_item(batch: "PackedBatch", embeds: Any, hidden_size: int | None, where: str) -> Any:
    """The ``multi_modal_data["image"]`` value for ``embeds`` in the family's vLLM form."""
    kind = _embedding_form(batch, where)
    rows = _good(batch.num_embeddings, batch)
    flat = concat_embeds(embeds, rows, where, hidden_size)
    if kind == "flat":
        grid = _good_grid(batch)
        merge = batch.pipeline.patchify.merge_size if batch.pipeline is not None else 2
        per = (grid.prod(-1) // merge ** 2).tolist()
        if per != rows:
            raise _fail("image_grid_thw", f"prod(grid) // {merge}**2 == num_embeddings {rows}",
                        f"{per}", "make the batch with vlmprep.Processor (one grid per image)",
                        where)
        return {"image_embeds": flat, "image_grid_thw": grid}
    if kind == "sized":
        return {"image_embeds": list(flat.split(rows)), "image_sizes": _image_sizes(batch)}
    if len(set(rows)) > 1:
        raise _fail("embeds sizes", f"one num_embeddings per request for form {_form(batch)!r} "
                    "(vLLM 0.33 stacks a request's image embeddings; mixed sizes fail its "
                    "schema: 'data contains inconsistent shapes')", f"num_embeddings {rows}",
                    "send one request per image: vlmprep.adapters.vllm.prompt_inputs_per_image("
                    "prompts, batch, embeds), or group images of equal num_embeddings", where)
    # (num_images, num_embeddings, hidden): the batched form every "stacked" schema takes
    return flat.reshape(len(rows), rows[0] if rows else 0, flat.shape[-1])


def _image_sizes(batch: "PackedBatch") -> "torch.Tensor":
    """``(num_good_images, 2)`` int64: each good image's ``[width, height]`` as loaded (after EXIF
    orientation), what vLLM sizes a ``"sized"`` family's placeholder from."""
    import torch
    plans = [p for p in batch.image_plans if p.index not in batch.errors]
    return torch.tensor([[p.source_hw[1], p.source_hw[0]] for p in plans], dtype=torch.int64)


def _pixels(batch: "PackedBatch", device_normalize: bool, device: Any = None) -> dict:
    """The processed-pixel dict (vLLM with PR #50160 only), dtype checked; full rows made on
    ``device`` (a compact batch expanded there)."""
    form = _form(batch)
    if form != "qwen2_vl":
        raise _fail("pixel form", "a Qwen2-VL-style batch (layout 'patches', to_hf form "
                    "'qwen2_vl')", f"form {form!r}", "pass embeds= (vLLM takes precomputed "
                    "embeddings), or give vLLM the images themselves")
    dt = str(batch.pixel_values.dtype).replace("torch.", "")
    if device_normalize and dt != "uint8":
        raise _fail("pixel_values dtype", "uint8 (mm_device_do_normalize on: the engine "
                    "normalizes on the GPU)", dt, "process with vlmprep.Processor(..., "
                    "dtype='uint8'), or pass device_normalize=False if the engine has it off")
    if not device_normalize and dt not in _FLOATS:
        raise _fail("pixel_values dtype", f"one of {_FLOATS} (normalized; "
                    "mm_device_do_normalize off)", dt, "process with dtype='float32', or pass "
                    "device_normalize=True if the engine normalizes on the device")
    grid = _good_grid(batch)
    tokens = _good(batch.num_tokens, batch)
    rows = int(grid.prod(-1).sum())
    pv = batch.pixel_values
    if pv.ndim != 2 or pv.shape[0] != rows:
        raise _fail("pixel_values shape", f"(sum t*h*w = {rows}, patch_dim)",
                    f"{tuple(pv.shape)}", "pass the PackedBatch unchanged")
    if grid.shape[0] != len(tokens):
        raise _fail("image_grid_thw", f"{len(tokens)} rows (one per image)",
                    f"{grid.shape[0]}", "use a Qwen-style batch (one sequence per image)")
    # The engine's layout is the full rows: a compact batch is expanded on ``device``.
    return {"pixel_values": batch.full_rows(device=device), "image_grid_thw": grid}
