"""Full-form rows on the consumer's device: what adapters hand to engines and models that take
transformers' layout (Qwen ``[c, t, py, px]`` rows), from a batch of either row form.

    full_form(batch, device=None) -> the batch with row_form "full", pixel_values on ``device``

A compact batch's rows are moved to ``device`` first and expanded there
(``PackedBatch.full_rows``: one full-size copy, on the consumer's device; never a full-size host
copy when ``device`` is a GPU); a full batch's rows are moved. ``batch.videos`` (always full rows)
is moved too. Only ``pixel_values`` change: the host fields (``grid_thw``, plans, ...) are
shared, so the result is for ``to_hf()`` / handing over, not for further packing.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from ..pack import PackedBatch

__all__ = ["full_form"]


def full_form(batch: "PackedBatch", device: "str | torch.device | None" = None) -> "PackedBatch":
    """``batch`` with full-form ``pixel_values`` on ``device`` (default: the batch's device);
    the batch itself when there is nothing to do."""
    vids = batch.videos
    if device is not None and vids is not None:
        vids = full_form(vids, device)
    if batch.row_form == "full" and device is None:
        return batch
    return replace(batch, pixel_values=batch.full_rows(device=device), row_form="full",
                   videos=vids)
