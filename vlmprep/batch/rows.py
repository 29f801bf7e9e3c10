"""Rows: one processed image as plain values (the shard schema), and back to a PackedBatch.

``process_samples`` is the one processing core of a batch job: the local engine's workers and
the Ray actors both call it, so both give the same rows (and the same shard bytes). A row is a
dict with the keys ``ROW_COLUMNS``, holding only Python values and bytes (picklable, Arrow- and
JSON-friendly):

    id, source         the sample's id and where it came from (for messages)
    status, error      "ok" and None, or "error" and the reason text (never an exception)
    dtype, layout      "float32" | "bfloat16" | "uint8"; "patches" | "tiles"
    grid_thw           flat list of ints, 3 per ViT sequence: [t0, h0, w0, t1, h1, w1, ...]
    seqlens            patches per sequence (t * h * w)
    num_patches        sum(seqlens)
    num_tokens         LLM placeholder tokens (0 for an error row)
    placeholder        the prompt placeholder string ("" for an error row)
    row_shape          pixel_values.shape[1:]: [patch_dim] ("patches") or [C, H, W] ("tiles")
    orig_hw            [H, W] of the source after EXIF orientation ([0, 0] when unknown)
    pixel_values       raw little-endian C-order bytes of this image's rows (b"" for an error
                       row); bfloat16 as its raw 2-byte words (Arrow and numpy have no bfloat16)

A tiny example (qwen2-vl, float32, a 56x56 image)::

    grid_thw [1, 4, 4], seqlens [16], num_patches 16, num_tokens 4, row_shape [1176],
    orig_hw [56, 56], pixel_values: 16 * 1176 * 4 = 75264 bytes

``batch_from_rows(rows, pipeline)`` is the exact inverse: the PackedBatch that ``Processor``
(``errors="skip"``) returns for the same images, bit for bit, ``image_plans`` included (re-planned
from ``orig_hw``, which is all the geometry needs), so ``to_hf()`` works for every family.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from ..errors import ImageError
from ..pack import PackedBatch
from ..plan import ImagePlan, plan_image
from ..plan.grid import row_length

if TYPE_CHECKING:
    import torch

    from ..pipeline import Pipeline
    from ..processor import Processor
    from .sources import Sample

__all__ = ["ROW_COLUMNS", "process_samples", "batch_from_rows", "row_layout", "row_shape_of"]

ROW_COLUMNS = ("id", "source", "status", "error", "dtype", "layout", "grid_thw", "seqlens",
               "num_patches", "num_tokens", "placeholder", "row_shape", "orig_hw", "pixel_values")

#: dtype -> (little-endian numpy word type, bytes per element). bfloat16 travels as 2-byte words.
WORDS = {"float32": ("<f4", 4), "bfloat16": ("<i2", 2), "uint8": ("|u1", 1)}

# Bounds of one Processor call inside process_samples: the packed output of a call is held once
# in memory (a 1080p Qwen image is ~50 MB in float32), so a shard of 1000 images is processed in
# pieces. The split never changes a pixel (one image's rows do not depend on its batch).
_CHUNK_BYTES = 256 << 20
_CHUNK_IMAGES = 64

_SKIPPING: "weakref.WeakKeyDictionary[Processor, Processor]" = weakref.WeakKeyDictionary()


def row_layout(pipeline: "Pipeline") -> str:
    """``"tiles"`` or ``"patches"``: the PackedBatch layout this pipeline produces."""
    return "tiles" if pipeline.patchify.order == "tiles" else "patches"


def row_shape_of(pipeline: "Pipeline") -> list[int]:
    """``pixel_values.shape[1:]`` of this pipeline's batches: ``[C, H, W]`` or ``[patch_dim]``."""
    if row_layout(pipeline) == "tiles":
        return [3, *pipeline.tile_hw]  # type: ignore[misc]
    return [row_length(pipeline.patchify)]


def _skipping(proc: "Processor") -> "Processor":
    """``proc`` itself when it skips bad images, else its ``errors="skip"`` clone (made once)."""
    if proc.errors == "skip":
        return proc
    clone = _SKIPPING.get(proc)
    if clone is None:
        clone = _SKIPPING[proc] = proc.clone(errors="skip")
    return clone


