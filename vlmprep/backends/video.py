"""Video execution: planned frames -> the family's video pixel rows, as transformers' video processors.

``run_video`` is the video lowering (``registry.VIDEO``) every backend that runs videos registers
(``register_video``: reference, torch and its ``match="torchvision"`` variant; on CPU and cuda the
same work, below); the Processor runs a video by its backend's (``lowering_of``). dali has none
yet (its pixel path is images only): ``backend="dali"`` refuses videos, naming the backends that
run them; ``backend="auto"`` picks, for videos, the first usable backend that has one
(``lowering_for``).

The execution path of a video, decided here in one place (``run_video``):

1. decode only the plan's ``frame_indices`` (``vlmprep.io.video.decode_frames``; each distinct
   frame once, repeats are copies);
2. resize every frame to the plan's ``resized_hw`` with one antialiased ``tvF.resize`` on uint8
   (``tv_exact.resize``), the frames spread over vlmprep's threads; SmolVLM's rule resizes twice,
   to the plan's ``first_resize_hw`` first, as ``SmolVLMVideoProcessor.resize`` does;
3. rescale + normalize as ``TorchvisionBackend.rescale_and_normalize`` (float32; the op
   ``Pipeline.normalize_for(dtype)`` names, none for ``dtype="uint8"``; bfloat16 is the float32
   result cast, as for images), fused with
4. the layout of the family's video processor: ``"patches"`` (Qwen,
   ``patchify.order == "merge_grouped"``): consecutive frames grouped by ``temporal_patch_size``
   (the plan already repeats the last frame to fill the last group), rows ``[c, t, py, px]`` in
   merge-grouped order, exactly ``Qwen2VLVideoProcessor.patchify``; ``"tiles"`` (LLaVA-OneVision,
   InternVL, SmolVLM): one ``(C, S, S)`` tile per frame.

With the kernels loaded, steps 2-4 of a ``"patches"`` video run as one compiled op per temporal
group (``_fused_rows``: the torchvision-exact resize band by band, each band of every frame
written straight into the group's rows, the normalize a lut: the same arithmetic applied to
every level, so the same bits); otherwise the frames are resized first and steps 3-4 run in the
compiled ``normalize_patchify`` (``_kernel_rows``: tiles, SmolVLM, hosts where the compiled
resize does not stand in for torchvision's) or, without the kernels, op by op in torch as
transformers runs them (``_torch_rows``, the twin all three are tested against).

transformers 5.24's video processors all run on torchvision (there is no PIL video path), so a
video's pixels are the torchvision processor's, bit for bit on the CPU in float32, whatever
``Processor(match=...)`` says for images. The work runs on the CPU (torchvision's uint8 resize is
native there; on CUDA it resizes in float) and the result is moved to the Processor's device.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .. import kernels
from ..budget import process_budget, video_bytes
from ..errors import ImageError
from ..kernels.threads import get_num_threads
from . import registry
from .registry import VIDEO

if TYPE_CHECKING:
    import torch

    from ..io.video import VideoLimits
    from ..pipeline import Pipeline
    from ..plan.video import VideoPlan

__all__ = ["VideoLowering", "register_video", "lowering_of", "lowering_for", "video_backends",
           "video_layout", "row_shape", "run_video", "frames_to_rows", "pack_rows"]

#: A video lowering: ``(video item, its plan, pipeline, dtype, limits, decoder) -> rows`` (CPU;
#: ``row_shape``), raising ImageError for the video's own failures (``run_video``).
VideoLowering = Callable[[Any, "VideoPlan", "Pipeline", str, "VideoLimits", str], "torch.Tensor"]


def register_video(backend: str, fn: VideoLowering | None = None) -> None:
    """Register ``fn`` (default: the shared ``run_video``) as registry key ``backend``'s video
    lowering (``registry.VIDEO``)."""
    registry.lowering(backend, VIDEO)(fn if fn is not None else run_video)


def video_backends(device: str = "cpu", match: str = "pil") -> list[str]:
    """The backend names usable here for ``device`` and ``match`` that run videos (have a
    ``registry.VIDEO`` lowering), e.g. ``['torch', 'reference']``."""
    cuda = device.startswith("cuda")
    return [n for n in registry.names() if not (cuda and n == "reference")
            and registry.has_lowering(n, VIDEO, match)]


def lowering_of(key: str, name: str | None = None, device: str = "cpu",
                match: str = "pil") -> VideoLowering:
    """The video lowering of registry key ``key`` (a Backend's ``name``, e.g. ``"torch"``,
    ``"torch:torchvision"``); ``name`` is the user's backend name (default ``key``). ValueError
    (expected / got / fix, naming the backends that run videos) when it has none."""
    try:
        return registry.get_lowering(key, VIDEO)
    except NotImplementedError:
        pass
    name = name or key
    can = [n for n in video_backends(device, match) if n != name]
    fix = (f"process videos with a Processor(..., backend={can[0]!r}) (a second one beside this "
           f"one for the images), or backend='auto'" if can else
           "install a backend that runs videos (pip install torch torchvision)")
    raise ValueError(f"videos on backend {name!r}: expected a backend that runs videos, one of "
                     f"{can or 'none usable here'}, got backend={name!r}, which has no video "
                     f"lowering yet (it runs images only); fix: {fix}")


def lowering_for(asked: str, key: str, name: str, device: str, match: str) -> VideoLowering:
    """The video lowering a Processor runs: its backend's (registry key ``key``, user name
    ``name``); when the backend was ``asked`` as ``"auto"`` and has none (dali), the first usable
    backend that has one (``registry.resolve_auto(..., op=VIDEO)``: torch). Else ValueError
    (``lowering_of``)."""
    if asked == "auto" and not registry.has_lowering(name, VIDEO, match):
        try:
            other = registry.resolve_auto(device, match, op=VIDEO)
        except RuntimeError:
            other = None
        if other is not None:
            cls: Any = registry.get(other, match)  # a Backend class: name is its registry key
            return lowering_of(cls.name, other, device, match)
    return lowering_of(key, name, device, match)


def check_video_ops(pipeline: "Pipeline") -> None:
    """ValueError unless every op of ``pipeline`` is one the video path runs: decode, the sizing
    op, normalize, patchify, pack. Any other (center_crop, an op of your own) would be skipped
    for videos without a word: refused instead, when the first video is processed."""
    runs = {"decode", "normalize", "patchify", "pack"}
    other = [op.name for op in pipeline if op.name not in runs and not type(op).sizing]
    if other:
        raise ValueError(f"videos with pipeline {pipeline.name!r}: expected only the ops the video path "
                         f"runs (decode, the sizing op, normalize, patchify, pack), got also {other}, "
                         f"which videos would skip; process videos with a Processor whose pipeline has "
                         f"none of them (e.g. the family's preset)")


def video_layout(pipeline: "Pipeline") -> str:
    """``"patches"`` (Qwen: merge-grouped rows with frames grouped in time) or ``"tiles"`` (one
    tile image per frame); ValueError for a patchify order no family's video uses."""
    order = pipeline.patchify.order
    if order == "merge_grouped":
        return "patches"
    if order == "tiles":
        return "tiles"
    raise ValueError(f"video: expected a pipeline whose patchify order is 'merge_grouped' (Qwen) or "
                     f"'tiles' (LLaVA-OneVision, InternVL, SmolVLM), got {order!r} in "
                     f"{pipeline.name!r}; process videos with one of those presets")


