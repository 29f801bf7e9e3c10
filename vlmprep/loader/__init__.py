"""Loading for batch jobs and training: a DataLoader replacement and collate helpers.

    loader = vlmprep.loader.DataLoader(sources, proc, batch_size=8, num_workers=2)  # as torch
    loader = vlmprep.loader.DataLoader(sources, proc, max_batch_tokens=16384)  # a token budget
    for ids, batch in loader: ...                       # batch: PackedBatch, ids: sample ids
    state = loader.state_dict(); loader.load_state_dict(state)   # resume mid-epoch

    torch.utils.data.DataLoader(ds, batch_size=8, collate_fn=vlmprep.loader.hf_collate_fn(proc))

    pages = vlmprep.loader.pages_of(proc, [vlmprep.Document("a.pdf")])  # one sample per page
    loader = vlmprep.loader.DataLoader(pages, proc, max_batch_tokens=16384)

    loader = vlmprep.loader.DataLoader(vlmprep.loader.ShardSource(out_dir), batch_size=8)
    # the samples `vlmprep run` already processed: read from its shards, never decoded

See docs/how-to/loader.md.
"""
from __future__ import annotations

from typing import Any

from .batching import Sample, group_by_tokens, pack_greedy
from .collate import HFCollate, collate_hf, hf_collate_fn
from .dataloader import DataLoader
from .documents import pages_of

__all__ = ["DataLoader", "ShardSource", "collate_hf", "hf_collate_fn", "HFCollate", "Sample",
           "pack_greedy", "group_by_tokens", "pages_of"]


def __getattr__(name: str) -> Any:
    # ShardSource lives with the shard reader (vlmprep.batch.shards); imported on first use so
    # that importing the loader does not import the batch-job package.
    if name == "ShardSource":
        from ..batch.shards import ShardSource  # deferred: as said above
        return ShardSource
    raise AttributeError(f"module 'vlmprep.loader' has no attribute {name!r}")
