"""Batch jobs (``vlmprep run``, issue 18): inputs -> packed shards, read back bit-exact.

Modules (import the one you need; this package imports none of them, nor pyarrow or torch):

- ``sources`` (a package, one module per input kind): ``discover(inputs)`` -> ``Unit`` per input
  (a folder, a WebDataset .tar, a parquet file, a text list of paths); a Unit yields ``Sample``
  (id, source, encoded bytes of an image or a video, never decoded).
- ``schema``: the shard row schema (``ROW_COLUMNS``), ``make_row``, the byte words.
- ``rows``: ``process_samples(proc, samples)`` -> one row per sample; ``batch_from_rows``.
- ``video_rows``: a video sample -> its row (``modality="video"``), and back to ``batch.videos``.
- ``shards`` (a package): shard names, the parquet / safetensors writers, the manifest,
  ``read_shards``, ``ShardSource``.
- ``config``: ``JobConfig``, the small picklable job configuration.
- ``work``: ``process_item``, one work item (unit, part) -> its shard: the step every engine runs.
- ``engines``: ``local`` (this process or spawned workers) and ``ray`` (an actor pool; with
  ``ray_stages``, public as ``vlmprep.integrations.ray``).
- ``run``: ``run(inputs, output, config, ...)``, the job with resume, over either engine.

Imports go one way, each at its module's top (no circle): ``run`` -> ``engines`` -> ``work`` ->
``shards``, ``rows``, ``sources``, ``config``; ``shards`` -> ``rows``, ``schema``, ``config``;
``rows`` -> ``video_rows`` -> ``schema``; ``sources`` and ``schema`` import no other batch
module. ``vlmprep.integrations.ray`` only re-exports ``engines.ray`` and ``engines.ray_stages``;
``run`` imports ``engines.ray`` when the Ray engine is asked for (Ray is optional).
"""
