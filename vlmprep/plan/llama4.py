"""Llama 4 geometry (``llama4_tile``): the best-fit canvas of up to ``max_patches`` tiles of 336,
the image resized into it without distortion and padded, plus the global view.

Reproduces transformers 5.24's ``Llama4ImageProcessor`` (torchvision only: there is no PIL class)
``find_supported_resolutions``, ``get_best_fit``, ``get_max_res_without_distortion`` and
``_preprocess``, and ``Llama4Processor._prompt_split_image``. The rule is Mllama's
(``plan.mllama``: the least upscale, else the least downscale, ties to the smaller area; the fit
clipped to ``[tile_size, canvas]``), but not its arithmetic, so it is not shared:

* the canvases are listed by tile count down from ``max_patches``, grouped by aspect ratio in
  first-seen order (the first of equal areas wins a tie), not Mllama's ``(1,1), (1,2), ...``;
* the scales are float32 (an int64 tensor divided by the image side), not float64, and so is
  the fit's scale on a side clipped to the canvas (a tensor then), float64 on a side that is not.

With more than one tile, the whole image squashed to ``tile_size x tile_size`` is appended as
the last tile (the global view). Tokens per tile: ``(tile // patch)^2 // downsample_ratio``
(336, 14, 4: 144).

Tiny example::

    Given  1080x1920 (HxW), tile 336, up to 16 tiles
    Input  no canvas of <= 16 tiles holds the image without a downscale; the least downscale
           (float32 min(rows * 336 / 1080, cols * 336 / 1920)) is 0.875, first reached by 3x5
    Output canvas 1008x1680 (3 rows x 5 cols), image resized to 945x1680 at the top-left (the
           rest 0), 15 tiles row-major, then the global view (1080x1920 squashed to 336x336):
           16 tiles; placeholder <|image_start|> + 3 rows of (5 x 144 <|patch|> with 4
           <|tile_x_separator|>, then <|tile_y_separator|>) + <|image|> + 144 <|patch|> +
           <|image_end|>: 2,322 tokens, 2,304 of them <|patch|> (num_embeddings)
"""
from __future__ import annotations

import math

from ..ops import llama4_tile
from ..pipeline import Pipeline
from .boxes import grid_boxes
from .plan import Canvas, Sizing, sizing_rule

__all__ = ["llama4_resolutions", "llama4_canvas", "llama4_fit", "llama4_placeholder",
           "llama4_tile_tokens", "IMAGE_START", "IMAGE_END", "IMAGE", "PATCH", "TILE_X", "TILE_Y"]

#: ``Llama4Processor``'s tokens (one LLM token each).
IMAGE_START, IMAGE_END, IMAGE, PATCH = "<|image_start|>", "<|image_end|>", "<|image|>", "<|patch|>"
TILE_X, TILE_Y = "<|tile_x_separator|>", "<|tile_y_separator|>"


def _F32(x):  # noqa: N802 - numpy's float32 scalar, its arithmetic (deferred: import vlmprep stays light)
    import numpy as np
    return np.float32(x)


