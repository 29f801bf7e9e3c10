"""Precomputed image embeddings handed to an engine: validated once, for vLLM and SGLang alike."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["concat_embeds"]


def concat_embeds(embeds: Any, tokens: list[int], where: str,
                  hidden_size: int | None = None) -> "torch.Tensor":
    """One ``(rows_i, hidden)`` tensor per image, or all of them concatenated, ->
    ``(sum rows, hidden)`` float; ``tokens`` are the images' embedding rows
    (``batch.num_embeddings`` of the good images), ``where`` names the caller in error messages
    (expected / got / fix). A 3-D ``(tiles, tokens_per_tile, hidden)`` tensor whose first two
    dims hold the rows (``vit.encode``'s InternVL / LLaVA output) is flattened, the order the LLM
    consumes."""
    import torch

    def rows2d(e: Any, n: int) -> Any:
        if torch.is_tensor(e) and e.ndim == 3 and e.shape[0] * e.shape[1] == n:
            return e.flatten(0, 1)
        return e

    def fail(what: str, expected: str, got: str, fix: str) -> ValueError:
        return ValueError(f"{where}: {what}: expected {expected}, got {got}; {fix}")

    if isinstance(embeds, (list, tuple)):
        if len(embeds) != len(tokens):
            raise fail("embeds", f"{len(tokens)} tensors (one per image)", f"{len(embeds)}",
                       "pass one embedding tensor per processed image, in order")
        embeds = [rows2d(e, n) for e, n in zip(embeds, tokens)]
        for i, (e, n) in enumerate(zip(embeds, tokens)):
            if not torch.is_tensor(e) or e.ndim != 2 or e.shape[0] != n:
                shape = tuple(e.shape) if torch.is_tensor(e) else type(e).__name__
                raise fail(f"embeds[{i}]", f"shape ({n}, hidden) (that image's num_embeddings)",
                           f"{shape}", "encode the image with the model's vision tower + merger")
        flat = torch.cat(list(embeds)) if embeds else torch.empty(0, hidden_size or 0)
    elif torch.is_tensor(embeds):
        embeds = rows2d(embeds, sum(tokens))
        if embeds.ndim != 2 or embeds.shape[0] != sum(tokens):
            raise fail("embeds", f"shape ({sum(tokens)}, hidden) (all images' num_embeddings "
                       f"{tokens} concatenated)", f"{tuple(embeds.shape)}",
                       "concatenate the per-image embeddings in image order")
        flat = embeds
    else:
        raise TypeError(f"{where}: expected embeds: Tensor or list of Tensors, got "
                        f"{type(embeds).__name__}")
    if not flat.is_floating_point():
        raise fail("embeds dtype", "a float dtype", str(flat.dtype), "pass the tower's output")
    if hidden_size is not None and flat.shape[-1] != hidden_size:
        raise fail("embeds hidden size", f"{hidden_size}", f"{flat.shape[-1]}",
                   "for Qwen3-VL concatenate the deepstack features on the last dim")
    return flat
