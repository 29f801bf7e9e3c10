"""Lowerings of the dali backend: ``fn(op, node, g) -> node``, called once, while a graph is built.

Unlike the eager backends, a lowering here does not touch pixels: it adds DALI operators to the
graph of its stage (see ``graph.py``) and reads every per-image number through ``g.arg(name)``,
an ``external_source`` the executor feeds from the plan (``feeds.py`` computes the values).

Stages and the ops lowered into each:
    decode  ``decode``: encoded bytes -> uint8 ``(H, W, 3)`` (mixed nvJPEG on cuda, CPU otherwise)
    canvas  every sizing op: parent image -> one canvas (box, two Pillow-order passes, pad)
    tiles   the plan's tile box (``cut_tile``), ``center_crop`` (nothing left to do),
            ``normalize``, ``patchify``: canvas -> the tile's output rows
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import nvidia.dali.fn as fn
import nvidia.dali.types as types

from ... import ops
from ..base import register_sizing
from ..registry import lowering
from .feeds import CANVAS_KEYS, PASS_KEYS
from .graph import GraphCtx

if TYPE_CHECKING:
    from nvidia.dali.data_node import DataNode

__all__ = ["INTERP_IDS", "cut_tile", "normalize_table", "plugin_loaded", "plugin_normalize_patchify"]

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
def _strip(x, side: str, a: dict, it, g: "GraphCtx"):
    """Rows (or columns) next to an edge, as Pillow computes them: resize(zero-padded window) /
    resize(its 0/1 mask), both over the same region of interest (see feeds.py)."""
    k = lambda name: a[f"{side}_{name}"]  # noqa: E731
    win = fn.slice(x, k("start"), k("shape"), axes=[0, 1], out_of_bounds_policy="pad",
                   fill_values=0)
    num = fn.resize(win, size=k("size"), roi_start=k("roi0"), roi_end=k("roi1"),
                    interp_type=it, antialias=True, dtype=_F32)
    den = fn.resize(g.dev(k("mask")), size=k("msize"), roi_start=k("roi0"), roi_end=k("mroi1"),
                    interp_type=it, antialias=True, dtype=_F32)
    # The cast rounds to nearest and saturates: Pillow's clip8 after each pass.
    return fn.slice(fn.cast(num / den, dtype=types.UINT8), start=[0, 0], shape=k("keep"),
                    axes=[0, 1])


def _pil_pass(x, axis: int, a: dict, it, g: "GraphCtx"):
    """One one-dimensional uint8 pass along ``axis`` (0: rows): DALI's antialiased resize inside,
    Pillow's truncated-and-renormalised filter in the edge strips."""
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
def cut_tile(x: "DataNode", g: "GraphCtx") -> "DataNode":
    """Canvas -> the tile's box ``(top, left, h, w)``, zero where it leaves the canvas."""
    return fn.slice(x, g.arg("tile_start"), g.arg("tile_shape"), axes=[0, 1],
                    out_of_bounds_policy="pad", fill_values=0)


def normalize_table(op: ops.normalize) -> np.ndarray:
    """float32 ``(3, 256)``: channel c's output for level v, computed by the reference
    backend's own normalize, so the table lookup gives the reference's bits."""
    from ..reference.ops import RAMP, normalize_array
    return np.ascontiguousarray(normalize_array(op, RAMP).T)


@lowering(B, "normalize")
def normalize(op: ops.normalize, x: "DataNode", g: "GraphCtx") -> "DataNode":
    """uint8 ``(h, w, 3)`` -> float32 ``(h, w, 3)`` through a 768-entry table indexed by
    ``v + 256 * c`` (one load per element, the reference's bits). With the fused plugin loaded
    the table goes to ``patchify`` instead (see ``plugin_normalize_patchify``)."""
    if g.plugin:
        g.deferred_normalize = op
        return x
    offsets = types.Constant(np.array([0, 256, 512], np.int16), device=g.device)
    idx = fn.cast(x, dtype=types.INT16) + offsets
    return fn.lookup_table(idx, keys=list(range(768)),
                           values=[float(v) for v in normalize_table(op).ravel()],
                           dtype=_F32, default_value=0.0)


@lowering(B, "patchify")
def patchify(op: ops.patchify, x: "DataNode", g: "GraphCtx") -> "DataNode":
    """Tile ``(h, w, 3)`` -> its rows in the family's layout (see ``vlmprep.plan.grid``):
    ``merge_grouped`` ``(gh*gw, 3*T*P*P)`` [c, t, py, px]; ``raster`` ``(gh*gw, 3*P*P)``
    [c, py, px]; ``naflex`` ``(gh*gw, P*P*3)`` [py, px, c]; ``tiles`` ``(3, h, w)``. Stock
    reshape / transpose / cat with per-tile shapes, until the fused plugin takes over."""
    fused = plugin_normalize_patchify(x, g.deferred_normalize, op, g)
    if fused is not None:
        return fused
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


# -- the fused plugin's hook ----------------------------------------------------------------------
_PLUGIN_OP = "VlmprepNormalizePatchify"


def plugin_loaded(device: str = "cpu") -> bool:
    """Whether the csrc DALI plugin (``vlmprep.kernels.dali_plugin``) is built and registered
    for ``device`` (``"cpu"`` or ``"gpu"``: a CPU-only build has no GPU op)."""
    try:
        from ...kernels import dali_plugin
    except ImportError:  # a vlmprep without the kernels' loader
        return False
    if dali_plugin() is None:
        return False
    import nvidia.dali.backend as backend
    ops = backend.RegisteredGPUOps() if device == "gpu" else backend.RegisteredCPUOps()
    return _PLUGIN_OP in ops


def plugin_normalize_patchify(x: "DataNode", normalize_op: "ops.normalize | None",
                              patchify_op: ops.patchify, g: "GraphCtx") -> "DataNode | None":
    """THE PLUGIN HOOK: the fused normalize + patchify op, or None when it is not loaded (the
    stock lowering then runs).

    Contract with ``csrc/dali`` (``fn.vlmprep_normalize_patchify``):
        input 0: uint8 ``(h, w, 3)`` HWC, one tile per sample (the output of ``cut_tile``);
        arguments: ``layout`` (``patchify.layout``), ``patch_size``, ``merge_size``,
            ``temporal_patch_size``, ``lut`` (``normalize_table(op).ravel()``: 768 floats,
            ``lut[c * 256 + v]``; left out for uint8 output), ``dtype`` (FLOAT or UINT8);
        output 0: this tile's rows, exactly what the stock path below returns (same shape, same
            bits: the table is the reference's normalize).
    ``normalize_op`` is the deferred normalize (None for ``dtype="uint8"``).
    """
    if not g.plugin:
        return None
    kw = {"dtype": types.UINT8} if normalize_op is None else {
        "dtype": _F32, "lut": [float(v) for v in normalize_table(normalize_op).ravel()]}
    return fn.vlmprep_normalize_patchify(
        x, layout=patchify_op.order, patch_size=patchify_op.patch_size,
        merge_size=patchify_op.merge_size, temporal_patch_size=patchify_op.temporal_patch_size,
        device=g.device, **kw)
