"""The torch backend on CUDA as a GPU pipeline: a batch runs stage by stage, not image by image.

``plan_batch`` decides, in this one place, how each image of a batch runs; ``run_batch`` runs
the plan. Image by image (``base.Backend._map``) the GPU would wait on one CPU thread's decode
of each image, on a pageable copy, on small uploads, and get one kernel launch per image.

Stages, run over consecutive chunks of the batch of at most ``CHUNK_BYTES`` decoded pixels
each, cut shorter where the process's memory budget cannot hold a whole chunk's planned host
bytes at once (``budget.held_chunks``). All device work is issued from the calling thread, on
its current stream (the Processor's, e.g. a Batcher worker's own stream):

| stage  | what runs                                                   | per image, decided by      |
|--------|-------------------------------------------------------------|----------------------------|
| decode | `DEVICE_JPEG`: one batched nvJPEG call                      | ``plan_batch`` (header),   |
|        | (``torchvision.io.decode_jpeg(list, device=cuda)``) for the | then ``device_jpeg`` (the  |
|        | JPEGs whose device decode is Pillow's pixels; `HOST`: the   | frame: sampling, coding)   |
|        | decode lowering's decoder (``io.decode``) on the image      |                            |
|        | threads, written straight into one pinned block            |                            |
|        | (``staging.Staging``) that goes up in one async copy;       |                            |
|        | `ON_DEVICE`: a tensor already on the device, as it is       |                            |
| size   | the plan's canvases level by level; the resizes of one      | ``resize_groups``: equal   |
|        | level grouped by (input shape, size, filter): one           | input shape, output size   |
|        | ``resize_like_pil`` call per group on an ``(N, C, H, W)``   | and filter; a plan with a  |
|        | stack; crops are views; padding from a fill tensor made     | ``Canvas.normalized``      |
|        | once per (fill, device) (``ops.fill_tensor``)               | canvas: per image (the     |
|        |                                                             | sizing lowering)           |
| write  | `ROWS`: one ``kernels.normalize_patchify`` call for every   | ``fusion.choose(most=      |
|        | tile of every such image (tiles not in pixel-stride-3       | ROWS)``, as image by image |
|        | memory made so in one stacked copy per tile shape; a call   |                            |
|        | per ``KERNEL_IMAGES`` tiles); `OP_BY_OP`: the lowerings,    |                            |
|        | per image                                                   |                            |

`DEVICE_JPEG` needs: encoded bytes of an 8-bit baseline (SOF0/SOF1, Huffman) RGB / gray JPEG,
EXIF orientation 1, no APP14 Adobe segment (its colour transform is libjpeg's to read), and a
chroma sampling in ``DEVICE_SAMPLINGS``: one component, or three with equal sampling (4:4:4), where no
chroma is upsampled. torchvision's nvJPEG decoder upsamples subsampled chroma (4:2:0, 4:2:2)
nearest-neighbour, Pillow's libjpeg "fancy" (interpolating), so those stay on the host until a
GPU run measures otherwise (bench/gpu_check.py). Progressive, arithmetic-coded, 12-bit, CMYK /
YCCK and rotated JPEGs, and every other format, decode on the host threads as before. A JPEG the
device decoder fails on is decoded on the host, which judges its data (so its ImageError is
the one image by image gives). What the device decoder cannot judge: damage inside the
compressed data that libjpeg reports as a warning (an ImageError on the host) may decode there.

Same bits as image by image: the decoders give the same pixels (4:4:4 / gray: no upsampling;
checked on a GPU by bench/gpu_check.py), a grouped resize is the per-image resize of each member
(one-dimensional passes, each image its own), and the rows kernel writes each image as alone.
``forced()`` runs this path on the CPU too (tests: bit-identical to image by image there).
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
import warnings
from concurrent.futures import Future, wait
from functools import partial
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np
import torch

from ... import kernels
from ...budget import held_chunks, image_bytes
from ...errors import ImageError
from ...io import decode as _io
from ...io.probe import jpeg_frame
from ...plan.grid import row_length
from .. import fusion
from ..base import cut_tiles, image_pool
from ..registry import SIZING, get_lowering
from . import ops as _ops
from .resize import resize_like_pil
from .staging import Staging

if TYPE_CHECKING:
    from ..base import Backend
    from ..context import Context

__all__ = ["DEVICE_JPEG", "HOST", "ON_DEVICE", "DEVICE_SAMPLINGS", "BatchPlan", "batched",
           "forced", "staging", "plan_batch", "device_jpeg", "device_decode", "resize_groups",
           "resize_group", "chunks", "CHUNK_BYTES", "KERNEL_IMAGES",
           "run_batch"]

DEVICE_JPEG = "device_jpeg"
HOST = "host"
ON_DEVICE = "on_device"

#: Chroma samplings decoded on the device: ``(h, v)`` factors of every component equal (one
#: component, or 4:4:4): nvJPEG upsamples no chroma there. Add "subsampled" once a GPU run
#: shows nvJPEG's 4:2:0 / 4:2:2 within the bound bench/gpu_check.py sets (it is nearest-
#: neighbour in torchvision's decoder today, where Pillow interpolates).
DEVICE_SAMPLINGS = ("gray", "4:4:4")

#: Decoded bytes (3 * H * W per image) one pass of the stages holds at most: a batch larger than
#: this runs in consecutive chunks, so the device holds a chunk's images, not the whole batch's,
#: and the staging block (at most ``staging.STAGING_LIMIT``) fits a chunk.
CHUNK_BYTES = 512 << 20

#: Tiles one rows kernel call takes at most: the CUDA launch's grid has one y-block per image
#: (65535 at most, csrc/torch/ops.cpp); more tiles take more calls.
KERNEL_IMAGES = 65535

_BASELINE = (0xC0, 0xC1)  # Huffman, sequential: what the device decoder takes here
# An APP14 "Adobe" segment (marker, 2-byte length, tag): its transform flag sets the colour space
# libjpeg decodes to. Not the word in EXIF / XMP text ("Adobe Photoshop"): those stay candidates.
_ADOBE_APP14 = re.compile(rb"\xff\xee..Adobe", re.DOTALL)
_FORCED = [False]
_NO_DEVICE_JPEG: dict[str, str] = {}  # device -> why its JPEG decoder is unusable (seen once)


def batched(device: str) -> bool:
    """Whether a batch on ``device`` runs stage by stage (here): cuda, or any under ``forced``."""
    return device.startswith("cuda") or _FORCED[0]


@contextlib.contextmanager
def forced() -> Iterator[None]:
    """Within the block the torch backend runs every batch here, on the CPU too (tests and
    benches compare it with image by image there)."""
    old, _FORCED[0] = _FORCED[0], True
    try:
        yield
    finally:
        _FORCED[0] = old


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """How each job of a batch runs (``plan_batch``).

    Fields:
        decoders: per job `DEVICE_JPEG` (a candidate: ``device_jpeg`` checks its frame when its
            bytes are read), `HOST` or `ON_DEVICE`.
        grouped_sizing: the backend's sizing lowering is the torch one (``ops.resize`` and
            ``ops.cut``), so canvases are built here with grouped resizes; else per image.
        own_decode: the backend's decode lowering is the torch one (else per image, on this
            thread).
        sized_alone: per job, its canvases are built by the sizing lowering, per image: not
            ``grouped_sizing``, or its plan has a ``Canvas.normalized`` canvas (which
            ``fusion.NORMALIZED_CANVAS`` normalizes inside that lowering).
    """

    decoders: tuple[str, ...]
    grouped_sizing: bool
    own_decode: bool
    sized_alone: tuple[bool, ...] = ()


def plan_batch(backend: "Backend", jobs: Sequence["Context"]) -> BatchPlan:
    """The one place a batch's path is decided (see the module's table)."""
    own_decode = backend.lowerings[0] is _ops.decode
    sizing = backend.ops[1:backend.tail]
    torch_sizing = get_lowering("torch", SIZING)
    grouped = bool(sizing) and all(
        fn is torch_sizing or op.name == "center_crop"
        for op, fn in zip(sizing, backend.lowerings[1:backend.tail]))
    grouped = grouped and sum(1 for op in sizing if op.sizing) == 1
    decoders = []
    for ctx in jobs:
        src = ctx.source
        if src.kind == "tensor" and src.item.device.type != "cpu":
            decoders.append(ON_DEVICE)
        elif own_decode and _jpeg_candidate(ctx, backend.device):
            decoders.append(DEVICE_JPEG)
        else:
            decoders.append(HOST)
    alone = tuple(not grouped or any(c.normalized for c in ctx.plan.canvases) for ctx in jobs)
    return BatchPlan(tuple(decoders), grouped, own_decode, alone)


def _jpeg_candidate(ctx: "Context", device: str) -> bool:
    """From the probe's header: an 8-bit baseline RGB / gray JPEG with no EXIF rotation, on a
    device whose JPEG decoder has not failed to load."""
    h = ctx.source.header
    return (ctx.source.kind == "encoded" and h is not None and h.format == "jpeg"
            and h.bit_depth == 8 and h.mode_hint in ("RGB", "L") and h.orientation == 1
            and not h.progressive and device not in _NO_DEVICE_JPEG)


def device_jpeg(data: bytes) -> bool:
    """From the frame (``io.probe.jpeg_frame``, already walked by ``io.decode.encoded_bytes``):
    baseline Huffman coding, a sampling in ``DEVICE_SAMPLINGS``, no APP14 Adobe segment."""
    marker, _h, _w, sampling, scan = jpeg_frame(data)
    if marker not in _BASELINE or _ADOBE_APP14.search(data, 0, scan):
        return False
    if len(sampling) == 1:
        return "gray" in DEVICE_SAMPLINGS
    if len(sampling) == 3 and len(set(sampling)) == 1:
        return "4:4:4" in DEVICE_SAMPLINGS
    return "subsampled" in DEVICE_SAMPLINGS


def resize_groups(keys: Sequence[Any]) -> list[list[int]]:
    """Indices of equal keys, grouped, in order of first appearance:
    ``[a, b, a, c, b] -> [[0, 2], [1, 4], [3]]``."""
    groups: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    return list(groups.values())


def resize_group(xs: list[torch.Tensor], hw: tuple[int, int], interpolation: str
                 ) -> list[torch.Tensor]:
    """uint8 ``(C, H, W)`` images of one shape -> each resized to ``hw`` as ``ops.resize``
    resizes it: one ``resize_like_pil`` call on their ``(N, C, H, W)`` stack where that is the
    resize, else one call each; an image already of size ``hw`` is itself."""
    if tuple(xs[0].shape[-2:]) == tuple(hw):
        return list(xs)
    if len(xs) == 1 or _ops.compiled_resize(xs[0].device, interpolation):
        return [_ops.resize(x, hw, interpolation) for x in xs]
    return list(resize_like_pil(torch.stack(xs), hw, interpolation).unbind(0))


# -- the run ----------------------------------------------------------------------------------

_STAGING: dict[str, Staging] = {}
_STAGING_LOCK = threading.Lock()


def staging(device: str) -> Staging:
    """``device``'s staging block, one per process and device, made on first use (page-locked
    for cuda); batches take turns on it (``Staging.batch_lock``)."""
    key = str(torch.device(device))
    with _STAGING_LOCK:
        st = _STAGING.get(key)
        if st is None:
            st = _STAGING[key] = Staging(key, pin=key.startswith("cuda"))
        return st


def chunks(sizes: Sequence[int], limit: int) -> list[range]:
    """Consecutive runs of jobs whose sizes add up to at most ``limit`` (a job larger than
    ``limit`` alone): ``chunks([4, 4, 4, 9, 1], 8) -> [range(0, 2), range(2, 3), range(3, 4),
    range(4, 5)]``."""
    out: list[range] = []
    start, total = 0, 0
    for i, n in enumerate(sizes):
        if i > start and total + n > limit:
            out.append(range(start, i))
            start, total = i, 0
        total += n
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out


def run_batch(backend: "Backend", jobs: list["Context"], out: torch.Tensor
              ) -> list[ImageError | None]:
    """Run ``jobs`` (each ``ctx.dest`` a slice of ``out``) stage by stage, ``CHUNK_BYTES`` of
    decoded pixels at a time; per job its ImageError or None (a failed image's rows are left
    unwritten, as image by image)."""
    errors: list[ImageError | None] = [None] * len(jobs)
    at = {id(c): i for i, c in enumerate(jobs)}

    def refuse(ctx: "Context", e: ImageError) -> None:
        errors[at[id(ctx)]] = e
    sizes = [3 * c.source.hw[0] * c.source.hw[1] for c in jobs]
    for part in chunks(sizes, CHUNK_BYTES):
        # the images of a chunk hold their planned host bytes from the process's memory budget
        # while it runs (the chunk is cut shorter when they do not all fit at once)
        for some in held_chunks(jobs[part.start:part.stop], len(part),
                                lambda c: image_bytes(c.source, c.plan), refuse):
            plan = plan_batch(backend, some)
            errs: list[ImageError | None] = [None] * len(some)
            images = _decode_batch(backend, some, plan, errs)
            tiles = _size_batch(backend, some, plan, images, errs)
            del images
            _write_batch(backend, some, tiles, errs, out)
            for c, e in zip(some, errs):
                errors[at[id(c)]] = e
    return errors


def _decode_batch(backend: "Backend", jobs: list["Context"], plan: BatchPlan,
                  errors: list[ImageError | None]) -> list[torch.Tensor | None]:
    """Every job's image as uint8 ``(3, H, W)`` on the device (None where it failed)."""
    device = torch.device(backend.device)
    n = len(jobs)
    images: list[torch.Tensor | None] = [None] * n
    if not plan.own_decode:
        for i, ctx in enumerate(jobs):
            images[i], errors[i] = backend.guarded(ctx, partial(backend.decode, ctx))
        return images
    st = staging(backend.device)
    with st.batch_lock:
        st.begin(sum(3 * c.source.hw[0] * c.source.hw[1] for c, d in zip(jobs, plan.decoders)
                          if d != ON_DEVICE))
        # slot[i]: ("device", bytes) | ("staged", offset) | ("own", uint8 (h, w, 3) array)
        slots: list[Any] = [None] * n

        def prepare(i: int) -> None:
            ctx = jobs[i]
            with kernels.local_threads(1):
                slots[i], errors[i] = backend.guarded(
                    ctx, partial(_prepare, backend, ctx, plan.decoders[i], st))

        order = ([i for i in range(n) if plan.decoders[i] == DEVICE_JPEG]
                 + [i for i in range(n) if plan.decoders[i] == HOST])
        for i in range(n):
            if plan.decoders[i] == ON_DEVICE:
                images[i], errors[i] = backend.guarded(
                    jobs[i], partial(jobs[i].source.item.to, device))
        workers = min(kernels.get_num_threads(), len(order))
        futures: dict[int, Future] = {}
        if workers > 1:
            pool = image_pool(kernels.get_num_threads())
            futures = {i: pool.submit(prepare, i) for i in order}
        else:
            for i in order:
                prepare(i)
        try:
            # The device decodes while the host threads still decode theirs.
            device_ids = [i for i in order if plan.decoders[i] == DEVICE_JPEG]
            for i in device_ids:
                if i in futures:
                    futures[i].result()
            device_ids = [i for i in device_ids if errors[i] is None and slots[i][0] == "device"]
            decoded = device_decode([slots[i][1] for i in device_ids], device)
            for i, img in zip(device_ids, decoded):
                if img is not None and tuple(img.shape[-2:]) == tuple(jobs[i].source.hw):
                    images[i] = img
                    continue
                # the device declined it: the host decodes it and judges its data
                slots[i], errors[i] = backend.guarded(
                    jobs[i], partial(_host, backend, _with_bytes(jobs[i], slots[i][1]), st))
            for f in futures.values():
                f.result()
        finally:  # no decode thread may still write into the block once it is released
            for f in futures.values():
                f.cancel()
            wait(list(futures.values()))
        try:
            dev = st.upload()
        except Exception:  # noqa: BLE001 (no room for the whole block: image by image below)
            dev = None
        for i, ctx in enumerate(jobs):
            slot = slots[i]
            if errors[i] is not None or slot is None or slot[0] == "device":
                continue
            h, w = ctx.source.hw
            if slot[0] == "staged" and dev is not None:
                images[i] = dev[slot[1]:slot[1] + 3 * h * w].view(h, w, 3).permute(2, 0, 1)
                continue
            # did not fit the block (or the block's upload failed): from its own memory
            hwc = (st.host_view(slot[1], (h, w, 3)) if slot[0] == "staged"
                   else torch.from_numpy(np.require(slot[1], requirements="W")))
            images[i], errors[i] = backend.guarded(ctx, partial(_upload_one, hwc, device))
    return images


