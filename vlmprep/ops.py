"""Ops: what the user wants done to each image, as frozen data (stdlib only).

Each op has one resolved form and one name that is the same in every layer
(ops, plan rule, backend lowering, tests, bench): grep ``smart_resize`` and you
find all of it. Ops hold numbers only; they never decide per-image sizes — the
plan does (``vlmprep.plan``), from these numbers and the image header.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import InitVar, dataclass
from typing import Any, ClassVar, NoReturn

__all__ = [
    "Op", "SizingOp", "fail", "check_int", "check_interpolation",
    "decode", "smart_resize", "glm4v_resize", "resize", "internvl_tile", "ovis2_tile", "idefics3_tile", "anyres_tile",
    "minicpmv_slice",
    "llama4_tile",
    "phi4_hd",
    "canvas_tile", "pan_and_scan", "pixtral_resize", "naflex_resize", "lfm2_vl_tile", "center_crop", "normalize",
    "patchify", "pack", "tile",
    "OP_TYPES", "INTERPOLATIONS", "PIL_RESAMPLE", "ORDERS", "CLIP_MEAN", "CLIP_STD",
    "LLAVA_NEXT_PINPOINTS",
]

#: Our interpolation names, and the PIL / transformers ``resample`` integer for each.
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos")
PIL_RESAMPLE = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3}

#: OpenAI CLIP's mean / std (normalize's defaults; Qwen2-VL, LLaVA, Pixtral, Mllama use them).
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

#: Pillow's decompression-bomb *error* threshold (2 x MAX_IMAGE_PIXELS).
DEFAULT_MAX_SOURCE_PIXELS = 178_956_970
#: Largest encoded input (file or bytes) read: 256 MiB holds any legitimate image under the pixel
#: limit, and bounds what a hostile or sparse file can make a decoder read and scan.
DEFAULT_MAX_SOURCE_BYTES = 256 << 20
#: Predicted peak memory of one image's decode (vlmprep.io.decode.decode_cost, from the header):
#: 16 bytes per pixel (more than any format/mode needs: 15 for an animation's RGBA canvases or a
#: progressive CMYK JPEG's coefficients, 11 for 16-bit RGBA) at the pixel limit, so nothing under
#: max_source_pixels is refused by default. Serving sets less (e.g. 1 << 30).
DEFAULT_MAX_DECODE_BYTES = 16 * DEFAULT_MAX_SOURCE_PIXELS


def fail(op: str, what: str, expected: str, got: Any, fix: str) -> NoReturn:
    """Raise the ValueError every op raises on a bad field: ``ops.<op>: <what>: expected
    <expected>, got <got!r>; <fix>`` (for a custom op's ``__post_init__``)."""
    raise ValueError(f"ops.{op}: {what}: expected {expected}, got {got!r}; {fix}")


def check_int(op: str, name: str, v: Any, lo: int = 1) -> None:
    """Field ``name`` of op ``op`` must be an int ``>= lo`` (not a bool); else ``fail``."""
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        fail(op, name, f"an int >= {lo}", v, f"pass {name}=<int>")


def _check_at_most(op: str, name: str, v: int, limit_name: str, limit: int) -> None:
    """Field ``name`` (``v``) of op ``op`` must be ``<=`` its field ``limit_name``; else ``fail``."""
    if v > limit:
        fail(op, name, f"<= {limit_name} ({limit})", v, f"lower {name} or raise {limit_name}")


def _check_bool(op: str, name: str, v: Any, expected: str = "a bool") -> None:
    """Field ``name`` of op ``op`` must be a bool; else ``fail``."""
    if not isinstance(v, bool):
        fail(op, name, expected, v, f"pass {name}=True or False")


def check_interpolation(op: str, v: Any) -> None:
    """``v`` must be one of ``INTERPOLATIONS`` (our names, not PIL's integers); else ``fail``."""
    if v not in INTERPOLATIONS:
        fail(op, "interpolation", f"one of {INTERPOLATIONS}", v,
             "use the name (transformers' resample=3 is 'bicubic')")




def _triple(op: str, name: str, v: Any) -> tuple[float, float, float]:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = (v, v, v)
    try:
        t = tuple(float(a) for a in v)
    except TypeError:
        t = ()
    if len(t) != 3 or not all(math.isfinite(a) for a in t):
        fail(op, name, "3 finite numbers (one per RGB channel)", v, f"pass {name}=(r, g, b)")
    return t


#: op name -> op class; every ``Op`` subclass registers itself here (loud on a clash).
OP_TYPES: dict[str, type["Op"]] = {}


@dataclass(frozen=True)
class Op:
    """Base of every op. ``name`` is the op's one name in every layer; ``sizing`` ops decide the
    resized canvases and tiles (a pipeline has exactly one, with a plan rule in vlmprep.plan).

    Every subclass registers itself in ``OP_TYPES`` under its ``name`` when the class is made
    (so ``Pipeline.from_dict`` finds it); a second class with the same name is an error, except
    the same class defined again (a re-run notebook cell or module reload).
    """

    name: ClassVar[str] = "op"
    sizing: ClassVar[bool] = False
    #: A sizing op whose rule keeps the resized image as one canvas and honours a later
    #: ``center_crop`` (its rule returns ``vlmprep.plan.one_canvas``): ``resize``, ``smart_resize``.
    allows_center_crop: ClassVar[bool] = False
    #: A sizing op whose pipelines are checked bit for bit against transformers' torchvision-backend
    #: processors (tests/backends/test_torchvision_match.py): ``match="torchvision"`` runs it
    #: (``vlmprep.backends.torch.tv_match.SIZING_OPS`` is the list of these), refuses the others.
    torchvision_exact: ClassVar[bool] = False

    def __init_subclass__(cls, base: bool = False, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if base:  # an abstract base such as SizingOp: no name of its own
            return
        name = cls.__dict__.get("name")
        if not isinstance(name, str) or not name.isidentifier() or "__" in name:
            fail(cls.__name__, "name", "a class attribute name: ClassVar[str] = '<snake_case>' "
                 "(an identifier without '__', unique among ops)", name,
                 f"add name: ClassVar[str] = {cls.__name__!r} to the class")
        if name in OP_TYPES and OP_TYPES[name].__qualname__ != cls.__qualname__:
            raise RuntimeError(f"op name {name!r} defined twice: expected a name no other op has "
                               f"(taken by {OP_TYPES[name].__module__}.{OP_TYPES[name].__qualname__}),"
                               f" got it again for {cls.__module__}.{cls.__qualname__}; pick "
                               f"another name")
        OP_TYPES[name] = cls

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.name}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            d[f.name] = list(v) if isinstance(v, tuple) else v
        return d

    def replace(self, **changes: Any) -> "Op":
        return dataclasses.replace(self, **changes)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @property
    def tile_hw(self) -> tuple[int, int] | None:
        """``(h, w)`` of every tile this op makes, when the op fixes it; None: per image (the
        plan decides). Each sizing op (and ``center_crop``) answers for itself."""
        return None


@dataclass(frozen=True)
class SizingOp(Op, base=True):
    """Base of every sizing op, the public way to add a model family's resize / tiling rule.

    A sizing op is data; its plan rule (``@vlmprep.plan.sizing_rule(op_class)``) turns a source
    ``(H, W)`` into the plan's ``Canvas`` list and tile boxes, and every backend executes those
    alike (no backend code). A subclass is a frozen dataclass with:

    - ``name: ClassVar[str]``: its one name (snake_case, unique; ``to_dict`` writes it);
    - an ``interpolation: str`` field (one of ``INTERPOLATIONS``): the resize of a canvas whose
      own ``Canvas.interpolation`` is None;
    - its numbers as fields with defaults, checked in ``__post_init__`` with ``fail`` /
      ``check_int`` / ``check_interpolation`` (expected / got / fix);
    - ``tile_hw`` overridden when every tile has one size (needed for ``patchify(order="tiles")``).

    Example (docs/how-to/new-family.md has the whole of Phi-3-vision)::

        @dataclass(frozen=True)
        class square(vlmprep.ops.SizingOp):
            name: ClassVar[str] = "square"
            size: int = 224
            interpolation: str = "bicubic"

            @property
            def tile_hw(self): return (self.size, self.size)

        @vlmprep.plan.sizing_rule(square)
        def _square(op, hw, pipeline):      # (H, W) of the source -> Sizing
            return vlmprep.plan.one_canvas((op.size, op.size), pipeline)
    """

    sizing: ClassVar[bool] = True


@dataclass(frozen=True)
class decode(Op):
    """Decode any supported input to uint8 RGB ``(H, W, 3)``.

    EXIF orientation is applied to encoded inputs (bytes, paths), transparency is
    composited on white, 16-bit samples become round(v / 257), animations give
    their first frame. Sources above ``max_source_pixels`` are rejected from the
    header, before any pixel is decoded; encoded inputs above ``max_source_bytes`` are
    rejected before they are read (a path: from its size on disk), and so are images whose
    decode is predicted from the header (``vlmprep.io.decode.decode_cost``: pixels x bytes per
    pixel of the decoder's image plus the output) to need more than ``max_decode_bytes``.
    """

    name: ClassVar[str] = "decode"
    max_source_pixels: int = DEFAULT_MAX_SOURCE_PIXELS
    max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES
    max_decode_bytes: int = DEFAULT_MAX_DECODE_BYTES

    def __post_init__(self) -> None:
        check_int(self.name, "max_source_pixels", self.max_source_pixels)
        check_int(self.name, "max_source_bytes", self.max_source_bytes)
        check_int(self.name, "max_decode_bytes", self.max_decode_bytes)


@dataclass(frozen=True)
class smart_resize(SizingOp):
    """Qwen-style aspect-preserving resize to multiples of ``factor``.

    Output ``(h, w)``: both multiples of ``factor``, ``min_pixels <= h*w <= max_pixels``
    (except where the ``max(factor, ...)`` clamps of transformers win); an aspect
    ratio above ``max_aspect_ratio`` is rejected. See ``vlmprep.plan.qwen``.
    """

    name: ClassVar[str] = "smart_resize"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    allows_center_crop: ClassVar[bool] = True
    factor: int = 28
    min_pixels: int = 3136
    max_pixels: int = 12_845_056
    interpolation: str = "bicubic"
    max_aspect_ratio: float = 200.0

    def __post_init__(self) -> None:
        check_int(self.name, "factor", self.factor)
        check_int(self.name, "min_pixels", self.min_pixels)
        check_int(self.name, "max_pixels", self.max_pixels)
        _check_at_most(self.name, "min_pixels", self.min_pixels, "max_pixels", self.max_pixels)
        check_interpolation(self.name, self.interpolation)
        if not (isinstance(self.max_aspect_ratio, (int, float)) and self.max_aspect_ratio >= 1):
            fail(self.name, "max_aspect_ratio", "a number >= 1", self.max_aspect_ratio,
                  "transformers uses 200")


@dataclass(frozen=True)
class glm4v_resize(SizingOp):
    """GLM-4.1V's smart resize (``Glm4vImageProcessor``): Qwen3-VL's video rule applied to an
    image as ``temporal_factor`` frames, so the pixel budget counts ``temporal_factor * h * w``
    and a side below ``factor`` scales the image up first. See ``vlmprep.plan.glm4v``."""

    name: ClassVar[str] = "glm4v_resize"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    allows_center_crop: ClassVar[bool] = True
    factor: int = 28
    min_pixels: int = 112 * 112
    max_pixels: int = 28 * 28 * 2 * 6144
    temporal_factor: int = 2
    interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        check_int(self.name, "factor", self.factor)
        check_int(self.name, "min_pixels", self.min_pixels)
        check_int(self.name, "max_pixels", self.max_pixels)
        check_int(self.name, "temporal_factor", self.temporal_factor)
        _check_at_most(self.name, "min_pixels", self.min_pixels, "max_pixels", self.max_pixels)
        check_interpolation(self.name, self.interpolation)


@dataclass(frozen=True)
class resize(SizingOp):
    """Resize to a fixed size or by one edge.

    ``mode``:
      - ``"fixed"``: to ``(height, width)`` exactly (aspect not kept; SigLIP's squash).
      - ``"shortest_edge"``: the short side becomes ``size``, the long side
        ``int(size * long / short)`` (transformers' ``get_resize_output_image_size``).
      - ``"longest_edge"``: the long side becomes ``size``, the short side scaled likewise.
    """

    name: ClassVar[str] = "resize"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    allows_center_crop: ClassVar[bool] = True
    mode: str = "fixed"
    size: int = 0
    height: int = 0
    width: int = 0
    interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        modes = ("fixed", "shortest_edge", "longest_edge")
        if self.mode not in modes:
            fail(self.name, "mode", f"one of {modes}", self.mode, "pick a mode")
        if self.mode == "fixed":
            check_int(self.name, "height", self.height)
            check_int(self.name, "width", self.width)
        else:
            check_int(self.name, "size", self.size)
        check_interpolation(self.name, self.interpolation)

    @property
    def tile_hw(self) -> tuple[int, int] | None:
        return (self.height, self.width) if self.mode == "fixed" else None


@dataclass(frozen=True)
class internvl_tile(SizingOp):
    """InternVL / GotOcr2 ``crop_to_patches`` (a sizing op): choose ``cols x rows`` with
    ``min_tiles <= cols*rows <= max_tiles`` closest to the image's aspect ratio, squash-resize the
    image to ``(rows*tile_size, cols*tile_size)``, cut it row-major into ``tile_size`` squares,
    and when there is more than one tile append a ``thumbnail``: the whole image squashed to
    ``tile_size``. See ``vlmprep.plan.internvl``.
    """

    name: ClassVar[str] = "internvl_tile"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    tile_size: int = 448
    min_tiles: int = 1
    max_tiles: int = 12
    thumbnail: bool = True
    interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        check_int(self.name, "tile_size", self.tile_size)
        check_int(self.name, "min_tiles", self.min_tiles)
        check_int(self.name, "max_tiles", self.max_tiles)
        _check_at_most(self.name, "min_tiles", self.min_tiles, "max_tiles", self.max_tiles)
        check_interpolation(self.name, self.interpolation)

    @property
    def tile_hw(self) -> tuple[int, int]:
        return self.tile_size, self.tile_size


def tile(rule: str = "internvl", *args: Any, **fields: Any) -> internvl_tile:
    """Deprecated spelling of ``internvl_tile`` (API.md's op ``tile``, whose only ``rule`` was
    ``"internvl"``; its other fields come in the same order): warns and returns
    ``internvl_tile(*args, **fields)``."""
    warnings.warn("vlmprep.ops.tile(rule='internvl', ...) is deprecated; use "
                  "vlmprep.ops.internvl_tile(...)", DeprecationWarning, stacklevel=2)
    if rule != "internvl":
        fail("tile", "rule", "one of ('internvl',)", rule, "use vlmprep.ops.internvl_tile(...)")
    return internvl_tile(*args, **fields)


@dataclass(frozen=True)
class ovis2_tile(SizingOp):
    """Ovis2 ``crop_to_patches`` (a sizing op): choose a grid of ``tile_size`` squares (with
    ``covering``, transformers' ``get_min_tile_covering_grid`` over 1..``max_tiles``, else
    InternVL's closest aspect ratio over ``min_tiles..max_tiles``), squash-resize the image to
    it, cut it row-major, and when there is more than one tile put a thumbnail (the whole image
    squashed to ``tile_size``) first. See ``vlmprep.plan.ovis2``.
    """

    name: ClassVar[str] = "ovis2_tile"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    tile_size: int = 448
    min_tiles: int = 1
    max_tiles: int = 12
    covering: bool = True
    interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        check_int(self.name, "tile_size", self.tile_size)
        check_int(self.name, "min_tiles", self.min_tiles)
        check_int(self.name, "max_tiles", self.max_tiles)
        _check_at_most(self.name, "min_tiles", self.min_tiles, "max_tiles", self.max_tiles)
        _check_bool(self.name, "covering", self.covering, "a bool (use_covering_area_grid)")
        check_interpolation(self.name, self.interpolation)

    @property
    def tile_hw(self) -> tuple[int, int]:
        return self.tile_size, self.tile_size


@dataclass(frozen=True)
class minicpmv_slice(SizingOp):
    """MiniCPM-V 4.6 slicing (``MiniCPMV4_6ImageProcessor``; a sizing op): the whole image
    resized to about ``scale_resolution**2`` pixels (aspect kept, sides rounded to multiples of
    ``patch_size * merge_size`` from ``patchify``), then, when it has more than
    ``scale_resolution**2`` pixels and ``slice_mode``, a grid of up to ``max_slice_nums`` slices
    (the grid closest in log aspect ratio) cut from the image resized once more. Tiles differ in
    size (one ViT sequence each). See ``vlmprep.plan.minicpmv``.
    """

    name: ClassVar[str] = "minicpmv_slice"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    max_slice_nums: int = 9
    scale_resolution: int = 448
    slice_mode: bool = True
    interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        check_int(self.name, "max_slice_nums", self.max_slice_nums)
        check_int(self.name, "scale_resolution", self.scale_resolution)
        _check_bool(self.name, "slice_mode", self.slice_mode)
        check_interpolation(self.name, self.interpolation)


@dataclass(frozen=True)
class idefics3_tile(SizingOp):
    """Idefics3 / SmolVLM (a sizing op): resize the long side to ``longest_edge`` (short side
    even-rounded; up or down; capped at ``max_edge``), then each side up to a multiple of
    ``tile_size`` (from that image), cut ``rows x cols`` tiles row-major and append the global
    image (that canvas squashed to ``tile_size``); a one-tile canvas is kept alone. ``split=False``
    squashes the first resize to one ``tile_size`` square (``do_image_splitting=False``).
    ``image_seq_len``: ``<image>`` tokens per tile in the prompt (the processor's, not the image
    processor's config: 169 for Idefics3-8B). See ``vlmprep.plan.idefics3``.
    """

    name: ClassVar[str] = "idefics3_tile"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    longest_edge: int = 1820
    tile_size: int = 364
    split: bool = True
    image_seq_len: int = 169
    max_edge: int = 4096
    interpolation: str = "lanczos"

    def __post_init__(self) -> None:
        check_int(self.name, "longest_edge", self.longest_edge)
        check_int(self.name, "tile_size", self.tile_size)
        check_int(self.name, "image_seq_len", self.image_seq_len)
        check_int(self.name, "max_edge", self.max_edge)
        if not isinstance(self.split, bool):
            fail(self.name, "split", "a bool", self.split, "pass split=True or split=False")
        check_interpolation(self.name, self.interpolation)

    @property
    def tile_hw(self) -> tuple[int, int]:
        return self.tile_size, self.tile_size

#: LLaVA-NeXT's checkpoint pinpoints, ``(height, width)`` (also transformers' class default).
LLAVA_NEXT_PINPOINTS = ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))
FEATURE_SELECT_STRATEGIES = ("default", "full")


