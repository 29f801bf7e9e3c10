"""Serving: an async dynamic batcher that coalesces concurrent requests into backend batches.

```python
batcher = vlmprep.serve.Batcher(proc, max_delay_ms=5.0, max_batch_images=64,
                                max_batch_tokens=65536)
plan = batcher.plan(images)          # header-only, now: token counts for KV budgeting
batch = await batcher.submit(images) # this request's PackedBatch, processed in a shared batch
await batcher.close()                # drains
```

See docs/how-to/serving.md.
"""
from __future__ import annotations

from .batcher import Batcher, RequestTooLarge

__all__ = ["Batcher", "RequestTooLarge"]
