"""Rows: one processed image or video as plain values (the shard schema, ``schema.py``), and
back to a PackedBatch.

``process_samples`` is the one processing core of a batch job: the local engine's workers and
the Ray actors both call it, so both give the same rows (and the same shard bytes). Images are
processed here, in a few Processor calls; a video sample (``video_rows.is_video``) goes through
``video_rows.video_row``, one Processor call per video (a clip decodes for seconds; its output
can be hundreds of MB).

``batch_from_rows(rows, pipeline)`` is the exact inverse: the PackedBatch that ``Processor``
(``errors="skip"``) returns for the same images, bit for bit, ``image_plans`` included (re-planned
from ``orig_hw``, which is all the geometry needs), so ``to_hf()`` works for every family; the
video rows' ``"video"`` PackedBatch in its ``videos`` (as ``proc(images, videos=...)`` gives it).
"""
from __future__ import annotations

import math
import weakref
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import ImageError
from ..pack import PackedBatch
from ..plan import ImagePlan, plan_image
from .document_rows import document_rows, is_document
from .packed_rows import rows_of_batch
from .schema import (
    MODALITIES,
    ROW_COLUMNS,
    WORDS,
    make_row,
    row_layout,
    row_shape_of,
    with_defaults,
)
from .video_rows import is_video, video_batch, video_row

if TYPE_CHECKING:
    import torch

    from ..pipeline import Pipeline
    from ..processor import Processor
    from .sources import Sample

# ROW_COLUMNS, WORDS, row_layout and row_shape_of live in .schema; importable from here as before
__all__ = ["ROW_COLUMNS", "WORDS", "process_samples", "batch_from_rows", "row_layout",
           "row_shape_of"]

# Bounds of one Processor call inside process_samples: the packed output of a call is held once
# in memory (a 1080p Qwen image is ~50 MB in float32), so a shard of 1000 images is processed in
# pieces. The split never changes a pixel (one image's rows do not depend on its batch).
_CHUNK_BYTES = 256 << 20
_CHUNK_IMAGES = 64

_SKIPPING: "weakref.WeakKeyDictionary[Processor, Processor]" = weakref.WeakKeyDictionary()


def _skipping(proc: "Processor") -> "Processor":
    """``proc`` itself when it skips bad images, else its ``errors="skip"`` clone (made once)."""
    if proc.errors == "skip":
        return proc
    clone = _SKIPPING.get(proc)
    if clone is None:
        clone = _SKIPPING[proc] = proc.clone(errors="skip")
    return clone