@dataclass(frozen=True)
class anyres_tile(SizingOp):
    """LLaVA-NeXT / LLaVA-OneVision "anyres" (a sizing op). See ``vlmprep.plan.anyres``.

    Pick the pinpoint ``(ph, pw)`` of ``pinpoints`` that keeps most pixels (max effective
    resolution, then min waste, first wins), aspect-fit resize into it (``ceil``, capped), pad
    centred with 0 (black) to ``(ph, pw)``, cut ``tile_size`` tiles row-major, and put the base
    image (the whole image squashed to ``tile_size``) FIRST.

    ``multi_image=True`` (OneVision, the images of a multi-image sample): pad the image to a
    square with ``square_fill`` (the mean colour, ``int(255 * mean)``) and squash it to one tile.

    Tokens (the processors' count): unpadded features of the ``rows*P x cols*P`` feature map
    (``P = tile_size // patch_size``) + one newline per row + ``P*P`` base features +
    ``num_additional_image_tokens`` (CLS), minus 1 for ``vision_feature_select_strategy=
    "default"``; ``max_num_patches`` (OneVision ``anyres_max_9``: 9; 0 = off) pools the
    unpadded map. A multi-image tile: base + 1 newline.
    """

    name: ClassVar[str] = "anyres_tile"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    tile_size: int = 336
    pinpoints: tuple[tuple[int, int], ...] = LLAVA_NEXT_PINPOINTS
    max_num_patches: int = 0
    num_additional_image_tokens: int = 1
    vision_feature_select_strategy: str = "default"
    multi_image: bool = False
    square_fill: tuple[int, int, int] = (0, 0, 0)
    interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        check_int(self.name, "tile_size", self.tile_size)
        try:
            pins = tuple((int(h), int(w)) for h, w in self.pinpoints)
        except (TypeError, ValueError):
            pins = ()
        if not pins or any(h < 1 or w < 1 or h % self.tile_size or w % self.tile_size
                           for h, w in pins):
            fail(self.name, "pinpoints", f"(height, width) pairs, multiples of tile_size "
                  f"({self.tile_size})", self.pinpoints, "use the checkpoint's image_grid_pinpoints")
        object.__setattr__(self, "pinpoints", pins)
        check_int(self.name, "max_num_patches", self.max_num_patches, lo=0)
        check_int(self.name, "num_additional_image_tokens", self.num_additional_image_tokens, lo=0)
        if self.vision_feature_select_strategy not in FEATURE_SELECT_STRATEGIES:
            fail(self.name, "vision_feature_select_strategy", f"one of {FEATURE_SELECT_STRATEGIES}",
                  self.vision_feature_select_strategy, "use the checkpoint processor's value")
        if not isinstance(self.multi_image, bool):
            fail(self.name, "multi_image", "a bool", self.multi_image, "pass True or False")
        fill = tuple(self.square_fill) if isinstance(self.square_fill, (tuple, list)) else ()
        if len(fill) != 3 or not all(isinstance(v, int) and 0 <= v <= 255 for v in fill):
            fail(self.name, "square_fill", "3 ints in 0..255", self.square_fill,
                  "use tuple(int(255 * m) for m in mean)")
        object.__setattr__(self, "square_fill", fill)
        check_interpolation(self.name, self.interpolation)

    @property
    def tile_hw(self) -> tuple[int, int]:
        return self.tile_size, self.tile_size