def _row(sample: "Sample", dtype: str, layout: str, row_shape: list[int], orig_hw: Sequence[int],
         *, error: str | None = None, grid: list[int] | None = None,
         seqlens: list[int] | None = None, num_tokens: int = 0, placeholder: str = "",
         pixel_values: bytes = b"") -> dict:
    seqlens = list(seqlens or [])
    return {"id": sample.id, "source": sample.source, "status": "ok" if error is None else "error",
            "error": error, "dtype": dtype, "layout": layout, "grid_thw": list(grid or []),
            "seqlens": seqlens, "num_patches": sum(seqlens), "num_tokens": int(num_tokens),
            "placeholder": placeholder, "row_shape": list(row_shape),
            "orig_hw": [int(orig_hw[0]), int(orig_hw[1])], "pixel_values": pixel_values}


def _host_words(pv: "torch.Tensor", dtype: str) -> memoryview:
    """``pv`` (any device) as a flat byte view of little-endian C-order words (one host copy
    at most)."""
    import numpy as np  # deferred: numpy and torch are heavy; importing the shard schema needs neither
    import torch
    t = pv.detach().cpu().contiguous()
    if dtype == "bfloat16":
        t = t.view(torch.int16)  # the raw 2-byte words
    arr = np.ascontiguousarray(t.numpy().astype(WORDS[dtype][0], copy=False))
    return memoryview(arr.reshape(-1).view(np.uint8).data)


def process_samples(proc: "Processor", samples: Sequence["Sample"]) -> list[dict]:
    """One row (dict, keys ``ROW_COLUMNS``) per sample, in order.

    ``samples``: ``vlmprep.batch.sources.Sample`` (or anything with its fields ``id``,
    ``source``, ``data``: encoded image bytes or None, ``error``: a reader's reason).
    Bad samples (a reader error, an ImageError from the header, the plan or the decode) get
    ``status="error"`` and the reason; this never raises for a per-item cause. ``proc`` is used
    with ``errors="skip"`` semantics (a clone when it raises). The samples are processed in a
    few Processor calls (at most ~256 MiB of output or 64 images each); an unexpected
    exception in a call is narrowed down by processing its images one by one: an image that
    fails alone becomes an error row ("TypeName: message"), and the exception is re-raised
    only when every image failed (a cause that is not the images': a broken backend).

    Given 3 samples, the second with data b"not an image" -> rows[1]["status"] == "error",
    rows[1]["error"] starts "expected ..." and rows 0 and 2 hold pixels.
    """
    if getattr(proc, "row_form", "full") != "full":
        # Shards record no row form: compact rows would read back as full ones (read_shards).
        raise ValueError(f"process_samples: expected a Processor with row_form='full' (shards "
                         f"hold full rows), got row_form={proc.row_form!r}; clone it with "
                         f"row_form='full' (proc.clone(row_form='full'))")
    p = _skipping(proc)
    pipe = p.pipeline
    dtype, layout, shape = p.dtype, row_layout(pipe), row_shape_of(pipe)
    out: list[dict | None] = [None] * len(samples)
    todo = []
    for k, s in enumerate(samples):
        if s.data is None or s.error is not None:
            out[k] = _row(s, dtype, layout, shape, (0, 0),
                          error=s.error or "expected image bytes, got no data")
        else:
            todo.append(k)
    sources, plans = p.prepare([samples[k].data for k in todo])
    good = []  # (sample position, source, plan)
    for k, src, plan in zip(todo, sources, plans):
        if plan.error is not None:
            out[k] = _row(samples[k], dtype, layout, shape, plan.source_hw,
                          error=plan.error.reason)
        else:
            good.append((k, src, plan))
    row_bytes = math.prod(shape) * WORDS[dtype][1]
    order = pipe.patchify.order
    chunk: list = []
    size = 0
    failures: list[BaseException] = []
    for item in good:
        n = item[2].rows(order) * row_bytes
        if chunk and (size + n > _CHUNK_BYTES or len(chunk) >= _CHUNK_IMAGES):
            _run_chunk(p, samples, chunk, out, failures)
            chunk, size = [], 0
        chunk.append(item)
        size += n
    if chunk:
        _run_chunk(p, samples, chunk, out, failures)
    if failures and len(failures) == len(good):
        raise failures[0]
    return [r for r in out if r is not None]


