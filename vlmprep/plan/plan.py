"""The plan: every size, box and count of a batch, decided from header sizes only.

Backends receive a plan and never decide a shape; ``Processor.plan()`` returns the
same plan that ``Processor.__call__`` executes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import ImageError
from ..ops import center_crop, decode, resize, smart_resize, tile
from ..pipeline import Pipeline
from . import grid, tiling
from . import resize as rules

if TYPE_CHECKING:
    import numpy as np

    from ..io.probe import ProbeResult

__all__ = ["Canvas", "ImagePlan", "Plan", "Sizing", "SIZING_RULES", "sizing_rule", "plan_image",
           "plan_images"]

Box = tuple[int, int, int, int]  # (top, left, height, width)
RGB = tuple[int, int, int]


@dataclass(frozen=True)
class Canvas:
    """One intermediate image that tiles are cut from, built in three steps:

    ``parent`` (-1: the decoded source; k: canvas k, built earlier) -> cut ``box`` (None: all)
    -> resize to ``resize_hw`` (``interpolation``, None: the sizing op's) -> place at ``offset``
    in a ``size`` canvas filled with ``fill`` (uint8 RGB; None ``size``: no padding).

    Given InternVL on 1080x1920: Canvas((896, 1792)) for the 8 tiles and Canvas((448, 448)) for
    the thumbnail, both from the source.
    """

    resize_hw: tuple[int, int]
    parent: int = -1
    box: Box | None = None
    size: tuple[int, int] | None = None
    offset: tuple[int, int] = (0, 0)
    fill: RGB = (0, 0, 0)
    interpolation: str | None = None

    @property
    def hw(self) -> tuple[int, int]:
        """The canvas's final ``(h, w)``."""
        return self.size if self.size is not None else self.resize_hw


@dataclass(frozen=True)
class ImagePlan:
    """Geometry of one input image.

    Fields:
        index: position in the input list.
        source_hw: ``(H, W)`` after EXIF orientation (what the user sees).
        resized_hw: ``(H', W')`` after the sizing op (the first canvas).
        tiles: ``(top, left, height, width)`` boxes in the resized canvas, in output order;
            one box for untiled families (the whole image, or the centre crop). A box may
            reach outside the canvas (a crop larger than the image): outside is zero.
        canvases: the intermediate images (``Canvas``) tiles are cut from, each built once;
            ``canvases[0].resize_hw`` is ``resized_hw``; e.g. InternVL's thumbnail is a second.
        tile_canvas: for each tile, the index of the canvas its box is cut from.
        grid_thw: one ``(t, h, w)`` patch grid per ViT sequence (per tile).
        num_patches: sum of ``t*h*w`` over the sequences.
        num_tokens: LLM placeholder tokens for this image (0 when ``error`` is set).
        placeholder: the exact string the family's processor puts in the prompt.
        error: the ImageError of a skipped image, else None.
    """

    index: int
    source_hw: tuple[int, int]
    resized_hw: tuple[int, int] = (0, 0)
    tiles: list[Box] = field(default_factory=list)
    grid_thw: list[tuple[int, int, int]] = field(default_factory=list)
    canvases: list[Canvas] = field(default_factory=list)
    tile_canvas: list[int] = field(default_factory=list)
    num_patches: int = 0
    num_tokens: int = 0
    placeholder: str = ""
    error: ImageError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def rows(self, order: str) -> int:
        """Leading-dimension rows this image fills in ``pixel_values``: patches or tiles."""
        return len(self.tiles) if order == "tiles" else self.num_patches


@dataclass(frozen=True)
class Sizing:
    """What a sizing rule decides for one image (see ImagePlan for the fields).

    ``image_tokens`` / ``placeholder``: None means the default rule, the sum over tiles of
    ``tokens_for_grid`` and ``prefix + image_token * image_tokens + suffix``; families whose
    token count or prompt string follows another rule set them.
    """

    canvases: list[Canvas]
    tiles: list[Box]
    tile_canvas: list[int]
    image_tokens: int | None = None
    placeholder: str | None = None
    #: ``ImagePlan.resized_hw`` when it is not ``canvases[0].resize_hw`` (chained resizes).
    resized_hw: tuple[int, int] | None = None


#: sizing op name -> rule(op, (H, W), pipeline) -> Sizing. One per sizing op; loud on conflicts.
SIZING_RULES: dict[str, Callable[[Any, tuple[int, int], Pipeline], Sizing]] = {}


def sizing_rule(op_name: str):
    """Decorator: register the plan rule of sizing op ``op_name``."""
    def deco(fn):
        if op_name in SIZING_RULES:
            raise RuntimeError(f"sizing rule for op {op_name!r} defined twice")
        SIZING_RULES[op_name] = fn
        return fn
    return deco


def _one_canvas(rhw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """The whole resized image as one tile, or the centre crop of it."""
    crop = pipeline.get("center_crop")
    if isinstance(crop, center_crop):
        # transformers: top = (H - h) // 2, floor; negative when the crop is larger (zero pad).
        box = ((rhw[0] - crop.height) // 2, (rhw[1] - crop.width) // 2, crop.height, crop.width)
    else:
        box = (0, 0, rhw[0], rhw[1])
    return Sizing([Canvas(rhw)], [box], [0])


@sizing_rule("smart_resize")
def _smart_resize(op: smart_resize, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    rhw = rules.smart_resize(hw[0], hw[1], op.factor, op.min_pixels, op.max_pixels,
                             op.max_aspect_ratio)
    return _one_canvas(rhw, pipeline)


@sizing_rule("resize")
def _resize(op: resize, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    if op.mode == "fixed":
        rhw = (op.height, op.width)
    elif op.mode == "shortest_edge":
        rhw = rules.shortest_edge(hw[0], hw[1], op.size)
    else:
        rhw = rules.longest_edge(hw[0], hw[1], op.size)
    return _one_canvas(rhw, pipeline)


@sizing_rule("tile")
def _tile(op: tile, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """Row-major tiles of the resized canvas, then the thumbnail (its own canvas) if > 1 tile."""
    cols, rows = tiling.internvl_grid(hw[0], hw[1], op.tile_size, op.min_tiles, op.max_tiles)
    t = op.tile_size
    canvases = [Canvas((rows * t, cols * t))]
    tiles: list[Box] = [(r * t, c * t, t, t) for r in range(rows) for c in range(cols)]
    tile_canvas = [0] * len(tiles)
    if op.thumbnail and len(tiles) > 1:
        canvases.append(Canvas((t, t)))
        tiles.append((0, 0, t, t))
        tile_canvas.append(1)
    return Sizing(canvases, tiles, tile_canvas)


def plan_image(pipeline: Pipeline, source_hw: tuple[int, int], index: int = 0,
               header: "ProbeResult | None" = None) -> ImagePlan:
    """Plan one image of ``source_hw = (H, W)`` (oriented); raises ImageError.

    ``header``: the probe result of an encoded source; with it, the decode's predicted peak
    memory is checked against ``decode.max_decode_bytes`` (before any byte is decoded).

    Given qwen2-vl and (1080, 1920) -> resized (1092, 1932), tiles [(0, 0, 1092, 1932)],
    grid [(1, 78, 138)], 10764 patches, 2691 tokens.
    """
    h, w = source_hw
    dec: decode = pipeline["decode"]  # type: ignore[assignment]
    if h < 1 or w < 1:
        raise ImageError(f"expected an image of at least 1x1 pixels, got {h}x{w} (HxW)")
    if h * w > dec.max_source_pixels:
        raise ImageError(f"expected at most {dec.max_source_pixels:,} source pixels, got {h}x{w} = "
                         f"{h * w:,} (rejected from the header, before decoding); downscale the "
                         f"image or raise max_source_pixels= if it is trusted")
    if header is not None:
        from ..io.decode import check_decode_cost
        check_decode_cost(header, dec.max_decode_bytes)
    sz = SIZING_RULES[pipeline.sizing.name](pipeline.sizing, (h, w), pipeline)
    pf = pipeline.patchify
    grids = [grid.patch_grid((b[2], b[3]), pf) for b in sz.tiles]
    pk = pipeline.pack
    image_tokens = (sz.image_tokens if sz.image_tokens is not None
                    else sum(grid.tokens_for_grid(g, pf) for g in grids))
    return ImagePlan(
        index=index, source_hw=(h, w),
        resized_hw=sz.resized_hw if sz.resized_hw is not None else sz.canvases[0].resize_hw,
        tiles=sz.tiles,
        grid_thw=grids, canvases=sz.canvases, tile_canvas=sz.tile_canvas,
        num_patches=sum(t * gh * gw for t, gh, gw in grids),
        num_tokens=image_tokens + pk.extra_tokens,
        placeholder=(sz.placeholder if sz.placeholder is not None
                     else pk.prefix + pk.image_token * image_tokens + pk.suffix),
    )


def plan_images(pipeline: Pipeline, sizes: Sequence[tuple[int, int] | ImageError],
                headers: "Sequence[ProbeResult | None] | None" = None) -> list[ImagePlan]:
    """Plan a batch; an ImageError in ``sizes`` (a failed probe) or from planning is recorded in
    that image's ``error`` (the caller decides whether to raise). ``headers[i]``: image i's probe
    result when encoded (see ``plan_image``)."""
    out = []
    for i, hw in enumerate(sizes):
        if isinstance(hw, ImageError):
            out.append(ImagePlan(index=i, source_hw=(0, 0), error=hw.at(index=i)))
            continue
        try:
            out.append(plan_image(pipeline, hw, i, headers[i] if headers is not None else None))
        except ImageError as e:
            out.append(ImagePlan(index=i, source_hw=tuple(hw), error=e.at(index=i)))
    return out


@dataclass(frozen=True)
class Plan:
    """The plan of a batch: ``images[i]`` for input ``i``, plus batch-level shortcuts."""

    images: list[ImagePlan]
    pipeline: Pipeline = field(repr=False, compare=False, default=None)  # type: ignore[assignment]

    @property
    def num_tokens(self) -> list[int]:
        """LLM placeholder tokens per input image (0 for a bad image)."""
        return [p.num_tokens for p in self.images]

    @property
    def grid_thw(self) -> "np.ndarray":
        """``(num_seqs, 3)`` int64: every good image's sequences, in input order."""
        import numpy as np
        rows = [g for p in self.images for g in p.grid_thw]
        return np.asarray(rows, dtype=np.int64).reshape(len(rows), 3)

    @property
    def total_tokens(self) -> int:
        return sum(p.num_tokens for p in self.images)

    @property
    def total_patches(self) -> int:
        return sum(p.num_patches for p in self.images)

    @property
    def errors(self) -> dict[int, ImageError]:
        return {p.index: p.error for p in self.images if p.error is not None}

    def __len__(self) -> int:
        return len(self.images)

    def __iter__(self):
        return iter(self.images)

    def __getitem__(self, i: int) -> ImagePlan:
        return self.images[i]