@dataclass(frozen=True)
class canvas_tile(SizingOp):
    """Mllama / Llama-3.2-Vision (a sizing op): pick the canvas of ``a x b`` tiles
    (``a*b <= max_tiles``) that needs the smallest upscale (else the largest downscale; ties: the
    smaller area), resize aspect-fit into it (sides clipped to ``[tile_size, canvas]``, never
    upscaled past the image itself), pad bottom/right with 0 and cut the canvas row-major into
    ``tile_size`` tiles. See ``vlmprep.plan.mllama``.
    """

    name: ClassVar[str] = "canvas_tile"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    tile_size: int = 560
    max_tiles: int = 4
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        check_int(self.name, "tile_size", self.tile_size)
        check_int(self.name, "max_tiles", self.max_tiles)
        check_interpolation(self.name, self.interpolation)

    @property
    def tile_hw(self) -> tuple[int, int]:
        return self.tile_size, self.tile_size


@dataclass(frozen=True)
class pan_and_scan(SizingOp):
    """Gemma 3 (a sizing op): squash the image to ``(height, width)``; with ``do_pan_and_scan``
    also cut 2..``pan_and_scan_max_num_crops`` crops along the long side of the ORIGINAL image
    (only when its aspect ratio is at least ``pan_and_scan_min_ratio_to_activate`` and every crop
    is at least ``pan_and_scan_min_crop_size``) and squash each to ``(height, width)`` too.
    Field names are transformers' (``Gemma3ImageProcessor``). See ``vlmprep.plan.gemma3``.
    """

    name: ClassVar[str] = "pan_and_scan"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    height: int = 896
    width: int = 896
    do_pan_and_scan: bool = False
    pan_and_scan_min_crop_size: int = 256
    pan_and_scan_max_num_crops: int = 4
    pan_and_scan_min_ratio_to_activate: float = 1.2
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        check_int(self.name, "height", self.height)
        check_int(self.name, "width", self.width)
        _check_bool(self.name, "do_pan_and_scan", self.do_pan_and_scan)
        check_int(self.name, "pan_and_scan_min_crop_size", self.pan_and_scan_min_crop_size)
        check_int(self.name, "pan_and_scan_max_num_crops", self.pan_and_scan_max_num_crops, lo=2)
        r = self.pan_and_scan_min_ratio_to_activate
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r < 1:
            fail(self.name, "pan_and_scan_min_ratio_to_activate", "a number >= 1", r,
                  "Gemma3Processor uses 1.2")
        check_interpolation(self.name, self.interpolation)

    @property
    def tile_hw(self) -> tuple[int, int]:
        return self.height, self.width


