"""The tiles graph's `ROWS` executor (``fusion.choose_graph``): vlmprep's fused normalize +
patchify plugin op (csrc/dali, ``fn.vlmprep_normalize_patchify``), in place of the normalize and
patchify lowerings, when ``vlmprep.kernels.dali_plugin_loaded(device)``.

Contract with ``csrc/dali``:
    input 0: uint8 ``(h, w, 3)`` HWC, one tile per sample (the output of ``graph.cut_tile``);
    arguments: ``order`` (``patchify.order``), ``patch_size``, ``merge_size``,
        ``temporal_patch_size``, ``lut`` (``normalize_lut(op).ravel()``: 768 floats,
        ``lut[c * 256 + v]``; left out for uint8 output), ``dtype`` (FLOAT or UINT8);
    output 0: this tile's rows, exactly what the stock lowerings return (same shape, same bits:
        the lut is the reference's normalize).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import nvidia.dali.fn as dali_fn
import nvidia.dali.types as dali_types

from ..normalize_lut import normalize_lut

if TYPE_CHECKING:
    from nvidia.dali.data_node import DataNode

    from ... import ops

__all__ = ["normalize_patchify"]

# DALI makes its type enums at import, and the plugin adds its op to ``fn`` when it loads:
# nothing for a type checker.
types: Any = dali_types
fn: Any = dali_fn


def normalize_patchify(x: "DataNode", normalize_op: "ops.normalize | None",
                       patchify_op: "ops.patchify", device: str) -> "DataNode":
    """Tile uint8 ``(h, w, 3)`` -> its rows (see ``lowerings.patchify``), normalized through
    ``normalize_op``'s lut, or left uint8 when ``normalize_op`` is None; ``device``: ``"cpu"`` or
    ``"gpu"``."""
    kw = {"dtype": types.UINT8} if normalize_op is None else {
        "dtype": types.FLOAT, "lut": [float(v) for v in normalize_lut(normalize_op).ravel()]}
    return fn.vlmprep_normalize_patchify(
        x, order=patchify_op.order, patch_size=patchify_op.patch_size,
        merge_size=patchify_op.merge_size, temporal_patch_size=patchify_op.temporal_patch_size,
        device=device, **kw)
