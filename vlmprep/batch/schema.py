"""The shard row schema: one processed image or video as plain values, and the helpers every row
maker shares (``rows`` for images, ``video_rows`` for videos).

A row is a dict with the keys ``ROW_COLUMNS``, holding only Python values and bytes (picklable,
Arrow- and JSON-friendly):

    id, source         the sample's id and where it came from (for messages)
    status, error      "ok" and None, or "error" and the reason text (never an exception)
    dtype, layout      "float32" | "bfloat16" | "uint8"; "patches" | "tiles"
    grid_thw           flat list of ints, 3 per ViT sequence: [t0, h0, w0, t1, h1, w1, ...]
    seqlens            patches per sequence (t * h * w)
    num_patches        sum(seqlens)
    num_tokens         LLM placeholder tokens (0 for an error row)
    placeholder        the prompt placeholder string ("" for an error row)
    row_shape          pixel_values.shape[1:]: [patch_dim] ("patches") or [C, H, W] ("tiles")
    orig_hw            [H, W] of the source after EXIF orientation (a video: its decoded frame
                       size, after the rotation; [0, 0] when unknown)
    pixel_values       raw little-endian C-order bytes of this sample's rows (b"" for an error
                       row); bfloat16 as its raw 2-byte words (Arrow and numpy have no bfloat16)
    modality           "image" or "video" (a video's rows are what ``batch.videos`` holds)
    video              a video row: JSON of its plan beyond the columns above (``video_rows``:
                       the container metadata, the sampled frame indices, ...); None otherwise

A tiny example (qwen2-vl, float32, a 56x56 image)::

    grid_thw [1, 4, 4], seqlens [16], num_patches 16, num_tokens 4, row_shape [1176],
    orig_hw [56, 56], pixel_values: 16 * 1176 * 4 = 75264 bytes, modality "image", video None

Shards written before videos (schema "1") have no ``modality`` / ``video``: their rows read as
images (``with_defaults``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..plan.grid import row_length

if TYPE_CHECKING:
    import torch

    from ..pipeline import Pipeline

__all__ = ["ROW_COLUMNS", "WORDS", "MODALITIES", "make_row", "host_words", "row_layout",
           "row_shape_of", "with_defaults"]

ROW_COLUMNS = ("id", "source", "status", "error", "dtype", "layout", "grid_thw", "seqlens",
               "num_patches", "num_tokens", "placeholder", "row_shape", "orig_hw", "pixel_values",
               "modality", "video")

#: The values of the ``modality`` column.
MODALITIES = ("image", "video")

#: Columns a schema "1" shard lacks, and the value its rows have (they are all images).
_ADDED = {"modality": "image", "video": None}

#: dtype -> (little-endian numpy word type, bytes per element). bfloat16 travels as 2-byte words.
WORDS = {"float32": ("<f4", 4), "bfloat16": ("<i2", 2), "uint8": ("|u1", 1)}


def row_layout(pipeline: "Pipeline") -> str:
    """``"tiles"`` or ``"patches"``: the PackedBatch layout this pipeline produces."""
    return "tiles" if pipeline.patchify.order == "tiles" else "patches"


def row_shape_of(pipeline: "Pipeline") -> list[int]:
    """``pixel_values.shape[1:]`` of this pipeline's batches: ``[C, H, W]`` or ``[patch_dim]``."""
    if row_layout(pipeline) == "tiles":
        return [3, *pipeline.tile_hw]  # type: ignore[misc]
    return [row_length(pipeline.patchify)]


def make_row(sample: Any, dtype: str, layout: str, row_shape: Sequence[int],
             orig_hw: Sequence[int], *, error: str | None = None, grid: list[int] | None = None,
             seqlens: list[int] | None = None, num_tokens: int = 0, placeholder: str = "",
             pixel_values: bytes = b"", modality: str = "image", video: str | None = None) -> dict:
    """One row (keys ``ROW_COLUMNS``) of ``sample`` (anything with ``id`` and ``source``)."""
    seqlens = list(seqlens or [])
    return {"id": sample.id, "source": sample.source, "status": "ok" if error is None else "error",
            "error": error, "dtype": dtype, "layout": layout, "grid_thw": list(grid or []),
            "seqlens": seqlens, "num_patches": sum(seqlens), "num_tokens": int(num_tokens),
            "placeholder": placeholder, "row_shape": list(row_shape),
            "orig_hw": [int(orig_hw[0]), int(orig_hw[1])], "pixel_values": pixel_values,
            "modality": modality, "video": video}


def with_defaults(row: Mapping[str, Any]) -> dict:
    """``row`` with the columns a schema "1" shard lacks filled in (an image row)."""
    out = dict(row)
    for k, v in _ADDED.items():
        out.setdefault(k, v)
    return out


def host_words(pv: "torch.Tensor", dtype: str) -> memoryview:
    """``pv`` (any device) as a flat byte view of little-endian C-order words (one host copy
    at most)."""
    import numpy as np  # deferred: numpy and torch are heavy; importing the shard schema needs neither
    import torch
    t = pv.detach().cpu().contiguous()
    if dtype == "bfloat16":
        t = t.view(torch.int16)  # the raw 2-byte words
    arr = np.ascontiguousarray(t.numpy().astype(WORDS[dtype][0], copy=False))
    return memoryview(arr.reshape(-1).view(np.uint8).data)