@dataclass(frozen=True)
class center_crop(Op):
    """Crop ``(height, width)`` from the centre, top/left rounded down as transformers does
    (``(H - h) // 2``; torchvision's own center_crop rounds differently). A crop larger than
    the image pads with zeros, as transformers does."""

    name: ClassVar[str] = "center_crop"
    height: int = 224
    width: int = 224

    def __post_init__(self) -> None:
        check_int(self.name, "height", self.height)
        check_int(self.name, "width", self.width)

    @property
    def tile_hw(self) -> tuple[int, int]:
        return self.height, self.width


@dataclass(frozen=True)
class normalize(Op):
    """``out = (x * rescale - mean) / std`` per channel, in float32.

    With ``dtype="uint8"`` asked of the Processor this op is skipped (engines that
    normalize on the device do it themselves).
    """

    name: ClassVar[str] = "normalize"
    rescale: float = 1 / 255
    mean: tuple[float, float, float] = CLIP_MEAN
    std: tuple[float, float, float] = CLIP_STD

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", _triple(self.name, "mean", self.mean))
        object.__setattr__(self, "std", _triple(self.name, "std", self.std))
        if any(s == 0 for s in self.std):
            fail(self.name, "std", "non-zero values", self.std, "use std=1 to skip scaling")
        if not (isinstance(self.rescale, (int, float)) and math.isfinite(self.rescale)):
            fail(self.name, "rescale", "a finite number", self.rescale, "use 1/255 or 1.0")
        object.__setattr__(self, "rescale", float(self.rescale))


