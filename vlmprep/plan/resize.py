"""The ``resize`` op's rule (SigLIP, LLaVA-1.5 / CLIP): a fixed size, or the shortest / longest
edge to ``size``; one canvas, one box (the whole image or the ``center_crop`` box).

As transformers' ``get_resize_output_image_size`` (``int()`` truncates, as there).
"""
from __future__ import annotations

from .. import ops
from ..pipeline import Pipeline
from .plan import Sizing, one_canvas, sizing_rule

__all__ = ["shortest_edge", "longest_edge"]


def shortest_edge(height: int, width: int, size: int) -> tuple[int, int]:
    """Short side -> ``size``, long side ``int(size * long / short)`` (truncated), as
    transformers' ``get_resize_output_image_size(default_to_square=False)``.

    Given 480x640, size 336 -> (336, 448).
    """
    short, long = (width, height) if width <= height else (height, width)
    new_long = int(size * long / short)
    return (new_long, size) if width <= height else (size, new_long)


def longest_edge(height: int, width: int, size: int) -> tuple[int, int]:
    """Long side -> ``size``, short side ``int(size * short / long)``, at least 1.

    Given 480x640, size 320 -> (240, 320).
    """
    short, long = (width, height) if width <= height else (height, width)
    new_short = max(1, int(size * short / long))
    return (size, new_short) if width <= height else (new_short, size)


@sizing_rule("resize")
def _resize(op: ops.resize, hw: tuple[int, int], pipeline: Pipeline) -> Sizing:
    if op.mode == "fixed":
        rhw = (op.height, op.width)
    elif op.mode == "shortest_edge":
        rhw = shortest_edge(hw[0], hw[1], op.size)
    else:
        rhw = longest_edge(hw[0], hw[1], op.size)
    return one_canvas(rhw, pipeline)
