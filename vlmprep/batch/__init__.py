"""Batch jobs (``vlmprep run``, issue 18): inputs -> packed shards, read back bit-exact.

Modules (import the one you need; this package imports none of them, nor pyarrow or torch):

- ``sources``: ``discover(inputs)`` -> ``Unit`` per input (a folder, a WebDataset .tar, a parquet
  file, a text list of paths); a Unit yields ``Sample`` (id, source, encoded bytes, never decoded).
- ``rows``: ``process_samples(proc, samples)`` -> one row per sample (the shard schema).
- ``shards``: shard names, the parquet / safetensors writers, the manifest, ``read_shards``.
- ``config``: ``JobConfig``, the small picklable job configuration.
- ``run``: ``run(inputs, output, config, ...)``, the local engine with resume (Ray: vlmprep.integrations).
"""
