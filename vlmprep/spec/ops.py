"""Ops: what the user wants done to each image, as frozen data (stdlib only).

Each op has one resolved form and one name that is the same in every layer
(spec, plan rule, backend lowering, tests, bench): grep ``smart_resize`` and you
find all of it. Ops hold numbers only; they never decide per-image sizes — the
plan does (``vlmprep.plan``), from these numbers and the image header.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "Op", "decode", "smart_resize", "resize", "tile", "center_crop", "normalize", "patchify", "pack",
    "OP_TYPES", "INTERPOLATIONS", "PIL_RESAMPLE",
]

#: Our interpolation names, and the PIL / transformers ``resample`` integer for each.
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos")
PIL_RESAMPLE = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3}

#: Pillow's decompression-bomb *error* threshold (2 x MAX_IMAGE_PIXELS).
DEFAULT_MAX_SOURCE_PIXELS = 178_956_970


def _fail(op: str, what: str, expected: str, got: Any, fix: str) -> None:
    raise ValueError(f"ops.{op}: {what}: expected {expected}, got {got!r}; {fix}")


def _check_int(op: str, name: str, v: Any, lo: int = 1) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        _fail(op, name, f"an int >= {lo}", v, f"pass {name}=<int>")


def _check_interp(op: str, v: Any) -> None:
    if v not in INTERPOLATIONS:
        _fail(op, "interpolation", f"one of {INTERPOLATIONS}", v,
              "use the name (transformers' resample=3 is 'bicubic')")


def _triple(op: str, name: str, v: Any) -> tuple[float, float, float]:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = (v, v, v)
    try:
        t = tuple(float(a) for a in v)
    except TypeError:
        t = ()
    if len(t) != 3 or not all(math.isfinite(a) for a in t):
        _fail(op, name, "3 finite numbers (one per RGB channel)", v, f"pass {name}=(r, g, b)")
    return t  # type: ignore[return-value]


#: op name -> op class; every ``Op`` subclass registers itself here (loud on a clash).
OP_TYPES: dict[str, type["Op"]] = {}


@dataclass(frozen=True)
class Op:
    """Base of every op. ``name`` is the op's one name in every layer; ``sizing`` ops decide the
    resized canvases and tiles (a pipeline has exactly one, with a plan rule in vlmprep.plan)."""

    name: ClassVar[str] = "op"
    sizing: ClassVar[bool] = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.name in OP_TYPES and OP_TYPES[cls.name].__qualname__ != cls.__qualname__:
            raise RuntimeError(f"op name {cls.name!r} defined twice")
        OP_TYPES[cls.name] = cls

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


@dataclass(frozen=True)
class decode(Op):
    """Decode any supported input to uint8 RGB ``(H, W, 3)``.

    EXIF orientation is applied to encoded inputs (bytes, paths), transparency is
    composited on white, 16-bit samples become round(v / 257), animations give
    their first frame. Sources above ``max_source_pixels`` are rejected from the
    header, before any pixel is decoded.
    """

    name: ClassVar[str] = "decode"
    max_source_pixels: int = DEFAULT_MAX_SOURCE_PIXELS

    def __post_init__(self) -> None:
        _check_int(self.name, "max_source_pixels", self.max_source_pixels)


@dataclass(frozen=True)
class smart_resize(Op):
    """Qwen-style aspect-preserving resize to multiples of ``factor``.

    Output ``(h, w)``: both multiples of ``factor``, ``min_pixels <= h*w <= max_pixels``
    (except where the ``max(factor, ...)`` clamps of transformers win); an aspect
    ratio above ``max_aspect_ratio`` is rejected. See ``vlmprep.plan.resize``.
    """

    name: ClassVar[str] = "smart_resize"
    sizing: ClassVar[bool] = True
    factor: int = 28
    min_pixels: int = 3136
    max_pixels: int = 12_845_056
    interpolation: str = "bicubic"
    max_aspect_ratio: float = 200.0

    def __post_init__(self) -> None:
        _check_int(self.name, "factor", self.factor)
        _check_int(self.name, "min_pixels", self.min_pixels)
        _check_int(self.name, "max_pixels", self.max_pixels)
        if self.min_pixels > self.max_pixels:
            _fail(self.name, "min_pixels", f"<= max_pixels ({self.max_pixels})", self.min_pixels,
                  "lower min_pixels or raise max_pixels")
        _check_interp(self.name, self.interpolation)
        if not (isinstance(self.max_aspect_ratio, (int, float)) and self.max_aspect_ratio >= 1):
            _fail(self.name, "max_aspect_ratio", "a number >= 1", self.max_aspect_ratio,
                  "transformers uses 200")


@dataclass(frozen=True)
class resize(Op):
    """Resize to a fixed size or by one edge.

    ``mode``:
      - ``"fixed"``: to ``(height, width)`` exactly (aspect not kept; SigLIP's squash).
      - ``"shortest_edge"``: the short side becomes ``size``, the long side
        ``int(size * long / short)`` (transformers' ``get_resize_output_image_size``).
      - ``"longest_edge"``: the long side becomes ``size``, the short side scaled likewise.
    """

    name: ClassVar[str] = "resize"
    sizing: ClassVar[bool] = True
    mode: str = "fixed"
    size: int = 0
    height: int = 0
    width: int = 0
    interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        modes = ("fixed", "shortest_edge", "longest_edge")
        if self.mode not in modes:
            _fail(self.name, "mode", f"one of {modes}", self.mode, "pick a mode")
        if self.mode == "fixed":
            _check_int(self.name, "height", self.height)
            _check_int(self.name, "width", self.width)
        else:
            _check_int(self.name, "size", self.size)
        _check_interp(self.name, self.interpolation)


#: Tile rules: how an image is cut into fixed-size tiles (see ``vlmprep.plan.tiling``).
TILE_RULES = ("internvl",)


@dataclass(frozen=True)
class tile(Op):
    """Cut the image into ``tile_size`` squares by the family's grid rule (a sizing op).

    ``rule="internvl"`` (InternVL / GotOcr2 ``crop_to_patches``): choose ``cols x rows`` with
    ``min_tiles <= cols*rows <= max_tiles`` closest to the image's aspect ratio, squash-resize the
    image to ``(rows*tile_size, cols*tile_size)``, cut it row-major, and when there is more than
    one tile append a ``thumbnail``: the whole image squashed to ``tile_size``.
    """

    name: ClassVar[str] = "tile"
    sizing: ClassVar[bool] = True
    rule: str = "internvl"
    tile_size: int = 448
    min_tiles: int = 1
    max_tiles: int = 12
    thumbnail: bool = True
    interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        if self.rule not in TILE_RULES:
            _fail(self.name, "rule", f"one of {TILE_RULES}", self.rule, "pick a rule")
        _check_int(self.name, "tile_size", self.tile_size)
        _check_int(self.name, "min_tiles", self.min_tiles)
        _check_int(self.name, "max_tiles", self.max_tiles)
        if self.min_tiles > self.max_tiles:
            _fail(self.name, "min_tiles", f"<= max_tiles ({self.max_tiles})", self.min_tiles,
                  "lower min_tiles or raise max_tiles")
        _check_interp(self.name, self.interpolation)


@dataclass(frozen=True)
class center_crop(Op):
    """Crop ``(height, width)`` from the centre, top/left rounded down as transformers does
    (``(H - h) // 2``; torchvision's own center_crop rounds differently). A crop larger than
    the image pads with zeros, as transformers does."""

    name: ClassVar[str] = "center_crop"
    height: int = 224
    width: int = 224

    def __post_init__(self) -> None:
        _check_int(self.name, "height", self.height)
        _check_int(self.name, "width", self.width)


@dataclass(frozen=True)
class normalize(Op):
    """``out = (x * rescale - mean) / std`` per channel, in float32.

    With ``dtype="uint8"`` asked of the Processor this op is skipped (engines that
    normalize on the device do it themselves).
    """

    name: ClassVar[str] = "normalize"
    rescale: float = 1 / 255
    mean: tuple[float, float, float] = (0.48145466, 0.4578275, 0.40821073)
    std: tuple[float, float, float] = (0.26862954, 0.26130258, 0.27577711)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", _triple(self.name, "mean", self.mean))
        object.__setattr__(self, "std", _triple(self.name, "std", self.std))
        if any(s == 0 for s in self.std):
            _fail(self.name, "std", "non-zero values", self.std, "use std=1 to skip scaling")
        if not (isinstance(self.rescale, (int, float)) and math.isfinite(self.rescale)):
            _fail(self.name, "rescale", "a finite number", self.rescale, "use 1/255 or 1.0")
        object.__setattr__(self, "rescale", float(self.rescale))


#: Output layouts. See ``vlmprep.plan.grid`` for the Given/Input/Output examples.
LAYOUTS = ("merge_grouped", "tiles")


@dataclass(frozen=True)
class patchify(Op):
    """Cut the image into ``patch_size`` squares and emit one row per patch.

    ``layout="merge_grouped"`` (Qwen2-VL / Qwen3-VL): each row is ``[c, t, py, px]``
    with the still image repeated ``temporal_patch_size`` times; rows are grouped by
    ``merge_size x merge_size`` blocks so each 4 consecutive rows are one LLM token.

    ``layout="tiles"`` (fixed-size tile families): the output keeps each tile as a
    ``(C, H, W)`` image; ``patch_size`` only sets the ViT grid (``floor(H / patch_size)``
    per side, as a stride-P convolution sees it) and ``merge_size`` how many patches per
    side one LLM token covers (InternVL's pixel shuffle: 2).
    """

    name: ClassVar[str] = "patchify"
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    layout: str = "merge_grouped"

    def __post_init__(self) -> None:
        _check_int(self.name, "patch_size", self.patch_size)
        _check_int(self.name, "temporal_patch_size", self.temporal_patch_size)
        _check_int(self.name, "merge_size", self.merge_size)
        if self.layout not in LAYOUTS:
            _fail(self.name, "layout", f"one of {LAYOUTS}", self.layout, "pick a layout")


#: ``to_hf()`` forms: qwen2_vl (pixel_values + image_grid_thw), images (pixel_values
#: ``[N, C, H, W]``), got_ocr2 (tiles + num_patches); "auto" = qwen2_vl or images by layout.
HF_OUTPUTS = ("auto", "qwen2_vl", "images", "got_ocr2")


@dataclass(frozen=True)
class pack(Op):
    """How packed sequences are presented to the LLM: the placeholder token.

    ``placeholder`` for an image is ``image_token * num_tokens`` wrapped in
    ``prefix``/``suffix`` — exactly what the family's transformers processor puts
    where the prompt had one image token (Qwen: ``<|image_pad|>`` repeated; the
    ``<|vision_start|>``/``<|vision_end|>`` pair comes from the chat template).
    """

    name: ClassVar[str] = "pack"
    image_token: str = "<|image_pad|>"
    prefix: str = ""
    suffix: str = ""
    #: LLM tokens that ``prefix`` + ``suffix`` add (InternVL's ``<img>``/``</img>``: 2).
    extra_tokens: int = 0
    #: Which transformers image processor's output ``PackedBatch.to_hf()`` reproduces.
    hf_output: str = "auto"

    def __post_init__(self) -> None:
        for k in ("image_token", "prefix", "suffix"):
            if not isinstance(getattr(self, k), str):
                _fail(self.name, k, "a str", getattr(self, k), f"pass {k}='...'")
        _check_int(self.name, "extra_tokens", self.extra_tokens, lo=0)
        if self.hf_output not in HF_OUTPUTS:
            _fail(self.name, "hf_output", f"one of {HF_OUTPUTS}", self.hf_output,
                  "'auto' picks from the patchify layout")


