"""Every preset (the 2024 twelve and issue 30's six) in one process, one batch after another in
two orders: each preset's output must not depend on which presets ran before it (no state leaks
between families through caches, buffers, lut or weight tables), the torch backend's uint8 rows
equal the reference backend's (both Pillow's pixels), and the header-only plan's token counts
are the batch's."""
from __future__ import annotations

import pytest
import torch
from _support.imgdata import crop, encode, tiled

import vlmprep


def _images():
    return [encode(crop("astronaut", 301, 453), "jpeg"), encode(tiled("coffee", 700, 1500), "png"),
            crop("chelsea", 37, 61)]


def _run(name: str, backend: str):
    proc = vlmprep.Processor(name, backend=backend, dtype="uint8")
    b = proc(_images())
    return proc, b


def test_every_preset_in_one_process_in_either_order():
    names = vlmprep.presets.names()
    assert len(names) >= 18, names
    first = {}
    for name in names:
        proc, b = _run(name, "torch")
        assert not b.errors, (name, b.errors)
        assert list(b.num_tokens) == [p.num_tokens for p in proc.plan(_images()).images], name
        ref = _run(name, "reference")[1]
        assert torch.equal(b.pixel_values.cpu(), ref.pixel_values.cpu()), name  # Pillow's pixels both
        first[name] = b.pixel_values.clone()
    for name in reversed(names):  # the same batches after every other family ran
        again = _run(name, "torch")[1].pixel_values
        assert torch.equal(again, first[name]), name


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_one_batch_per_preset_is_finite(dtype):
    """The normalized outputs of every preset are finite and of the asked dtype."""
    for name in vlmprep.presets.names():
        b = vlmprep.Processor(name, backend="torch", dtype=dtype)(_images()[:1])
        assert b.pixel_values.dtype == getattr(torch, dtype), name
        assert bool(torch.isfinite(b.pixel_values.float()).all()), name
