"""The dali backend's GPU paths one at a time, and the bounds each is held to against Pillow.

Used by tests/backends/test_dali.py and bench/gpu_check.py (the one GPU run records the
measured figures next to these bounds). The end-to-end difference on the GPU is split into its
two sources, each with a bound that can fail:

    decode   nvJPEG (the mixed decoder, fancy upsampling) vs libjpeg-turbo (Pillow): JPEGs only;
             PNG, WebP, GIF and arrays are decoded on the CPU on either device.
    resize   the GPU canvas graph vs Pillow on the same decoded pixels (the reference is fed the
             arrays the GPU decoded): the same float arithmetic as the CPU graph, and, since
             ``lowerings.to_levels``, the same rounding (ties half away from zero), so the CPU
             graph's measured bound holds.

``decode_only`` runs the decode lowering alone (nvJPEG on ``"gpu"``, libjpeg-turbo on
``"cpu"``) and hands back host arrays.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ... import ops
from .graph import GraphCtx, build_pipeline
from .lowerings import decode as decode_lowering

__all__ = ["BOUNDS", "decode_only"]

#: uint8 levels per path: max, mean and 99.9th percentile of |ours - Pillow| over a batch.
BOUNDS: dict[str, dict[str, float]] = {
    # Measured on the CPU graph (tests/backends/test_dali.py MAX_LEVELS: three chained canvases,
    # Idefics3): a float sum within ~1e-6 of a half level lands one level apart per pass. The
    # GPU runs the same float passes (another summation order moves the same near-ties) and
    # rounds like the host now, so the same numbers; the mean and p99.9.
    "resize": {"max": 3.0, "mean": 1.0, "p999": 6.0},
    # Not measured yet (no GPU here; bench/gpu_check.py records it on the first GPU run).
    # Derived: libjpeg-turbo's islow IDCT and nvJPEG's are each within 1 of the exact IDCT
    # (IEEE 1180), so Y, Cb, Cr differ by <= 2; interpolated (fancy) chroma upsampling is a
    # convex combination plus its own rounding (<= 3); colour conversion rounds once in each
    # (<= 1): B = Y + 1.772 (Cb - 128) differs by <= 2 + 1.772 * 3 + 1 = 8.3 -> 8 levels.
    # Mean 1: DALI's own test of the mixed decoder with fancy upsampling against its CPU one
    # (test_decoders_image.py, compare_pipelines eps=1, a mean). Replicated chroma (a decoder
    # that ignores fancy upsampling) moves colour edges by tens of levels and fails this.
    "decode": {"max": 8.0, "mean": 1.0, "p999": 6.0},
}


def decode_only(data: list[bytes], device: str, device_id: int | None = 0) -> list[np.ndarray]:
    """Encoded images -> ``(H, W, 3)`` uint8 host arrays through the ``decode`` lowering alone
    (``device`` ``"gpu"``: the mixed nvJPEG decoder the GPU graphs use; ``"cpu"``: DALI's
    libjpeg-turbo). The same graph code as the backend's decode stage, one run."""
    if device not in ("cpu", "gpu"):
        raise ValueError(f"decode_only: expected device 'cpu' or 'gpu' (DALI's names), got {device!r}")
    g = GraphCtx(device, "uint8")

    def define(g: GraphCtx) -> Any:
        return decode_lowering(ops.decode(), g.data("encoded", layout=None, on_device=False), g)

    pipe = build_pipeline(define, g, max(1, len(data)), device_id if device == "gpu" else None)
    pipe.feed_input("encoded", [np.frombuffer(d, np.uint8) for d in data])
    (out,) = pipe.run()
    if device == "gpu":
        out = out.as_cpu()
    return [np.array(out[k]) for k in range(len(data))]
