"""Adapters: hand a PackedBatch to consumers (transformers, vLLM, SGLang, ViT encoders).

Each module is imported on its own (``vlmprep.adapters.transformers`` ...); none is imported here,
so ``import vlmprep`` stays light.
"""

_SUBMODULES = ("sglang", "transformers", "vit", "vllm")


def __getattr__(name: str):
    # ``vlmprep.adapters.vit.encode`` works after ``import vlmprep``: the module loads on access.
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
