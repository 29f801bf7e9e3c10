"""The dali executor: plan -> per-sample feeds -> the three compiled graphs -> ``out``.

Per chunk of images (at most the decode graph's batch size, ``graph.BATCH``, and as many as
the process's memory budget holds at once: ``budget.held_chunks``):
1. decode: on the GPU, the JPEGs DALI decodes exactly (nvJPEG) in one graph run; everything
   else (on the CPU: every input) through ``vlmprep.io.decode`` on the CPU, into the same batch
   (DALI's decoders are not hardened against hostile files). A failed run is bisected (or split
   at the sample DALI names) until every bad file is alone; a file DALI rejects alone gets one
   CPU decode, so an image is an error exactly when the reference backend would call it one,
   with the same message.
2. canvas: every canvas of the chunk in one flattened batch, level by level (a canvas built
   from another canvas waits for it). A ``plan.Canvas.normalized`` canvas (Phi-4's global view)
   is built in torch instead, from its parent: the normalize's lut (the tiles graph's values),
   then ``tv_exact.resize_normalized``, as the eager backends build it.
3. tiles: every tile of the chunk in one flattened batch, cut, normalized and patchified; the
   rows are copied into ``out`` (a normalized canvas's tiles, images in the ``tiles`` order,
   are copied from it directly).
A failure in 2 or 3 (not expected after validation) is isolated by bisecting the images; one
that every image of the chunk hits (out of memory, a graph or feed problem) is raised instead.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch
from nvidia.dali.tensors import TensorCPU, TensorGPU

from ...budget import held_chunks, image_bytes
from ...errors import ImageError
from ...io import decode as _io
from ..base import Backend as _Base
from ..normalize_lut import lut_tensor
from ..tv_exact import resize_normalized
from . import feeds as F
from .graph import Stages, compile_stages
from .lowerings import INTERP_IDS

if TYPE_CHECKING:
    from ...io.inputs import Source
    from ...plan import ImagePlan

__all__ = ["Backend"]

_SAMPLE = re.compile(r"sample #(\d+)")


@dataclass
class _Item:
    """One image of the batch: its source, plan and first output row."""

    src: "Source"
    plan: "ImagePlan"
    row: int
    image: Any = None  # decoded: a DALI tensor (HWC uint8 on the stage device)
    keep: list = field(default_factory=list)  # host/device buffers the DALI tensors point into


class Backend(_Base):
    """``dali``: the pipeline compiled into DALI graphs, on CPU or CUDA (see the package doc)."""

    name = "dali"

    def __init__(self, pipeline, device: str, dtype: str):
        super().__init__(pipeline, device, dtype)
        self.gpu = device.startswith("cuda")
        # "cuda" means torch's current device when the graphs are first built (not now: no
        # CUDA initialisation in the constructor, and a pickled Processor picks its own).
        self.device_id = int(device.split(":")[1]) if ":" in device else None
        self._stages: Stages | None = None
        self._lock = threading.Lock()

    # Processors pickle (loader workers, Ray): DALI graphs do not; they are rebuilt on first use.
    def __getstate__(self) -> dict:
        d = self.__dict__.copy()
        d["_stages"] = None
        d.pop("_lock", None)
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()

    @property
    def stages(self) -> Stages:
        """The compiled graphs (built on first use; batch sizes from ``graph.BATCH``)."""
        if self._stages is None:
            if self.gpu and self.device_id is None:
                self.device_id = torch.cuda.current_device()
            self._stages = compile_stages(self.ops, self.lowerings, "gpu" if self.gpu else "cpu",
                                          self.dtype, self.device_id)
        return self._stages

    # -- the contract shared with the other backends --------------------------------------------
    def run(self, sources: Sequence["Source | None"], plans: Sequence["ImagePlan"],
            out: torch.Tensor) -> dict[int, ImageError]:
        """Fill ``out`` with every good image's rows (see ``base.Backend.run``); return the
        images that failed now (their rows are left unwritten: the caller compacts)."""
        order = self.pipeline.patchify.order
        items, row = [], 0
        for src, p in zip(sources, plans):
            if p.error is not None or src is None:
                continue
            items.append(_Item(src, p, row))
            row += p.rows(order)
        errors: dict[int, ImageError] = {}
        with self._lock:
            stages = self.stages
            if self.gpu and out.device.index not in (None, self.device_id):
                raise ValueError(f"backend 'dali': expected the output on cuda:{self.device_id} "
                                 f"(where its graphs were built), got {out.device}; keep one "
                                 f"Processor per device")
            def refuse(it: _Item, e: ImageError) -> None:
                errors[it.plan.index] = e.at(index=it.plan.index, source=it.src.desc)
            # each chunk's images hold their planned host bytes from the process's memory
            # budget while the chunk runs (a chunk closes early when the next does not fit)
            for chunk in held_chunks(items, stages.decode.batch_size,
                                     lambda it: image_bytes(it.src, it.plan), refuse):
                held: list = []  # this chunk's DALI outputs: alive until the copies read them
                try:
                    self._decode(chunk, errors)
                    self._geometry([it for it in chunk if it.plan.index not in errors], out,
                                   errors, held)
                finally:
                    if self.gpu:
                        # DALI may hand a buffer back to its pool once unreferenced; make sure
                        # the copies into ``out`` that read it are done first.
                        torch.cuda.current_stream(self.device_id).synchronize()
                    held.clear()
                    for it in chunk:
                        it.image, it.keep = None, []
        return errors

    # -- decode ---------------------------------------------------------------------------------
    def _stream(self):
        return torch.cuda.current_stream(self.device_id) if self.gpu else None

    def _wrap(self, hwc: np.ndarray | torch.Tensor, it: _Item):
        """A host array / torch tensor ``(H, W, 3)`` uint8 -> a DALI tensor on the stage device."""
        if not self.gpu:
            a = np.ascontiguousarray(hwc)
            it.keep.append(a)
            return TensorCPU(a, "HWC")
        t = torch.as_tensor(hwc).to(f"cuda:{self.device_id}", non_blocking=False).contiguous()
        it.keep.append(t)
        return TensorGPU(t, "HWC")

    def _cpu_decode(self, it: _Item) -> None:
        """The CPU path (``vlmprep.io.decode``): raises ImageError like the reference backend."""
        if self.gpu and it.src.kind == "tensor":
            x = it.src.item.to(f"cuda:{self.device_id}").permute(1, 2, 0)
            it.image = self._wrap(x, it)
            return
        it.image = self._wrap(_io.decode(it.src, op=self.decode_op), it)

    def _decode(self, chunk: list[_Item], errors: dict[int, ImageError]) -> None:
        dali_items = []
        # DALI's decoders are not hardened against hostile files (a PNG whose eXIf IFD declares
        # 65,535 entries crashes the process inside DALI) and decode damaged JPEG scans without
        # a word. So on the CPU every encoded input goes through vlmprep.io.decode (bounded,
        # judged; the same pixels), and on the GPU only JPEGs DALI decodes exactly (nvJPEG),
        # after encoded_bytes' structural checks.
        for it in chunk:
            h = it.src.header
            if self.gpu and h is not None and h.format == "jpeg" and F.dali_decodes(it.src):
                dali_items.append(it)
                continue
            try:
                self._cpu_decode(it)
            except ImageError as e:
                errors[it.plan.index] = e.at(index=it.plan.index, source=it.src.desc)
        self._dali_decode(dali_items, errors)

    def _dali_decode(self, items: list[_Item], errors: dict[int, ImageError]) -> None:
        """Decode ``items`` in one graph run; on failure split the batch and retry (a file DALI
        rejects alone is given to the CPU path, which decodes it or raises its ImageError)."""
        if not items:
            return
        data = []
        for it in items:
            try:
                # bounded, and checked as for every decoder (DALI's libjpeg ignores warnings)
                data.append(np.frombuffer(_io.encoded_bytes(it.src, self.decode_op),
                                          np.uint8))
            except ImageError as e:
                errors[it.plan.index] = e.at(index=it.plan.index, source=it.src.desc)
        items = [it for it in items if it.plan.index not in errors]
        if not items:
            return
        try:
            (images,) = self.stages.decode.run({"encoded": data}, self._stream())
        except RuntimeError as e:
            if len(items) == 1:
                self._fallback(items[0], errors, e)
                return
            m = _SAMPLE.search(str(e))
            k = int(m.group(1)) if m and int(m.group(1)) < len(items) else None
            parts = ([items[k:k + 1], items[:k] + items[k + 1:]] if k is not None else
                     [items[:len(items) // 2], items[len(items) // 2:]])
            for part in parts:
                self._dali_decode(part, errors)
            return
        for k, it in enumerate(items):
            img = images[k]
            if tuple(img.shape()[:2]) != tuple(it.src.hw) or img.shape()[2] != 3:
                # DALI read the header differently from probe (orientation, odd files): the CPU
                # path decodes what the plan describes, or says why not.
                self._fallback(it, errors, None)
                continue
            it.image = img
            it.keep.append(images)

    def _fallback(self, it: _Item, errors: dict[int, ImageError], cause: Exception | None) -> None:
        try:
            self._cpu_decode(it)
        except ImageError as e:
            errors[it.plan.index] = e.at(index=it.plan.index, source=it.src.desc)
            return
        if cause is not None:
            # DALI failed on a file Pillow decodes (e.g. a PNG with a bad CRC, which Pillow does
            # not check): keep Pillow's pixels, and rebuild in case the graph did not recover.
            self.stages.decode.reset()

    # -- canvases and tiles ---------------------------------------------------------------------
    def _geometry(self, items: list[_Item], out: torch.Tensor, errors: dict[int, ImageError],
                  held: list) -> None:
        """Canvases and tiles of ``items``; a failing run is bisected down to single images.

        Only a failure some images pass is theirs: when every image fails (DALI out of memory,
        a graph or feed problem), the first error is raised, not pinned on the images.
        """
        failed: list[tuple[_Item, RuntimeError]] = []
        self._bisect(items, out, failed, held)
        if failed and len(failed) == len(items):
            raise failed[0][1]
        for it, e in failed:
            msg = str(e).strip().splitlines()
            errors[it.plan.index] = ImageError(
                f"expected DALI to resize and cut this {it.src.hw[0]}x{it.src.hw[1]} image "
                f"as planned, got {type(e).__name__}: {msg[-1] if msg else e}; process it "
                f"with backend='torch' or 'reference', and report it (with the image)",
                index=it.plan.index, source=it.src.desc)

    def _bisect(self, items: list[_Item], out: torch.Tensor,
                failed: list[tuple[_Item, RuntimeError]], held: list) -> None:
        if not items:
            return
        try:
            self._canvases_and_tiles(items, out, held)
        except RuntimeError as e:
            if self.gpu and isinstance(e, torch.cuda.OutOfMemoryError):
                raise  # the device's, not an image's
            self.stages.canvas.reset()
            self.stages.tiles.reset()
            if len(items) == 1:
                failed.append((items[0], e))
                return
            half = len(items) // 2
            self._bisect(items[:half], out, failed, held)
            self._bisect(items[half:], out, failed, held)

    def _canvases_and_tiles(self, items: list[_Item], out: torch.Tensor, held: list) -> None:
        stream = self._stream()
        built = self._canvases(items, held, stream)
        self._tiles(items, built, out, held, stream)

    def _canvases(self, items: list[_Item], held: list, stream: Any) -> dict[tuple[int, int], Any]:
        """Every canvas of ``items``, keyed (item, canvas): the DALI ones one run per dependency
        level (a canvas's parent is built in an earlier one), then the normalized leaves in torch."""
        interp = self.fusion.interpolation  # the sizing op's
        built: dict[tuple[int, int], Any] = {}
        depth: dict[tuple[int, int], int] = {}
        for n, it in enumerate(items):
            for k, c in enumerate(it.plan.canvases):
                if not c.normalized:  # a leaf, built in torch below
                    depth[(n, k)] = 0 if c.parent < 0 else depth[(n, c.parent)] + 1
        step = self.stages.canvas.batch_size
        for level in range(max(depth.values(), default=-1) + 1):
            todo = [(n, k) for (n, k), d in depth.items() if d == level]
            for lo in range(0, len(todo), step):
                part = todo[lo:lo + step]
                feeds = F.Feeds()
                images = []
                for n, k in part:
                    it, c = items[n], items[n].plan.canvases[k]
                    images.append(it.image if c.parent < 0 else built[(n, c.parent)])
                    in_hw = it.src.hw if c.parent < 0 else it.plan.canvases[c.parent].hw
                    feeds.add(F.canvas_args(c, in_hw, interp, INTERP_IDS))
                (res,) = self.stages.canvas.run({"image": images, **feeds.data}, stream)
                held.append(res)
                for j, key in enumerate(part):
                    built[key] = res[j]
        for n, it in enumerate(items):
            for k, c in enumerate(it.plan.canvases):
                if c.normalized:
                    parent = it.image if c.parent < 0 else built[(n, c.parent)]
                    built[(n, k)] = self._normalized_canvas(parent, c.resize_hw, c.interpolation or interp)
        return built

    def _tiles(self, items: list[_Item], built: dict, out: torch.Tensor, held: list, stream: Any) -> None:
        """The tiles: one flattened batch, in output order; each run's rows go straight into
        ``out`` (a normalized canvas's tiles are copied there from torch)."""
        pf = self.pipeline.patchify
        tiles = []  # (image tensor, args, rows, destination row)
        for n, it in enumerate(items):
            row = it.row
            for box, k in zip(it.plan.tiles, it.plan.tile_canvas):
                args, rows = F.tile_args(box, pf)
                if it.plan.canvases[k].normalized:  # a torch (C, h, w) canvas, order "tiles"
                    top, left, h, w = box
                    out[row].copy_(built[(n, k)][:, top:top + h, left:left + w])
                else:
                    tiles.append((built[(n, k)], args, rows, row))
                row += rows
        step = self.stages.tiles.batch_size
        for lo in range(0, len(tiles), step):
            run = tiles[lo:lo + step]
            feeds = F.Feeds()
            for _, args, _, _ in run:
                feeds.add(args)
            (res,) = self.stages.tiles.run({"image": [t[0] for t in run], **feeds.data}, stream)
            held.append(res)
            self._copy_out(res, [(t[2], t[3]) for t in run], out)

    def _normalized_canvas(self, parent: Any, hw: tuple[int, int], interpolation: str
                           ) -> torch.Tensor:
        """A ``plan.Canvas.normalized`` canvas -> ``(C, h, w)`` on the stage device: the parent
        (a DALI uint8 ``(H, W, C)``) through the normalize's lut in float32 (the tiles graph's
        values; a uint8 output keeps the levels), then ``tv_exact.resize_normalized``."""
        x = _torch_view(parent, self.gpu)
        op = self.pipeline.normalize_for(self.dtype)
        if op is None:
            chw = x.permute(2, 0, 1)
        else:
            lut = lut_tensor(op, torch.float32, x.device, self.normalize_levels)
            chw = torch.stack([lut[c][x[..., c].long()] for c in range(x.shape[2])])
        return resize_normalized(chw, hw, interpolation)

    def _copy_out(self, res, spans: list[tuple[int, int]], out: torch.Tensor) -> None:
        """Copy the tile rows of one run into ``out``. DALI's contiguous output is viewed as one
        tensor without a copy (DLPack); the one copy into ``out`` is needed because ``out`` is
        the caller's preallocated batch tensor (and DALI recycles its buffers once released)."""
        total = sum(r for r, _ in spans)
        row_shape = tuple(out.shape[1:])
        try:
            flat = res.as_reshaped_tensor([total, *row_shape])
            src = _torch_view(flat, self.gpu)
        except (RuntimeError, ValueError, TypeError):  # not one buffer (not expected): per sample
            src = torch.cat([_torch_view(res[i], self.gpu).reshape(-1, *row_shape)
                             for i in range(len(res))])
        # One copy per run of consecutive destination rows (all of them, unless an image in the
        # middle failed to decode).
        s, first = 0, 0
        while s < len(spans):
            e, n = s, spans[s][0]
            while e + 1 < len(spans) and spans[e + 1][1] == spans[e][1] + spans[e][0]:
                e += 1
                n += spans[e][0]
            out[spans[s][1]:spans[s][1] + n].copy_(src[first:first + n], non_blocking=True)
            first += n
            s = e + 1


def _torch_view(t, gpu: bool) -> torch.Tensor:
    """A DALI tensor as a torch tensor on the same memory (no copy)."""
    if gpu:
        return torch.from_dlpack(t)
    return torch.from_numpy(np.asarray(t))
