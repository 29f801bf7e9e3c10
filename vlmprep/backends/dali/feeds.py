"""Per-sample arguments of the DALI graphs, computed on the host from the plan (numpy only).

The graphs are built once; everything that differs between images (crop boxes, resize sizes,
pass order, strip windows, pad boxes, tile boxes, patch grids) enters as one small array per
sample and argument name, fed through ``external_source``. Nothing here decides a shape: every
size comes from the ``ImagePlan``; this module only spells it in DALI's terms.

Pillow-exact resize, one pass (the canvas graph runs two, in Pillow 13's order):

    Given  a pass along H from 427 rows to 100 rows (bicubic, scale 4.27)
    Input  the image ``x`` (427, W, 3) uint8
    Output ``cat([top, mid, bottom], axis=0)`` (100, W, 3) uint8, where
           mid    = rows [2, 98) of DALI's plain antialiased resize of ``x``;
           top    = rows [0, 2) computed as resize(zero-padded window) / resize(window mask),
           bottom = rows [98, 100) likewise.

Why the strips: near an edge Pillow truncates the filter window and renormalises the weights
that remain; DALI clamps (repeats the edge pixel). The two agree inside the image but differ by
up to ~15 levels in the first and last rows (columns) on large downscales. A zero-padded window
resized with a region of interest gives ``sum(w * x)`` over the in-image taps; the same resize of
a 0/1 mask gives ``sum(w)``; their ratio is Pillow's value (measured: within 1 level everywhere).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ...plan.grid import row_length
from ..resample_order import pil_pass_order

if TYPE_CHECKING:
    from ...io.inputs import Source
    from ...ops import patchify
    from ...plan import Canvas

__all__ = ["INTERPOLATION_SUPPORT", "Feeds", "pass_args", "canvas_args", "tile_args",
           "dali_decodes", "ARG_TYPES", "PASS_KEYS", "CANVAS_KEYS", "TILE_KEYS"]

#: Support of each interpolation's kernel in input pixels at scale 1 (Pillow's: triangle, Keys
#: a=-0.5, Lanczos 3); nearest samples one pixel, so its passes need no edge strips.
INTERPOLATION_SUPPORT = {"nearest": 0.0, "bilinear": 1.0, "bicubic": 2.0, "lanczos": 3.0}

_B, _I16, _I32, _F32 = np.dtype(np.bool_), np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.float32)
#: One edge strip of a pass (``top_`` / ``bot_``): name -> (dtype, layout).
_STRIP_ARGS = {"start": (_I32, None), "shape": (_I32, None), "roi0": (_F32, None),
               "roi1": (_F32, None), "mroi1": (_F32, None), "mask": (_F32, "HWC"),
               "size": (_F32, None), "msize": (_F32, None), "keep": (_I32, None)}
#: One resize pass (prefixed with the pass: ``a_`` first, ``b_`` second).
_PASS_ARGS = {"on": (_B, None), "size": (_F32, None), "mid_start": (_I32, None),
              "mid_shape": (_I32, None),
              **{f"{side}_{k}": t for side in ("top", "bot") for k, t in _STRIP_ARGS.items()}}
#: A canvas, besides its two passes.
_CANVAS_ARGS = {"box_on": (_B, None), "box_start": (_I32, None), "box_shape": (_I32, None),
                "interp": (_I32, None), "hfirst": (_B, None), "pad_on": (_B, None),
                "pad_start": (_I32, None), "pad_shape": (_I32, None), "fill_on": (_B, None),
                "fill": (_I16, None)}
#: A tile: its box in the canvas and its layout's reshapes.
_TILE_ARGS = {"tile_start": (_I32, None), "tile_shape": (_I32, None), "grid": (_I32, None),
              "rows": (_I32, None)}

#: Every per-sample argument of the graphs: name -> (numpy dtype, DALI layout or None). The graph
#: declares each ``external_source`` from this table; the functions below build arrays of these
#: dtypes (tests/backends/test_dali.py checks they agree).
ARG_TYPES: dict[str, tuple[np.dtype, str | None]] = {
    **_CANVAS_ARGS, **{f"{p}_{k}": t for p in ("a", "b") for k, t in _PASS_ARGS.items()},
    **_TILE_ARGS}
#: Argument names of one resize pass (without the pass prefix).
PASS_KEYS = tuple(_PASS_ARGS)
#: Argument names of a canvas (besides the passes).
CANVAS_KEYS = tuple(_CANVAS_ARGS)
#: Argument names of a tile (``grid`` and ``rows``: patch orders only).
TILE_KEYS = tuple(_TILE_ARGS)


class Feeds:
    """Per-sample arrays by argument name: ``feeds[name]`` is a list with one array per sample."""

    def __init__(self) -> None:
        self.data: dict[str, list] = {}

    def add(self, values: dict[str, np.ndarray]) -> None:
        for k, v in values.items():
            self.data.setdefault(k, []).append(v)


def _i32(*v: int) -> np.ndarray:
    return np.array(v, np.int32)


def _f32(*v: float) -> np.ndarray:
    return np.array(v, np.float32)


def pass_args(n_in: int, n_out: int, other: int, axis: int, interpolation: str) -> dict:
    """Arguments of one one-dimensional pass (see the module docstring).

    Args:
        n_in, n_out: size along the pass axis before and after; other: the size of the other
            axis (unchanged by this pass); axis: 0 (rows, Pillow's vertical pass) or 1 (columns).

    Returns ``{key: array}`` for the keys ``PASS_KEYS`` (without the pass prefix); ``on`` is
    False when the size does not change (the graph skips the pass).
    """
    def v2(a, b):  # (along the axis, along the other) -> (H, W) order
        return (a, b) if axis == 0 else (b, a)

    if n_in == n_out:
        return _off_pass()
    s = n_in / n_out
    support = INTERPOLATION_SUPPORT[interpolation]
    # Input pixels a tap may reach from an output pixel's centre, plus one of margin (a row
    # counted here that Pillow does not truncate is still computed exactly: only cost).
    reach = support * max(s, 1.0) + 1.0
    top = bot = 0
    if support > 0:
        while top < n_out and (top + 0.5) * s - reach < 0:
            top += 1
        while bot < n_out - top and (n_out - bot - 0.5) * s + reach > n_in:
            bot += 1
    out = {"on": np.array(True), "size": _f32(*v2(n_out, other)),
           "mid_start": _i32(*v2(top, 0)), "mid_shape": _i32(*v2(n_out - top - bot, other))}
    for side, cnt in (("top", top), ("bot", bot)):
        c = max(cnt, 1)  # DALI cannot resize to 0 rows: compute one, keep none
        o0, o1 = (0, c) if side == "top" else (n_out - c, n_out)
        src0, src1 = o0 * s, o1 * s
        ws = math.floor(src0 - reach) - 1
        we = math.ceil(src1 + reach) + 1
        pos = np.arange(ws, we)
        mask = ((pos >= 0) & (pos < n_in)).astype(np.float32)
        out.update({
            f"{side}_start": _i32(*v2(ws, 0)), f"{side}_shape": _i32(*v2(we - ws, other)),
            f"{side}_roi0": _f32(*v2(src0 - ws, 0)), f"{side}_roi1": _f32(*v2(src1 - ws, other)),
            f"{side}_mroi1": _f32(*v2(src1 - ws, 1)),
            f"{side}_mask": mask.reshape((-1, 1, 1) if axis == 0 else (1, -1, 1)),
            f"{side}_size": _f32(*v2(c, other)), f"{side}_msize": _f32(*v2(c, 1)),
            f"{side}_keep": _i32(*v2(cnt, other)),
        })
    return out


def _off_pass() -> dict:
    """Placeholders of a skipped pass (same dtype and rank; the graph never reads them)."""
    z2i, z2f = _i32(0, 0), _f32(1, 1)
    out = {"on": np.array(False), "size": z2f, "mid_start": z2i, "mid_shape": z2i}
    for side in ("top", "bot"):
        out.update({f"{side}_start": z2i, f"{side}_shape": z2i, f"{side}_roi0": z2f,
                    f"{side}_roi1": z2f, f"{side}_mroi1": z2f,
                    f"{side}_mask": np.ones((1, 1, 1), np.float32), f"{side}_size": z2f,
                    f"{side}_msize": z2f, f"{side}_keep": z2i})
    return out


def canvas_args(c: "Canvas", in_hw: tuple[int, int], interpolation: str,
                interp_ids: dict[str, int]) -> dict:
    """Arguments of canvas ``c`` built from an image of ``in_hw``: cut ``c.box`` (zero outside),
    resize to ``c.resize_hw`` in two passes in Pillow 13's order, place at ``c.offset`` in a
    ``c.size`` canvas filled with ``c.fill``."""
    interp = c.interpolation or interpolation
    out: dict = {"interp": np.array(interp_ids[interp], np.int32)}
    if c.box is not None:
        top, left, h, w = c.box
        out.update(box_on=np.array(True), box_start=_i32(top, left), box_shape=_i32(h, w))
        cur = (h, w)
    else:
        out.update(box_on=np.array(False), box_start=_i32(0, 0), box_shape=_i32(0, 0))
        cur = (in_hw[0], in_hw[1])
    dst = (c.resize_hw[0], c.resize_hw[1])
    order = pil_pass_order(cur, dst, interp)
    hfirst = not order or order[0] == "h"
    out["hfirst"] = np.array(hfirst)
    first = 1 if hfirst else 0
    for prefix, axis in (("a", first), ("b", 1 - first)):
        args = pass_args(cur[axis], dst[axis], cur[1 - axis], axis, interp)
        out.update({f"{prefix}_{k}": v for k, v in args.items()})
        cur = (dst[0], cur[1]) if axis == 0 else (cur[0], dst[1])
    if c.size is not None:
        fill = np.array(c.fill, np.int16)
        out.update(pad_on=np.array(True), pad_start=_i32(-c.offset[0], -c.offset[1]),
                   pad_shape=_i32(*c.size), fill_on=np.array(bool(fill.any())), fill=fill)
    else:
        out.update(pad_on=np.array(False), pad_start=_i32(0, 0), pad_shape=_i32(0, 0),
                   fill_on=np.array(False), fill=np.zeros(3, np.int16))
    return out


def tile_args(box: tuple[int, int, int, int], op: "patchify") -> tuple[dict, int]:
    """Arguments of one tile: its box in the canvas (zero outside) and the reshapes of its
    layout. Returns ``(args, rows)``: ``rows`` leading-dimension rows it fills."""
    top, left, h, w = box
    out = {"tile_start": _i32(top, left), "tile_shape": _i32(h, w)}
    p, m = op.patch_size, op.merge_size
    if op.order == "tiles":
        return out, 1
    gh, gw = h // p, w // p
    if op.order == "merge_grouped":
        out["grid"] = _i32(gh // m, m, p, gw // m, m, p, 3)
    else:  # raster / naflex: (gy, py, gx, px, c)
        out["grid"] = _i32(gh, p, gw, p, 3)
    out["rows"] = _i32(gh * gw, row_length(op))
    return out, gh * gw


#: Formats and Pillow modes DALI's decoder turns into exactly the pixels ``vlmprep.io.decode``
#: gives (checked bit for bit on the CPU in tests/backends/test_dali.py). Everything else goes
#: through the CPU path: transparency (composited on white there, dropped by DALI), 16-bit
#: (round(v/257) there, v>>8 in DALI), CMYK/YCCK, low bit depths, animations, GIF, TIFF, and BMP
#: (rare, and the probe reports 16-bit RGB565 BMPs as 8-bit, which DALI was not checked on).
_DALI_MODES = {"jpeg": ("RGB", "L"), "png": ("RGB", "L", "P"), "webp": ("RGB",)}


def dali_decodes(src: "Source") -> bool:
    """Whether ``src`` goes to DALI's decoder (else: the CPU decode path, into the same batch)."""
    h = src.header
    if src.kind != "encoded" or h is None:
        return False
    return (h.mode_hint in _DALI_MODES.get(h.format, ()) and h.bit_depth == 8
            and not h.has_alpha and not h.animated)
