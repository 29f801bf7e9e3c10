"""The plan: every size, box and count of a batch, decided from header sizes only.

Backends receive a plan and never decide a shape; ``Processor.plan()`` returns the
same plan that ``Processor.__call__`` executes.

This module holds the types (``Canvas``, ``ImagePlan``, ``Sizing``, ``Plan``), the rule registry
(``SIZING_RULES``, filled by ``@sizing_rule``) and ``plan_image`` / ``plan_images``; each sizing
op's rule lives in its own module (``qwen``, ``resize``, ``internvl``, ``anyres``, ``idefics3``,
``mllama``, ``gemma3``, ``pixtral``, ``naflex``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import ImageError
from ..io.decode import check_decode_cost
from ..ops import OP_TYPES, Op, center_crop, decode
from ..pipeline import Pipeline
from . import grid
from .boxes import Box, center_crop_box

if TYPE_CHECKING:
    import numpy as np

    from ..io.probe import ProbeResult
    from .document import DocumentPlan
    from .video import VideoPlan

__all__ = ["Canvas", "ImagePlan", "Plan", "Sizing", "SizingRule", "SIZING_RULES", "sizing_rule",
           "check_sizing", "one_canvas", "plan_image", "plan_images", "count_embeddings"]

RGB = tuple[int, int, int]


@dataclass(frozen=True)
class Canvas:
    """One intermediate image that tiles are cut from, built in three steps:

    ``parent`` (-1: the decoded source; k: canvas k, built earlier) -> cut ``box`` (None: all)
    -> resize to ``resize_hw`` (``interpolation``, None: the sizing op's) -> place at ``offset``
    in a ``size`` canvas filled with ``fill`` (uint8 RGB; None ``size``: no padding).

    ``normalized=True``: the canvas is resized from its parent's *normalized* values, float32,
    without antialias (``torch.nn.functional.interpolate(antialias=False)`` through
    ``tvF.resize``), so the pipeline's normalize runs before it; with a uint8 output (no
    normalize) from the parent's levels, still without antialias. Its tiles leave the resize
    normalized. Transformers' Phi-4-multimodal global view is one (``phi4_hd``); such a canvas is
    a leaf with no box and no padding, its tiles inside it, in the ``tiles`` order
    (``check_sizing``).

    Given InternVL on 1080x1920: Canvas((896, 1792)) for the 8 tiles and Canvas((448, 448)) for
    the thumbnail, both from the source. Phi-4 on 1080x1920: Canvas((1260, 2240), size=(1344,
    2240), fill=(255, 255, 255)) for the 15 crops and Canvas((448, 448), parent=0,
    interpolation="bicubic", normalized=True) for the global view.
    """

    resize_hw: tuple[int, int]
    parent: int = -1
    box: Box | None = None
    size: tuple[int, int] | None = None
    offset: tuple[int, int] = (0, 0)
    fill: RGB = (0, 0, 0)
    interpolation: str | None = None
    normalized: bool = False

    @property
    def hw(self) -> tuple[int, int]:
        """The canvas's final ``(h, w)``."""
        return self.size if self.size is not None else self.resize_hw


def _abbrev(v: Any, chars: int = 40, items: int = 8) -> str:
    """``repr(v)``, a long string as its first ``chars`` characters + ``'... (N chars)'`` and a
    long list as its first ``items`` items + ``'... (N items)'``.

    Given "<|image_pad|>" * 3000 -> "'<|image_pad|><|image_pad|><|image_pad|><|i'... (39000 chars)".
    """
    if isinstance(v, str) and len(v) > chars:
        return f"{v[:chars]!r}... ({len(v)} chars)"
    if isinstance(v, list) and len(v) > items:
        return f"[{', '.join(repr(x) for x in v[:items])}, ... ({len(v)} items)]"
    return repr(v)


