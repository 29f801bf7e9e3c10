"""Exact integer geometry, shared by every backend and by ``Processor.plan()``.

``plan.py`` holds the types and the rule registry (``SIZING_RULES``); each sizing op's rule lives
in its own module (``qwen``: smart_resize, ``resize``, ``internvl``, ``anyres``, ``idefics3``,
``mllama``: canvas_tile, ``gemma3``: pan_and_scan, ``pixtral``, ``naflex``) and registers itself
when imported here; ``grid.py``: patch grids and token counts; ``boxes.py``: box helpers.
"""
from . import anyres, gemma3, idefics3, internvl, mllama, naflex, pixtral, qwen, resize
from .plan import SIZING_RULES, Canvas, ImagePlan, Plan, plan_image, plan_images
from .qwen import smart_resize
from .resize import longest_edge, shortest_edge

__all__ = ["Canvas", "ImagePlan", "Plan", "SIZING_RULES", "plan_image", "plan_images",
           "smart_resize", "shortest_edge", "longest_edge",
           "anyres", "gemma3", "idefics3", "internvl", "mllama", "naflex", "pixtral", "qwen", "resize"]
