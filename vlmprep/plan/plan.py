"""The plan: every size, box and count of a batch, decided from header sizes only.

Backends receive a plan and never decide a shape; ``Processor.plan()`` returns the
same plan that ``Processor.__call__`` executes.

This module holds the types (``Canvas``, ``ImagePlan``, ``Sizing``, ``Plan``), the rule registry
(``SIZING_RULES``, filled by ``@sizing_rule``) and ``plan_image`` / ``plan_images``; each sizing
op's rule lives in its own module (``qwen``, ``resize``, ``internvl``, ``anyres``, ``idefics3``,
``mllama``, ``gemma3``, ``pixtral``, ``naflex``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import ImageError
from ..ops import OP_TYPES, center_crop, decode
from ..pipeline import Pipeline
from . import grid
from .boxes import Box, center_crop_box

if TYPE_CHECKING:
    import numpy as np

    from ..io.probe import ProbeResult

__all__ = ["Canvas", "ImagePlan", "Plan", "Sizing", "SIZING_RULES", "sizing_rule", "one_canvas",
           "plan_image", "plan_images"]

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


#: sizing op name -> rule(op, (H, W), pipeline) -> Sizing: the one registry of plan rules, filled
#: by ``@sizing_rule`` in each rule's module (``vlmprep.plan`` imports them all); loud on conflicts.
SIZING_RULES: dict[str, Callable[[Any, tuple[int, int], Pipeline], Sizing]] = {}


def sizing_rule(op_name: str):
    """Decorator: register the plan rule of sizing op ``op_name`` (an ``ops`` sizing op)."""
    def deco(fn):
        if op_name in SIZING_RULES:
            raise RuntimeError(f"sizing rule for op {op_name!r} defined twice")
        if op_name not in OP_TYPES or not OP_TYPES[op_name].sizing:
            raise RuntimeError(f"sizing rule for {op_name!r}: expected the name of a sizing op "
                               f"in vlmprep.ops, got an unknown or non-sizing name")
        SIZING_RULES[op_name] = fn
        return fn
    return deco


def one_canvas(rhw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """The whole resized image as one tile, or the pipeline's ``center_crop`` box of it."""
    crop = pipeline.get("center_crop")
    box = (center_crop_box(rhw, crop.tile_hw) if isinstance(crop, center_crop)
           else (0, 0, rhw[0], rhw[1]))
    return Sizing([Canvas(rhw)], [box], [0])


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
    rule = SIZING_RULES.get(pipeline.sizing.name)
    if rule is None:
        raise NotImplementedError(f"plan: expected a plan rule for sizing op "
                                  f"{pipeline.sizing.name!r}, got none; rules exist for "
                                  f"{sorted(SIZING_RULES)} (add one with @sizing_rule)")
    sz = rule(pipeline.sizing, (h, w), pipeline)
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
            out.append(ImagePlan(index=i, source_hw=(hw[0], hw[1]), error=e.at(index=i)))
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
