"""Exact integer geometry, shared by every backend and by ``Processor.plan()``."""
from .plan import Canvas, ImagePlan, Plan, plan_image, plan_images
from .resize import longest_edge, shortest_edge, smart_resize

__all__ = ["Canvas", "ImagePlan", "Plan", "plan_image", "plan_images", "smart_resize", "shortest_edge",
           "longest_edge"]
