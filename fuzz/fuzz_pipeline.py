"""Harness (b): the whole per-image path on one mutated encoded image.

``Processor("qwen2-vl", backend=reference | torch, errors="skip")`` (the first input byte
picks the backend; the rest is the file). Guarantee: the call never raises; a failure is an
ImageError at index 0 whose message says what was expected; a success has exactly the rows,
grid and token count the header-only plan predicted.

    .venv/bin/python fuzz/fuzz_pipeline.py fuzz/corpus/pipeline fuzz/seeds/pipeline -max_total_time=60
"""
from __future__ import annotations

import _common  # noqa: F401  (sys.path)

_PROCS: list = []


def _procs():
    if not _PROCS:
        import vlmprep
        # max_pixels bounds the output (and so the cost of an accepted input), not the decode:
        # a mutated header still claims anything up to the pixel limit
        for b in ("reference", "torch"):
            _PROCS.append(vlmprep.Processor("qwen2-vl", backend=b, errors="skip", max_pixels=200_704))
    return _PROCS


def test_one_input(data: bytes) -> None:
    import numpy as np
    import torch

    import vlmprep
    if not data:
        return
    proc = _procs()[data[0] % 2]
    item = data[1:]
    b = proc([item])  # errors="skip": must not raise, whatever the bytes
    plan = proc.plan([item])
    if b.errors:
        assert list(b.errors) == [0], b.errors
        e = b.errors[0]
        assert isinstance(e, vlmprep.ImageError) and e.index == 0, repr(e)
        assert "expected" in str(e), f"message does not say what was expected: {e}"
        assert b.pixel_values.shape[0] == 0 and b.num_tokens == [0], b
        return
    assert plan.images[0].error is None, f"plan rejected what the call accepted: {plan.images[0].error}"
    assert b.pixel_values.shape[0] == plan.total_patches, (b.pixel_values.shape, plan.total_patches)
    assert np.array_equal(b.grid_thw.numpy(), np.asarray(plan.grid_thw)), (b.grid_thw, plan.grid_thw)
    assert b.num_tokens == plan.num_tokens, (b.num_tokens, plan.num_tokens)
    assert torch.isfinite(b.pixel_values).all(), "non-finite output"


if __name__ == "__main__":
    _common.main(test_one_input, instrument=("vlmprep.io.probe", "vlmprep.io.decode",
                                            "vlmprep.io.inputs"))