def process_samples(proc: "Processor", samples: Sequence["Sample"], *, fps: float | None = None,
                    num_frames: int | None = None,
                    document: dict[str, Any] | None = None) -> list[dict]:
    """One row (dict, keys ``ROW_COLUMNS``) per sample, in order; a PDF sample
    (``document_rows.is_document``) is one row per page, in page order
    (``document_rows.document_rows``).

    ``samples``: ``vlmprep.batch.sources.Sample`` (or anything with its fields ``id``,
    ``source``, ``data``: encoded image or video bytes or None, ``error``: a reader's reason;
    ``video``, optional: the reader's name says video). A video sample (``video_rows.is_video``:
    that, or bytes that start as an MP4 / MOV / MKV / WebM / AVI container) is one row of
    ``modality="video"``: what ``proc(videos=[Video(data, fps=fps, num_frames=num_frames)])``
    gives (``fps`` / ``num_frames`` None: the Processor's video options decide). A PDF sample is
    ``vlmprep.Document(data, **document)`` (``document``: its keywords, e.g. ``{"dpi": 150}``).
    Bad samples (a reader error, an ImageError from the header, the plan or the decode) get
    ``status="error"`` and the reason; this never raises for a per-item cause. ``proc`` is used
    with ``errors="skip"`` semantics (a clone when it raises). The images are processed in a
    few Processor calls (at most ~256 MiB of output or 64 images each), each video in its own;
    an unexpected exception in a call is narrowed down by processing its images one by one: an
    image or video that fails alone becomes an error row ("TypeName: message"), and the
    exception is re-raised only when every sample failed (a cause that is not the samples': a
    broken backend).

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
    out: list = [None] * len(samples)  # a row, or a document's rows (a list)
    todo: list[int] = []
    videos: list[int] = []
    docs: list[int] = []
    for k, s in enumerate(samples):
        video = is_video(s)
        if s.data is None or s.error is not None:
            what = "video" if video else "image"
            out[k] = make_row(s, dtype, layout, shape, (0, 0), modality=what,
                              error=s.error or f"expected {what} bytes, got no data")
        else:
            (videos if video else docs if is_document(s) else todo).append(k)
    failures: list[BaseException] = []
    for k in videos:
        out[k], failed = video_row(p, samples[k], fps, num_frames)
        if failed is not None:
            failures.append(failed)
    for k in docs:
        out[k], failed = document_rows(p, samples[k], document or {})
        if failed is not None:
            failures.append(failed)
    good = _image_rows(p, samples, todo, out, failures)
    if failures and len(failures) == good + len(videos) + len(docs):
        raise failures[0]
    return [r for x in out for r in (x if isinstance(x, list) else [x])]


def _image_rows(p: "Processor", samples: Sequence["Sample"], todo: list[int], out: list,
                failures: list[BaseException]) -> int:
    """Fill the rows of the image samples ``todo`` (positions) in ``out``; returns how many
    were planned good (and so processed)."""
    pipe = p.pipeline
    dtype, layout, shape = p.dtype, row_layout(pipe), row_shape_of(pipe)
    sources, plans = p.prepare([samples[k].data for k in todo])
    good = []  # (sample position, source, plan)
    for k, src, plan in zip(todo, sources, plans):
        if plan.error is not None:
            out[k] = make_row(samples[k], dtype, layout, shape, plan.source_hw,
                              error=plan.error.reason)
        else:
            good.append((k, src, plan))
    row_bytes = math.prod(shape) * WORDS[dtype][1]
    order = pipe.patchify.order
    chunk: list = []
    size = 0
    for item in good:
        n = item[2].rows(order) * row_bytes
        if chunk and (size + n > _CHUNK_BYTES or len(chunk) >= _CHUNK_IMAGES):
            _run_chunk(p, samples, chunk, out, failures)
            chunk, size = [], 0
        chunk.append(item)
        size += n
    if chunk:
        _run_chunk(p, samples, chunk, out, failures)
    return len(good)


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
        out[k] = make_row(samples[k], p.dtype, row_layout(pipe), row_shape_of(pipe), plan.source_hw,
                      error=f"{type(e).__name__}: {e}")
        return
    rows = rows_of_batch(batch, [samples[k] for k, _, _ in chunk],
                         [plan for _, _, plan in chunk], p.dtype)
    for (k, _, _), row in zip(chunk, rows, strict=True):
        out[k] = row


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
    Video rows (``modality="video"``) are the batch's ``videos``, in their order: the
    ``"video"`` PackedBatch ``Processor(...)(images, videos=...)`` gives, ``video_plans``
    rebuilt from their ``video`` column; rows of videos only give an empty image batch with
    them, as ``proc([], videos=...)`` does.
    """
    if not rows:
        raise _bad("rows:", "at least one row", "pass the rows of one or more samples")
    missing = [c for c in ROW_COLUMNS if c not in with_defaults(rows[0])]
    if missing:
        raise _bad("rows[0]:", f"the keys {list(ROW_COLUMNS)}, got none for {missing}",
                   "pass rows made by vlmprep.batch.rows.process_samples (or read from a shard)")
    rows = [with_defaults(r) for r in rows]  # a schema "1" shard's rows are images
    modalities = sorted({str(r["modality"]) for r in rows} - set(MODALITIES))
    if modalities:
        raise _bad("modality:", f"one of {list(MODALITIES)} for every row, got {modalities}",
                   "the rows are damaged; rerun the job")
    dtype, shape = _shared(rows, pipeline)
    images = [r for r in rows if r["modality"] == "image"]
    videos = [r for r in rows if r["modality"] == "video"]
    batch = _image_batch(images, pipeline, dtype, shape)
    if videos:
        batch = replace(batch, videos=video_batch(videos, pipeline,
                                                  _pixels(videos, row_layout(pipeline), dtype, shape)))
    return batch


