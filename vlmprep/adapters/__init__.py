"""Adapters: hand a PackedBatch to consumers (transformers, vLLM, SGLang, ViT encoders).

Each module is imported on its own (``vlmprep.adapters.transformers`` ...); none is imported here,
so ``import vlmprep`` stays light.
"""
