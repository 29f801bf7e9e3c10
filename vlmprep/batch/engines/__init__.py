"""The engines of a batch job: where ``work.process_item`` runs for each (unit, part) item.

- ``local``: in this process (``in_process``) or in spawned worker processes (``local_pool``).
- ``ray``: a Ray Data actor pool (``run_ray``; ``pip install vlmprep[ray]``), and
  ``ray_stages``: ``Preprocess`` / ``plan_tokens`` / ``rows_from_batch`` for a user's own Ray
  Data pipeline (both public as ``vlmprep.integrations.ray``).

This package imports none of them (Ray is optional): import the module you need.
"""
