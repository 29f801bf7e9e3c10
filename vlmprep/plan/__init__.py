"""Exact integer geometry, shared by every backend and by ``Processor.plan()``.

``plan.py`` holds the types and the rule registry (``SIZING_RULES``); each sizing op's rule lives
in its own module (``qwen``: smart_resize, ``resize``, ``internvl``, ``anyres``, ``idefics3``,
``mllama``: canvas_tile, ``gemma3``: pan_and_scan, ``pixtral``, ``naflex``,
``minicpmv``: minicpmv_slice, ``llama4``: llama4_tile,
``phi4_multimodal``: phi4_hd) and registers itself
when imported here; ``grid.py``: patch grids and token counts; ``boxes.py``: box helpers.

The extension point (a new family's sizing, docs/how-to/new-family.md): a
``vlmprep.ops.SizingOp`` subclass and its rule, ``@sizing_rule(op_class)`` returning a
``Sizing`` of ``Canvas`` es and tile boxes (``grid_boxes``, ``center_crop_box``, ``one_canvas``;
``patch_grid`` / ``tokens_for_grid`` for token counts).
"""
from . import (
           anyres,
           gemma3,
           glm4v,
           idefics3,
           internvl,
           lfm2_vl,
           llama4,
           minicpmv,
           mllama,
           naflex,
           ovis2,
           phi4_multimodal,
           pixtral,
           qwen,
           resize,
)
from .boxes import Box, center_crop_box, grid_boxes
from .grid import patch_grid, tokens_for_grid
from .plan import (
           SIZING_RULES,
           Canvas,
           ImagePlan,
           Plan,
           Sizing,
           SizingRule,
           check_sizing,
           one_canvas,
           plan_image,
           plan_images,
           sizing_rule,
)
from .qwen import smart_resize
from .resize import longest_edge, shortest_edge

__all__ = ["Canvas", "ImagePlan", "Plan", "SIZING_RULES", "plan_image", "plan_images",
           "Sizing", "SizingRule", "sizing_rule", "check_sizing", "one_canvas",
           "Box", "grid_boxes", "center_crop_box", "patch_grid", "tokens_for_grid",
           "smart_resize", "shortest_edge", "longest_edge",
           "anyres", "gemma3", "glm4v", "idefics3", "internvl", "lfm2_vl", "llama4",
           "minicpmv", "mllama", "naflex", "ovis2", "phi4_multimodal", "pixtral", "qwen",
           "resize"]
