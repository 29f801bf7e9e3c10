"""MiniCPM-V 4.6 geometry (``minicpmv_slice``): the source image resized to about
``scale_resolution**2`` pixels, then its slices, and the ``<image>..</image><slice>..</slice>``
prompt.

Reproduces transformers 5.24's ``MiniCPMV4_6ImageProcessorPil`` / ``MiniCPMV4_6ImageProcessor``
(``find_best_resize``, ``get_refine_size``, ``get_sliced_grid``, ``ensure_divide``) and
``MiniCPMV4_6Processor.replace_image_token``; the same float expressions in the same order
(``int()`` truncation, Python's ``round`` half to even).

- The grid: ``multiple = min(ceil(H*W / S**2), max_slice_nums)``; none when ``multiple <= 1``
  (or without ``slice_mode``); else over ``multiple - 1 .. multiple + 1`` slices (not 1, not over
  the cap) every ``rows x cols`` factorization, the least ``|log(W/H) - log(cols/rows)|`` wins
  (ties: more rows).
- The source: resized to ``find_best_resize`` (scaled to about ``S**2`` pixels when larger, or
  always when there is no grid; each side then rounded to a multiple of ``q = patch *
  merge``, at least ``q``).
- The slices: the image resized once to ``rows * h_s x cols * w_s`` (``find_best_resize`` of
  one slice's share, always scaled) and cut row-major into ``rows x cols`` slices of ``h_s x
  w_s``.

Tiles, a tiny example::

    Given  1080x1920 (HxW), S 448, 9 slices, patch 14, merge 4 (q = 56)
    Input  multiple = ceil(2073600 / 200704) = 9 (capped): grids of 8, 9 (and 10: over the cap);
           the closest to log(1920/1080) is 2 rows x 4 cols (8)
    Output the source resized to 336x616 (24 x 44 patches: 66 tokens), then the image resized
           to 896x1792 cut row-major into 8 slices of 448x448 (32 x 32 patches: 64 tokens
           each): 9 tiles, 578 image tokens (597 with the wrappers and the row newline)
"""
from __future__ import annotations

import math

from ..ops import minicpmv_slice
from ..pipeline import Pipeline
from .boxes import Box
from .grid import patch_grid, tokens_for_grid
from .plan import Canvas, Sizing, sizing_rule

__all__ = ["ensure_divide", "find_best_resize", "sliced_grid", "refine_size", "minicpmv_placeholder",
           "IMAGE_TOKEN", "IMAGE_START", "IMAGE_END", "SLICE_START", "SLICE_END"]

#: ``tokenizer.image_token`` of MiniCPM-V 4.6 (its ``extra_special_tokens``), repeated per
#: visual embedding; the processor also reads one from the prompt per image.
IMAGE_TOKEN = "<|image_pad|>"
#: The wrappers ``MiniCPMV4_6Processor`` reads from the tokenizer (one LLM token each).
IMAGE_START, IMAGE_END, SLICE_START, SLICE_END = "<image>", "</image>", "<slice>", "</slice>"


def ensure_divide(length: float, divisor: int) -> int:
    """transformers' ``ensure_divide``: ``length`` rounded (half to even) to a multiple of
    ``divisor``, at least ``divisor``. Given 100, 56 -> 112; 10, 56 -> 56."""
    return max(round(length / divisor) * divisor, divisor)


def find_best_resize(height: float, width: float, scale: int, q: int,
                     allow_upscale: bool = False) -> tuple[int, int]:
    """``find_best_resize((H, W), scale, patch, mode, allow_upscale)`` with ``q = patch * merge``
    -> ``(h, w)``. Given 1080x1920, 448, 56 -> (336, 616); 1x1 with upscale -> (448, 448)."""
    if height * width > scale * scale or allow_upscale:
        aspect = width / height
        height = int(scale / math.sqrt(aspect))
        width = int(height * aspect)
    return ensure_divide(height, q), ensure_divide(width, q)