def llama4_resolutions(max_patches: int) -> tuple[tuple[int, int], ...]:
    """``find_supported_resolutions`` in tiles ``(rows, cols)``, in its order: for ``n`` from
    ``max_patches`` down to 1 each factorization ``(f, n // f)`` (``f`` ascending) is appended to
    the list of its ratio ``f / (n // f)``; the lists in first-seen order of their ratios.

    Given 4 -> (1,4) (2,2) (1,1) (4,1) (1,3) (3,1) (1,2) (2,1).
    """
    by_ratio: dict[float, list[tuple[int, int]]] = {}
    for n in range(max_patches, 0, -1):
        for f in sorted(d for d in range(1, n + 1) if n % d == 0):
            by_ratio.setdefault(f / (n // f), []).append((f, n // f))
    return tuple(rc for group in by_ratio.values() for rc in group)


def llama4_canvas(height: int, width: int, tile: int, max_patches: int,
                  to_max: bool = False) -> tuple[int, int]:
    """``get_best_fit`` -> ``(rows, cols)``: per canvas ``scale = min(ch / H, cw / W)`` in float32;
    the smallest scale >= 1 (the largest with ``to_max``), else the largest < 1; among equal
    scales the smallest area, the first listed on equal areas (``torch.argmin``).

    Given 1x1 -> (1, 1); 1080x1920 -> (3, 5); 336x672 -> (1, 2); 17x900 -> (1, 3).
    """
    arr = llama4_resolutions(max_patches)
    scales = []
    for a, b in arr:
        sh, sw = _F32(a * tile) / _F32(height), _F32(b * tile) / _F32(width)
        scales.append(sw if sh > sw else sh)
    ups = [s for s in scales if s >= 1]
    chosen = (max(ups) if to_max else min(ups)) if ups else max(scales)
    best = None
    for (a, b), s in zip(arr, scales):
        if s == chosen and (best is None or a * b < best[0] * best[1]):
            best = (a, b)
    return best  # type: ignore[return-value]


def _side(image: int, canvas: int, tile: int, to_max: bool) -> tuple[int, bool]:
    """The fit's target for one side and whether transformers holds it as a tensor (float32
    arithmetic): ``min(max(image, tile), canvas)`` is the canvas (a 0-d tensor) only when the
    canvas is strictly smaller (Python's ``min`` keeps the first of equals)."""
    if to_max:
        return canvas, True
    lo = max(image, tile)
    return (canvas, True) if canvas < lo else (lo, False)


def llama4_fit(height: int, width: int, canvas_h: int, canvas_w: int, tile: int,
               to_max: bool = False) -> tuple[int, int]:
    """``get_max_res_without_distortion`` on the targets ``_preprocess`` gives it: each side's
    target clipped to ``[tile, canvas side]`` (not with ``to_max``), the smaller scale wins, the
    other side ``floor(side * scale)`` (at most its target, at least 1). A target that is the
    canvas is a tensor in transformers: its scale, the comparison and the product are float32.

    Given 1080x1920 in 1008x1680 -> (945, 1680); 1x1 in 336x336 -> (336, 336);
    17x900 in 336x1008 -> (17, 900) (no upscale past the image's own sides above 336).
    """
    th, t32h = _side(height, canvas_h, tile, to_max)
    tw, t32w = _side(width, canvas_w, tile, to_max)
    sw = _F32(tw) / _F32(width) if t32w else tw / width
    sh = _F32(th) / _F32(height) if t32h else th / height
    f32 = t32w or t32h  # a comparison with a float32 tensor is made in float32
    if (_F32(sw) < _F32(sh)) if f32 else (sw < sh):
        nh = math.floor(_F32(height) * sw) if t32w else math.floor(height * sw)
        return max(min(nh, th), 1), tw
    nw = math.floor(_F32(width) * sh) if t32h else math.floor(width * sh)
    return th, max(min(nw, tw), 1)


def llama4_tile_tokens(op: llama4_tile, patch: int) -> int:
    """``<|patch|>`` tokens per tile: ``(tile // patch)^2 // downsample_ratio`` (144)."""
    return (op.tile_size // patch) * (op.tile_size // patch) // op.downsample_ratio


def llama4_placeholder(rows: int, cols: int, tile_tokens: int) -> str:
    """``Llama4Processor._prompt_split_image``.

    Given 1 x 1, 2 tokens -> ``<|image_start|><|image|><|patch|><|patch|><|image_end|>``;
    1 x 2, 1 token -> ``<|image_start|><|patch|><|tile_x_separator|><|patch|>
    <|tile_y_separator|><|image|><|patch|><|image_end|>`` (without the line break).
    """
    parts = [IMAGE_START]
    if rows * cols > 1:
        row = TILE_X.join([PATCH * tile_tokens] * cols) + TILE_Y
        parts.append(row * rows)
    parts += [IMAGE, PATCH * tile_tokens, IMAGE_END]
    return "".join(parts)


@sizing_rule("llama4_tile")
def _llama4_tile(op: llama4_tile, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """One canvas (resized image padded bottom/right with 0), its tiles row-major, and with more
    than one tile the global view (its own canvas, the source squashed to one tile) last;
    tokens: every token of the placeholder."""
    t = op.tile_size
    a, b = llama4_canvas(hw[0], hw[1], t, op.max_patches, op.resize_to_max_canvas)
    rhw = llama4_fit(hw[0], hw[1], a * t, b * t, t, op.resize_to_max_canvas)
    canvases = [Canvas(rhw, size=(a * t, b * t), offset=(0, 0), fill=(0, 0, 0))]
    tiles = grid_boxes(a, b, t)
    tile_canvas = [0] * len(tiles)
    n = a * b
    if n > 1:
        canvases.append(Canvas((t, t)))
        tiles.append((0, 0, t, t))
        tile_canvas.append(1)
    k = llama4_tile_tokens(op, pipeline.patchify.patch_size)
    tokens = 3 + k + (n * k + a * b if n > 1 else 0)
    return Sizing(canvases, tiles, tile_canvas, image_tokens=tokens,
                  placeholder=llama4_placeholder(a, b, k))
