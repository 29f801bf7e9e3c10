"""Ray Data integration: vlmprep as one stage of a ``ray.data`` pipeline (``pip install vlmprep[ray]``).

- ``Preprocess``: callable class for ``Dataset.map_batches``: a column of encoded images -> one row
  per image in the shard schema (``vlmprep.batch.rows.ROW_COLUMNS``), the other columns passed
  through. One Processor per actor, built from a small picklable config.
- ``plan_tokens``: header-only function for ``map_batches`` (no pixel decoded): adds
  ``num_tokens``, ``height``, ``width`` and ``error``, to sort, filter or budget before the heavy stage.
- ``rows_from_batch``: a ``Preprocess`` output batch -> row dicts (``rows.batch_from_rows`` makes
  the PackedBatch a model takes).
- ``run_ray``: the engine of ``vlmprep run --engine ray``: the job's work items over an actor pool,
  each writing its shard with the local engine's own function (so the shards are byte-identical).

Read inputs as bytes: ``ray.data.read_parquet``, ``read_binary_files(include_paths=True)``,
``read_webdataset(decoder=None)``. Never ``read_images``, nor ``read_webdataset`` with its default
decoder (or ``decoder=False``): both decode every image with PIL on the CPU, the step vlmprep does.

    import ray, vlmprep
    from vlmprep.integrations.ray import Preprocess, plan_tokens
    cfg = {"preset": "qwen2-vl", "device": "cuda"}        # or a vlmprep.batch.config.JobConfig
    ds = ray.data.read_binary_files("s3://bucket/images/", include_paths=True)
    ds = ds.map_batches(plan_tokens, fn_kwargs={"config": cfg})        # cheap, CPU tasks
    ds = ds.map_batches(Preprocess, fn_constructor_kwargs={"config": cfg, "id_column": "path"},
                        compute=ray.data.ActorPoolStrategy(size=4), num_gpus=0.25,
                        batch_size=64, batch_format="numpy")

The pool must leave CPUs for the read and write tasks (4 actors take 4 CPUs): a pool that takes
every CPU hangs with no error (docs/how-to/batch.md sizes it from ``ray.cluster_resources()``).
``num_gpus`` is ``map_batches``' own argument (fractional: 0.25 puts four actors on one GPU);
Ray sets ``CUDA_VISIBLE_DEVICES`` per actor, so the config says ``device="cuda"``, not ``cuda:N``.

The code lives in ``vlmprep.batch.engines.ray_stages`` (the stages) and
``vlmprep.batch.engines.ray`` (the engine); this module is their public name.
"""
from __future__ import annotations

from ..batch.engines.ray import run_ray
from ..batch.engines.ray_stages import Preprocess, plan_tokens, rows_from_batch

__all__ = ["Preprocess", "plan_tokens", "rows_from_batch", "run_ray"]