@dataclass(frozen=True)
class pixtral_resize(SizingOp):
    """Pixtral / Mistral-Small-3.x (a sizing op): if the long side exceeds ``longest_edge``,
    scale both sides by ``max(H, W) / longest_edge`` with floor (transformers' choice; the
    original Mistral code and mistral_common round), then ceil each side to a multiple of
    ``q = patch_size * merge_size`` (taken from ``patchify``, as PixtralProcessor passes it).
    Never upscales beyond that round-up. The prompt placeholder is ``image_token`` (``pack``)
    x cols then ``break_token`` per row, the last replaced by ``end_token``: ``rows*(cols+1)``
    tokens. See ``vlmprep.plan.pixtral``.
    """

    name: ClassVar[str] = "pixtral_resize"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    longest_edge: int = 1024
    break_token: str = "[IMG_BREAK]"
    end_token: str = "[IMG_END]"
    interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        check_int(self.name, "longest_edge", self.longest_edge)
        for k in ("break_token", "end_token"):
            if not isinstance(getattr(self, k), str):
                fail(self.name, k, "a str", getattr(self, k), f"pass {k}='...'")
        check_interpolation(self.name, self.interpolation)


@dataclass(frozen=True)
class naflex_resize(SizingOp):
    """SigLIP2 NaFlex (a sizing op): the largest scale (binary search, as transformers'
    ``get_image_size_for_max_num_patches``) whose sides, each ceiled to a multiple of the patch
    size (``patchify.patch_size``) and at least one patch, give at most ``max_num_patches``
    patches; aspect kept up to that rounding; up- or downscales. See ``vlmprep.plan.naflex``.
    """

    name: ClassVar[str] = "naflex_resize"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    max_num_patches: int = 256
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        check_int(self.name, "max_num_patches", self.max_num_patches)
        check_interpolation(self.name, self.interpolation)


