"""What every backend shares: one lowering per op, the executor of each image chosen by
``fusion.choose`` and run by ``Backend.run_image``, errors per image.

A batch runs image by image (``Backend.run_jobs``: side by side on the CPU's image threads), except
where a backend runs it stage by stage: the torch backend on CUDA (``backends/torch/gpu.py``,
whose ``plan_batch`` decides each image's decoder and executor there)."""
from __future__ import annotations

import contextvars
import dataclasses
import functools
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar, cast

from ..budget import Hold, MemoryBudget, image_bytes, process_budget
from ..errors import ImageError
from ..kernels import get_num_threads, local_threads
from ..pipeline import Pipeline
from . import fused, fusion
from .context import Context
from .normalize_lut import lut_tensor, normalize_array
from .registry import SIZING, get_lowering, lowering

if TYPE_CHECKING:
    import torch

    from ..io.inputs import Source
    from ..ops import decode as DecodeOp
    from ..plan import ImagePlan

log = logging.getLogger("vlmprep.backends")

__all__ = ["Backend", "build_canvases", "cut_tiles", "normalized_first", "register_geometry_lowerings",
           "register_sizing", "image_pool"]

T = TypeVar("T")


class Backend:
    """Executes a Pipeline's ops for each image, writing rows into a preallocated output.

    Subclasses set ``name``; their lowerings are registered with
    ``@registry.lowering(name, op_name)`` and called as ``fn(op, value, ctx) -> value`` with
    plain values (images, lists of tiles). The fused executors (``fusion``) need two more facts
    from a backend: ``normalize_levels``, its normalize arithmetic (the lut is it applied to
    every level, so a fused image gets the op-by-op bits), and ``hwc``, its tile as uint8
    ``(h, w, 3)``; ``resize_in_kernel`` lets the kernel resize while it writes the rows.
    """

    name = "base"
    #: ``(op, uint8 (256, C) levels) -> float32 values``: see ``normalize_lut.normalize_lut``.
    normalize_levels: Callable[..., Any] = staticmethod(normalize_array)
    #: Whether `RESIZE_ROWS` / `DECODE_RESIZE_ROWS` / `DECODE_ROWS` may run (the kernel's resize,
    #: in ``resize_match``'s arithmetic, is this backend's resize).
    resize_in_kernel = False
    #: whose resize arithmetic the kernels use when they resize (``kernels.resize``'s ``match``)
    resize_match = "pillow"

    def __init__(self, pipeline: Pipeline, device: str, dtype: str):
        self.pipeline = pipeline
        self.device = device
        self.dtype = dtype
        # the ops this dtype runs (pack and, for uint8, normalize left out: Pipeline.executed_ops)
        self.ops = list(pipeline.executed_ops(dtype))
        # Resolve every lowering now, so a missing one fails at construction, not mid-batch.
        self.lowerings = [get_lowering(self.name, op.name) for op in self.ops]
        self.decode_op = cast("DecodeOp", self.ops[0])  # a Pipeline starts with decode
        # ops[:tail]: decode and sizing (the tiles); ops[tail:]: normalize, patchify (the rows).
        self.tail = next((i for i, op in enumerate(self.ops)
                          if op.name in ("normalize", "patchify")), len(self.ops))
        # fusion.NORMALIZED_CANVAS runs ops[tail] (the normalize) inside the sizing lowering
        self.normalize_at = self.tail if (self.tail < len(self.ops)
                                          and self.ops[self.tail].name == "normalize") else None
        self.fusion = fusion.rules(self.ops, dtype, device, self.resize_in_kernel)

    @staticmethod
    def hwc(tile: Any) -> Any:
        """A tile as this backend holds it -> uint8 ``(h, w, 3)`` (a view)."""
        return tile

    def run(self, sources: Sequence["Source | None"], plans: Sequence["ImagePlan"],
            out: "torch.Tensor") -> dict[int, ImageError]:
        """Fill ``out`` (``(total_patches, patch_dim)`` or ``(total_tiles, C, H, W)``) with the
        rows of every image whose plan has no error, in input order; return
        ``{index: ImageError}`` for images that failed now (their rows are left unwritten: the
        caller compacts)."""
        errors: dict[int, ImageError] = {}
        order = self.pipeline.patchify.order
        row = 0
        jobs: list[Context] = []
        for src, p in zip(sources, plans):
            if p.error is not None or src is None:
                continue
            n = p.rows(order)
            jobs.append(Context(src, p, out[row:row + n], self.dtype, self.device))
            row += n
        for ctx, err in zip(jobs, self.run_jobs(jobs, out)):
            if err is not None:
                errors[ctx.plan.index] = err.at(index=ctx.plan.index, source=ctx.source.desc)
        return errors

    def run_jobs(self, jobs: list[Context], out: "torch.Tensor") -> list[ImageError | None]:
        """Run every job (each ``ctx.dest`` a slice of ``out``); per job its ImageError or None.
        Here image by image (``_map``); a backend that runs a batch stage by stage overrides it."""
        return self._map(jobs)

    def guarded(self, ctx: Context, fn: Callable[[], T]) -> tuple[T | None, ImageError | None]:
        """``(fn(), None)``, or ``(None, the ImageError)`` when it fails: any failure of a step of
        one image is that image's ImageError.

        Only ImageError leaves for a per-image cause: a decoder's or kernel's unexpected
        exception (a closed PIL file, a tensor a lowering cannot read, a library bug) becomes
        an ImageError naming it (logged with its traceback, so a real bug stays visible), and
        so does MemoryError: the failed image's allocations are freed as it unwinds, so the
        other images of the batch still run. KeyboardInterrupt, SystemExit and other
        BaseExceptions that are not Exceptions propagate: they stop the call, not an image.
        """
        try:
            return fn(), None
        except ImageError as e:
            return None, e
        except MemoryError as e:
            err = ImageError("expected an image that fits in memory, got MemoryError while "
                             "processing it; lower max_source_pixels / max_pixels or process "
                             "fewer images at once")
            err.__cause__ = e
            return None, err
        except Exception as e:  # noqa: BLE001 (one image's failure must not fail the batch)
            log.warning("vlmprep: image %s failed with an unexpected %s", ctx.plan.index,
                        type(e).__name__, exc_info=True)
            err = ImageError(f"expected an image the {self.name} backend can process, got "
                             f"{type(e).__name__} while processing it ({_short(e)}); pass it "
                             f"as encoded bytes or a contiguous uint8 array, or report this")
            err.__cause__ = e
            return None, err

    def _one(self, ctx: Context) -> ImageError | None:
        """Run one image (``guarded``)."""
        return self.guarded(ctx, lambda: self.run_image(ctx))[1]

    def _map(self, jobs: list[Context]) -> list[ImageError | None]:
        """Run every image; on the CPU with several threads allowed, images run side by side
        (decoders and kernels release the GIL), each with one kernel thread. Each image holds
        its planned bytes from the process's memory budget (``vlmprep.budget``) while it runs;
        this thread waits for them, in order, so an image thread never waits on the budget."""
        budget = process_budget()  # a bad VLMPREP_MEMORY_BUDGET fails the call, not an image
        n = min(get_num_threads(), len(jobs))
        if n <= 1 or not self.device.startswith("cpu"):
            out: list[ImageError | None] = []
            for c in jobs:
                hold, err = self._admit(budget, c)
                if hold is not None:
                    with hold:
                        err = self._one(c)
                out.append(err)
            return out

        def one(c: Context, hold: Hold) -> ImageError | None:
            try:
                with local_threads(1):
                    return self._one(c)
            finally:
                hold.release()
        pool = image_pool(get_num_threads())
        runs: list[Any] = []
        for c in jobs:
            hold, err = self._admit(budget, c)
            if hold is None:
                runs.append(err)
                continue
            try:
                # in a copy of this context: fusion.at_most's cap reaches the image thread
                runs.append(pool.submit(contextvars.copy_context().run, one, c, hold))
            except BaseException:
                hold.release()
                raise
        return [r if r is None or isinstance(r, ImageError) else r.result() for r in runs]

    def _admit(self, budget: MemoryBudget, ctx: Context) -> tuple[Hold | None, ImageError | None]:
        """``(the image's hold of its planned bytes, None)``, or ``(None, its ImageError)`` when
        the budget refuses it or its wait runs out."""
        return self.guarded(ctx, lambda: budget.acquire(image_bytes(ctx.source, ctx.plan),
                                                        what="this image"))

    def run_image(self, ctx: Context) -> None:
        """Run one image by the executor ``fusion.choose`` names (see fusion's table)."""
        how = fusion.choose(self.fusion, ctx)
        if how in (fusion.RESIZE_ROWS, fusion.DECODE_RESIZE_ROWS):
            c = ctx.plan.canvases[0]  # the whole source, resized: the one tile
            hw, interp = c.resize_hw, c.interpolation or self.fusion.interpolation
            if how == fusion.DECODE_RESIZE_ROWS:
                fused.decode_resize_rows(ctx.source, self.decode_op, hw, interp, self.lut(ctx), ctx,
                                         self.pipeline.patchify, self.resize_match)
            else:
                fused.resize_rows(self.hwc(self.decode(ctx)), hw, interp, self.lut(ctx), ctx,
                                  self.pipeline.patchify, self.resize_match)
            return
        if how == fusion.DECODE_ROWS:
            fused.decode_rows(ctx.source, self.decode_op, self.fusion.interpolation,
                              self.lut(ctx), ctx, self.pipeline.patchify, self.resize_match)
            return
        self.write(self.size(self.decode(ctx), ctx, how), ctx, how)

    # -- the stages of one image (also timed one by one by vlmprep.bench) -----------------------
    def decode(self, ctx: Context) -> Any:
        """The decode lowering: ``ctx.source`` -> the image."""
        return self.lowerings[0](self.ops[0], ctx.source, ctx)

    def size(self, image: Any, ctx: Context, how: str | None = None) -> Any:
        """The lowerings after decode and before normalize / patchify: image -> the plan's tiles.
        ``how``: the image's executor (None: `NORMALIZED_CANVAS` where ``fusion.normalized_canvas``
        says so, as ``choose`` would); `NORMALIZED_CANVAS` runs them with ``ctx.normalize`` set,
        so the tiles leave them normalized (float32)."""
        if how is None and fusion.normalized_canvas(self.fusion, ctx):
            how = fusion.NORMALIZED_CANVAS
        if how == fusion.NORMALIZED_CANVAS:
            ctx = dataclasses.replace(ctx, normalize=functools.partial(self.normalize_one, ctx))
        for op, fn in zip(self.ops[1:self.tail], self.lowerings[1:self.tail]):
            image = fn(op, image, ctx)
        return image

    def normalize_one(self, ctx: Context, image: Any) -> Any:
        """The normalize lowering on one uint8 image or canvas -> float32 (``Context.normalize``
        under `NORMALIZED_CANVAS`: the same op and arithmetic as on the tiles)."""
        k = self.normalize_at
        assert k is not None  # fusion.rules: NORMALIZED_CANVAS only where the pipeline normalizes
        return self.lowerings[k](self.ops[k], [image], ctx)[0]

    def write(self, tiles: Any, ctx: Context, how: str) -> None:
        """The tiles -> ``ctx.dest``: the rest of the lowerings (`OP_BY_OP`; `NORMALIZED_CANVAS`:
        the ones after the normalize, which ``size`` ran), or one kernel call with the normalize
        as a lut (`ROWS`)."""
        if how == fusion.ROWS:
            fused.write_rows([self.hwc(t) for t in tiles], self.lut(ctx), ctx,
                             self.pipeline.patchify)
            return
        start = self.tail + 1 if how == fusion.NORMALIZED_CANVAS else self.tail
        for op, fn in zip(self.ops[start:], self.lowerings[start:]):
            tiles = fn(op, tiles, ctx)

    def lut(self, ctx: Context) -> "torch.Tensor | None":
        """The fused kernels' normalize: ``(3, 256)`` in the output's dtype and device, this
        backend's arithmetic; None where the output runs no normalize (uint8:
        ``Pipeline.normalize_for``)."""
        op = self.pipeline.normalize_for(self.dtype)
        if op is None:
            return None
        return lut_tensor(op, ctx.dest.dtype, ctx.dest.device, self.normalize_levels)


