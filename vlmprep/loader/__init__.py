"""Loading for batch jobs and training: a DataLoader replacement and collate helpers.

    loader = vlmprep.loader.DataLoader(sources, proc, batch_size=8, num_workers=2)  # as torch
    loader = vlmprep.loader.DataLoader(sources, proc, max_batch_tokens=16384)  # a token budget
    for ids, batch in loader: ...                       # batch: PackedBatch, ids: sample ids
    state = loader.state_dict(); loader.load_state_dict(state)   # resume mid-epoch

    torch.utils.data.DataLoader(ds, batch_size=8, collate_fn=vlmprep.loader.hf_collate_fn(proc))

See docs/how-to/loader.md.
"""
from __future__ import annotations

from .batching import Sample, group_by_tokens, pack_greedy
from .collate import HFCollate, collate_hf, hf_collate_fn
from .dataloader import DataLoader

__all__ = ["DataLoader", "collate_hf", "hf_collate_fn", "HFCollate", "Sample", "pack_greedy",
           "group_by_tokens"]
