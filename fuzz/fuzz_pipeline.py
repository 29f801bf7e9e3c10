"""Harness (b): the whole per-image path on one mutated encoded image.

``Processor("qwen2-vl", backend=..., errors="skip")`` for reference and torch on the same bytes
(the input's first byte is reserved; the rest is the file). Guarantees: the call never raises;
a failure is an ImageError at index 0 whose message says what was expected; a success has
exactly the rows, grid and token count the header-only plan predicted; and both backends agree
on whether the file is an image (one accepting what the other rejects is a silently partial or
a wrongly refused decode).

    .venv/bin/python fuzz/fuzz_pipeline.py fuzz/corpus/pipeline fuzz/seeds/pipeline -max_total_time=60
"""
from __future__ import annotations

import os

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


def _check(proc, item):
    import numpy as np

    import vlmprep
    b = proc([item])  # errors="skip": must not raise, whatever the bytes
    plan = proc.plan([item])
    if b.errors:
        assert list(b.errors) == [0], b.errors
        e = b.errors[0]
        assert isinstance(e, vlmprep.ImageError) and e.index == 0, repr(e)
        assert "expected" in str(e), f"message does not say what was expected: {e}"
        assert b.pixel_values.shape[0] == 0 and b.num_tokens == [0], b
        return b
    assert plan.images[0].error is None, f"plan rejected what the call accepted: {plan.images[0].error}"
    assert b.pixel_values.shape[0] == plan.total_patches, (b.pixel_values.shape, plan.total_patches)
    assert np.array_equal(b.grid_thw.numpy(), np.asarray(plan.grid_thw)), (b.grid_thw, plan.grid_thw)
    assert b.num_tokens == plan.num_tokens, (b.num_tokens, plan.num_tokens)
    assert bool(b.pixel_values.isfinite().all()), "non-finite output"
    return b


def test_one_input(data: bytes) -> None:
    if not data:
        return
    item = data[1:]
    ref, tor = (_check(p, item) for p in _procs())
    assert bool(ref.errors) == bool(tor.errors), (
        f"backends disagree: reference {'rejects: ' + str(ref.errors[0]) if ref.errors else 'accepts'}, "
        f"torch {'rejects: ' + str(tor.errors[0]) if tor.errors else 'accepts'}")
    assert ref.pixel_values.shape == tor.pixel_values.shape, (ref.pixel_values.shape, tor.pixel_values.shape)


if __name__ == "__main__":
    def warm():
        import glob
        for f in sorted(glob.glob(os.path.join(_common.ROOT, "fuzz", "seeds", "pipeline", "*")))[:6]:
            test_one_input(open(f, "rb").read())
    _common.main(test_one_input, instrument=("vlmprep.io.probe", "vlmprep.io.decode",
                                            "vlmprep.io.inputs"), warm=warm)
