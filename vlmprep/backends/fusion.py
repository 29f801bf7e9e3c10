"""Which executor runs an image: decided here, once per pipeline (``rules``) and once per image
(``choose``), and nowhere else.

The eager backends (reference, torch) run an image by one of six executors; ``base.Backend``
asks ``choose`` and runs the answer (``Backend.run_image``). Each executor gets plain inputs:
a lowering's input is an image or a list of tiles, never a wrapper.

| executor             | what runs                                    | when (every condition holds)   |
|----------------------|----------------------------------------------|--------------------------------|
| `DECODE_RESIZE_ROWS` | one ``kernels.decode_resize_normalize_       | `RESIZE_ROWS`'s conditions;    |
|                      | patchify`` call: decodes the JPEG, resizes   | the input is encoded bytes of  |
|                      | and writes the rows band by band             | an 8-bit RGB / gray JPEG with  |
|                      |                                              | no EXIF rotation; the kernels  |
|                      |                                              | have libjpeg-turbo; this image |
|                      |                                              | gets 2 threads or more         |
| `RESIZE_ROWS`        | the decode lowering, then one ``kernels.     | `ROWS`'s conditions; the       |
|                      | resize_normalize_patchify`` call (no resized | backend resizes in the kernel  |
|                      | image in memory)                             | (torch) on the CPU; the ops are|
|                      |                                              | decode, one sizing op,         |
|                      |                                              | [normalize,] patchify in a     |
|                      |                                              | ``RESIZE_ORDERS`` order; the   |
|                      |                                              | plan's one canvas is the whole |
|                      |                                              | source resized (no crop, no    |
|                      |                                              | pad) with an interpolation of  |
|                      |                                              | ``kernels.                     |
|                      |                                              | RESIZE_INTERPOLATIONS``, and   |
|                      |                                              | its one tile is that canvas    |
| `DECODE_ROWS`        | one ``kernels.decode_resize`` call (decodes  | `ROWS`'s conditions; not       |
|                      | the JPEG and, beside it, resizes the plan's  | `RESIZE_ROWS`'s; the backend   |
|                      | canvases), then the tiles (views of them) by | resizes in the kernel (torch)  |
|                      | ``kernels.normalize_patchify`` as `ROWS`     | on the CPU; the ops are decode,|
|                      |                                              | one sizing op, [normalize,]    |
|                      |                                              | patchify; every canvas is a    |
|                      |                                              | box of the source (no padding) |
|                      |                                              | resized with one compiled      |
|                      |                                              | interpolation, every tile      |
|                      |                                              | inside its canvas; the input   |
|                      |                                              | is a JPEG as for `DECODE_      |
|                      |                                              | RESIZE_ROWS` (2+ threads)      |
| `ROWS`               | the lowerings up to the sizing op's tiles,   | the kernels are loaded and     |
|                      | then one ``kernels.normalize_patchify`` call | built for the output's device; |
|                      | (the normalize as the backend's lut)         | the output is contiguous; the  |
|                      |                                              | pipeline normalizes after its  |
|                      |                                              | sizing op, or dtype is uint8;  |
|                      |                                              | no op of its own between       |
|                      |                                              | normalize and patchify         |
|                      |                                              | (``kernel_tail``)              |
| `OP_BY_OP`           | every lowering in turn                       | otherwise                      |
| `NORMALIZED_CANVAS`  | the lowerings, the normalize moved into the  | the plan has a ``plan.Canvas.  |
|                      | sizing lowering (``Context.normalize``): the | normalized`` canvas and the    |
|                      | canvases built (a normalized one resized by  | pipeline normalizes after its  |
|                      | ``resize_normalized`` from its normalized    | sizing op (not uint8); checked |
|                      | parent), each canvas that tiles come from    | first: the only executor of    |
|                      | normalized once, the tiles cut (float32),    | such an image, ``at_most`` and |
|                      | then the lowerings after the normalize       | the kernels notwithstanding    |

`NORMALIZED_CANVAS` is not a fusion level: the rows kernel takes uint8 tiles, and such a tile is
float32 before the normalize would run (Phi-4-multimodal's global view, resized from the
normalized canvas as transformers does). With a uint8 output the same plan runs as any other
(its normalized canvas is resized from the parent's levels inside the sizing lowering).

The dali backend compiles its graphs instead: its tiles graph is `ROWS` (the csrc plugin op
``vlmprep_normalize_patchify`` in place of the normalize and patchify lowerings) when the plugin
is loaded for the graph's device and ``kernel_tail`` holds, else `OP_BY_OP` (``choose_graph``,
when the graph is built).

Every executor gives the same bits as `OP_BY_OP` (tests/backends/test_fused.py). ``at_most``
caps the choice for a block, e.g. ``at_most(OP_BY_OP)`` to time or test the op-by-op paths.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from .. import kernels

if TYPE_CHECKING:
    from ..ops import Op
    from .context import Context

__all__ = ["OP_BY_OP", "ROWS", "DECODE_ROWS", "RESIZE_ROWS", "DECODE_RESIZE_ROWS", "EXECUTORS",
           "NORMALIZED_CANVAS", "RESIZE_ORDERS",
           "Rules", "rules", "choose", "choose_graph", "at_most", "kernels_write", "kernel_tail",
           "normalized_canvas"]

OP_BY_OP = "op_by_op"
ROWS = "rows"
DECODE_ROWS = "decode_rows"
RESIZE_ROWS = "resize_rows"
DECODE_RESIZE_ROWS = "decode_resize_rows"
#: Executors from least to most fused (``at_most``'s order). Each one's conditions include
#: `ROWS`'s; `DECODE_RESIZE_ROWS`'s include `RESIZE_ROWS`'s; `DECODE_ROWS` is the JPEG decode
#: overlap for plans `RESIZE_ROWS` does not take (crops, several canvases: InternVL).
EXECUTORS = (OP_BY_OP, ROWS, DECODE_ROWS, RESIZE_ROWS, DECODE_RESIZE_ROWS)
#: Op by op with the normalize inside the sizing lowering: not a fusion level (see the table).
NORMALIZED_CANVAS = "normalized_canvas"

#: Patchify orders whose rows the kernel can write while it resizes (a band of patch rows at a
#: time).
RESIZE_ORDERS = ("merge_grouped", "raster", "naflex")

#: at_most's cap, per context (a thread or task sees the cap of the block it runs in; image
#: threads get it from ``Backend._map``, which submits each image in a copy of the caller's context).
_CAP: contextvars.ContextVar[str] = contextvars.ContextVar("vlmprep_fusion_cap", default=DECODE_RESIZE_ROWS)


@dataclass(frozen=True)
class Rules:
    """What a pipeline allows, decided once per backend instance (``rules``).

    Fields:
        rows: `ROWS` is allowed (per image it still needs ``kernels_write``).
        resize_rows: `RESIZE_ROWS` and `DECODE_RESIZE_ROWS` are allowed.
        interpolation: the sizing op's (a canvas without its own uses it).
        decode_rows: `DECODE_ROWS` is allowed.
        normalizes: the pipeline normalizes after its sizing op in this dtype (so a
            ``plan.Canvas.normalized`` canvas takes `NORMALIZED_CANVAS`).
    """

    rows: bool
    resize_rows: bool
    interpolation: str
    decode_rows: bool = False
    normalizes: bool = False


def rules(ops: Sequence["Op"], dtype: str, device: str, resize_in_kernel: bool) -> Rules:
    """The pipeline's part of the table, for a backend's ``ops`` (``Pipeline.executed_ops(dtype)``:
    pack dropped; normalize dropped for uint8) on ``device``; ``resize_in_kernel``: the backend
    lets the kernel resize (torch). ``dtype`` only says what the kernel can write (uint8 levels
    without a lut)."""
    names = [op.name for op in ops]
    sizing: Any = next(op for op in ops if op.sizing)  # every sizing op has an interpolation
    patchify: Any = next(op for op in ops if op.name == "patchify")
    at = names.index(sizing.name)
    normalizes = "normalize" in names and names.index("normalize") > at
    rows = (dtype == "uint8" or normalizes) and kernel_tail(names)
    decode_rows = (rows and resize_in_kernel and device.startswith("cpu")
                   and names[:2] == ["decode", sizing.name]
                   and names[2:] in (["normalize", "patchify"], ["patchify"]))
    resize_rows = decode_rows and patchify.order in RESIZE_ORDERS
    return Rules(rows=rows, resize_rows=resize_rows, interpolation=sizing.interpolation,
                 decode_rows=decode_rows, normalizes=normalizes)


def kernels_write(ctx: "Context") -> bool:
    """Whether the kernels can fill ``ctx.dest``: built, loaded, built for its device, and it is
    contiguous."""
    if not kernels.available() or not ctx.dest.is_contiguous():
        return False
    if ctx.dest.device.type == "cpu":
        return True
    return ctx.dest.device.type == "cuda" and kernels.built_with("torch_ext", "cuda")


def _whole_source_resized(ctx: "Context", interpolation: str) -> bool:
    """The plan's only canvas is the whole source resized with a compiled interpolation (no crop,
    no padding) and its only tile is that canvas (Qwen, Pixtral, NaFlex)."""
    plan = ctx.plan
    if len(plan.canvases) != 1:
        return False
    c = plan.canvases[0]
    if c.parent != -1 or c.box is not None or c.size is not None:
        return False
    return ((c.interpolation or interpolation) in kernels.RESIZE_INTERPOLATIONS
            and list(plan.tiles) == [(0, 0, *c.resize_hw)])


def _source_canvases(ctx: "Context", interpolation: str) -> bool:
    """Every canvas is a box of the source inside it (or all of it), resized with one compiled
    interpolation and not padded, and every tile lies inside its canvas (InternVL, Qwen)."""
    plan, (H, W) = ctx.plan, ctx.source.hw
    interps = {c.interpolation or interpolation for c in plan.canvases}
    if not plan.canvases or len(interps) != 1 or not interps <= set(kernels.RESIZE_INTERPOLATIONS):
        return False
    for c in plan.canvases:
        if c.parent != -1 or c.size is not None:
            return False
        if c.box is not None:
            t, x, h, w = c.box
            if t < 0 or x < 0 or h < 1 or w < 1 or t + h > H or x + w > W:
                return False
    for (t, x, h, w), k in zip(plan.tiles, plan.tile_canvas):
        ch, cw = plan.canvases[k].resize_hw
        if t < 0 or x < 0 or t + h > ch or x + w > cw:
            return False
    return len(plan.tile_canvas) == len(plan.tiles)


def _jpeg_in_kernel(ctx: "Context") -> bool:
    """An 8-bit RGB / gray JPEG with no EXIF rotation, a kernel built with libjpeg-turbo, and two
    threads or more for this image (the kernel resizes and writes the bands already decoded
    beside the decode, itself split over two decoders when the output is small; on one thread it
    is no faster than decoding first)."""
    h = ctx.source.header
    return (ctx.source.kind == "encoded" and h is not None and h.format == "jpeg"
            and h.bit_depth == 8 and h.mode_hint in ("RGB", "L") and h.orientation == 1
            and kernels.get_num_threads() >= 2 and kernels.jpeg_available())


def normalized_canvas(r: Rules, ctx: "Context") -> bool:
    """`NORMALIZED_CANVAS`'s condition: the output is normalized after the sizing op and a canvas
    of the plan is built from normalized values (``plan.Canvas.normalized``)."""
    return r.normalizes and any(c.normalized for c in ctx.plan.canvases)


def choose(r: Rules, ctx: "Context", most: str = DECODE_RESIZE_ROWS) -> str:
    """The executor of this image (see the module's table), at most ``most`` (and ``at_most``'s
    cap) among the fusion levels; `NORMALIZED_CANVAS` whatever the cap. Called in the thread that
    runs the image (its thread count counts)."""
    if normalized_canvas(r, ctx):
        return NORMALIZED_CANVAS
    cap = min(EXECUTORS.index(most), EXECUTORS.index(_CAP.get()))
    if cap < 1 or not r.rows or not kernels_write(ctx):
        return OP_BY_OP
    cpu = ctx.dest.device.type == "cpu"
    if cap >= 3 and r.resize_rows and cpu and _whole_source_resized(ctx, r.interpolation):
        return DECODE_RESIZE_ROWS if cap >= 4 and _jpeg_in_kernel(ctx) else RESIZE_ROWS
    if (cap >= 2 and r.decode_rows and cpu
            and _source_canvases(ctx, r.interpolation) and _jpeg_in_kernel(ctx)):
        return DECODE_ROWS
    return ROWS


def kernel_tail(names: Sequence[str]) -> bool:
    """Whether the rows kernel can stand in for the lowerings from the first ``normalize`` or
    ``patchify`` on: they are ``[normalize,] patchify`` and nothing else. An op of one's own
    between normalize and patchify (on the float tiles) keeps its lowering: op by op.

    Given [decode, resize, toy, normalize, patchify] -> True (toy runs before the kernel);
          [decode, resize, normalize, toy, patchify] -> False
    """
    k = next((i for i, n in enumerate(names) if n in ("normalize", "patchify")), len(names))
    return list(names[k:]) in (["normalize", "patchify"], ["patchify"])


def choose_graph(plugin_loaded: bool, names: Sequence[str] = ("normalize", "patchify")) -> str:
    """The dali tiles graph's executor: `ROWS` when the plugin is loaded for the graph's device
    and the graph's ops (``names``) end as ``kernel_tail`` needs, else `OP_BY_OP` (and
    ``at_most``'s cap)."""
    return (ROWS if plugin_loaded and kernel_tail(names) and EXECUTORS.index(_CAP.get()) >= 1
            else OP_BY_OP)


@contextlib.contextmanager
def at_most(executor: str) -> Iterator[None]:
    """Within the block, every choice made in this context is at most ``executor`` (for tests
    that compare the less fused paths; dali reads it when a graph is built). A context variable,
    not a process-wide setting: another thread or request keeps its own cap."""
    if executor not in EXECUTORS:
        raise ValueError(f"at_most: expected one of {EXECUTORS}, got {executor!r}")
    token = _CAP.set(executor)
    try:
        yield
    finally:
        _CAP.reset(token)