@dataclass(frozen=True)
class lfm2_vl_tile(SizingOp):
    """LFM2-VL (``Lfm2VlImageProcessor``, a sizing op): an image within ``max_pixels_tolerance``
    times the token budget is smart-resized (sides multiples of ``patch_size * merge_size``,
    between ``min_image_tokens`` and ``max_image_tokens`` tokens); a larger one is squashed to the
    closest-aspect grid of ``tile_size`` squares (``min_tiles..max_tiles``), cut row-major, and
    followed by the smart-resized image as a thumbnail (``use_thumbnail``). ``min_tiles ==
    max_tiles == 1``: no splitting (``do_image_splitting`` false). ``special_tokens``: the
    processor's ``use_image_special_tokens``. See ``vlmprep.plan.lfm2_vl``."""

    name: ClassVar[str] = "lfm2_vl_tile"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    tile_size: int = 512
    min_tiles: int = 2
    max_tiles: int = 10
    use_thumbnail: bool = True
    min_image_tokens: int = 64
    max_image_tokens: int = 256
    max_pixels_tolerance: float = 2.0
    special_tokens: bool = True
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        for k in ("tile_size", "min_tiles", "max_tiles", "min_image_tokens", "max_image_tokens"):
            check_int(self.name, k, getattr(self, k))
        if not (self.min_tiles == self.max_tiles == 1 or 2 <= self.min_tiles <= self.max_tiles):
            fail(self.name, "min_tiles", f"2 <= min_tiles <= max_tiles ({self.max_tiles}), or "
                 "min_tiles == max_tiles == 1 (no splitting)", self.min_tiles,
                 "raise min_tiles to 2 (a 1x1 grid has no thumbnail and a placeholder that "
                 "transformers miscounts)")
        _check_at_most(self.name, "min_image_tokens", self.min_image_tokens, "max_image_tokens",
                       self.max_image_tokens)
        t = self.max_pixels_tolerance
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
            fail(self.name, "max_pixels_tolerance", "a number > 0", t, "pass e.g. 2.0")
        for k in ("use_thumbnail", "special_tokens"):
            _check_bool(self.name, k, getattr(self, k))
        check_interpolation(self.name, self.interpolation)

    @property
    def splits(self) -> bool:
        """``do_image_splitting``: large images are tiled."""
        return not self.min_tiles == self.max_tiles == 1