def row_shape(pipeline: "Pipeline", plan: "VideoPlan") -> tuple[int, ...]:
    """The shape of one video's rows: ``(num_patches, C*T*P*P)`` or ``(frames, C, S, S)``."""
    pf = pipeline.patchify
    if video_layout(pipeline) == "patches":
        return (plan.num_patches, 3 * pf.temporal_patch_size * pf.patch_size * pf.patch_size)
    h, w = plan.resized_hw
    return (len(plan.frame_indices), 3, h, w)


def _interpolation(pipeline: "Pipeline") -> str:
    return str(getattr(pipeline.sizing, "interpolation", "bicubic"))


def frames_to_rows(frames: "torch.Tensor", plan: "VideoPlan", pipeline: "Pipeline",
                   dtype: str, threads: int | None = None) -> "torch.Tensor":
    """uint8 ``(T, H, W, 3)`` frames (the plan's ``frame_indices``, in order) -> the video's rows
    (``row_shape``) in ``dtype`` on the CPU: resize, normalize, lay out (module docstring).

    ``threads``: vlmprep's thread count for this call (default ``kernels.threads
    .get_num_threads``). Three paths, one pick, the same bits (tests/video): ``_fused_rows``
    (``"patches"``, the compiled torchvision-exact resize: each temporal group's frames resized
    band by band and written straight into its rows), else the frames resized first
    (``_resize_frames``) and laid out by the compiled ``normalize_patchify`` (``_kernel_rows``)
    or, without the kernels, op by op in torch as transformers runs it (``_torch_rows``, the
    twin)."""
    threads = threads if threads is not None else get_num_threads()
    norm = pipeline.normalize_for(dtype)
    mode = _interpolation(pipeline)
    # the kernels write lut values or uint8 levels: a float output with no normalize op is torch's
    compiled = (norm is not None or dtype == "uint8") and _kernels_loaded()
    if compiled and _fusable(plan, pipeline, mode):
        return _fused_rows(frames, plan, pipeline, dtype, norm, mode, threads)
    resized = _resize_frames(frames, plan, mode, threads)
    if compiled:
        return _kernel_rows(resized, plan, pipeline, dtype, norm)
    return _torch_rows(resized, plan, pipeline, dtype, norm)


