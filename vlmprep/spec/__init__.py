"""What the user wants: ops and pipelines as frozen data (stdlib only)."""
from . import ops
from .pipeline import Pipeline

__all__ = ["ops", "Pipeline"]
