"""The floors the harness divides by, each on one thread: decode only (the fastest decoder), the
plan's canvases by the compiled exact resize alone, and streamed stores of exactly the output bytes
(see ``harness``'s module doc and ``DEFINITIONS``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .. import kernels
from ..io import decode as io_decode
from ..io.inputs import resolve
from ..io.probe import probe
from ..plan import plan_images
from . import decoders as bench_decoders
from .images import ImageSet
from .timing import floor_times, ms, thread_count

if TYPE_CHECKING:
    from ..pipeline import Pipeline

__all__ = ["decode_floor", "resize_floor", "write_floor"]


def decode_floor(s: ImageSet, repeat: int, device: str = "cpu") -> dict:
    """Every decoder that works here, decode only, one thread: the fastest one's p50 per image."""
    hws = [probe(b).size_hw for b in s.items]
    with thread_count(1):
        calls, unavailable = bench_decoders.prepare(list(s.items), hws, device)
        decoders = {}
        for name, fns in calls.items():
            p50, least = floor_times(fns, repeat)
            decoders[name] = {"per_image_p50_ms": ms(p50), "per_image_min_ms": ms(least)}
    out: dict = {"size": s.label, "threads": 1, "decoders": decoders, "unavailable": unavailable}
    if decoders:
        best = min(decoders, key=lambda k: decoders[k]["per_image_p50_ms"])
        out.update(fastest=best, decode_floor_ms=decoders[best]["per_image_p50_ms"],
                   decode_floor_min_ms=min(d["per_image_min_ms"] for d in decoders.values()))
    else:
        out.update(fastest=None, decode_floor_ms=None, decode_floor_min_ms=None)
    return out


def resize_floor(pipe: "Pipeline", s: ImageSet, repeat: int) -> dict:
    """The plan's canvases from each decoded image by the compiled exact resize alone, one thread
    (``base.build_canvases`` with the torch backend's CPU ``resize`` and ``cut``: the kernels'
    Pillow-exact resize into a reused buffer; crops inside the image are views)."""
    import numpy as np  # deferred: heavy
    import torch  # deferred: heavy

    from ..backends.base import build_canvases  # deferred: imports torch
    from ..backends.torch import ops as torch_ops  # deferred: imports torch
    interp = pipe.sizing.interpolation  # type: ignore[attr-defined]
    calls = []
    for item in s.items:
        src = resolve(item)
        (plan,) = plan_images(pipe, [src.hw])
        img = torch.from_numpy(np.require(io_decode.decode(src, fast=True), requirements="W"))
        chw = img.permute(2, 0, 1)
        calls.append(lambda chw=chw, plan=plan: build_canvases(chw, plan, interp, torch_ops.resize,
                                                               torch_ops.cut))
    compiled = kernels.available() and all(
        (c.interpolation or interp) in kernels.RESIZE_INTERPOLATIONS
        for item in s.items[:1] for c in plan_images(pipe, [resolve(item).hw])[0].canvases)
    with thread_count(1):
        p50, low = floor_times(calls, repeat)
    return {"size": s.label, "threads": 1, "resize_floor_ms": ms(p50), "resize_floor_min_ms": ms(low),
            "resize": "kernels.resize" if compiled else "resize_like_pil (no compiled resize)"}


def write_floor(proc: Any, s: ImageSet, repeat: int) -> dict:
    """Streamed stores of exactly each image's output bytes (its ``pixel_values`` from ``proc``)
    into buffers taken as the Processor takes them, one thread (``kernels.stream_store``)."""
    shapes = []
    for item in s.items:
        pv = proc([item]).pixel_values
        shapes.append((tuple(pv.shape), pv.dtype, pv.numel() * pv.element_size()))
    nbytes = sum(b for _, _, b in shapes) / len(shapes)
    out: dict[str, Any] = {"size": s.label, "dtype": proc.dtype,
                           "row_form": getattr(proc, "row_form", "full"), "threads": 1,
                           "write_floor_bytes": round(nbytes)}
    if not kernels.available() or proc.device != "cpu":
        out.update(write_floor_ms=None, write_floor_min_ms=None, write_floor_GB_per_s=None,
                   why=("CPU outputs only" if kernels.available()
                        else f"no compiled kernels: {kernels.why_unavailable()}"))
        return out
    held: list = [None]

    def store(shape: tuple, dtype: Any) -> None:
        buf = kernels.empty(shape, dtype)  # as Processor.__call__ takes its output
        kernels.stream_store(buf)
        held[0] = buf  # the previous output stays alive through the next call, as in a loop

    def call(shape: tuple, dtype: Any) -> Callable[[], None]:
        return lambda: store(shape, dtype)

    with thread_count(1):
        p50, low = floor_times([call(sh, dt) for sh, dt, _ in shapes], repeat)
    out.update(write_floor_ms=ms(p50), write_floor_min_ms=ms(low),
               write_floor_GB_per_s=round(nbytes / p50 / 1e9, 2) if p50 > 0 else None)
    return out
