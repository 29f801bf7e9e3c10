"""Lowerings of the dali backend: ``fn(op, node, g) -> node``, called once, while a graph is built.

Unlike the eager backends, a lowering here does not touch pixels: it adds DALI operators to the
graph of its stage (see ``graph.py``) and reads every per-image number through ``g.arg(name)``,
an ``external_source`` the executor feeds from the plan (``feeds.py`` computes the values).

Stages and the ops lowered into each:
    decode  ``decode``: encoded bytes -> uint8 ``(H, W, 3)`` (mixed nvJPEG on cuda, CPU otherwise)
    canvas  every sizing op: parent image -> one canvas (box, two Pillow-order passes, pad)
    tiles   after the plan's tile box (``graph.cut_tile``): ``center_crop`` (nothing left to
            do), ``normalize``, ``patchify``: the tile -> its output rows. With the csrc plugin
            loaded, the tiles graph runs ``plugin.normalize_patchify`` instead of the last two
            (``fusion.choose_graph``, decided in ``graph.compile_stages``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import nvidia.dali.fn as fn
import nvidia.dali.math as dmath
import nvidia.dali.types as dali_types
from nvidia.dali.pipeline import do_not_convert

from ... import ops
from ..base import register_sizing
from ..normalize_lut import normalize_lut
from ..registry import lowering
from .feeds import CANVAS_KEYS, PASS_KEYS
from .graph import GraphCtx

if TYPE_CHECKING:
    from nvidia.dali.data_node import DataNode

__all__ = ["INTERP_IDS", "round_half_away", "to_levels"]

types: Any = dali_types  # DALI makes its type enums at import: nothing for a type checker

B = "dali"

#: Our interpolation names -> DALI's (fed per canvas as int32, cast in the graph).
INTERP_IDS = {"nearest": int(types.INTERP_NN), "bilinear": int(types.INTERP_LINEAR),
              "bicubic": int(types.INTERP_CUBIC), "lanczos": int(types.INTERP_LANCZOS3)}

_F32 = types.FLOAT


# -- decode ---------------------------------------------------------------------------------------
@lowering(B, "decode")
def decode(op: ops.decode, encoded: "DataNode", g: "GraphCtx") -> "DataNode":
    """Encoded bytes (uint8 1-D) -> uint8 ``(H, W, 3)`` RGB, EXIF orientation applied (as probe).

    cuda: the mixed decoder (nvJPEG, hardware JPEG decoder where present). ``hw_decoder_load=1``
    sends every JPEG the hardware can take to it: with a fraction, whether an image lands on the
    hardware or the CUDA decoder would depend on its position in the batch, and the two do not
    give the same bits (batch invariance). ``jpeg_fancy_upsampling`` matches libjpeg's chroma
    upsampling (the CPU decoder's and Pillow's).
    """
    if not isinstance(g, GraphCtx):  # e.g. a harness timing the eager backends op by op
        raise TypeError("the dali lowerings build DALI graphs (fn(op, node, GraphCtx)) and do "
                        "not run on one image; time the dali backend end to end")
    if g.gpu:
        return fn.decoders.image(encoded, device="mixed", output_type=types.RGB,
                                 adjust_orientation=True, hw_decoder_load=1.0,
                                 jpeg_fancy_upsampling=True)
    return fn.decoders.image(encoded, device="cpu", output_type=types.RGB, adjust_orientation=True)


# -- sizing: one canvas ---------------------------------------------------------------------------
def to_levels(x: Any, explicit: bool) -> Any:
    """float DataNode -> uint8 levels, saturated; ``explicit``: ties rounded half away from zero
    by graph arithmetic (Pillow's ``clip8`` after a pass: its fixed-point sum starts at half a
    unit, so exact ties go up), else by DALI's own conversion.

    DALI's float -> uint8 conversions round ties differently: ``fn.cast`` with ``std::round``
    on the host (half away: Pillow's) but ``__float2int_rn`` on the device (half to even: 2.5 ->
    2), and ``fn.resize`` with a uint8 output half to even on both (measured on the CPU: every
    tie of an even level lands one below Pillow's). Exact ties are common (a 2x bilinear pass
    averages with weights k/8). The GPU graphs (``GraphCtx.rounds_in_graph``) therefore round
    here (``round_half_away``: exact float steps) and the cast only sees whole numbers, so no
    device rounding mode is left. The CPU graphs keep DALI's uint8 resize output: rounding in
    the graph there costs a float image per pass and an arithmetic op (+15% and +79% in two
    paired runs of 4 x 1080p qwen2-vl on a loaded 2-core box) for a mean change of about 0.001
    level."""
    return fn.cast(round_half_away(x) if explicit else x, dtype=types.UINT8)


def round_half_away(x: Any) -> Any:
    """float DataNode -> the same values rounded to whole numbers, ties away from zero (for the
    non-negative values a resize gives; a negative one saturates to 0 either way): floor, then
    up where the exact remainder is at least a half. Every step is exact in float32."""
    f: Any = dmath.floor(x)
    return f + (x - f >= 0.5)


def _strip(x: Any, side: str, a: dict, it: Any, g: "GraphCtx") -> Any:
    """Rows (or columns) next to an edge, as Pillow computes them: resize(zero-padded window) /
    resize(its 0/1 mask), both over the same region of interest (see feeds.py)."""
    k = lambda name: a[f"{side}_{name}"]  # noqa: E731
    win = fn.slice(x, k("start"), k("shape"), axes=[0, 1], out_of_bounds_policy="pad",
                   fill_values=0)
    # DataNodes (their arithmetic is DALI's; its stubs do not say so)
    num: Any = fn.resize(win, size=k("size"), roi_start=k("roi0"), roi_end=k("roi1"),
                    interp_type=it, antialias=True, dtype=_F32)
    den: Any = fn.resize(g.dev(k("mask")), size=k("msize"), roi_start=k("roi0"), roi_end=k("mroi1"),
                    interp_type=it, antialias=True, dtype=_F32)
    # Rounded half away from zero and saturated: Pillow's clip8 after each pass.
    levels: Any = to_levels(num / den, explicit=g.rounds_in_graph)
    return fn.slice(levels, start=[0, 0], shape=k("keep"), axes=[0, 1])


# Branches on a Python value only (g.rounds_in_graph, fixed when the graph is built), so
# AutoGraph (enable_conditionals) has nothing to convert; left to it, it fails on the annotated
# name and logs a warning on every graph build, through the root logger.
@do_not_convert
def _pil_pass(x, axis: int, a: dict, it, g: "GraphCtx"):
    """One one-dimensional uint8 pass along ``axis`` (0: rows): DALI's antialiased resize inside,
    Pillow's truncated-and-renormalised filter in the edge strips. Where the graph rounds
    (``GraphCtx.rounds_in_graph``: the GPU) the resize gives float and ``to_levels`` rounds it as
    Pillow does; elsewhere DALI's uint8 output (ties to even, see ``to_levels``)."""
    if g.rounds_in_graph:
        plain: Any = to_levels(fn.resize(x, size=a["size"], interp_type=it, antialias=True,
                                         dtype=_F32), explicit=True)
    else:
        plain = fn.resize(x, size=a["size"], interp_type=it, antialias=True)
    mid = fn.slice(plain, a["mid_start"], a["mid_shape"], axes=[0, 1])
    return fn.cat(_strip(x, "top", a, it, g), mid, _strip(x, "bot", a, it, g), axis=axis)