@dataclass(frozen=True)
class llama4_tile(SizingOp):
    """Llama 4 (``Llama4ImageProcessor``, a sizing op): pick the canvas of ``a x b`` tiles
    (``a*b <= max_patches``) as Mllama does, but over Llama 4's list order and in float32 (ties:
    the smaller area, the first listed); resize aspect-fit into it (sides clipped to
    ``[tile_size, canvas]`` unless ``resize_to_max_canvas``), pad bottom/right with 0, cut it
    row-major, and with more than one tile add the whole image squashed to one tile last (the
    global view). ``downsample_ratio``: the processor's ``round(1 / pixel_shuffle_ratio^2)``
    (tokens per tile = ``(tile_size // patch)^2 // downsample_ratio``). See
    ``vlmprep.plan.llama4``."""

    name: ClassVar[str] = "llama4_tile"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    #: transformers rescales and normalizes in bfloat16 (``rescale_and_normalize``):
    #: ``match="torchvision"`` does too (``backends.torch.tv_match.normalize_bf16``).
    hf_normalize_dtype: ClassVar[str] = "bfloat16"
    tile_size: int = 336
    max_patches: int = 16
    resize_to_max_canvas: bool = False
    downsample_ratio: int = 4
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        for k in ("tile_size", "max_patches", "downsample_ratio"):
            check_int(self.name, k, getattr(self, k))
        _check_bool(self.name, "resize_to_max_canvas", self.resize_to_max_canvas)
        check_interpolation(self.name, self.interpolation)

    @property
    def tile_hw(self) -> tuple[int, int]:
        return self.tile_size, self.tile_size


@dataclass(frozen=True)
class phi4_hd(SizingOp):
    """Phi-4-multimodal's dynamic HD (``Phi4MultimodalImageProcessor``, a sizing op): a grid of
    ``ceil(W / tile) x ceil(H / tile)`` crops, or, above ``dynamic_hd`` crops, the closest aspect
    ratio among grids of at most ``dynamic_hd`` (InternVL's rule); aspect-fit resize into it
    (``interpolation``), pad right/bottom with white, crops row-major after a global view: the
    padded canvas's *normalized* values resized to one tile with ``global_interpolation`` and no
    antialias (``plan.Canvas.normalized``; transformers resizes ``rescale_and_normalize``'s
    float32 output). ``patch_size``: the attention mask's cell (a padding of at least one patch
    is masked). See ``vlmprep.plan.phi4_multimodal``."""

    name: ClassVar[str] = "phi4_hd"
    sizing: ClassVar[bool] = True
    torchvision_exact: ClassVar[bool] = True
    tile_size: int = 448
    dynamic_hd: int = 36
    patch_size: int = 14
    interpolation: str = "bilinear"
    global_interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        for k in ("tile_size", "dynamic_hd", "patch_size"):
            check_int(self.name, k, getattr(self, k))
        check_interpolation(self.name, self.interpolation)
        check_interpolation(self.name, self.global_interpolation)
        if self.global_interpolation == "lanczos":  # torchvision: "LANCZOS requires antialias"
            fail(self.name, "global_interpolation", "'nearest', 'bilinear' or 'bicubic' (the "
                 "global view is resized without antialias, which torchvision's lanczos refuses, "
                 "so transformers raises)", self.global_interpolation,
                 "use 'bicubic' (resample=3, the class default)")

    @property
    def tile_hw(self) -> tuple[int, int]:
        return self.tile_size, self.tile_size


#: Row orders of patchify's output (see ``vlmprep.plan.grid`` for Given/Input/Output examples):
#: merge_grouped (Qwen): rows [c, t, py, px] in merge blocks; tiles: (C, H, W) images;
#: raster (Pixtral): rows [c, py, px] in raster order; naflex (SigLIP2): rows [py, px, c].
ORDERS = ("merge_grouped", "tiles", "raster", "naflex")