def _upload_one(hwc: torch.Tensor, device: torch.device) -> torch.Tensor:
    """uint8 ``(h, w, 3)`` host image -> ``(3, h, w)`` on ``device`` (a synchronous copy: its
    memory may be reused as soon as this returns)."""
    return hwc.to(device, copy=True).permute(2, 0, 1)


def _with_bytes(ctx: "Context", data: bytes) -> "Context":
    """``ctx`` whose source holds ``data`` (its bytes, already read and checked): decoding it
    again reads no file."""
    return dataclasses.replace(ctx, source=dataclasses.replace(ctx.source, item=data))


def _prepare(backend: "Backend", ctx: "Context", decoder: str, st: Staging) -> tuple:
    """On an image thread: a `DEVICE_JPEG` candidate's bytes, read and checked (``("device",
    bytes)``), or, when its frame is not one the device decodes, its host decode; a `HOST`
    image's host decode."""
    if decoder == DEVICE_JPEG:
        data = _io.encoded_bytes(ctx.source, backend.decode_op)
        if device_jpeg(data):
            return ("device", data)
        ctx = _with_bytes(ctx, data)
    return _host(backend, ctx, st)


def _host(backend: "Backend", ctx: "Context", st: Staging) -> tuple:
    """The decode lowering's host decode of one image, written into the staging block
    (``("staged", offset)``), or kept in its own memory when the block is full (``("own",
    array)``)."""
    src = ctx.source
    if src.kind == "tensor":
        a = src.item.detach().permute(1, 2, 0).numpy()
    else:
        a = _io.decode(src, fast=True, op=backend.decode_op)
    off = st.reserve(a.size)
    if off is None:
        return ("own", a)
    st.put(off, a)
    return ("staged", off)


