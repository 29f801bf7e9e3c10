"""Exact integer geometry, shared by every backend and by ``Processor.plan()``."""
from .plan import Canvas, ImagePlan, Plan, plan_image, plan_images
from .resize import longest_edge, shortest_edge, smart_resize

__all__ = ["Canvas", "ImagePlan", "Plan", "plan_image", "plan_images", "smart_resize", "shortest_edge",
           "longest_edge"]

from . import (  # noqa: E402,F401  (register pixtral_resize, naflex_resize)  # noqa: E402,F401  (register canvas_tile, pan_and_scan)
           anyres,  # noqa: E402,F401  (registers the anyres_tile sizing rule)
           gemma3,
           idefics3,  # noqa: E402,F401  (registers the idefics3_tile sizing rule)
           mllama,
           naflex,
           pixtral,
)