def _short(e: BaseException, n: int = 200) -> str:
    s = " ".join(str(e).split())
    return s if len(s) <= n else s[:n - 3] + "..."


_POOLS: dict[tuple[str, int], Any] = {}
_POOLS_LOCK = threading.Lock()


def _kept_pool(name: str, n: int):
    from concurrent.futures import ThreadPoolExecutor
    with _POOLS_LOCK:
        if (name, n) not in _POOLS:
            _POOLS[(name, n)] = ThreadPoolExecutor(n, thread_name_prefix=f"{name}{n}")
        return _POOLS[(name, n)]


def image_pool(n: int):
    """A process-wide pool of ``n`` image threads, kept: the kernels' per-thread scratch buffers
    (and the OS threads) are reused instead of made again for every batch."""
    return _kept_pool("vlmprep", n)


def video_pool(n: int):
    """A process-wide pool of ``n`` threads for a video's frames and temporal groups, kept, and
    apart from ``image_pool``: a clip's hundreds of tasks never queue ahead of the image
    requests a Batcher runs beside it (serve/videos.py)."""
    return _kept_pool("vlmprep-video", n)


Resize = Callable[[Any, tuple[int, int], str], Any]


def build_canvases(img: Any, plan: "ImagePlan", interpolation: str, resize: Resize,
                   cut: Callable[[Any, tuple[int, int, int, int], tuple[int, int, int]], Any],
                   resize_normalized: Resize | None = None,
                   normalize: Callable[[Any], Any] | None = None) -> list:
    """Execute the plan's canvases with a backend's primitives (shared by every backend):
    ``resize(img, (h, w), interpolation)`` and ``cut(img, (top, left, h, w), fill)``, where a
    box reaching outside the image is filled with ``fill`` (so padding is a cut too), and for a
    ``Canvas.normalized`` canvas ``resize_normalized(parent, (h, w), interpolation)``.

    ``normalize`` (`fusion.NORMALIZED_CANVAS`: the output is normalized): a normalized canvas
    is resized from its parent normalized (each parent normalized once), and the canvases of
    ``normalized_first(plan)`` come back normalized (float32), so their tiles are cut
    normalized; ``cut_tiles`` normalizes the others' tiles. Without it (uint8 output) a
    normalized canvas is resized from its parent's levels, and every canvas is uint8.

    Given Phi-4 on 1080x1920 with ``normalize``: canvas 0 uint8 (1344, 2240), normalized (its
    15 crops lie inside it); canvas 1 = ``resize_normalized(normalize(canvas 0), (448, 448),
    "bicubic")``.
    """
    built: list = []
    normed: dict[int, Any] = {}  # canvas k -> normalize(canvas k), made once

    def normalized(k: int) -> Any:
        if k not in normed:
            normed[k] = normalize(built[k]) if normalize is not None else built[k]
        return normed[k]
    for k, c in enumerate(plan.canvases):
        if c.normalized:
            if resize_normalized is None:
                raise NotImplementedError(
                    f"build_canvases: canvas {k} is normalized (plan.Canvas.normalized): expected "
                    f"a backend with a resize_normalized primitive, got none; register one with "
                    f"register_geometry_lowerings(..., resize_normalized=...)")
            x = (normalize(img) if normalize is not None else img) if c.parent < 0 else \
                normalized(c.parent)
            normed[k] = resize_normalized(x, c.resize_hw, c.interpolation or interpolation)
            built.append(normed[k])
            continue
        x = img if c.parent < 0 else built[c.parent]
        if c.box is not None:
            x = cut(x, c.box, (0, 0, 0))
        x = resize(x, c.resize_hw, c.interpolation or interpolation)
        if c.size is not None:
            x = cut(x, (-c.offset[0], -c.offset[1], c.size[0], c.size[1]), c.fill)
        built.append(x)
    if normalize is None:
        return built
    first = normalized_first(plan)
    return [normalized(k) if k in first else x for k, x in enumerate(built)]