def device_decode(datas: list[bytes], device: torch.device) -> list[torch.Tensor | None]:
    """JPEG bytes -> uint8 ``(3, H, W)`` on ``device`` in one batched call
    (``torchvision.io.decode_jpeg``; nvJPEG on cuda); when the batch fails, one call each, and
    None for each that fails alone (the host decodes those)."""
    if not datas:
        return []
    try:
        with warnings.catch_warnings():  # torchvision 0.29 deprecates its image io (still here)
            warnings.simplefilter("ignore", DeprecationWarning)
            from torchvision.io import ImageReadMode, decode_jpeg
    except ImportError as e:
        _NO_DEVICE_JPEG[str(device)] = str(e)
        return [None] * len(datas)

    def run(batch: list[bytes]) -> list[torch.Tensor]:
        ts = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in batch]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return list(decode_jpeg(ts, mode=ImageReadMode.RGB, device=device))
    try:
        return list(run(datas))
    except Exception as e:  # noqa: BLE001 (one bad file fails the call: then one by one)
        if "not compiled with nvJPEG" in str(e):  # no device decoder in this torchvision
            _NO_DEVICE_JPEG[str(device)] = str(e)
            return [None] * len(datas)
    got: list[torch.Tensor | None] = []
    for d in datas:
        try:
            got.append(run([d])[0])
        except Exception:  # noqa: BLE001 (the host decodes it and judges its data)
            got.append(None)
    return got


