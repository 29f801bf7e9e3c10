"""Python face of the compiled ops (csrc/): availability, build info, thread count."""
from __future__ import annotations

from .threads import get_num_threads, set_num_threads

__all__ = ["get_num_threads", "set_num_threads"]