def normalized_first(plan: "ImagePlan") -> set[int]:
    """Under `fusion.NORMALIZED_CANVAS`, the canvases normalized before their tiles are cut: the
    normalized ones, and those with tiles that all lie inside them (normalizing the canvas then
    cutting is normalizing the tiles, one pass; a tile reaching outside is cut from the levels,
    its fill a level, then normalized)."""
    out = set()
    for k, c in enumerate(plan.canvases):
        boxes = [b for b, j in zip(plan.tiles, plan.tile_canvas) if j == k]
        h, w = c.hw
        if c.normalized or (boxes and all(t >= 0 and x >= 0 and t + bh <= h and x + bw <= w
                                          for t, x, bh, bw in boxes)):
            out.add(k)
    return out


def cut_tiles(canvases: list, plan: "ImagePlan",
              cut: Callable[[Any, tuple[int, int, int, int], tuple[int, int, int]], Any],
              normalize: Callable[[Any], Any] | None = None) -> list:
    """The plan's tiles, each cut from its canvas, in output order. ``normalize``
    (`fusion.NORMALIZED_CANVAS`, with ``build_canvases``' canvases): the tiles of a canvas not in
    ``normalized_first`` are normalized once cut."""
    first = normalized_first(plan) if normalize is not None else set()
    tiles = []
    for box, k in zip(plan.tiles, plan.tile_canvas):
        t = cut(canvases[k], box, (0, 0, 0))
        tiles.append(normalize(t) if normalize is not None and k not in first else t)
    return tiles


