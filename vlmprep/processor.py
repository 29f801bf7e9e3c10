"""Processor: the user's entry point. Resolve inputs -> plan -> backend -> PackedBatch."""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Sequence, cast

from . import presets
from .errors import ImageError, describe_source
from .io.inputs import as_image_list, resolve
from .pipeline import Pipeline
from .plan import ImagePlan, Plan, plan_images

if TYPE_CHECKING:
    from .ops import decode

__all__ = ["Processor"]

DTYPES = ("float32", "bfloat16", "uint8")
_ERRORS = ("raise", "skip")
DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?)$")


class Processor:
    """Turns images into the tensors a VLM's vision encoder expects.

    Args:
        pipeline: a preset name (``vlmprep.presets.names()``) or a ``vlmprep.Pipeline``.
        backend: ``"auto"`` | ``"dali"`` | ``"torch"`` | ``"reference"``
            (``vlmprep.backends.available()``; ``"auto"``: the first usable of dali, torch on
            CUDA, of torch, reference on the CPU).
        device: ``"cpu"`` | ``"cuda"`` | ``"cuda:N"``: where ``pixel_values`` is produced.
        dtype: ``"float32"`` | ``"bfloat16"`` | ``"uint8"`` (resized, patchified, not normalized).
        errors: ``"raise"`` (the first bad image raises, nothing is returned) or ``"skip"``
            (bad images are left out and named in ``batch.errors``).
        **overrides: any field of the pipeline's ops, e.g. ``max_pixels=1_003_520``.
    """

    def __init__(self, pipeline: str | Pipeline = "qwen2-vl", backend: str = "auto",
                 device: str = "cpu", dtype: str = "float32", errors: str = "raise",
                 **overrides: Any):
        from . import backends
        if isinstance(pipeline, Pipeline):
            pipe = pipeline.replace(**overrides)
        elif isinstance(pipeline, str):
            pipe = presets.get(pipeline, **overrides)
        else:
            raise TypeError(f"pipeline: expected a preset name {presets.names()} or a "
                            f"vlmprep.Pipeline, got {type(pipeline).__name__}")
        device = str(device)
        if not DEVICE_RE.match(device):
            raise ValueError(f"device: expected 'cpu', 'cuda' or 'cuda:N', got {device!r}")
        if dtype not in DTYPES:
            raise ValueError(f"dtype: expected one of {DTYPES}, got {dtype!r}")
        if errors not in _ERRORS:
            raise ValueError(f"errors: expected one of {_ERRORS}, got {errors!r}")
        name = backends.resolve_auto(device) if backend == "auto" else backend
        cls = backends.get(name)
        if device.startswith("cuda"):
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError(f"device {device!r}: expected a CUDA GPU, found none "
                                   f"(torch.cuda.is_available() is False); use device='cpu'")
            if name == "reference":
                raise ValueError("backend 'reference' runs on the CPU only; use backend='torch' "
                                 "for CUDA, or device='cpu'")
        self.pipeline = pipe
        self.backend_name = name
        self.device = device
        self.dtype = dtype
        self.errors = errors
        self._backend = cls(pipe, device, dtype)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs: Any) -> "Processor":
        """A Processor from a local checkpoint folder or its ``preprocessor_config.json``.

        Reads transformers 4.x and 5.x spellings; never downloads. ``kwargs`` go to
        ``Processor(...)`` (backend, device, dtype, errors and field overrides).
        """
        pipe = presets.from_config(presets.load_config(path))
        return cls(pipe, **kwargs)

    def __repr__(self) -> str:
        return (f"Processor({self.pipeline.name!r}, backend={self.backend_name!r}, "
                f"device={self.device!r}, dtype={self.dtype!r}, errors={self.errors!r})")

    # -- planning -------------------------------------------------------------------------------
    def prepare(self, items: list) -> tuple[list, list[ImagePlan]]:
        """Probe (headers, shapes) and plan every item once -> (sources, plans).

        Never raises for a per-item cause: a bad item has ``None`` as its source and its
        ImageError in its plan. ``execute`` runs the result without probing again; the serving
        batcher calls ``prepare`` when a request arrives and ``execute`` when its batch runs.
        """
        max_bytes = cast("decode", self.pipeline["decode"]).max_source_bytes
        sources: list = []
        sizes: list = []
        for i, item in enumerate(items):
            try:
                src = resolve(item, max_bytes)
            except ImageError as e:
                sources.append(None)
                sizes.append(e.at(index=i, source=describe_source(item)))
                continue
            sources.append(src)
            sizes.append(src.hw)
        # The headers let the plan refuse from them what decoding would cost too much
        # (decode.max_decode_bytes), before any batch is allocated.
        plans = plan_images(self.pipeline, sizes,
                            headers=[s.header if s is not None else None for s in sources])
        plans = [p if p.error is None or sources[p.index] is None
                 else _with_source(p, sources[p.index].desc) for p in plans]
        return sources, plans

    def _first_error(self, plans: Sequence[ImagePlan]) -> None:
        if self.errors == "raise":
            for p in plans:
                if p.error is not None:
                    raise p.error

    def plan(self, images: Sequence[Any]) -> Plan:
        """Geometry of every image from headers only (no pixel is decoded).

        Returns a Plan equal to what ``self(images)`` produces. With ``errors="raise"``
        the first bad image raises ImageError; with ``"skip"`` it is recorded in its plan.
        """
        _, plans = self.prepare(as_image_list(images))
        self._first_error(plans)
        return Plan(list(plans), self.pipeline)

    # -- execution ------------------------------------------------------------------------------
    def __call__(self, images: Sequence[Any]):
        """Process ``images`` -> PackedBatch (see API.md for every field)."""
        return self.execute(*self.prepare(as_image_list(images)))

    def execute(self, sources: Sequence[Any], plans: Sequence[ImagePlan]):
        """``prepare``'s output -> PackedBatch, without probing again (the Batcher plans a
        request when it arrives and runs it later through this).

        ``plans[k].index`` must be ``k``.
        """
        import torch

        from . import pack
        from .plan.grid import row_length
        self._first_error(plans)  # raise before any decode: no partial state
        order = self.pipeline.patchify.order
        total = sum(p.rows(order) for p in plans if p.error is None)
        if order == "tiles":
            shape = (total, 3, *self.pipeline.tile_hw)  # type: ignore[misc]
        else:
            shape = (total, row_length(self.pipeline.patchify))
        from . import kernels  # on the CPU a cached buffer: a fresh one costs more to fault in
        out = kernels.empty(shape, getattr(torch, self.dtype), self.device)
        late = self._backend.run(sources, plans, out)
        if late:
            if self.errors == "raise":
                raise late[min(late)]
            out = _drop_rows(out, plans, late, order)
        errors = {p.index: p.error for p in plans if p.error is not None}
        errors.update(late)
        return pack.build(out, plans, errors, self.pipeline)


def _with_source(p: ImagePlan, desc: str) -> ImagePlan:
    from dataclasses import replace
    err = p.error
    return replace(p, error=err.at(source=desc) if err is not None else None)


def _drop_rows(out, plans: Sequence[ImagePlan], failed: dict[int, ImageError], order: str):
    """``out`` without the rows of images that failed during decode (rare path: one copy)."""
    import torch
    keep, row = [], 0
    for p in plans:
        if p.error is not None:
            continue
        n = p.rows(order)
        if p.index not in failed:
            keep.append(torch.arange(row, row + n))
        row += n
    idx = torch.cat(keep) if keep else torch.zeros(0, dtype=torch.int64)
    return out[idx.to(out.device)]
