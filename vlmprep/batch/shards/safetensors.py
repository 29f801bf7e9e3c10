"""The safetensors shard writer: vlmprep writes the file itself (a length, a JSON header and the
data, as the safetensors package lays it out), because the package's writer orders the
metadata by a hash map, so its bytes change from one process to the next (safetensors 0.8).
The tensors and the ``vlmprep.rows`` metadata: the package docstring (``vlmprep.batch.shards``)."""
from __future__ import annotations

import json
import math
from typing import Any, Mapping, Sequence

from .files import Hashing
from .names import ROWS_KEY, SCHEMA_KEY, SCHEMA_VERSION

__all__ = ["write_safetensors"]

_ST_DTYPES = {"float32": "F32", "bfloat16": "BF16", "uint8": "U8"}
_ST_ITEMSIZE = {"F32": 4, "BF16": 2, "U8": 1, "I32": 4, "I64": 8}


def _st_header_entry(dtype: str, shape: Sequence[int], start: int) -> tuple[dict, int]:
    end = start + math.prod(shape) * _ST_ITEMSIZE[dtype]
    return {"dtype": dtype, "shape": [int(s) for s in shape], "data_offsets": [start, end]}, end


def write_safetensors(f: Hashing, rows: Sequence[Mapping[str, Any]], meta: dict[str, str],
                      dtype: str, layout: str, shape: list[int]) -> None:
    import numpy as np  # deferred: numpy is heavy and needed only to write this format
    ok_rows = [r for r in rows if r["status"] == "ok"]
    seqlens = [int(n) for r in ok_rows for n in r["seqlens"]]
    cu = np.zeros(len(seqlens) + 1, dtype="<i4")
    np.cumsum(seqlens, out=cu[1:])
    grid = np.array([int(v) for r in ok_rows for v in r["grid_thw"]], dtype="<i8").reshape(-1, 3)
    index = np.array([i for i, r in enumerate(rows) if r["status"] == "ok"
                      for _ in r["seqlens"]], dtype="<i8")
    ph = [str(r["placeholder"]).encode("utf-8") for r in rows]
    offsets = np.zeros(len(rows) + 1, dtype="<i8")
    np.cumsum([len(p) for p in ph], out=offsets[1:])
    small = {
        "cu_seqlens": ("I32", cu), "grid_thw": ("I64", grid), "image_index": ("I64", index),
        "num_tokens": ("I64", np.array([int(r["num_tokens"]) for r in rows], dtype="<i8")),
        "num_patches": ("I64", np.array([int(r["num_patches"]) for r in rows], dtype="<i8")),
        "orig_hw": ("I64", np.array([[int(v) for v in r["orig_hw"]] for r in rows],
                                    dtype="<i8").reshape(-1, 2)),
        "placeholder_offsets": ("I64", offsets),
    }
    pv_bytes = sum(len(r["pixel_values"]) for r in ok_rows)
    itemsize = _ST_ITEMSIZE[_ST_DTYPES[dtype]]
    row_elems = math.prod(shape) if shape else 1
    pv_shape = [pv_bytes // (itemsize * row_elems), *shape]
    # Data order as safetensors writes it: wider elements first (aligned), then by name.
    entries: list[tuple[str, str, Sequence[int], Any]] = [
        (k, t, a.shape, a) for k, (t, a) in small.items()]
    entries.append(("pixel_values", _ST_DTYPES[dtype], pv_shape, None))
    entries.append(("placeholders", "U8", [int(offsets[-1])], None))
    entries.sort(key=lambda e: (-_ST_ITEMSIZE[e[1]], e[0]))
    info = {"ids": [str(r["id"]) for r in rows], "sources": [str(r["source"]) for r in rows],
            "status": [str(r["status"]) for r in rows],
            "errors": [None if r["error"] is None else str(r["error"]) for r in rows],
            "modality": [str(r["modality"]) for r in rows],
            "video": [None if r["video"] is None else str(r["video"]) for r in rows],
            "dtype": dtype, "layout": layout, "row_shape": shape}
    header: dict[str, Any] = {"__metadata__": {
        **meta, SCHEMA_KEY: SCHEMA_VERSION,
        ROWS_KEY: json.dumps(info, sort_keys=True, separators=(",", ":"))}}
    pos = 0
    for k, t, shp, _ in entries:
        header[k], pos = _st_header_entry(t, shp, pos)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors pads it
    f.write(len(text).to_bytes(8, "little"))
    f.write(text)
    for k, _, _, a in entries:
        if k == "pixel_values":
            for r in ok_rows:
                f.write(r["pixel_values"])
        elif k == "placeholders":
            for p in ph:
                f.write(p)
        else:
            f.write(np.ascontiguousarray(a).tobytes())
