"""A PackedBatch of image items -> one shard row per item: what the image rows (``rows``) and the
PDF page rows (``document_rows``) both make from their Processor calls.

    Given  a qwen2-vl batch of 2 images, their samples and plans
    Output 2 rows: grid_thw, seqlens, num_tokens, placeholder and the image's own pixel bytes
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from .schema import WORDS, host_words, make_row

if TYPE_CHECKING:
    from ..pack import PackedBatch
    from ..plan import ImagePlan

__all__ = ["rows_of_batch"]


def rows_of_batch(batch: "PackedBatch", samples: Sequence[Any], plans: Sequence["ImagePlan"],
                  dtype: str) -> list[dict]:
    """Row ``j`` of item ``j`` of ``batch`` (``samples[j]``: its ``id`` / ``source``;
    ``plans[j]``: its plan): its pixel bytes, grid, tokens and placeholder, or an error row
    with ``batch.errors[j]``'s reason."""
    shape = list(batch.pixel_values.shape[1:])
    words = host_words(batch.pixel_values, dtype)
    row_bytes = math.prod(shape) * WORDS[dtype][1]
    grids = batch.grid_thw.tolist()
    seq = byte = 0
    out = []
    for j, (sample, plan) in enumerate(zip(samples, plans, strict=True)):
        if j in batch.errors:
            out.append(make_row(sample, dtype, batch.layout, shape, plan.source_hw,
                                error=batch.errors[j].reason))
            continue
        n_seq = len(plan.grid_thw)
        lens = batch.seqlens[seq:seq + n_seq]
        grid = [int(v) for g in grids[seq:seq + n_seq] for v in g]
        n_bytes = (sum(lens) if batch.layout == "patches" else n_seq) * row_bytes
        out.append(make_row(sample, dtype, batch.layout, shape, plan.source_hw, grid=grid,
                            seqlens=lens, num_tokens=batch.num_tokens[j],
                            placeholder=batch.placeholders[j],
                            pixel_values=bytes(words[byte:byte + n_bytes])))
        seq += n_seq
        byte += n_bytes
    return out