@dataclass(frozen=True)
class patchify(Op):
    """Cut the image into ``patch_size`` squares and emit one row per patch.

    ``order="merge_grouped"`` (Qwen2-VL / Qwen3-VL): each row is ``[c, t, py, px]``
    with the still image repeated ``temporal_patch_size`` times; rows are grouped by
    ``merge_size x merge_size`` blocks so each 4 consecutive rows are one LLM token.

    ``order="tiles"`` (fixed-size tile families): the output keeps each tile as a
    ``(C, H, W)`` image; ``patch_size`` only sets the ViT grid (``floor(H / patch_size)``
    per side, as a stride-P convolution sees it) and ``merge_size`` how many patches per
    side one LLM token covers (InternVL's pixel shuffle: 2).

    ``order="raster"`` (Pixtral, MiniCPM-V) / ``"naflex"`` (SigLIP2 NaFlex, LFM2-VL): one sequence per tile, rows
    in raster order, each ``[c, py, px]`` / ``[py, px, c]``; ``temporal_patch_size`` must be 1.

    Defaults are a plain ViT's (CLIP, SigLIP): ``temporal_patch_size=1``, ``merge_size=1``
    (one LLM token per patch; ``merge_grouped`` with merge 1 is raster order). Up to 0.1.0 they
    were Qwen's (2 and 2): Qwen-style pipelines pass ``temporal_patch_size=2, merge_size=2``
    (every preset spells its values). A fixed tile whose patch grid is not a multiple of
    ``merge_size`` is refused when its tokens are counted (``vlmprep.plan.grid``).

    ``layout=``: the deprecated spelling of ``order=`` (API.md's); warns, sets ``order``, and is
    not a field (``to_dict`` writes ``order``).
    """

    name: ClassVar[str] = "patchify"
    patch_size: int = 14
    temporal_patch_size: int = 1
    merge_size: int = 1
    order: str = "merge_grouped"
    layout: InitVar[str | None] = None

    def __post_init__(self, layout: str | None) -> None:
        if layout is not None:
            warnings.warn("vlmprep.ops.patchify(layout=...) is deprecated; use order=...",
                          DeprecationWarning, stacklevel=3)
            if self.order not in ("merge_grouped", layout):
                fail(self.name, "layout", f"the same value as order ({self.order!r}) or no "
                      f"layout", layout, "pass order= only")
            object.__setattr__(self, "order", layout)
        check_int(self.name, "patch_size", self.patch_size)
        check_int(self.name, "temporal_patch_size", self.temporal_patch_size)
        check_int(self.name, "merge_size", self.merge_size)
        if self.order not in ORDERS:
            fail(self.name, "order", f"one of {ORDERS}", self.order, "pick an order")
        if self.order in ("raster", "naflex") and self.temporal_patch_size != 1:
            fail(self.name, "temporal_patch_size", f"1 for order {self.order!r} (still images)",
                  self.temporal_patch_size, "pass temporal_patch_size=1")


# ``to_hf()`` form names: ``vlmprep.hf_forms.HF_OUTPUTS`` ("auto" and every ``@hf_form``, the one
# list, a layer above): ``pack`` checks the name's form; the Processor checks it is registered
# when it is made, and hf_forms again when a batch is handed out.


@dataclass(frozen=True)
class pack(Op):
    """How packed sequences are presented to the LLM: the placeholder token.

    ``placeholder`` for an image is ``image_token * num_tokens`` wrapped in
    ``prefix``/``suffix`` — exactly what the family's transformers processor puts
    where the prompt had one image token (Qwen: ``<|image_pad|>`` repeated; the
    ``<|vision_start|>``/``<|vision_end|>`` pair comes from the chat template).

    The default ``image_token`` is the neutral ``"<image>"`` (LLaVA's, Idefics3's); up to 0.1.0 it
    was Qwen's ``"<|image_pad|>"``, which a Qwen-style custom pipeline now passes
    explicitly (every preset spells its token). A ``Pipeline`` without a ``pack`` gets this
    default.
    """

    name: ClassVar[str] = "pack"
    image_token: str = "<image>"
    prefix: str = ""
    suffix: str = ""
    #: LLM tokens that ``prefix`` + ``suffix`` add (InternVL's ``<img>``/``</img>``: 2).
    extra_tokens: int = 0
    #: Which transformers image processor's output ``PackedBatch.to_hf()`` reproduces.
    hf_output: str = "auto"

    def __post_init__(self) -> None:
        for k in ("image_token", "prefix", "suffix"):
            if not isinstance(getattr(self, k), str):
                fail(self.name, k, "a str", getattr(self, k), f"pass {k}='...'")
        check_int(self.name, "extra_tokens", self.extra_tokens, lo=0)
        if not isinstance(self.hf_output, str) or not self.hf_output.isidentifier():
            fail(self.name, "hf_output", "'auto' or a to_hf form name (vlmprep.hf_forms."
                 "HF_OUTPUTS: registered with @hf_form)", self.hf_output,
                 "'auto' picks from the patchify order")
