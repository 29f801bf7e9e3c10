"""Harness (b): the whole per-image path on one mutated encoded image.

``Processor("qwen2-vl", backend=..., errors="skip")`` for reference and torch on the same bytes,
and dali (where installed) on a quarter of the inputs, chosen by the input's first byte (a DALI
graph run costs more per call); the rest is the file. Guarantees: the call never raises;
a failure is an ImageError at index 0 whose message says what was expected; a success has
exactly the rows, grid and token count the header-only plan predicted; and both backends agree
on whether the file is an image (one accepting what the other rejects is a silently partial or
a wrongly refused decode).

    .venv/bin/python fuzz/fuzz_pipeline.py fuzz/corpus/pipeline fuzz/seeds/pipeline -max_total_time=60
"""
from __future__ import annotations

import os

import _common  # noqa: F401  (sys.path)

_PROCS: dict = {}


def _procs() -> dict:
    if not _PROCS:
        import vlmprep
        # max_pixels bounds the output; max_source_pixels the decode (16 Mpx: <= ~400 MB at the
        # decoders' worst per-pixel cost), so that a run past -rss_limit_mb is an amplification
        # bug, not an honest decode of a huge header
        for b in ("reference", "torch", "dali"):
            if b in vlmprep.backends.available():
                _PROCS[b] = vlmprep.Processor("qwen2-vl", backend=b, errors="skip", max_pixels=200_704,
                                              max_source_pixels=1 << 24)
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
    procs = _procs()
    names = [b for b in procs if b != "dali" or data[0] % 4 == 0]
    out = {b: _check(procs[b], item) for b in names}
    ref = out["reference"]
    for b in names[1:]:
        got = out[b]
        assert bool(ref.errors) == bool(got.errors), (
            f"backends disagree: reference {'rejects: ' + str(ref.errors[0]) if ref.errors else 'accepts'}, "
            f"{b} {'rejects: ' + str(got.errors[0]) if got.errors else 'accepts'}")
        assert ref.pixel_values.shape == got.pixel_values.shape, (b, ref.pixel_values.shape,
                                                                  got.pixel_values.shape)


if __name__ == "__main__":
    def warm():
        import glob
        for f in sorted(glob.glob(os.path.join(_common.ROOT, "fuzz", "seeds", "pipeline", "*")))[:6]:
            test_one_input(b"\0" + open(f, "rb").read()[1:])  # first byte 0: dali too
    _common.main(test_one_input, instrument=("vlmprep.io.probe", "vlmprep.io.decode",
                                            "vlmprep.io.inputs"), warm=warm)