def _fusable(plan: "VideoPlan", pipeline: "Pipeline", mode: str) -> bool:
    """Whether ``_fused_rows`` gives this video's bits: the ``"patches"`` layout, one resize
    (not SmolVLM's two) and the compiled resize standing in for torchvision's here."""
    from . import tv_exact  # deferred: imports torch and torchvision
    return video_layout(pipeline) == "patches" and plan.first_resize_hw is None \
        and tv_exact.host_compiles(mode)


def _lut(norm: Any, dtype: str) -> "torch.Tensor | None":
    """The torchvision normalize as a per-level lut of ``dtype`` (``tv_exact.normalize_levels``
    applied to every level: the same arithmetic, so the same bits); None for uint8."""
    import torch

    from . import tv_exact  # deferred: imports torch and torchvision
    from .normalize_lut import lut_tensor  # deferred: imports numpy
    if norm is None:
        return None
    return lut_tensor(norm, getattr(torch, dtype), "cpu", normalize=tv_exact.normalize_levels)


def _fused_rows(frames: "torch.Tensor", plan: "VideoPlan", pipeline: "Pipeline", dtype: str,
                norm: Any, mode: str, threads: int) -> "torch.Tensor":
    """The compiled ``"patches"`` path: per temporal group, one ``kernels.resize_normalize_patchify``
    of its ``(tps, H, W, 3)`` frames with ``match="torchvision"``. Each band of ``m * p`` resized
    rows of every frame of the group stays in cache and goes straight into the group's output rows
    ``[c, t, py, px]``: each distinct frame read once, no resized frames, no interleave copy.
    ``threads``: whole groups per thread on the kept video pool when there are at least two
    groups per thread, else each group's bands split over them (the same bits either way)."""
    from ..kernels import local_threads
    h, w = (int(plan.resized_hw[0]), int(plan.resized_hw[1]))
    p, m, tps, group_rows, out = _group_rows_out(plan, pipeline, len(frames), (h, w), dtype)
    gt = len(frames) // tps
    lut, flat = _lut(norm, dtype), out.view(-1)
    frames = frames if frames.is_contiguous() else frames.contiguous()

    def group(g: int) -> None:
        kernels.resize_normalize_patchify(
            frames[g * tps:(g + 1) * tps], (h, w), mode, lut, flat,
            g * group_rows * out.shape[1], "merge_grouped", p, m, tps, match="torchvision")

    if threads > 1 and gt >= 2 * threads:
        # whole groups per thread, on the kept pool: one wake-up of the other threads per video
        # instead of new threads for every group's bands (on the 2-core VM, 20 720p frames:
        # after a decode had left the second core idle, the bands' split took 51-57 ms)
        from .base import video_pool  # deferred: imports torch

        def pooled(g: int) -> None:
            with local_threads(1):
                group(g)
        list(video_pool(threads).map(pooled, range(gt)))
        return out
    with local_threads(threads):
        for g in range(gt):
            group(g)
    return out


def _kernels_loaded() -> bool:
    return kernels.available()