@dataclass(frozen=True, repr=False)
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
        num_embeddings: embedding rows an engine expects for this image: the image-context
            tokens inside ``placeholder`` (``count_embeddings``), without wrappers such as
            InternVL's ``<img>``/``</img>``, Idefics3's row / global markers or Pixtral's
            ``[IMG_BREAK]``/``[IMG_END]`` (0 when ``error`` is set).
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
    num_embeddings: int = 0
    placeholder: str = ""
    error: ImageError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        """The dataclass repr with long fields abbreviated (a 4000x3000 Qwen image's placeholder
        is ~199,000 characters): strings past 40 characters, lists past 8 items."""
        parts = [f"{f.name}={_abbrev(getattr(self, f.name))}" for f in fields(self)]
        return f"ImagePlan({', '.join(parts)})"

    def rows(self, order: str) -> int:
        """Leading-dimension rows this image fills in ``pixel_values``: patches or tiles."""
        return len(self.tiles) if order == "tiles" else self.num_patches


@dataclass(frozen=True)
class Sizing:
    """What a sizing rule decides for one image (see ImagePlan for the fields).

    Fields:
        canvases: the intermediate images, each built from the source (``parent=-1``) or an
            earlier canvas; ``canvases[0]`` is the main resized image.
        tiles: ``(top, left, height, width)`` boxes, in output order (one ViT sequence each).
        tile_canvas: for each tile, the index of the canvas it is cut from.
        image_tokens: LLM tokens of the image without ``pack.extra_tokens``; None: the default
            rule, the sum over tiles of ``grid.tokens_for_grid`` (patches / merge**2).
        placeholder: the prompt string; None: ``prefix + image_token * image_tokens + suffix``.
        resized_hw: ``ImagePlan.resized_hw`` when it is not ``canvases[0].resize_hw`` (chained
            resizes).

    Given Phi-3-vision on 300x451 (HxW): canvases [Canvas((894, 1344), size=(1008, 1344),
    offset=(57, 0), fill=(255, 255, 255)), Canvas((336, 336), parent=0)], tiles
    [(0, 0, 336, 336)] (the global view, canvas 1) + 12 row-major boxes of canvas 0,
    image_tokens 1921 (docs/how-to/new-family.md).
    """

    canvases: list[Canvas]
    tiles: list[Box]
    tile_canvas: list[int]
    image_tokens: int | None = None
    placeholder: str | None = None
    #: ``ImagePlan.resized_hw`` when it is not ``canvases[0].resize_hw`` (chained resizes).
    resized_hw: tuple[int, int] | None = None


#: A sizing rule: ``rule(op, (H, W), pipeline) -> Sizing`` for a source of ``(H, W)`` (oriented).
SizingRule = Callable[[Any, tuple[int, int], Pipeline], Sizing]

#: sizing op name -> its rule: the one registry of plan rules, filled by ``@sizing_rule`` (each
#: built-in rule's module; ``vlmprep.plan`` imports them all; user rules at any time).
SIZING_RULES: dict[str, SizingRule] = {}


def sizing_rule(op: "str | type[Op]") -> Callable[[SizingRule], SizingRule]:
    """Decorator: register the plan rule of sizing op ``op`` (its class, or its name).

    The rule is ``rule(op, (H, W), pipeline) -> Sizing``: from the op's fields, the oriented
    source size and the pipeline (its ``patchify``, ``pack``) it returns the canvases and tile
    boxes of one image; every backend executes them (no backend code). Register at any time:
    plans and Processors look the rule up per call. Defining the same function again (a re-run
    cell) replaces it; a different second rule for the op is an error.

    Example::

        @vlmprep.plan.sizing_rule(square)            # square: a vlmprep.ops.SizingOp subclass
        def _square(op, hw, pipeline):
            return vlmprep.plan.one_canvas((op.size, op.size), pipeline)
    """
    name = op if isinstance(op, str) else getattr(op, "name", None)
    typ = OP_TYPES.get(name) if isinstance(name, str) else None
    if typ is None or not typ.sizing:
        raise RuntimeError(f"sizing_rule: expected a sizing op (a vlmprep.ops.SizingOp subclass "
                           f"or its name; known: {sorted(n for n, t in OP_TYPES.items() if t.sizing)}"
                           f"), got {op!r}, an unknown or non-sizing op; subclass SizingOp first")
    if "interpolation" not in typ.field_names():
        raise RuntimeError(f"sizing_rule: op {name!r} expected an interpolation field (canvases "
                           f"without their own resize with it), got fields {list(typ.field_names())};"
                           f" add interpolation: str = 'bicubic' to the class")

    def deco(fn: SizingRule) -> SizingRule:
        old = SIZING_RULES.get(name)  # type: ignore[arg-type]
        if old is not None and (getattr(old, "__module__", None), getattr(old, "__qualname__", None)
                                ) != (getattr(fn, "__module__", None), getattr(fn, "__qualname__", 0)):
            raise RuntimeError(f"sizing rule for op {name!r} defined twice: expected one rule, got "
                               f"{_fn_name(old)} and {_fn_name(fn)}; keep one")
        SIZING_RULES[name] = fn  # type: ignore[index]
        return fn
    return deco


