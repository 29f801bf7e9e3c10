"""vlmprep: exact, fast image preprocessing for vision-language models.

``import vlmprep`` is cheap: torch, numpy, PIL and DALI load on first use. Every submodule the
docs name (``vlmprep.pack.concat``, ``vlmprep.kernels.set_num_threads``,
``vlmprep.adapters.vit.encode``, ...) is reachable after ``import vlmprep`` alone: it is imported
on first attribute access. The library logs through ``logging.getLogger("vlmprep")`` and installs
no handler (configure logging in the application).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import ops, presets
from .errors import ImageError
from .pipeline import Pipeline

__version__ = "0.1.0"

__all__ = ["Processor", "Pipeline", "PackedBatch", "ImageError", "Plan", "ops", "presets",
           "probe", "backends", "read_shards", "Video", "Document",
           "__version__"]

if TYPE_CHECKING:
    from .backends import registry as backends  # noqa: F401
    from .io.document import Document  # noqa: F401
    from .io.probe import probe  # noqa: F401
    from .io.video import Video  # noqa: F401
    from .pack import PackedBatch  # noqa: F401
    from .plan import Plan  # noqa: F401
    from .processor import Processor  # noqa: F401

_LAZY = {
    "Processor": ("vlmprep.processor", "Processor"),
    "PackedBatch": ("vlmprep.pack", "PackedBatch"),
    "Plan": ("vlmprep.plan", "Plan"),
    "probe": ("vlmprep.io.probe", "probe"),
    "Video": ("vlmprep.io.video", "Video"),
    "Document": ("vlmprep.io.document", "Document"),
    "backends": ("vlmprep.backends", None),
    "loader": ("vlmprep.loader", None),
    "cache": ("vlmprep.cache", None),
    "serve": ("vlmprep.serve", None),
    # submodules the docs name: imported on first access, so ``import vlmprep`` stays light
    "adapters": ("vlmprep.adapters", None),
    "kernels": ("vlmprep.kernels", None),
    "pack": ("vlmprep.pack", None),
    "plan": ("vlmprep.plan", None),
    "io": ("vlmprep.io", None),
    "hf_forms": ("vlmprep.hf_forms", None),
    "processor": ("vlmprep.processor", None),
    "bench": ("vlmprep.bench", None),
    "cli": ("vlmprep.cli", None),
    # batch jobs (issue 18): shards of `vlmprep run`, and the Ray Data integration (Ray optional)
    "read_shards": ("vlmprep.batch.shards", "read_shards"),
    "batch": ("vlmprep.batch", None),
    "integrations": ("vlmprep.integrations", None),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib
        mod, attr = _LAZY[name]
        m = importlib.import_module(mod)
        value = m if attr is None else getattr(m, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vlmprep' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