def _resize_frames(frames: "torch.Tensor", plan: "VideoPlan", mode: str,
                   threads: int) -> list["torch.Tensor"]:
    """uint8 ``(T, H, W, 3)`` -> T uint8 ``(h, w, 3)`` C-contiguous frames, each by
    ``tv_exact.resize`` (SmolVLM: to the plan's ``first_resize_hw`` first). With ``threads`` > 1
    the frames are spread over the videos' kept pool (``base.video_pool``): torch's resize
    releases the GIL, and one frame per thread scales better than torch's own split of one small
    frame (its rows)."""
    from . import tv_exact  # deferred: imports torch and torchvision
    first = plan.first_resize_hw
    hw = (int(plan.resized_hw[0]), int(plan.resized_hw[1]))

    def one(f: "torch.Tensor") -> "torch.Tensor":  # (H, W, 3) -> (h, w, 3)
        x = f.permute(2, 0, 1)  # (C, H, W) view in HWC memory, as tv_exact.resize takes it
        if first is not None and tuple(first) != tuple(x.shape[-2:]):
            x = tv_exact.resize(x, (int(first[0]), int(first[1])), mode)
        if hw != tuple(x.shape[-2:]):
            x = tv_exact.resize(x, hw, mode)
        return x.permute(1, 2, 0).contiguous()  # a no-op for the kernel's channels-last output

    if threads <= 1 or len(frames) <= 1:
        return [one(f) for f in frames]
    from ..kernels import local_threads
    from .base import video_pool  # deferred: imports torch

    def pooled(f: "torch.Tensor") -> "torch.Tensor":
        with local_threads(1):  # one frame per thread: the compiled resize splits nothing more
            return one(f)
    return list(video_pool(threads).map(pooled, frames))


