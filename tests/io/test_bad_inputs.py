"""Bad inputs give an ImageError naming the right index; the others are processed; the
Processor stays usable afterwards."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import vlmprep
from imgdata import crop, encode


def _huge_png_header() -> bytes:
    # A valid PNG signature + IHDR claiming 30000x30000 (900 Mpx), and no pixel data at all.
    import struct
    import zlib
    chunk = b"IHDR" + struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))


def _bad_items(tmp_path):
    jpeg = encode(crop("astronaut", 120, 160), "jpeg")
    return {
        "empty bytes": b"",
        "random bytes": os.urandom(512),
        "truncated header": jpeg[:40],
        "truncated data": jpeg[: len(jpeg) // 2],
        "huge header": _huge_png_header(),
        "float array": np.zeros((20, 20, 3), np.float32),
        "gray array": np.zeros((20, 20), np.uint8),
        "rgba array": np.zeros((20, 20, 4), np.uint8),
        "HWC tensor": torch.zeros((20, 20, 3), dtype=torch.uint8),
        "empty array": np.zeros((0, 20, 3), np.uint8),
        "missing path": str(tmp_path / "nope.jpg"),
        "directory": tmp_path,
        "aspect 300": np.zeros((1, 300, 3), np.uint8),
        "not an image": 12345,
    }


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_each_bad_input_named_by_index(tmp_path, backend):
    good = [crop("chelsea", 57, 91), encode(crop("coffee", 80, 60), "png")]
    bad = _bad_items(tmp_path)
    for label, item in bad.items():
        items = [good[0], item, good[1]]
        proc = vlmprep.Processor("qwen2-vl", backend=backend, errors="skip")
        b = proc(items)
        assert list(b.errors) == [1], label
        err = b.errors[1]
        assert isinstance(err, vlmprep.ImageError) and isinstance(err, ValueError)
        assert err.index == 1 and err.source, label
        assert "expected" in str(err), (label, str(err))  # says what was expected and found
        assert b.image_index.tolist() == [0, 2]
        # The good images are exactly what they are alone.
        alone = proc([good[0], good[1]])
        assert torch.equal(b.pixel_values, alone.pixel_values), label
        # errors="raise": the bad one raises with its index; the processor stays usable.
        strict = vlmprep.Processor("qwen2-vl", backend=backend)
        with pytest.raises(vlmprep.ImageError) as ei:
            strict(items)
        assert ei.value.index == 1, label
        assert strict(good).num_tokens == alone.num_tokens
        # plan() agrees about header-level errors (decode errors are only known at decode).
        plan = vlmprep.Processor("qwen2-vl", backend=backend, errors="skip").plan(items)
        if label != "truncated data":
            assert plan.images[1].error is not None and plan.images[1].num_tokens == 0, label


def test_first_bad_index_raised_before_any_decode(tmp_path, monkeypatch):
    # With errors="raise" a header-level error raises before any image is decoded.
    import vlmprep.io.decode as dec
    calls = []
    monkeypatch.setattr(dec, "decode", lambda src: calls.append(src) or None)
    with pytest.raises(vlmprep.ImageError) as ei:
        vlmprep.Processor("qwen2-vl", backend="reference")(
            [crop("chelsea", 50, 50), b"", os.urandom(64)])
    assert ei.value.index == 1 and calls == []


def test_error_message_shape():
    with pytest.raises(vlmprep.ImageError) as ei:
        vlmprep.Processor("qwen2-vl", backend="reference")([np.zeros((4, 4, 3), np.float64)])
    msg = str(ei.value)
    assert msg.startswith("image 0 numpy.ndarray(4, 4, 3) float64: expected")
    assert "got dtype float64" in msg and "convert" in msg


def test_backend_registry_errors():
    assert {"reference", "torch"} <= set(vlmprep.backends.available())
    with pytest.raises(ValueError, match=r"unknown backend 'nope'; expected one of \["):
        vlmprep.Processor("qwen2-vl", backend="nope")
    with pytest.raises(ValueError, match="device"):
        vlmprep.Processor("qwen2-vl", device="tpu")
    with pytest.raises(ValueError, match="dtype"):
        vlmprep.Processor("qwen2-vl", dtype="float16")