def _run_chunk(p: "Processor", samples: Sequence["Sample"], chunk: list, out: list,
               failures: list[BaseException]) -> None:
    """Process ``chunk`` ((position, source, plan), ...) in one call and fill its rows."""
    try:
        batch = p.execute([src for _, src, _ in chunk],
                          [replace(plan, index=j) for j, (_, _, plan) in enumerate(chunk)])
    except Exception as e:  # noqa: BLE001 (narrowed to the image, or re-raised: see the caller)
        if len(chunk) > 1:
            for item in chunk:
                _run_chunk(p, samples, [item], out, failures)
            return
        k, _, plan = chunk[0]
        failures.append(e)
        pipe = p.pipeline
        out[k] = _row(samples[k], p.dtype, row_layout(pipe), row_shape_of(pipe), plan.source_hw,
                      error=f"{type(e).__name__}: {e}")
        return
    dtype = p.dtype
    shape = list(batch.pixel_values.shape[1:])
    words = _host_words(batch.pixel_values, dtype)
    row_bytes = math.prod(shape) * WORDS[dtype][1]
    grids = batch.grid_thw.tolist()
    seq = 0
    byte = 0
    for j, (k, _, plan) in enumerate(chunk):
        if j in batch.errors:
            out[k] = _row(samples[k], dtype, batch.layout, shape, plan.source_hw,
                          error=batch.errors[j].reason)
            continue
        n_seq = len(plan.grid_thw)
        lens = batch.seqlens[seq:seq + n_seq]
        grid = [int(v) for g in grids[seq:seq + n_seq] for v in g]
        n_bytes = (sum(lens) if batch.layout == "patches" else n_seq) * row_bytes
        out[k] = _row(samples[k], dtype, batch.layout, shape, plan.source_hw, grid=grid,
                      seqlens=lens, num_tokens=batch.num_tokens[j],
                      placeholder=batch.placeholders[j],
                      pixel_values=bytes(words[byte:byte + n_bytes]))
        seq += n_seq
        byte += n_bytes


def _bad(what: str, got: str, fix: str) -> ValueError:
    return ValueError(f"batch_from_rows: {what} expected {got}; {fix}")