def _size_batch(backend: "Backend", jobs: list["Context"], plan: BatchPlan,
                images: list[torch.Tensor | None], errors: list[ImageError | None]
                ) -> list[list[torch.Tensor] | None]:
    """Every job's tiles (the plan's canvases, then its tiles, in output order)."""
    n = len(jobs)
    tiles: list[list[torch.Tensor] | None] = [None] * n
    alone = plan.sized_alone
    for i, ctx in enumerate(jobs):
        if alone[i] and errors[i] is None:
            how = fusion.choose(backend.fusion, ctx, fusion.ROWS)
            tiles[i], errors[i] = backend.guarded(
                ctx, partial(backend.size, images[i], ctx, how))
    if all(alone):
        return tiles
    interpolation = backend.fusion.interpolation
    built: list[list[torch.Tensor]] = [[] for _ in range(n)]
    depth = max((len(c.plan.canvases) for c in jobs), default=0)
    for k in range(depth):
        # this level's inputs: each canvas's source (the image or an earlier canvas), cropped
        todo: list[tuple[int, torch.Tensor, tuple[int, int], str]] = []
        for i, ctx in enumerate(jobs):
            if alone[i] or errors[i] is not None or k >= len(ctx.plan.canvases):
                continue
            c = ctx.plan.canvases[k]

            def source(i=i, c=c) -> torch.Tensor:
                img = images[i]
                x = img if c.parent < 0 else built[i][c.parent]
                assert x is not None
                return _ops.cut(x, c.box, (0, 0, 0)) if c.box is not None else x
            x, errors[i] = backend.guarded(ctx, source)
            if x is not None:
                todo.append((i, x, (c.resize_hw[0], c.resize_hw[1]), c.interpolation or interpolation))
        keys = [(tuple(x.shape), hw, interp) for _, x, hw, interp in todo]
        for group in resize_groups(keys):
            members = [todo[g] for g in group]
            got = _resize_members(backend, jobs, members, errors)
            for (i, _, _, _), r in zip(members, got):
                if errors[i] is not None or r is None:
                    continue
                c = jobs[i].plan.canvases[k]
                if c.size is None:
                    built[i].append(r)
                    continue
                box = (-c.offset[0], -c.offset[1], c.size[0], c.size[1])
                padded, errors[i] = backend.guarded(
                    jobs[i], partial(_ops.cut, r, box, c.fill))
                if padded is not None:
                    built[i].append(padded)
    for i, ctx in enumerate(jobs):
        if not alone[i] and errors[i] is None:
            tiles[i], errors[i] = backend.guarded(
                ctx, partial(cut_tiles, built[i], ctx.plan, _ops.cut))
    return tiles


