"""The compiler: a Pipeline's ops -> three DALI graphs (decode, canvas, tiles), built once.

Why three: the number of samples changes along the way (one image has one or more canvases,
one canvas one or more tiles), and a DALI graph keeps its batch. Each stage is therefore one
graph over a flattened batch: images, then all canvases of the batch (run once per dependency
level when a canvas is built from another, e.g. Idefics3), then all tiles. Outputs of one stage
are fed to the next as DALI tensors (no host round trip on the GPU).

    Given  qwen2-vl and internvl images in one Processor call each
    decode  2 encoded -> 2 images           (one run)
    canvas  qwen: 2 canvases; internvl: grid + thumbnail per image -> 4 canvases (one run)
    tiles   qwen: 2 tiles -> rows; internvl: e.g. 7 + 1 tiles -> (8, 3, 448, 448) (one run)

A stage's graph is built on first use and reused for every batch; it is rebuilt only after a
failure (see ``Stage.reset``). All per-image numbers enter through named ``external_source``
inputs (``GraphCtx.arg``), so no shape is decided in the graph.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import nvidia.dali.fn as fn
import nvidia.dali.types as dali_types
from nvidia.dali import pipeline_def

from ...kernels import dali_plugin_loaded, get_num_threads
from .. import fusion
from .feeds import ARG_TYPES
from .plugin import normalize_patchify

__all__ = ["GraphCtx", "Stage", "build_pipeline", "compile_stages", "Stages", "cut_tile"]

types: Any = dali_types  # DALI makes its type enums at import: nothing for a type checker

#: numpy dtype of a per-sample argument (feeds.ARG_TYPES) -> DALI's.
_DALI_TYPES = {np.dtype(np.bool_): types.BOOL, np.dtype(np.int16): types.INT16,
               np.dtype(np.int32): types.INT32, np.dtype(np.float32): types.FLOAT}


@dataclass
class GraphCtx:
    """What a lowering may use while it builds a graph.

    Fields:
        device: ``"cpu"`` or ``"gpu"`` (DALI's names) for image data.
        dtype: the Processor's dtype (``"float32"`` | ``"bfloat16"`` | ``"uint8"``).
        inputs: every ``external_source`` created so far, by name (the executor feeds these).
        plugin: whether the fused normalize + patchify plugin is loaded for ``device``
            (read when the graph is built: ``fusion.choose_graph``).
    """

    device: str
    dtype: str
    plugin: bool = False
    inputs: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu(self) -> bool:
        return self.device == "gpu"

    @property
    def rounds_in_graph(self) -> bool:
        """Whether float -> uint8 is rounded by graph arithmetic, ties up as in Pillow
        (``lowerings.to_levels``): on the GPU, whose own conversions round ties to even."""
        return self.gpu

    def arg(self, name: str):
        """A per-sample argument (host memory), fed by name; one node per name; its type from
        ``feeds.ARG_TYPES``."""
        if name not in self.inputs:
            dtype, layout = ARG_TYPES[name]
            self.inputs[name] = fn.external_source(name=name, dtype=_DALI_TYPES[dtype],
                                                   layout=layout)
        return self.inputs[name]

    def data(self, name: str, layout: str | None = "HWC", on_device: bool = True):
        """The stage's data input: uint8 images on the stage's device (``layout`` None: encoded
        bytes, always on the host). A CPU graph reads the fed tensors in place (no_copy): its run
        is over when ``run`` returns, and the executor keeps them alive until then; a GPU graph
        copies them (its work may still be in flight after ``run`` returns)."""
        dev = self.device if on_device else "cpu"
        self.inputs[name] = fn.external_source(name=name, dtype=types.UINT8, layout=layout,
                                               device=dev, no_copy=not self.gpu)
        return self.inputs[name]

    def dev(self, node):
        """``node`` (a host argument) on the stage's device, for arithmetic with image data."""
        return node.gpu() if self.gpu else node


@pipeline_def(enable_conditionals=True)
def _graph(define: Callable[[GraphCtx], Any], g: GraphCtx):
    return define(g)


def build_pipeline(define: Callable[[GraphCtx], Any], g: GraphCtx, batch_size: int,
                   device_id: int | None):
    """The built DALI pipeline of ``define(g)``, with the settings every stage uses.

    prefetch_queue_depth=1: a run that failed on bad data leaves the pipeline usable (deeper
    queues raise "peek the data batch that doesn't exist" on the next run)."""
    pipe = _graph(define, g, batch_size=batch_size, num_threads=get_num_threads(),
                  device_id=device_id, prefetch_queue_depth=1, exec_dynamic=True)
    pipe.build()
    return pipe


class Stage:
    """One DALI graph of the compiled pipeline.

    ``run(feeds)`` feeds every input by name (``feeds[name]``: one array or DALI tensor per
    sample, at most ``batch_size`` samples) and returns the graph's outputs (DALI TensorLists,
    valid while referenced: DALI 2.4's executor does not reuse a buffer Python still holds).
    """

    def __init__(self, name: str, define: Callable[[GraphCtx], Any], device: str, dtype: str,
                 device_id: int | None, batch_size: int):
        self.name = name
        self.define = define
        self.device, self.dtype, self.device_id = device, dtype, device_id
        self.batch_size = batch_size
        self._pipe = None
        self._inputs: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def build(self):
        if self._pipe is None:
            g = GraphCtx(self.device, self.dtype, plugin=dali_plugin_loaded(self.device))
            pipe = build_pipeline(self.define, g, self.batch_size, self.device_id)
            self._pipe, self._inputs = pipe, tuple(g.inputs)
        return self._pipe

    def run(self, feeds: dict[str, list], stream: Any = None) -> tuple:
        with self._lock:
            pipe = self.build()
            kw = {} if stream is None else {"cuda_stream": stream}
            for name in self._inputs:
                data = feeds[name]
                try:
                    pipe.feed_input(name, data, **kw)
                except KeyError:  # an input no output depends on was pruned from the graph
                    self._inputs = tuple(n for n in self._inputs if n != name)
            # On the GPU the outputs are bound to the caller's (torch's) stream: no host sync.
            return tuple(pipe.run() if stream is None else pipe.run(stream))

    def reset(self) -> None:
        """Drop the graph; the next run builds a fresh one (after a failure, to be safe)."""
        with self._lock:
            self._pipe = None


@dataclass
class Stages:
    decode: Stage
    canvas: Stage
    tiles: Stage


#: Largest flattened batch per graph; bigger batches run in several graph runs.
BATCH = {"decode": 16, "canvas": 64, "tiles": 128}


def cut_tile(x, g: GraphCtx):
    """Canvas -> the tile's box ``(top, left, h, w)``, zero where it leaves the canvas."""
    return fn.slice(x, g.arg("tile_start"), g.arg("tile_shape"), axes=[0, 1],
                    out_of_bounds_policy="pad", fill_values=0)


def compile_stages(ops: list, lowerings: list, device: str, dtype: str,
                   device_id: int | None) -> Stages:
    """Split the ops (``Backend.ops``, pack and, for uint8, normalize already dropped) over the
    three stages and return them, unbuilt: ``decode`` -> decode stage, the sizing op -> canvas
    stage, the rest (``center_crop``, ``normalize``, ``patchify``) -> tiles stage, after the
    plan's tile box is cut. The tiles stage runs the executor ``fusion.choose_graph`` names when
    its graph is built: the plugin op for normalize + patchify (`ROWS`), or every lowering."""
    by_stage: dict[str, list] = {"decode": [], "canvas": [], "tiles": []}
    for op, low in zip(ops, lowerings):
        stage = "decode" if op.name == "decode" else "canvas" if op.sizing else "tiles"
        by_stage[stage].append((op, low))
    if len(by_stage["decode"]) != 1 or len(by_stage["canvas"]) != 1:
        raise ValueError(f"dali: expected one decode op and one sizing op, got "
                         f"{[op.name for op in ops]}")
    (dec_op, dec_fn), = by_stage["decode"]
    (size_op, size_fn), = by_stage["canvas"]
    tile_ops = by_stage["tiles"]
    normalize_op = next((op for op, _ in tile_ops if op.name == "normalize"), None)
    patchify_op = next(op for op, _ in tile_ops if op.name == "patchify")

    def define_decode(g: GraphCtx):
        return dec_fn(dec_op, g.data("encoded", layout=None, on_device=False), g)

    def define_canvas(g: GraphCtx):
        return size_fn(size_op, g.data("image"), g)

    def define_tiles(g: GraphCtx):
        x = cut_tile(g.data("image"), g)
        if fusion.choose_graph(g.plugin, [op.name for op, _ in tile_ops]) == fusion.ROWS:
            for op, low in tile_ops:
                if op.name not in ("normalize", "patchify"):
                    x = low(op, x, g)
            return normalize_patchify(x, normalize_op, patchify_op, g.device)
        for op, low in tile_ops:
            x = low(op, x, g)
        return x

    return Stages(*(Stage(name, define, device, dtype, device_id, BATCH[name])  # read now
                    for name, define in (("decode", define_decode), ("canvas", define_canvas),
                                         ("tiles", define_tiles))))