@dataclass(frozen=True)
class _Sizing:
    """The lowering of every sizing op (a class, not a closure, so Processors pickle)."""

    resize: Callable
    cut: Callable
    resize_normalized: Callable | None = None

    def __call__(self, op: Any, img: Any, ctx: Context) -> list:
        """decoded image -> the plan's tiles, each cut from its canvas, in output order (float32
        under `NORMALIZED_CANVAS`, where ``ctx.normalize`` is set: see ``build_canvases``)."""
        canvases = build_canvases(img, ctx.plan, op.interpolation, self.resize, self.cut,
                                  self.resize_normalized, ctx.normalize)
        return cut_tiles(canvases, ctx.plan, self.cut, ctx.normalize)


def _already_cut(op: Any, tiles: list, ctx: Context) -> list:
    """``center_crop``: the plan's crop box is the tile the sizing step already cut."""
    return tiles


def register_sizing(backend: str, fn: Callable) -> None:
    """Register ``fn`` as ``backend``'s lowering of every sizing op (``registry.SIZING``: found
    by ``get_lowering`` for any op whose ``Op.sizing`` is set, including ops defined later), and
    ``center_crop`` as nothing to do: the plan decides every canvas and tile box, so all sizing
    ops lower alike, and a centre crop is a tile box too."""
    lowering(backend, SIZING)(fn)
    lowering(backend, "center_crop")(_already_cut)


def register_geometry_lowerings(backend: str, resize: Callable, cut: Callable,
                                resize_normalized: Callable | None = None) -> None:
    """``register_sizing`` with the shared executor: build the canvases, cut the tiles, from a
    backend's primitives (see ``build_canvases``; ``resize_normalized``: for
    ``plan.Canvas.normalized`` canvases, None where the backend has none)."""
    register_sizing(backend, _Sizing(resize, cut, resize_normalized))