def batch_from_rows(rows: Sequence[dict], pipeline: "Pipeline") -> "PackedBatch":
    """The PackedBatch of ``rows`` (as ``process_samples`` made them), on the CPU.

    Bit-exact with what ``Processor(pipeline, dtype=..., errors="skip")`` returns for the same
    images: ``pixel_values`` (dtype from the rows), ``cu_seqlens``, ``seqlens``, ``grid_thw``,
    ``image_index``, ``num_tokens``, ``placeholders``, ``layout``; an error row is a skipped
    image (``errors[i]``: an ImageError with the row's reason and source, no rows, 0 tokens).
    ``image_plans`` are re-planned from ``orig_hw`` with ``pipeline`` (header-only geometry),
    so ``to_hf()`` works for every family; a row whose grid or token count disagrees with that
    plan was made by another pipeline: ValueError (pass the pipeline of the job's manifest).
    """
    import numpy as np  # deferred: numpy and torch are heavy; importing the shard schema needs neither
    import torch
    if not rows:
        raise _bad("rows:", "at least one row", "pass the rows of one or more samples")
    missing = [c for c in ROW_COLUMNS if c not in rows[0]]
    if missing:
        raise _bad("rows[0]:", f"the keys {list(ROW_COLUMNS)}, got none for {missing}",
                   "pass rows made by vlmprep.batch.rows.process_samples (or read from a shard)")
    dtypes = sorted({r["dtype"] for r in rows})
    if len(dtypes) != 1 or dtypes[0] not in WORDS:
        raise _bad("dtype:", f"one of {list(WORDS)} for every row, got {dtypes}",
                   "rebuild one batch per dtype")
    dtype = dtypes[0]
    layout = row_layout(pipeline)
    shapes = sorted({tuple(r["row_shape"]) for r in rows})
    layouts = sorted({r["layout"] for r in rows})
    if layouts != [layout]:
        raise _bad("layout:", f"{layout!r} (the pipeline's) for every row, got {layouts}",
                   "pass the pipeline that made the rows")
    if len(shapes) != 1:
        raise _bad("row_shape:", f"one shape for every row, got {[list(s) for s in shapes]}",
                   "rebuild one batch per job")
    shape = list(shapes[0])
    if shape != row_shape_of(pipeline):
        raise _bad("row_shape:", f"{row_shape_of(pipeline)} (the pipeline's), got {shape}",
                   "pass the pipeline that made the rows")
    word, itemsize = WORDS[dtype]
    row_bytes = math.prod(shape) * itemsize
    seqlens: list[int] = []
    grids: list[int] = []
    index: list[int] = []
    num_tokens: list[int] = []
    placeholders: list[str] = []
    errors: dict[int, ImageError] = {}
    plans: list[ImagePlan] = []
    payload: list[bytes] = []
    for i, r in enumerate(rows):
        hw = (int(r["orig_hw"][0]), int(r["orig_hw"][1]))
        if r["status"] != "ok":
            err = ImageError(str(r["error"]), index=i, source=r["source"])
            errors[i] = err
            num_tokens.append(0)
            placeholders.append("")
            plans.append(ImagePlan(index=i, source_hw=hw, error=err))
            continue
        lens, grid = [int(n) for n in r["seqlens"]], [int(v) for v in r["grid_thw"]]
        if len(grid) != 3 * len(lens) or any(
                lens[s] != grid[3 * s] * grid[3 * s + 1] * grid[3 * s + 2] for s in range(len(lens))):
            raise _bad(f"row {i} ({r['id']!r}):", f"3 grid ints per sequence with t*h*w == its "
                       f"seqlen, got grid_thw {grid} and seqlens {lens}",
                       "the row is damaged; rerun the job for this sample")
        n_rows = sum(lens) if layout == "patches" else len(lens)
        data = r["pixel_values"]
        if len(data) != n_rows * row_bytes:
            raise _bad(f"row {i} ({r['id']!r}) pixel_values:",
                       f"{n_rows} rows x {shape} x {itemsize} bytes = {n_rows * row_bytes} bytes, "
                       f"got {len(data)}", "the row is damaged; rerun the job for this sample")
        try:
            plan = plan_image(pipeline, hw, i)
        except ImageError as e:
            raise _bad(f"row {i} ({r['id']!r}):", f"an image this pipeline plans, got {hw} "
                       f"(HxW) refused: {e.reason}", "pass the pipeline of the job's manifest") \
                from None
        planned = [v for g in plan.grid_thw for v in g]
        if planned != grid or plan.num_tokens != int(r["num_tokens"]):
            raise _bad(f"row {i} ({r['id']!r}):", f"grid_thw {planned} and {plan.num_tokens} "
                       f"tokens (this pipeline's plan of a {hw[0]}x{hw[1]} image), got "
                       f"{grid} and {r['num_tokens']} tokens",
                       "the rows were made by another pipeline: pass the one of the job's "
                       "manifest")
        seqlens += lens
        grids += grid
        index += [i] * len(lens)
        num_tokens.append(int(r["num_tokens"]))
        placeholders.append(str(r["placeholder"]))
        plans.append(plan)
        payload.append(data)
    buf = bytearray(b"".join(payload))  # writable: torch.from_numpy shares it without a warning
    arr = np.frombuffer(buf, dtype=word)
    if not arr.dtype.isnative:  # a big-endian host: the stored words are little-endian
        arr = arr.astype(arr.dtype.newbyteorder("="))
    pv = torch.from_numpy(arr)
    if dtype == "bfloat16":
        pv = pv.view(torch.bfloat16)
    pv = pv.reshape(len(buf) // row_bytes, *shape)
    cu = [0]
    for n in seqlens:
        cu.append(cu[-1] + n)
    return PackedBatch(
        pixel_values=pv, cu_seqlens=torch.tensor(cu, dtype=torch.int32), seqlens=seqlens,
        max_seqlen=max(seqlens, default=0),
        grid_thw=torch.tensor(grids, dtype=torch.int64).reshape(len(seqlens), 3),
        image_index=torch.tensor(index, dtype=torch.int64), num_tokens=num_tokens,
        errors=errors, layout=layout, pipeline=pipeline, placeholders=placeholders,
        image_plans=plans)
