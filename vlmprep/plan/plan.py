"""The plan: every size, box and count of a batch, decided from header sizes only.

Backends receive a plan and never decide a shape; ``Processor.plan()`` returns the
same plan that ``Processor.__call__`` executes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from ..errors import ImageError
from ..spec.ops import center_crop, decode, resize, smart_resize, tile
from ..spec.pipeline import Pipeline
from . import grid
from . import resize as rules
from . import tiling

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Canvas", "ImagePlan", "Plan", "plan_image", "plan_images"]

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

    def rows(self, layout: str) -> int:
        """Leading-dimension rows this image fills in ``pixel_values``: patches or tiles."""
        return len(self.tiles) if layout == "tiles" else self.num_patches


def _resized_hw(op, hw: tuple[int, int]) -> tuple[int, int]:
    h, w = hw
    if isinstance(op, tile):
        cols, rows = tiling.internvl_grid(h, w, op.tile_size, op.min_tiles, op.max_tiles)
        return rows * op.tile_size, cols * op.tile_size
    if isinstance(op, smart_resize):
        return rules.smart_resize(h, w, op.factor, op.min_pixels, op.max_pixels,
                                  op.max_aspect_ratio)
    assert isinstance(op, resize)
    if op.mode == "fixed":
        return op.height, op.width
    if op.mode == "shortest_edge":
        return rules.shortest_edge(h, w, op.size)
    return rules.longest_edge(h, w, op.size)


def plan_image(pipeline: Pipeline, source_hw: tuple[int, int], index: int = 0) -> ImagePlan:
    """Plan one image of ``source_hw = (H, W)`` (oriented); raises ImageError.

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
    sizing = pipeline.sizing
    rhw = _resized_hw(sizing, (h, w))
    canvases = [Canvas(rhw)]
    crop = pipeline.get("center_crop")
    if isinstance(sizing, tile):
        # Row-major tiles of the resized canvas, then the thumbnail (its own canvas) if > 1 tile.
        t = sizing.tile_size
        tiles: list[Box] = [(r, c, t, t) for r in range(0, rhw[0], t) for c in range(0, rhw[1], t)]
        tile_canvas = [0] * len(tiles)
        if sizing.thumbnail and len(tiles) > 1:
            canvases.append(Canvas((t, t)))
            tiles.append((0, 0, t, t))
            tile_canvas.append(1)
    elif isinstance(crop, center_crop):
        # transformers: top = (H - h) // 2, floor; negative when the crop is larger (zero pad).
        tiles = [((rhw[0] - crop.height) // 2, (rhw[1] - crop.width) // 2, crop.height, crop.width)]
        tile_canvas = [0]
    else:
        tiles = [(0, 0, rhw[0], rhw[1])]
        tile_canvas = [0]
    pf = pipeline.patchify
    grids = [grid.patch_grid((b[2], b[3]), pf) for b in tiles]
    image_tokens = sum(grid.tokens_for_grid(g, pf) for g in grids)
    pk = pipeline.pack
    return ImagePlan(
        index=index, source_hw=(h, w), resized_hw=rhw, tiles=tiles, grid_thw=grids,
        canvases=canvases, tile_canvas=tile_canvas,
        num_patches=sum(t * gh * gw for t, gh, gw in grids),
        num_tokens=image_tokens + pk.extra_tokens,
        placeholder=pk.prefix + pk.image_token * image_tokens + pk.suffix,
    )


def plan_images(pipeline: Pipeline, sizes: Sequence[tuple[int, int] | ImageError]
                ) -> list[ImagePlan]:
    """Plan a batch; an ImageError in ``sizes`` (a failed probe) or from planning is recorded in
    that image's ``error`` (the caller decides whether to raise)."""
    out = []
    for i, hw in enumerate(sizes):
        if isinstance(hw, ImageError):
            out.append(ImagePlan(index=i, source_hw=(0, 0), error=hw.at(index=i)))
            continue
        try:
            out.append(plan_image(pipeline, hw, i))
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
