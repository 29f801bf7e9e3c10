"""``dali``: the pipeline compiled into NVIDIA DALI graphs, on the GPU (``device="cuda"``) or the CPU.

One lowering per op (``lowerings.py``, registered as ``("dali", op)``) builds three graphs once
per Processor (``graph.py``): decode, canvases, tiles. The plan's numbers enter every graph as
per-sample inputs (``feeds.py``, their types declared in ``feeds.ARG_TYPES``); the executor
(``backend.py``) runs them per batch and copies the rows into the output. When the csrc plugin
is loaded the tiles graph writes the rows with it (``plugin.py``; ``fusion.choose_graph``).
Imports run one way: backend -> lowerings -> graph -> feeds, plugin (``parity``, for the tests
and bench/gpu_check.py, -> lowerings, graph). Files DALI cannot decode the way
``vlmprep.io.decode`` does go through that CPU path into the same batch; a failing batch is split
until each bad image is named.

Pixels: decode is bit-exact with Pillow on the CPU (libjpeg-turbo, libpng, libwebp); resizes are
two one-dimensional passes in the installed Pillow's order with uint8 between and Pillow's edge
handling, within 3 levels of the reference (the GPU graphs round ties up in the graph, as Pillow
does: ``lowerings.to_levels``); normalize is the reference's float32 arithmetic, tabulated. The
GPU paths' bounds, one per path: ``parity.py``.
"""
from __future__ import annotations

from .backend import Backend

__all__ = ["Backend"]
