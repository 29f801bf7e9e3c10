"""Shared check of the LLM adapters: a tiny model's logits from vlmprep's inputs vs the
transformers processor's own inputs (used by tests/adapters/test_llm_adapters*.py)."""
from __future__ import annotations

import torch

from vlmprep.adapters import transformers as tfa


def seeded_model(model_cls, cfg):
    """A tiny random-weight model, the same weights every call (seed 0), in eval mode."""
    torch.manual_seed(0)
    return model_cls(cfg).eval()


def compare_model_inputs(proc, model_cls, cfg, vp, texts, images, tag):
    """Assert ``model_inputs`` on vlmprep's batch equals the processor's own inputs: keys, ids,
    integer tensors exactly, pixels within 1e-5, and the model's logits within fp32 noise.
    Returns ``(ours, ref)`` for family-specific checks."""
    ref = proc(images=images, text=list(texts), return_tensors="pt", padding=True)
    batch = vp(images)
    ours = tfa.model_inputs(proc, texts, batch)

    assert set(ours) == set(ref), (sorted(ours), sorted(ref))
    assert torch.equal(ours["input_ids"], ref["input_ids"])
    assert torch.equal(ours["attention_mask"], ref["attention_mask"])
    for k in ref:
        if k in ("input_ids", "attention_mask"):
            continue
        a, b = ours[k], ref[k]
        assert a.shape == b.shape and a.dtype == b.dtype, (k, a.shape, b.shape, a.dtype, b.dtype)
        if not a.is_floating_point():
            assert torch.equal(a, b), k
    # pixels: reference backend vs the PIL processor, same numerics (tests/backends hold 1e-6)
    dpix = (ours["pixel_values"] - ref["pixel_values"]).abs().max().item()
    assert dpix <= 1e-5, dpix

    model = seeded_model(model_cls, cfg)
    with torch.no_grad():
        la = model(**ours).logits
        lb = model(**ref).logits
        # the logits do depend on the pixels (else their equality would prove nothing)
        lc = model(**{**ours, "pixel_values": ours["pixel_values"].flip(-1)}).logits
    assert la.shape == lb.shape and la.shape[:2] == ref["input_ids"].shape
    assert (lc - la).abs().max().item() > 1e-4
    d = (la - lb).abs()
    print(f"\n[{tag}] input_ids {tuple(ref['input_ids'].shape)} pixel_values "
          f"{tuple(ref['pixel_values'].shape)} pixel max|d|={dpix:.3g} "
          f"logits max|d|={d.max().item():.3g} mean={d.mean().item():.3g}")
    # Measured: exactly 0 (bit-identical pixels and ids). Allow fp32 noise only.
    assert d.max().item() <= 1e-5 and d.mean().item() <= 1e-6
    return ours, ref