def _fn_name(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def check_sizing(sz: Any, op: Op, pipeline: Pipeline) -> Sizing:
    """A rule's answer, checked before any backend sees it (expected / got / fix, naming the op):
    a ``Sizing``; one ``tile_canvas`` index per tile, each a canvas; each canvas built from the
    source or an earlier canvas, with positive sizes; a tile of the ``tiles`` order of the
    pipeline's tile size."""
    where = f"plan: sizing rule of op {op.name!r}"
    if not isinstance(sz, Sizing):
        raise TypeError(f"{where}: expected a vlmprep.plan.Sizing, got {type(sz).__name__}; "
                        f"return Sizing(canvases, tiles, tile_canvas)")
    n = len(sz.canvases)
    if n == 0 or not sz.tiles or len(sz.tiles) != len(sz.tile_canvas):
        raise ValueError(f"{where}: expected >= 1 canvas, >= 1 tile and one tile_canvas index per "
                         f"tile, got {n} canvases, {len(sz.tiles)} tiles, {len(sz.tile_canvas)} "
                         f"indices; give each tile box its canvas index")
    for k, c in enumerate(sz.canvases):
        if not isinstance(c, Canvas) or not -1 <= c.parent < k or min(c.resize_hw) < 1 or (
                c.size is not None and min(c.size) < 1):
            raise ValueError(f"{where}: canvas {k}: expected a Canvas with sizes >= 1 built from the "
                             f"source (parent=-1) or an earlier canvas (parent < {k}), got {c!r}; "
                             f"order the canvases so parents come first")
    for k, c in enumerate(sz.canvases):
        if c.normalized:
            _check_normalized(where, k, c, sz, pipeline)
    tile_hw = pipeline.tile_hw if pipeline.patchify.order == "tiles" else None
    for box, k in zip(sz.tiles, sz.tile_canvas):
        if not 0 <= k < n or len(box) != 4 or box[2] < 1 or box[3] < 1 or (
                tile_hw is not None and (box[2], box[3]) != tile_hw):
            want = f"{tile_hw} (the pipeline's tile_hw)" if tile_hw else "(h, w) >= 1"
            raise ValueError(f"{where}: expected tile boxes (top, left, h, w) with (h, w) {want} "
                             f"in a canvas 0..{n - 1}, got {box} in canvas {k}; fix the rule or "
                             f"the op's tile_hw")
    return sz


def _check_normalized(where: str, k: int, c: Canvas, sz: Sizing, pipeline: Pipeline) -> None:
    """A ``normalized`` canvas is what every backend builds after the normalize: a leaf (no
    canvas is built from float values), the whole parent resized (no box; no padding: ``fill``
    is a uint8 colour), every tile inside it (a tile is not padded after the normalize), and
    tiles kept as images (``order="tiles"``: the dali backend writes them itself)."""
    children = [j for j, d in enumerate(sz.canvases) if d.parent == k]
    outside = [b for b, j in zip(sz.tiles, sz.tile_canvas) if j == k and (
        b[0] < 0 or b[1] < 0 or b[0] + b[2] > c.resize_hw[0] or b[1] + b[3] > c.resize_hw[1])]
    order = pipeline.patchify.order
    if c.box is not None or c.size is not None or children or outside or order != "tiles":
        raise ValueError(f"{where}: canvas {k} (normalized): expected a leaf canvas with no box "
                         f"and no padding, tiles inside it, patchify order 'tiles', got box "
                         f"{c.box}, size {c.size}, canvases {children} built from it, tiles "
                         f"{outside} outside it, order {order!r}; resize the parent as it is and "
                         f"cut the tiles inside the result")


def one_canvas(rhw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """The whole resized image as one tile, or the pipeline's ``center_crop`` box of it."""
    crop = pipeline.get("center_crop")
    box = (center_crop_box(rhw, crop.tile_hw) if isinstance(crop, center_crop)
           else (0, 0, rhw[0], rhw[1]))
    return Sizing([Canvas(rhw)], [box], [0])


def count_embeddings(placeholder: str, image_token: str, num_tokens: int) -> int:
    """Embedding rows of one image: the ``image_token`` occurrences in its ``placeholder`` (the
    rows vLLM and SGLang scatter embeddings into); a family without a prompt token (SigLIP,
    ``image_token=""``) has no wrappers, so every token is a row: ``num_tokens``.

    The one formula for ``ImagePlan.num_embeddings`` and ``PackedBatch.num_embeddings``.

    Given InternVL, 7 tiles: ``"<img>" + "<IMG_CONTEXT>" * 1792 + "</img>"`` -> 1792 (num_tokens
    1794); Pixtral 30x40: ``([IMG] * 40 + [IMG_BREAK]) * 30`` (last -> ``[IMG_END]``) -> 1200.
    """
    return placeholder.count(image_token) if image_token else num_tokens


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
        check_decode_cost(header, dec.max_decode_bytes)
    rule = SIZING_RULES.get(pipeline.sizing.name)
    if rule is None:
        raise NotImplementedError(f"plan: expected a plan rule for sizing op "
                                  f"{pipeline.sizing.name!r}, got none; rules exist for "
                                  f"{sorted(SIZING_RULES)} (add one with @sizing_rule)")
    sz = check_sizing(rule(pipeline.sizing, (h, w), pipeline), pipeline.sizing, pipeline)
    pf = pipeline.patchify
    grids = [grid.patch_grid((b[2], b[3]), pf) for b in sz.tiles]
    pk = pipeline.pack
    image_tokens = (sz.image_tokens if sz.image_tokens is not None
                    else sum(grid.tokens_for_grid(g, pf) for g in grids))
    text = (sz.placeholder if sz.placeholder is not None
            else pk.prefix + pk.image_token * image_tokens + pk.suffix)
    return ImagePlan(
        index=index, source_hw=(h, w),
        resized_hw=sz.resized_hw if sz.resized_hw is not None else sz.canvases[0].resize_hw,
        tiles=sz.tiles,
        grid_thw=grids, canvases=sz.canvases, tile_canvas=sz.tile_canvas,
        num_patches=sum(t * gh * gw for t, gh, gw in grids),
        num_tokens=image_tokens + pk.extra_tokens,
        placeholder=text,
        num_embeddings=count_embeddings(text, pk.image_token, image_tokens + pk.extra_tokens),
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
    """The plan of a batch: ``images[i]`` for input ``i``, plus batch-level shortcuts (over the
    images); ``videos[j]`` the ``VideoPlan`` of video ``j`` (``proc.plan(videos=...)``; empty
    without videos). ``len()`` and iteration are over the images."""

    images: list[ImagePlan]
    pipeline: Pipeline = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    videos: list["VideoPlan"] = field(default_factory=list)
    #: ``documents[d]``: the ``DocumentPlan`` of document ``d`` (its pages are among ``images``,
    #: after the images given: which pages at which dpi, within its ``max_tokens``).
    documents: list["DocumentPlan"] = field(default_factory=list)

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

    @property
    def num_embeddings(self) -> list[int]:
        """Embedding rows per input image (``ImagePlan.num_embeddings``; 0 for a bad image)."""
        return [p.num_embeddings for p in self.images]

    def __len__(self) -> int:
        return len(self.images)

    def __iter__(self):
        return iter(self.images)

    def __getitem__(self, i: int) -> ImagePlan:
        return self.images[i]
