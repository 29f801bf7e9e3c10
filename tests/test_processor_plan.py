"""Processor.plan / Processor(): what the plan refuses from headers alone, before any decode."""
from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from PIL import Image

import vlmprep
import vlmprep.io.decode as dec


def _gif_with_screen(side: int) -> bytes:
    """A 1x1-frame GIF whose logical screen says side x side (the size Pillow reports)."""
    buf = io.BytesIO()
    Image.new("P", (1, 1)).save(buf, "GIF")
    b = bytearray(buf.getvalue())
    b[6:10] = struct.pack("<HH", side, side)
    return bytes(b)


def test_plan_refuses_decode_cost_from_the_header(monkeypatch):
    bomb = _gif_with_screen(5000)  # 25 M pixels: under the pixel limit, ~100 MB to decode
    assert vlmprep.probe(bomb).size_hw == (5000, 5000)
    proc = vlmprep.Processor("qwen2-vl", backend="reference", errors="skip",
                             max_decode_bytes=16 << 20)
    plan = proc.plan([bomb, np.zeros((30, 40, 3), np.uint8)])
    assert plan.images[0].error is not None and plan.images[1].error is None
    assert "max_decode_bytes" in plan.images[0].error.reason
    # The same refusal in a call, before anything is decoded.
    decoded = []
    real = dec.decode
    monkeypatch.setattr(dec, "decode", lambda src, *a, **k: decoded.append(src) or real(src, *a, **k))
    b = proc([bomb])
    assert list(b.errors) == [0] and "max_decode_bytes" in b.errors[0].reason and decoded == []
    with pytest.raises(vlmprep.ImageError, match="max_decode_bytes"):
        vlmprep.Processor("qwen2-vl", backend="reference", max_decode_bytes=16 << 20).plan([bomb])