def sliced_grid(height: int, width: int, max_slices: int, scale: int) -> tuple[int, int] | None:
    """``get_sliced_grid`` -> ``(rows, cols)``, or None (no slices). Given 1080x1920, 9, 448 ->
    (2, 4); 448x448 -> None."""
    log_ratio = math.log(width / height)
    multiple = min(math.ceil(width * height / (scale * scale)), max_slices)
    if multiple <= 1:
        return None
    best, least = (1, 1), float("inf")
    for n in (multiple - 1, multiple, multiple + 1):
        if n == 1 or n > max_slices:
            continue
        for rows in range(1, n + 1):
            if n % rows:
                continue
            err = abs(log_ratio - math.log((n // rows) / rows))
            if err < least or (err == least and rows > best[0]):
                best, least = (rows, n // rows), err
    return best


def refine_size(height: int, width: int, grid: tuple[int, int], scale: int, q: int
                ) -> tuple[int, int]:
    """``get_refine_size`` -> the ``(h, w)`` the image is resized to before slicing (a whole
    number of equal slices). Given 1080x1920, (2, 4), 448, 56 -> (896, 1792)."""
    rows, cols = grid
    h, w = find_best_resize(ensure_divide(height, rows) / rows, ensure_divide(width, cols) / cols,
                            scale, q, allow_upscale=True)
    return h * rows, w * cols


def minicpmv_placeholder(tokens: list[int], grid: tuple[int, int] | None,
                         token: str = IMAGE_TOKEN) -> str:
    """``MiniCPMV4_6Processor.replace_image_token``'s string (without the ``<image_id>k
    </image_id>`` prefix the processor prepends per sample): ``tokens[0]`` for the source,
    then one per slice, rows joined by a newline.

    Given [1], None, "x" -> ``<image>x</image>``; [1, 1, 1], (2, 1), "x" ->
    ``<image>x</image><slice>x</slice>\\n<slice>x</slice>``.
    """
    text = IMAGE_START + token * tokens[0] + IMAGE_END
    if grid is None:
        return text
    rows, cols = grid
    return text + "\n".join(
        "".join(SLICE_START + token * n + SLICE_END for n in tokens[1 + r * cols:1 + (r + 1) * cols])
        for r in range(rows))


def _slice_boxes(refine: tuple[int, int], grid: tuple[int, int]) -> list[Box]:
    """``divide_to_patches``' boxes: row-major ``rows x cols`` slices of the refined canvas."""
    (rows, cols), (h, w) = grid, (refine[0] // grid[0], refine[1] // grid[1])
    return [(r * h, c * w, h, w) for r in range(rows) for c in range(cols)]


@sizing_rule("minicpmv_slice")
def _minicpmv_slice(op: minicpmv_slice, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    """The source (canvas 0) first, then the slices of the refined image (canvas 1); tokens:
    every image token, wrapper and row newline of the placeholder."""
    pf = pipeline.patchify
    q, s = pf.patch_size * pf.merge_size, op.scale_resolution
    grid = sliced_grid(hw[0], hw[1], op.max_slice_nums, s) if op.slice_mode else None
    source = find_best_resize(hw[0], hw[1], s, q, allow_upscale=grid is None)
    canvases, tiles, owner = [Canvas(source)], [(0, 0, *source)], [0]
    if grid is not None:
        refine = refine_size(hw[0], hw[1], grid, s, q)
        canvases.append(Canvas(refine))
        boxes = _slice_boxes(refine, grid)
        tiles += boxes
        owner += [1] * len(boxes)
    tokens = [tokens_for_grid(patch_grid((b[2], b[3]), pf), pf) for b in tiles]
    text = minicpmv_placeholder(tokens, grid, pipeline.pack.image_token)
    newlines = grid[0] - 1 if grid is not None else 0
    return Sizing(canvases, tiles, owner, image_tokens=sum(tokens) + 2 * len(tiles) + newlines,
                  placeholder=text)