def _shared(rows: Sequence[dict], pipeline: "Pipeline") -> tuple[str, list[int]]:
    """(dtype, row_shape) every row shares, checked against ``pipeline``."""
    dtypes = sorted({r["dtype"] for r in rows})
    if len(dtypes) != 1 or dtypes[0] not in WORDS:
        raise _bad("dtype:", f"one of {list(WORDS)} for every row, got {dtypes}",
                   "rebuild one batch per dtype")
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
    return dtypes[0], shape


def _checked_rows(r: dict, i: int, layout: str, shape: list[int], itemsize: int
                  ) -> tuple[list[int], list[int]]:
    """(seqlens, flat grid) of an ok row whose grid, seqlens and pixel bytes agree."""
    lens, grid = [int(n) for n in r["seqlens"]], [int(v) for v in r["grid_thw"]]
    if len(grid) != 3 * len(lens) or any(
            lens[s] != grid[3 * s] * grid[3 * s + 1] * grid[3 * s + 2] for s in range(len(lens))):
        raise _bad(f"row {i} ({r['id']!r}):", f"3 grid ints per sequence with t*h*w == its "
                   f"seqlen, got grid_thw {grid} and seqlens {lens}",
                   "the row is damaged; rerun the job for this sample")
    n_rows = sum(lens) if layout == "patches" else len(lens)
    row_bytes = math.prod(shape) * itemsize
    if len(r["pixel_values"]) != n_rows * row_bytes:
        raise _bad(f"row {i} ({r['id']!r}) pixel_values:",
                   f"{n_rows} rows x {shape} x {itemsize} bytes = {n_rows * row_bytes} bytes, "
                   f"got {len(r['pixel_values'])}", "the row is damaged; rerun the job for this "
                   "sample")
    return lens, grid


def _pixels(rows: Sequence[dict], layout: str, dtype: str, shape: list[int]) -> "torch.Tensor":
    """The ok rows' ``pixel_values`` (sizes checked), concatenated: ``(rows, *shape)``."""
    import numpy as np  # deferred: numpy and torch are heavy; importing the shard schema needs neither
    import torch
    word, itemsize = WORDS[dtype]
    payload = []
    for i, r in enumerate(rows):
        if r["status"] == "ok":
            _checked_rows(r, i, layout, shape, itemsize)
            payload.append(r["pixel_values"])
    buf = bytearray(b"".join(payload))  # writable: torch.from_numpy shares it without a warning
    arr = np.frombuffer(buf, dtype=word)
    if not arr.dtype.isnative:  # a big-endian host: the stored words are little-endian
        arr = arr.astype(arr.dtype.newbyteorder("="))
    pv = torch.from_numpy(arr)
    if dtype == "bfloat16":
        pv = pv.view(torch.bfloat16)
    return pv.reshape(len(buf) // (math.prod(shape) * itemsize), *shape)


def _image_batch(rows: Sequence[dict], pipeline: "Pipeline", dtype: str, shape: list[int]
                 ) -> "PackedBatch":
    """The image rows' PackedBatch (empty for no rows), their plans re-planned and checked."""
    import torch
    layout = row_layout(pipeline)
    pv = _pixels(rows, layout, dtype, shape)
    seqlens: list[int] = []
    grids: list[int] = []
    index: list[int] = []
    num_tokens: list[int] = []
    placeholders: list[str] = []
    errors: dict[int, ImageError] = {}
    plans: list[ImagePlan] = []
    for i, r in enumerate(rows):
        hw = (int(r["orig_hw"][0]), int(r["orig_hw"][1]))
        if r["status"] != "ok":
            err = ImageError(str(r["error"]), index=i, source=r["source"])
            errors[i] = err
            num_tokens.append(0)
            placeholders.append("")
            plans.append(ImagePlan(index=i, source_hw=hw, error=err))
            continue
        lens, grid = _checked_rows(r, i, layout, shape, WORDS[dtype][1])
        plan = _replanned(r, i, hw, grid, pipeline)
        seqlens += lens
        grids += grid
        index += [i] * len(lens)
        num_tokens.append(int(r["num_tokens"]))
        placeholders.append(str(r["placeholder"]))
        plans.append(plan)
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


def _replanned(r: dict, i: int, hw: tuple[int, int], grid: list[int], pipeline: "Pipeline"
               ) -> ImagePlan:
    """The image's plan from its ``orig_hw``, which must give the row's grid and tokens."""
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
    return plan