def canvas(op: ops.Op, x: "DataNode", g: "GraphCtx") -> "DataNode":
    """Parent image uint8 ``(H, W, 3)`` -> one canvas of the plan (``plan.Canvas``): cut the box
    (zero outside), resize in two passes in Pillow 13's order (rounded to uint8 between, as
    Pillow does), place at the offset in a canvas of the fill colour. Per-sample switches skip
    the steps a canvas does not have, so one graph serves every family and canvas."""
    # Every input is declared before the first condition (inputs cannot live inside a branch).
    a = {k: g.arg(k) for k in CANVAS_KEYS}
    pa = {k: g.arg(f"a_{k}") for k in PASS_KEYS}
    pb = {k: g.arg(f"b_{k}") for k in PASS_KEYS}
    it = fn.cast(a["interp"], dtype=types.INTERP_TYPE)
    if a["box_on"]:
        x = fn.slice(x, a["box_start"], a["box_shape"], axes=[0, 1], out_of_bounds_policy="pad",
                     fill_values=0)
    if a["hfirst"]:
        if pa["on"]:
            x = _pil_pass(x, 1, pa, it, g)
        if pb["on"]:
            x = _pil_pass(x, 0, pb, it, g)
    else:
        if pa["on"]:
            x = _pil_pass(x, 0, pa, it, g)
        if pb["on"]:
            x = _pil_pass(x, 1, pb, it, g)
    if a["pad_on"]:
        if a["fill_on"]:
            # slice pads with one constant for the whole batch; a per-canvas colour is padded as
            # (x - fill) with 0, then shifted back (exact in int16).
            fill = g.dev(a["fill"])
            y = fn.slice(fn.cast(x, dtype=types.INT16) - fill, a["pad_start"], a["pad_shape"],
                         axes=[0, 1], out_of_bounds_policy="pad", fill_values=0)
            x = fn.cast(y + fill, dtype=types.UINT8)
        else:
            x = fn.slice(x, a["pad_start"], a["pad_shape"], axes=[0, 1],
                         out_of_bounds_policy="pad", fill_values=0)
    return x