def _torch_rows(resized: list["torch.Tensor"], plan: "VideoPlan", pipeline: "Pipeline",
                dtype: str, norm: Any) -> "torch.Tensor":
    """The op-by-op path (transformers' own operations; no compiled kernels needed)."""
    import torch
    x = torch.stack([f.permute(2, 0, 1).contiguous() for f in resized])  # (T, C, h, w) uint8
    if video_layout(pipeline) == "tiles":
        return _values(x.transpose(0, 1), norm, dtype).transpose(0, 1).contiguous()
    pf = pipeline.patchify
    p, m, tps = pf.patch_size, pf.merge_size, pf.temporal_patch_size
    t, c, h, w = x.shape
    _check_groups(plan, t, tps)
    gt, gh, gw = t // tps, h // p, w // p
    # Qwen2VLVideoProcessor.patchify without its batch dim, on the uint8 frames (a quarter of the
    # bytes to move; normalize is per element, so the bits are the same after it):
    # (gt, tps, c, bh, mh, py, bw, mw, px) -> (gt, bh, bw, mh, mw, c, tps, py, px)
    x = x.view(gt, tps, c, gh // m, m, p, gw // m, m, p).permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    rows = x.reshape(gt * gh * gw, c, tps * p * p)
    return _values(rows.transpose(0, 1), norm, dtype).transpose(0, 1).reshape(gt * gh * gw, -1)


def _values(x: "torch.Tensor", norm: Any, dtype: str) -> "torch.Tensor":
    """uint8 ``(C, ...)`` -> ``dtype``: transformers' fused rescale+normalize in float32
    (``tv_exact.normalize_tensor``; memory layout kept), cast for bfloat16; uint8 as it is."""
    import torch

    from . import tv_exact  # deferred: imports torch and torchvision
    if dtype == "uint8":
        return x
    y = tv_exact.normalize_tensor(norm, x) if norm is not None else x.to(torch.float32)
    return y.to(torch.bfloat16) if dtype == "bfloat16" else y


def _check_groups(plan: "VideoPlan", t: int, tps: int) -> None:
    if t % tps:
        raise AssertionError(f"video plan {plan.index}: {t} frames is not a multiple of the "
                             f"temporal patch {tps} (the plan pads it)")


def _group_rows_out(plan: "VideoPlan", pipeline: "Pipeline", t: int, hw: tuple[int, int],
                    dtype: str) -> tuple[int, int, int, int, "torch.Tensor"]:
    """The ``"patches"`` output of ``t`` frames resized to ``hw``: ``(patch, merge, temporal
    patch, rows per temporal group, the uninitialised (groups * rows, 3 * tps * p * p) output)``
    (``kernels.empty``: a reused host buffer is not faulted in again)."""
    import torch
    pf = pipeline.patchify
    p, m, tps = pf.patch_size, pf.merge_size, pf.temporal_patch_size
    _check_groups(plan, t, tps)
    group_rows = (hw[0] // p) * (hw[1] // p)
    out = kernels.empty((t // tps * group_rows, 3 * tps * p * p), getattr(torch, dtype))
    return p, m, tps, group_rows, out


def _kernel_rows(resized: list["torch.Tensor"], plan: "VideoPlan", pipeline: "Pipeline",
                 dtype: str, norm: Any) -> "torch.Tensor":
    """Resized frames -> rows by the compiled ``kernels.normalize_patchify`` (one call; the lut
    of ``_lut``), written into a ``kernels.empty`` output (a reused host buffer is not faulted in
    again). ``"tiles"``: a frame per tile. ``"patches"``: each temporal group's ``tps`` frames
    stacked into one ``(tps, h, w, 3)`` sample, whose frame t the kernel writes to the rows'
    t-th slots ``[c, t, py, px]``."""
    import torch
    tdt = getattr(torch, dtype)
    lut = _lut(norm, dtype)
    h, w = resized[0].shape[:2]
    if video_layout(pipeline) == "tiles":
        out = kernels.empty((len(resized), 3, h, w), tdt)
        kernels.normalize_patchify(resized, lut, out.view(-1), [i * 3 * h * w for i in
                                                                 range(len(resized))], "tiles", 1)
        return out
    p, m, tps, group_rows, out = _group_rows_out(plan, pipeline, len(resized), (h, w), dtype)
    gt = len(resized) // tps
    groups = [torch.stack(resized[g * tps:(g + 1) * tps]) for g in range(gt)]
    kernels.normalize_patchify(groups, lut, out.view(-1),
                               [g * group_rows * out.shape[1] for g in range(gt)],
                               "merge_grouped", p, m, tps)
    return out


def run_video(video: Any, plan: "VideoPlan", pipeline: "Pipeline", dtype: str,
              limits: "VideoLimits", decoder: str = "auto") -> "torch.Tensor":
    """One planned video -> its rows (``row_shape``, ``dtype``, CPU). Raises ImageError (naming
    the item) when decoding fails, or when the process's memory budget (``vlmprep.budget``)
    refuses its planned bytes or has no room for them within its ``timeout_s``; the plan must
    have no error."""
    if plan.error is not None:
        raise plan.error
    # the video's planned bytes, held from the process's memory budget until its rows are made;
    # the wait counts against its timeout_s
    with process_budget().acquire(video_bytes(plan), limits.timeout_s, "this video") as hold:
        if hold.waited_s > 0:
            limits = replace(limits, timeout_s=max(limits.timeout_s - hold.waited_s, 1e-3))
        return _decoded_rows(video, plan, pipeline, dtype, limits, decoder)


def _decoded_rows(video: Any, plan: "VideoPlan", pipeline: "Pipeline", dtype: str,
                  limits: "VideoLimits", decoder: str) -> "torch.Tensor":
    import numpy as np
    import torch

    from ..io.video import decode_frames  # deferred: imports numpy
    wanted = list(dict.fromkeys(plan.frame_indices))  # each distinct frame decoded once
    frames = decode_frames(video, sorted(wanted), limits, decoder=decoder)
    where = {k: i for i, k in enumerate(sorted(wanted))}
    h, w = frames.shape[1:3]
    meta = plan.meta
    if meta is not None and (h, w) != (meta.height, meta.width):
        raise ImageError(f"expected decoded frames of {meta.height}x{meta.width} (HxW, as probed), "
                         f"got {h}x{w}; the file changes size mid-stream: re-encode it")
    pick = np.asarray([where[k] for k in plan.frame_indices], dtype=np.int64)
    ordered = frames if len(pick) == len(frames) and bool((pick == np.arange(len(pick))).all()) \
        else frames[pick]
    return frames_to_rows(torch.from_numpy(ordered), plan, pipeline, dtype)


def pack_rows(rows: Sequence["torch.Tensor"], pipeline: "Pipeline", dtype: str,
              device: str) -> "torch.Tensor":
    """The videos' rows concatenated in input order, on ``device`` (an empty tensor of the right
    trailing shape when there are none)."""
    import torch
    if rows:
        out = torch.cat(list(rows)) if len(rows) > 1 else rows[0]
    else:
        pf = pipeline.patchify
        if video_layout(pipeline) == "patches":
            shape: tuple[int, ...] = (0, 3 * pf.temporal_patch_size * pf.patch_size * pf.patch_size)
        else:
            hw = pipeline.tile_hw or (0, 0)
            shape = (0, 3, *hw)
        out = torch.empty(shape, dtype=getattr(torch, dtype))
    return out.to(device) if not device.startswith("cpu") else out