def _resize_members(backend: "Backend", jobs: list["Context"],
                    members: list[tuple[int, torch.Tensor, tuple[int, int], str]],
                    errors: list[ImageError | None]) -> list[torch.Tensor | None]:
    """One resize group's results: one ``resize_group`` call; when it fails, each member alone
    (each failure that member's error)."""
    hw, interp = members[0][2], members[0][3]
    try:
        return list(resize_group([m[1] for m in members], hw, interp))
    except Exception:  # noqa: BLE001 (then one by one: a failure is that image's)
        pass
    got: list[torch.Tensor | None] = []
    for i, x, _, _ in members:
        r, errors[i] = backend.guarded(jobs[i], partial(_resize_one, x, hw, interp))
        got.append(r)
    return got


def _resize_one(x: torch.Tensor, hw: tuple[int, int], interpolation: str) -> torch.Tensor:
    return resize_group([x], hw, interpolation)[0]


def _write_batch(backend: "Backend", jobs: list["Context"],
                 tiles: list[list[torch.Tensor] | None], errors: list[ImageError | None],
                 out: torch.Tensor) -> None:
    """Every job's rows into its ``ctx.dest``: the `ROWS` images in one kernel call, the others
    by their lowerings."""
    op = backend.pipeline.patchify
    rows: list[int] = []
    for i, ctx in enumerate(jobs):
        if errors[i] is not None or tiles[i] is None:
            continue
        how = fusion.choose(backend.fusion, ctx, fusion.ROWS)
        if how == fusion.ROWS and out.is_contiguous():
            rows.append(i)
        else:
            _, errors[i] = backend.guarded(
                ctx, partial(backend.write, tiles[i], ctx, how))
    if not rows:
        return
    hwcs: list[torch.Tensor] = []
    offsets: list[int] = []
    owner: list[int] = []
    size = out.element_size()
    for i in rows:
        at = (jobs[i].dest.data_ptr() - out.data_ptr()) // size
        for t in tiles[i] or []:
            x = backend.hwc(t)
            h, w = int(x.shape[0]), int(x.shape[1])
            hwcs.append(x)
            offsets.append(at)
            owner.append(i)
            at += 3 * h * w if op.order == "tiles" else \
                (h // op.patch_size) * (w // op.patch_size) * row_length(op)
    hwcs = _pixel_stride_3(hwcs)
    lut = backend.lut(jobs[rows[0]])
    flat = out.view(-1)
    try:
        for k in range(0, len(hwcs), KERNEL_IMAGES):
            kernels.normalize_patchify(hwcs[k:k + KERNEL_IMAGES], lut, flat,
                                       offsets[k:k + KERNEL_IMAGES], op.order, op.patch_size,
                                       op.merge_size, op.temporal_patch_size)
    except Exception:  # noqa: BLE001 (then image by image: a failure is that image's)
        for i in rows:
            _, errors[i] = backend.guarded(
                jobs[i], partial(backend.write, tiles[i], jobs[i], fusion.ROWS))


def _pixel_stride_3(hwcs: list[torch.Tensor]) -> list[torch.Tensor]:
    """uint8 ``(h, w, 3)`` views -> the same pixels with pixel stride 3 (what the rows kernel
    reads): those that are not made so in one stacked copy per shape, the rest as they are."""
    out = list(hwcs)
    need = [k for k, x in enumerate(hwcs) if x.stride(2) != 1 or x.stride(1) != 3]
    for group in resize_groups([tuple(hwcs[k].shape) for k in need]):
        ks = [need[g] for g in group]
        made = torch.stack([hwcs[k] for k in ks]) if len(ks) > 1 else hwcs[ks[0]].contiguous()[None]
        for k, x in zip(ks, made.unbind(0)):
            out[k] = x
    return out