register_sizing(B, canvas)


# -- tiles ----------------------------------------------------------------------------------------
@lowering(B, "normalize")
def normalize(op: ops.normalize, x: "DataNode", g: "GraphCtx") -> "DataNode":
    """uint8 ``(h, w, 3)`` -> float32 ``(h, w, 3)`` through the 768-entry lut indexed by
    ``v + 256 * c`` (``normalize_lut``: one load per element, the reference's bits)."""
    offsets = types.Constant(np.array([0, 256, 512], np.int16), device=g.device)
    idx = fn.cast(x, dtype=types.INT16) + offsets
    return fn.lookup_table(idx, keys=list(range(768)),
                           values=[float(v) for v in normalize_lut(op).ravel()],
                           dtype=_F32, default_value=0.0)


@lowering(B, "patchify")
def patchify(op: ops.patchify, x: "DataNode", g: "GraphCtx") -> "DataNode":
    """Tile ``(h, w, 3)`` -> its rows in the family's layout (see ``vlmprep.plan.grid``):
    ``merge_grouped`` ``(gh*gw, 3*T*P*P)`` [c, t, py, px]; ``raster`` ``(gh*gw, 3*P*P)``
    [c, py, px]; ``naflex`` ``(gh*gw, P*P*3)`` [py, px, c]; ``tiles`` ``(3, h, w)``. Stock
    reshape / transpose / cat with per-tile shapes (``plugin.normalize_patchify``: the same in
    one op)."""
    if op.order == "tiles":
        return fn.transpose(x, perm=[2, 0, 1])
    y = fn.reshape(x, shape=g.arg("grid"), layout="")
    if op.order == "merge_grouped":
        # (bh, mh, py, bw, mw, px, c) -> (bh, bw, mh, mw, c, py, px), then T copies after c.
        y = fn.transpose(y, perm=[0, 3, 1, 4, 6, 2, 5])
        if op.temporal_patch_size > 1:
            y = fn.expand_dims(y, axes=[5])
            y = fn.cat(*([y] * op.temporal_patch_size), axis=5)
    elif op.order == "raster":
        y = fn.transpose(y, perm=[0, 2, 4, 1, 3])  # (gy, gx, c, py, px)
    else:
        y = fn.transpose(y, perm=[0, 2, 1, 3, 4])  # naflex: (gy, gx, py, px, c)
    return fn.reshape(y, shape=g.arg("rows"), layout="")
