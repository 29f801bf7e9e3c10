"""vLLM adapter: a PackedBatch (or its ViT embeddings) -> the prompt dict ``LLM.generate`` takes.

vLLM expands the image placeholder itself, so the prompt keeps ONE image token per image (for
Qwen: ``<|vision_start|><|image_pad|><|vision_end|>``, ``Qwen2VLForConditionalGeneration.
get_placeholder_str``) and vLLM replaces it by ``prod(grid_thw) // merge_size**2`` copies.

Schemas (vLLM V1, ``vllm/multimodal/inputs.py`` + ``vllm/model_executor/models/qwen2_vl.py``):

- Embeddings (supported; needs ``LLM(..., enable_mm_embeds=True)``)::

      {"prompt": str, "multi_modal_data": {"image": {
          "image_embeds": (sum_i tokens_i, hidden) float,   # flat; split per image by
          "image_grid_thw": (num_images, 3) int64}}}        # grid.prod(-1) // merge**2

  Qwen3-VL's embeds carry the deepstack features concatenated on the last dim.
  Non-Qwen families take a tensor ``(num_images, tokens, hidden)`` (or a list of
  ``(tokens_i, hidden)``) directly under ``"image"``.
- Processed pixels (Qwen2-VL-style; accepted by vLLM builds with the pre-computed processor
  output parser, PR #50160)::

      {"image": {"pixel_values": (sum_i t*h*w, 3*T*P*P), "image_grid_thw": (num_images, 3) int64}}

  ``pixel_values`` dtype follows the engine's ``mm_device_do_normalize`` convention (PR #50411):
  when it is on (its default for models declaring ``supports_mm_device_do_normalize``: Qwen2-VL,
  Qwen2.5-VL), the HF processor runs with ``do_rescale=False, do_normalize=False`` and the vision
  tower's fused input norm applies ``(x / 255 - mean) / std``: pixels are **uint8**
  (``vlmprep.Processor(..., dtype="uint8")``). When it is off, pixels are normalized float.
  ``device_normalize=`` says which one the engine expects, and the dtype is checked against it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ._embeds import concat_embeds

if TYPE_CHECKING:
    import torch

    from ..pack import PackedBatch

__all__ = ["prompt_inputs"]

_FLOATS = ("float32", "float16", "bfloat16")


def _fail(what: str, expected: str, got: str, fix: str) -> ValueError:
    return ValueError(f"vllm.prompt_inputs: {what}: expected {expected}, got {got}; {fix}")


def _form(batch: "PackedBatch") -> str:
    from ..hf_forms import hf_output
    return hf_output(batch.pipeline)


def _good_grid(batch: "PackedBatch") -> "torch.Tensor":
    """``(num_good_images, 3)`` int64: one grid per image (Qwen-style: one sequence per image)."""
    return batch.grid_thw.to("cpu", dtype=__import__("torch").int64)


def _tokens(batch: "PackedBatch") -> list[int]:
    return [n for i, n in enumerate(batch.num_tokens) if i not in batch.errors]


def _check_prompt(prompt: Any, batch: "PackedBatch", image_token: str | None) -> None:
    from .transformers import prompt_image_token
    n = batch.num_images - len(batch.errors)
    if isinstance(prompt, str):
        tok = image_token if image_token is not None else prompt_image_token(batch)
        got = prompt.count(tok)
        if got != n:
            raise _fail("prompt placeholders", f"{n} {tok!r} (one per image; vLLM expands each)",
                        f"{got}", "write the image token once per image and do not pre-expand "
                        "it (expand_prompt is for transformers, not vLLM)")
    else:
        raise TypeError(f"vllm.prompt_inputs: expected prompt: str, got {type(prompt).__name__}")


def prompt_inputs(prompt: str, batch: "PackedBatch", embeds: "torch.Tensor | Sequence[torch.Tensor] | None" = None,
                  *, device_normalize: bool = False, image_token: str | None = None,
                  hidden_size: int | None = None) -> dict:
    """The vLLM prompt dict for ``LLM.generate(...)``.

    Args:
        prompt: text with ONE image token per processed image (vLLM expands it).
        batch: the images' PackedBatch (Qwen-style ``layout="patches"`` for the pixel form).
        embeds: precomputed image embeddings (vision tower + merger output): one
            ``(tokens_i, hidden)`` tensor per image, or all concatenated ``(sum tokens, hidden)``.
        device_normalize: the engine's ``mm_device_do_normalize``: True -> pixels must be uint8
            (``dtype="uint8"`` batch), False -> float32/bfloat16/float16 normalized pixels.
        image_token: the prompt's image token (default: the family's).
        hidden_size: if given, the embeds' last dim is checked against it.

    Returns ``{"prompt": prompt, "multi_modal_data": {"image": ...}}`` (see the module doc).
    Raises ValueError (expected / got / fix) on a shape, count or dtype mismatch.
    """
    import torch
    _check_prompt(prompt, batch, image_token)
    form = _form(batch)
    tokens = _tokens(batch)
    if embeds is not None:
        flat = concat_embeds(embeds, tokens, "vllm.prompt_inputs", hidden_size)
        if form == "qwen2_vl":
            grid = _good_grid(batch)
            merge = batch.pipeline.patchify.merge_size if batch.pipeline is not None else 2
            per = (grid.prod(-1) // merge ** 2).tolist()
            if per != tokens:
                raise _fail("image_grid_thw", f"prod(grid) // {merge}**2 == tokens {tokens}",
                            f"{per}", "make the batch with vlmprep.Processor (one grid per image)")
            image: Any = {"image_embeds": flat, "image_grid_thw": grid}
        else:
            parts = list(torch.split(flat, tokens))
            # (num_images, feature_size, hidden) when every image has as many tokens
            image = torch.stack(parts) if len(set(tokens)) == 1 and tokens else parts
        return {"prompt": prompt, "multi_modal_data": {"image": image}}

    if form != "qwen2_vl":
        raise _fail("pixel form", "a Qwen2-VL-style batch (layout 'patches', to_hf form "
                    "'qwen2_vl')", f"form {form!r}", "pass embeds= (vLLM takes precomputed "
                    "embeddings for every family), or give vLLM the images themselves")
    pv = batch.pixel_values
    dt = str(pv.dtype).replace("torch.", "")
    if device_normalize and dt != "uint8":
        raise _fail("pixel_values dtype", "uint8 (mm_device_do_normalize on: the engine "
                    "normalizes on the GPU)", dt, "process with vlmprep.Processor(..., "
                    "dtype='uint8'), or pass device_normalize=False if the engine has it off")
    if not device_normalize and dt not in _FLOATS:
        raise _fail("pixel_values dtype", f"one of {_FLOATS} (normalized; "
                    "mm_device_do_normalize off)", dt, "process with dtype='float32', or pass "
                    "device_normalize=True if the engine normalizes on the device")
    grid = _good_grid(batch)
    rows = int(grid.prod(-1).sum())
    if pv.ndim != 2 or pv.shape[0] != rows:
        raise _fail("pixel_values shape", f"(sum t*h*w = {rows}, patch_dim)",
                    f"{tuple(pv.shape)}", "pass the PackedBatch unchanged")
    if grid.shape[0] != len(tokens):
        raise _fail("image_grid_thw", f"{len(tokens)} rows (one per image)",
                    f"{grid.shape[0]}", "use a Qwen-style batch (one sequence per image)")
    return {"prompt": prompt,
            "multi_modal_data": {"image": {"pixel_values": pv, "image_grid_thw": grid}}}
