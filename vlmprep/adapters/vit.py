"""ViT side of the adapters: run a vision encoder on a PackedBatch, with no device sync.

Everything here is computed from the batch's host fields (``seqlens``, ``grid_thw``), then moved
to ``batch.device``; nothing calls ``.item()`` / ``.tolist()`` on a device tensor.

    varlen_args(batch)          -> {"cu_seqlens": (S+1,) int32, "max_seqlen": int}  (flash-attn)
    block_diagonal_mask(batch)  -> (1, 1, N, N) bool, True = may attend                PyTorch SDPA
    split_sequences / split_images(x, batch)  -> per sequence / per image views of x
    patch_positions(batch)      -> (N, 2) int64 (row, col) of each patch, in the batch's row order
    rotary_position_ids(batch)  -> (N, 2) int64 (hpos, wpos): Qwen's rotary inputs
    naflex_inputs(batch)        -> Siglip2VisionModel's pixel_values, pixel_attention_mask,
                                   spatial_shapes
    normalize_on_device(batch)  -> the uint8 batch rescaled + normalized on its device (bit-equal)
    encode(vision_tower, batch) -> list[Tensor], one per input image (transformers towers;
                                   Qwen towers take compact rows too: the temporal kernel folded)
    encode_packed(vit, batch)   -> list[Tensor], a plain ViT on packed sequences (block mask)

N = total ViT tokens (``sum(batch.seqlens)``), S = ``batch.num_seqs``. Positions, a tiny example::

    Given  one Qwen image with grid (1, 2, 4), merge 2 (rows merge-grouped)
    Output patch_positions rows (0,0) (0,1) (1,0) (1,1) | (0,2) (0,3) (1,2) (1,3)
    Given  the same grid in raster / naflex / tiles order
    Output (0,0) (0,1) (0,2) (0,3) (1,0) (1,1) (1,2) (1,3)
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from .. import presets
from ..hf_forms import HF_FORMS, hf_output

if TYPE_CHECKING:
    import torch

    from ..pack import PackedBatch

__all__ = [
    "varlen_args", "block_diagonal_mask", "sequence_ids", "split_sequences", "split_images",
    "patch_positions", "rotary_position_ids", "naflex_inputs", "qwen_vision_kwargs",
    "normalize_on_device", "encode", "encode_packed", "SUPPORTED_TOWERS",  # noqa: F822 (module __getattr__)
]


# -- checks at the boundary ---------------------------------------------------------------------
def _check_batch(batch: "PackedBatch") -> None:
    """The host fields agree with each other and with ``pixel_values`` (trust inside after)."""
    grids = batch.grid_thw.tolist()  # host tensor (API.md): no device sync
    if len(grids) != batch.num_seqs:
        raise ValueError(f"vit: expected one grid_thw row per sequence ({batch.num_seqs}), got "
                         f"{len(grids)}; build the batch with vlmprep.Processor / split / concat")
    for i, ((t, h, w), n) in enumerate(zip(grids, batch.seqlens)):
        if t * h * w != n:
            raise ValueError(f"vit: sequence {i}: expected grid_thw t*h*w == seqlens[{i}] = {n}, "
                             f"got grid ({t}, {h}, {w}) = {t * h * w} patches; the grid and the "
                             f"lengths come from different batches: rebuild it with the Processor")
    rows = sum(batch.seqlens) if batch.layout == "patches" else batch.num_seqs
    if batch.pixel_values.shape[0] != rows:
        raise ValueError(f"vit: expected pixel_values with {rows} rows ({batch.layout} layout), "
                         f"got shape {tuple(batch.pixel_values.shape)}; rebuild the batch")


def _patchify(batch: "PackedBatch"):
    if batch.pipeline is None:
        raise ValueError("vit: expected a batch that carries its pipeline (batch.pipeline), got "
                         "None; build the batch with vlmprep.Processor")
    return batch.pipeline.patchify


# -- varlen / SDPA inputs -------------------------------------------------------------------------
def varlen_args(batch: "PackedBatch") -> dict[str, Any]:
    """flash-attn varlen inputs: ``{"cu_seqlens": (S + 1,) int32 on batch.device, "max_seqlen":
    int}`` (pass as ``cu_seqlens_q = cu_seqlens_k``, ``max_seqlen_q = max_seqlen_k``)."""
    return {"cu_seqlens": batch.cu_seqlens, "max_seqlen": batch.max_seqlen}


def sequence_ids(batch: "PackedBatch") -> "torch.Tensor":
    """``(N,)`` int64 on batch.device: the sequence index of every token."""
    import torch
    n = sum(batch.seqlens)
    lens = torch.tensor(batch.seqlens, dtype=torch.int64)
    ids = torch.repeat_interleave(torch.arange(batch.num_seqs), lens, output_size=n)
    return ids.to(batch.device, non_blocking=True)


def block_diagonal_mask(batch: "PackedBatch") -> "torch.Tensor":
    """``(1, 1, N, N)`` bool on batch.device, True where query and key are in the same sequence:
    SDPA's boolean ``attn_mask`` (True = takes part). Memory is N^2 bytes: prefer flash-attn's
    varlen (``varlen_args``) for long batches."""
    ids = sequence_ids(batch)
    return (ids[:, None] == ids[None, :])[None, None]


def _split(x: "torch.Tensor", counts: list[int], dim: int, what: str) -> list["torch.Tensor"]:
    total = sum(counts)
    size = x.shape[dim]
    if total == 0:
        return [x.narrow(dim, 0, 0) for _ in counts]
    # x may hold one row per patch, or fewer (a 2x2 merger: 4x fewer) or more, uniformly.
    if any(size * c % total for c in counts):
        raise ValueError(f"vit: split_{what}: expected dim {dim} of size k * {total} or "
                         f"{total} / k (one row per patch, or per merged token), got {size}")
    return list(x.split([size * c // total for c in counts], dim=dim))


def split_sequences(x: "torch.Tensor", batch: "PackedBatch", dim: int = 0) -> list["torch.Tensor"]:
    """Views of ``x`` per ViT sequence: ``x`` has one row per patch (``N``) along ``dim``, or a
    uniform multiple / fraction of it (e.g. ``N / 4`` after Qwen's 2x2 merger)."""
    return _split(x, list(batch.seqlens), dim, "sequences")


def split_images(x: "torch.Tensor", batch: "PackedBatch", dim: int = 0) -> list["torch.Tensor"]:
    """Views of ``x`` per input image (skipped images: empty), rows as in ``split_sequences``."""
    counts = [0] * batch.num_images
    for i, n in zip(batch.image_index.tolist(), batch.seqlens):
        counts[i] += n
    return _split(x, counts, dim, "images")


# -- positions ------------------------------------------------------------------------------------
def _grid_rc(h: int, w: int, merge: int) -> "torch.Tensor":
    """``(h*w, 2)`` (row, col): raster for merge 1, merge-grouped (m x m blocks) otherwise."""
    import torch
    r, c = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    if merge > 1:
        shape = (h // merge, merge, w // merge, merge)
        r, c = r.reshape(shape).transpose(1, 2), c.reshape(shape).transpose(1, 2)
    return torch.stack([r.flatten(), c.flatten()], dim=-1)


def patch_positions(batch: "PackedBatch") -> "torch.Tensor":
    """``(N, 2)`` int64 on batch.device: ``(row, col)`` of every patch in its grid, in the batch's
    row order: merge-grouped for ``merge_grouped`` (Qwen), raster for ``raster`` (Pixtral),
    ``naflex`` (SigLIP2; a row is ``[py, px, c]``, positions are raster) and ``tiles`` (each tile's
    ``gh x gw`` grid, tile after tile). A sequence with ``t > 1`` repeats its frame's positions."""
    import torch
    _check_batch(batch)
    op = _patchify(batch)
    merge = op.merge_size if op.order == "merge_grouped" else 1
    parts = [_grid_rc(h, w, merge).repeat(t, 1) for t, h, w in batch.grid_thw.tolist()]
    out = torch.cat(parts) if parts else torch.zeros((0, 2), dtype=torch.int64)
    return out.to(batch.device, non_blocking=True)


def rotary_position_ids(batch: "PackedBatch") -> "torch.Tensor":
    """``(N, 2)`` int64 on batch.device: Qwen2-VL / Qwen2.5-VL / Qwen3-VL rotary inputs
    ``(hpos, wpos)`` in merge-grouped order, exactly ``transformers.vision_utils.
    get_vision_position_ids(grid_thw, merge_size)`` (what the vision model feeds its
    ``rotary_pos_emb``; pass it as ``position_ids=``)."""
    op = _patchify(batch)
    if op.order != "merge_grouped":
        raise ValueError(f"rotary_position_ids: expected a merge_grouped batch (Qwen families), "
                         f"got order {op.order!r}; use patch_positions(batch) for other orders")
    return patch_positions(batch)


#: The ``to_hf`` forms of naflex batches (their padded width is the processor's).
_NAFLEX_FORMS = ("siglip2", "lfm2_vl")


def naflex_inputs(batch: "PackedBatch") -> dict[str, "torch.Tensor"]:
    """``Siglip2VisionModel`` inputs on batch.device: ``pixel_values (S, L, P*P*C)`` (each image's
    ``[py, px, c]`` rows then zero rows, ``L = max(max_num_patches, max_seqlen)``),
    ``pixel_attention_mask (S, L)`` int32 (1 on a real patch), ``spatial_shapes (S, 2)`` int64
    ``(h_p, w_p)``. The same tensors as ``Siglip2ImageProcessor`` gives (``lfm2-vl``: as
    ``Lfm2VlImageProcessor`` gives, one sequence per tile, ``L`` = its 1024)."""
    _check_batch(batch)
    if _patchify(batch).order != "naflex":
        raise ValueError(f"naflex_inputs: expected a naflex batch (preset 'siglip2-naflex'), got "
                         f"order {_patchify(batch).order!r}")
    form = hf_output(batch.pipeline)
    out = HF_FORMS[form if form in _NAFLEX_FORMS else "siglip2"](batch)
    out["spatial_shapes"] = out["spatial_shapes"].to(batch.device, non_blocking=True)
    return out


def qwen_vision_kwargs(batch: "PackedBatch", vision_tower: Any = None) -> dict[str, Any]:
    """Precomputed keyword inputs of a transformers Qwen vision model (5.x ``vision_utils``
    contract: the model pops them instead of computing them from ``grid_thw`` on the device):
    ``position_ids (N, 2)``, ``cu_seqlens`` (one segment per frame, int32), ``max_seqlen``; for a
    Qwen2.5-VL tower also ``window_index``, ``cu_window_seqlens``, ``max_window_seqlen``; for
    Qwen3-VL ``interp_indices`` / ``interp_weights`` (its learned position-table resampling).
    All computed on the host from ``batch.grid_thw``, then moved to batch.device."""
    import torch
    from transformers import vision_utils as vu
    grid = batch.grid_thw.cpu()
    dev = batch.device
    _patchify(batch)  # the batch carries its pipeline (else a clear error, before any work)
    frames = [h * w for t, h, w in grid.tolist() for _ in range(t)]
    cu = torch.tensor([0] + frames, dtype=torch.int64).cumsum(0).to(torch.int32)
    out: dict[str, Any] = {"position_ids": rotary_position_ids(batch),
                           "cu_seqlens": cu.to(dev, non_blocking=True),
                           "max_seqlen": max(frames, default=0)}
    cfg: Any = getattr(vision_tower, "config", None)
    if hasattr(vision_tower, "fullatt_block_indexes"):  # Qwen2.5-VL windowed attention
        index, cu_win = vu.get_vision_window_index(grid, cfg.spatial_merge_size, cfg.window_size,
                                                   cfg.patch_size)
        win_max = int((cu_win[1:] - cu_win[:-1]).max()) if len(cu_win) > 1 else 0  # host tensor
        out.update(window_index=index.to(dev, non_blocking=True),
                   cu_window_seqlens=cu_win.to(dev, non_blocking=True), max_window_seqlen=win_max)
    if hasattr(vision_tower, "num_grid_per_side"):  # Qwen3-VL learned, resampled position table
        idx, wts = vu.get_vision_interpolation_indices_and_weights(
            grid, num_grid_per_side=vision_tower.num_grid_per_side,
            mode=getattr(vision_tower, "interpolation_mode", "bilinear"),
            align_corners=getattr(vision_tower, "interpolation_align_corners", True),
            spatial_merge_size=cfg.spatial_merge_size)
        out.update(interp_indices=idx.to(dev, non_blocking=True),
                   interp_weights=wts.to(dev, non_blocking=True))
    return out


# -- device-side normalization ------------------------------------------------------------------
def _normalize_lut(op) -> "torch.Tensor":
    """``(C, 256)`` float32: the float path's value for every uint8 level, per channel, computed
    with the reference backend's exact operations (so a gather gives the same bits)."""
    import torch

    from ..backends.normalize_lut import normalize_lut  # deferred: imports numpy
    return torch.from_numpy(normalize_lut(op))


def normalize_on_device(batch: "PackedBatch", dtype: "torch.dtype | None" = None) -> "PackedBatch":
    """The batch with ``pixel_values`` rescaled and normalized on its own device.

    ``pixel_values`` uint8 -> float32 (or ``dtype``, rounded from float32 as the float path does),
    same shape and layout; bit-equal to ``Processor(..., dtype="float32")`` on the same images.
    The math is a per-channel lookup of ``((v.astype(f64) * rescale).astype(f32) - mean) / std``
    for the 256 levels (float64 on a GPU is slow; the lut is exact). The channel of an element:
    ``merge_grouped`` rows ``[c, t, py, px]`` and ``raster`` rows ``[c, py, px]``: index //
    (row_len / C); ``naflex`` rows ``[py, px, c]``: index % C; ``tiles`` ``(S, C, H, W)``: dim 1.
    A batch that is not uint8 is returned as it is (already normalized).
    """
    import torch
    pv = batch.pixel_values
    if pv.dtype != torch.uint8:
        return batch
    op = batch.pipeline.normalize if batch.pipeline is not None else None
    if op is None:
        raise ValueError("normalize_on_device: expected a batch whose pipeline has a normalize op "
                         "(its mean/std), got none; build the batch with a preset or add "
                         "vlmprep.ops.normalize(...) to the pipeline")
    order = _patchify(batch).order
    c = len(op.mean)
    if order == "tiles":
        view = pv.reshape(pv.shape[0], pv.shape[1], -1)             # (S, C, H*W)
    elif order == "naflex":
        view = pv.reshape(-1, 1, c).transpose(1, 2)                 # (N*P*P, C, 1)
    else:
        view = pv.reshape(pv.shape[0], c, -1)                       # (N, C, T*P*P) / (N, C, P*P)
    if view.shape[1] != c:
        raise ValueError(f"normalize_on_device: expected {c} channels, got pixel_values "
                         f"{tuple(pv.shape)} in order {order!r}")
    lut = _normalize_lut(op).to(pv.device, non_blocking=True)
    offsets = torch.arange(c, device=pv.device, dtype=torch.int32).mul_(256)[None, :, None]
    idx = view.to(torch.int32) + offsets                            # flat index into (C*256,)
    out = torch.index_select(lut.reshape(-1), 0, idx.reshape(-1)).reshape(idx.shape)
    if order == "naflex":
        out = out.transpose(1, 2)
    out = out.reshape(pv.shape)
    if dtype is not None and dtype != torch.float32:
        out = out.to(dtype)
    return replace(batch, pixel_values=out.contiguous())


# -- encoders -------------------------------------------------------------------------------------
def _tower_of(model: Any, attr: str) -> Any:
    """``model.<attr>`` or ``model.model.<attr>`` (a full *ForConditionalGeneration)."""
    for m in (model, getattr(model, "model", None)):
        if m is not None and getattr(m, attr, None) is not None:
            return getattr(m, attr)
    return None


def _param_dtype(module: Any) -> "torch.dtype":
    import torch
    p = next(iter(module.parameters()), None)
    return p.dtype if p is not None else torch.float32


def _expect(kind: str, what: str, got: Any, expected: Any, fix: str) -> None:
    if got != expected:
        raise ValueError(f"encode ({kind}): {what}: expected {expected!r} (the model's), got "
                         f"{got!r} (the batch's); {fix}")


def _pad_images(batch: "PackedBatch", per_seq: list["torch.Tensor"]) -> list["torch.Tensor"]:
    """Group per-sequence outputs (each with a leading dim: rows, or one tile) by input image,
    concatenated; a skipped image gets an empty tensor of the same trailing shape."""
    import torch
    owner = batch.image_index.tolist()
    groups: list[list] = [[] for _ in range(batch.num_images)]
    for i, x in zip(owner, per_seq):
        groups[i].append(x)
    like = per_seq[0] if per_seq else None
    out = []
    for g in groups:
        if g:
            out.append(torch.cat(g))
        elif like is not None:
            out.append(like.new_empty((0,) + tuple(like.shape[1:])))
        else:
            out.append(torch.empty(0))
    return out


def _encode_qwen(model: Any, batch: "PackedBatch", deepstack: bool) -> list["torch.Tensor"]:
    import torch
    tower = model if _supported().get(type(model).__name__) == "qwen_tower" \
        else _tower_of(model, "visual")
    cfg = tower.config
    op = _patchify(batch)
    kind = type(tower).__name__
    fix = "process the images with the preset of this model (e.g. 'qwen3-vl' for Qwen3-VL)"
    _expect(kind, "order", op.order, "merge_grouped", fix)
    _expect(kind, "patch_size", op.patch_size, cfg.patch_size, fix)
    _expect(kind, "temporal_patch_size", op.temporal_patch_size, cfg.temporal_patch_size, fix)
    _expect(kind, "spatial_merge_size", op.merge_size, cfg.spatial_merge_size, fix)
    compact = batch.row_form == "compact"
    frames = 1 if compact else cfg.temporal_patch_size   # compact row: [c, py, px], one frame
    row = cfg.in_channels * frames * cfg.patch_size ** 2
    _expect(kind, f"patch row length ({batch.row_form} rows)", batch.pixel_values.shape[1], row,
            fix)
    if batch.num_seqs == 0:
        return [torch.empty(0) for _ in range(batch.num_images)]
    kw = qwen_vision_kwargs(batch, tower)
    # One (1, h, w) row per frame, as Glm4vModel.get_video_features hands its tower (GLM's
    # position-table interpolation reads the grid per attention segment, one per frame); Qwen
    # towers read the grid only through kw (popped). Images (t = 1): the grid itself.
    grid = batch.grid_thw
    grid = torch.cat([torch.ones_like(grid[:, :1]), grid[:, 1:]], 1)
    grid = grid.repeat_interleave(batch.grid_thw[:, 0], 0)
    grid = grid.to(batch.device, non_blocking=True)
    pv = batch.pixel_values.to(_param_dtype(tower))
    run = _folded_tower(tower, kind) if compact else tower
    out = run(pv, grid_thw=grid, return_dict=True, **kw)
    emb = out.pooler_output                                     # (N / merge^2, out_hidden)
    if deepstack and getattr(out, "deepstack_features", None):
        # vLLM's Qwen3-VL image_embeds layout: main then each deepstack level, on the last dim.
        emb = torch.cat([emb] + list(out.deepstack_features), dim=-1)
    return split_images(emb, batch)


def _folded_tower(tower: Any, kind: str) -> Any:
    """The tower with its patch embedding folded over time, for compact rows (``_fold``): a
    shallow view sharing every weight, so the user's tower is never modified (thread-safe)."""
    import torch

    from ._fold import FoldedPatchEmbed, with_patch_embed  # deferred: imports torch
    pe = getattr(tower, "patch_embed", None)
    proj = getattr(pe, "proj", None)
    if not isinstance(proj, torch.nn.Conv3d) or proj.kernel_size != proj.stride:
        raise NotImplementedError(
            f"encode ({kind}): compact rows: expected patch_embed.proj to be a Conv3d with stride "
            f"== kernel (the one fold_weight folds), got {type(proj).__name__}; expand the rows: "
            f"dataclasses.replace(batch, pixel_values=batch.full_rows(), row_form='full'), or "
            f"process with row_form='full'")
    if "forward" in vars(tower):
        # accelerate's hooks (device_map, offload) set forward on the instance, bound to the
        # tower itself: a view would run the tower's own Conv3d on the compact rows.
        raise NotImplementedError(
            f"encode ({kind}): compact rows: expected a tower whose forward is its class's, got "
            f"one wrapped on the instance (accelerate hooks: device_map / offload); expand the "
            f"rows: dataclasses.replace(batch, pixel_values=batch.full_rows(), "
            f"row_form='full'), or load the tower without device_map")
    return with_patch_embed(tower, FoldedPatchEmbed(pe))


def _check_tiles(kind: str, batch: "PackedBatch", image_size: Any, patch_size: Any) -> None:
    op = _patchify(batch)
    fix = "process the images with this model's preset (tile size and patch size must match)"
    _expect(kind, "order", op.order, "tiles", fix)
    size = image_size if isinstance(image_size, (list, tuple)) else (image_size, image_size)
    patch = patch_size if isinstance(patch_size, (list, tuple)) else (patch_size, patch_size)
    _expect(kind, "tile size (H, W)", tuple(batch.pixel_values.shape[2:]), tuple(size), fix)
    _expect(kind, "patch_size", (op.patch_size, op.patch_size), tuple(patch), fix)


def _encode_tiles_tower(model: Any, batch: "PackedBatch") -> list["torch.Tensor"]:
    """SiglipVisionModel / CLIPVisionModel / InternVLVisionModel: ``last_hidden_state`` per tile."""
    kind = type(model).__name__
    cfg = model.config
    _check_tiles(kind, batch, cfg.image_size, cfg.patch_size)
    if batch.num_seqs == 0:
        return _pad_images(batch, [])
    out = model(pixel_values=batch.pixel_values.to(_param_dtype(model)), return_dict=True)
    return _pad_images(batch, list(out.last_hidden_state.split(1)))


def _encode_full_tiles(model: Any, batch: "PackedBatch") -> list["torch.Tensor"]:
    """InternVLModel / LlavaModel (or their *ForConditionalGeneration): ``get_image_features``
    (vision tower, feature layer and select strategy of the config, pixel shuffle for InternVL,
    the projector), per tile."""
    import torch
    kind = type(model).__name__
    vcfg = model.config.vision_config
    _check_tiles(kind, batch, vcfg.image_size, vcfg.patch_size)
    if batch.num_seqs == 0:
        return _pad_images(batch, [])
    out = model.get_image_features(pixel_values=batch.pixel_values.to(_param_dtype(model)),
                                   return_dict=True)
    feats = out.pooler_output                # (S, tokens, D) tensor (InternVL) or list (LLaVA)
    if isinstance(feats, (list, tuple)):
        feats = torch.stack(list(feats))
    return _pad_images(batch, list(feats.split(1)))


def _encode_anyres(model: Any, batch: "PackedBatch") -> list["torch.Tensor"]:
    """LlavaNextModel / LlavaOnevisionModel (or their *ForConditionalGeneration):
    ``get_image_features`` on the batch's transformers form (each image's crops + its size),
    which runs the tower and projector and packs each image (unpadding, ``image_newline``):
    ``(num_embeddings_i, D_llm)`` per image, the rows vLLM's embedding input takes. Each image is
    its own sample (OneVision: anyres crops for every image, as for one image per prompt)."""
    import torch
    kind = type(model).__name__
    vcfg = model.config.vision_config
    _check_tiles(kind, batch, vcfg.image_size, vcfg.patch_size)
    if batch.num_seqs == 0:
        return _pad_images(batch, [])
    hf = batch.to_hf()
    kw: dict[str, Any] = {}
    if "Onevision" in kind:
        good = hf["image_sizes"].shape[0]
        kw["batch_num_images"] = torch.ones(good, dtype=torch.long)
    out = model.get_image_features(pixel_values=hf["pixel_values"].to(_param_dtype(model)),
                                   image_sizes=hf["image_sizes"], return_dict=True, **kw)
    feats = list(out.pooler_output)              # one packed (rows_i, D) per good image
    ok = [i for i in range(batch.num_images) if i not in batch.errors]
    like = feats[0]
    per_image = [like.new_empty((0, like.shape[-1])) for _ in range(batch.num_images)]
    for i, f in zip(ok, feats):
        per_image[i] = f
    return per_image


def _encode_siglip2(model: Any, batch: "PackedBatch") -> list["torch.Tensor"]:
    kind = type(model).__name__
    op = _patchify(batch)
    fix = "process the images with the 'siglip2-naflex' preset"
    _expect(kind, "order", op.order, "naflex", fix)
    _expect(kind, "patch_size", op.patch_size, model.config.patch_size, fix)
    if batch.num_seqs == 0:
        return _pad_images(batch, [])
    inp = naflex_inputs(batch)
    out = model(pixel_values=inp["pixel_values"].to(_param_dtype(model)),
                pixel_attention_mask=inp["pixel_attention_mask"],
                spatial_shapes=inp["spatial_shapes"], return_dict=True)
    hidden = out.last_hidden_state                             # (S, L, D), valid rows first
    return _pad_images(batch, [hidden[i, :n] for i, n in enumerate(batch.seqlens)])


def _encode_naflex_model(model: Any, batch: "PackedBatch") -> list["torch.Tensor"]:
    """Lfm2VlModel (or its *ForConditionalGeneration): ``get_image_features`` on
    ``naflex_inputs`` (the SigLIP2 tower, the ``downsample_factor`` unshuffle, the projector):
    ``(tokens, D_llm)`` per sequence; an image's tiles, then its thumbnail, concatenated."""
    kind = type(model).__name__
    op = _patchify(batch)
    fix = "process the images with this model's preset ('lfm2-vl')"
    _expect(kind, "order", op.order, "naflex", fix)
    _expect(kind, "patch_size", op.patch_size, model.config.vision_config.patch_size, fix)
    _expect(kind, "downsample_factor", op.merge_size, model.config.downsample_factor, fix)
    if batch.num_seqs == 0:
        return _pad_images(batch, [])
    inp = naflex_inputs(batch)
    out = model.get_image_features(pixel_values=inp["pixel_values"].to(_param_dtype(model)),
                                   spatial_shapes=inp["spatial_shapes"],
                                   pixel_attention_mask=inp["pixel_attention_mask"],
                                   return_dict=True)
    return _pad_images(batch, list(out.pooler_output))


#: How ``encode`` runs each kind of class (``vlmprep.presets.spec.VIT_KINDS``): what it returns.
_KIND_RETURNS = {
    "qwen_tower": "merged embeddings (tokens_i, out_hidden) per image",
    "qwen_model": "merged embeddings (tokens_i, out_hidden) per image",
    "tile_tower": "last_hidden_state (tiles_i, L, D) per image",
    "tile_model": "get_image_features (tiles_i, tokens, D_llm) per image",
    "anyres_model": "get_image_features packed (num_embeddings_i, D_llm) per image",
    "naflex": "last_hidden_state valid rows (patches_i, D) per image",
    "naflex_model": "get_image_features (tokens_i, D_llm) per image, tiles concatenated",
}
# The classes of each kind are declared by the families (``FamilySpec.vit_towers`` in each
# ``presets/<family>.py``) and read from ``vlmprep.presets.vit_towers()`` on access: the dispatch
# table ``SUPPORTED_TOWERS`` (transformers class name -> what ``encode`` returns for it, for
# messages) and the per-kind tuples ``_QWEN`` (qwen_tower), ``_QWEN_FULL`` (qwen_model),
# ``_TILE_TOWERS`` (tile_tower), ``_FULL_TILES`` (tile_model).
_KIND_TUPLES = {"_QWEN": "qwen_tower", "_QWEN_FULL": "qwen_model", "_TILE_TOWERS": "tile_tower",
                "_FULL_TILES": "tile_model"}


def _supported() -> dict[str, str]:
    """transformers class name -> its kind, from the families' declarations."""
    return {c: kind for kind, classes in presets.vit_towers().items() for c in classes}


def __getattr__(name: str) -> Any:
    if name == "SUPPORTED_TOWERS":
        return {c: _KIND_RETURNS[kind] for c, kind in _supported().items()}
    if name in _KIND_TUPLES:
        return presets.vit_towers().get(_KIND_TUPLES[name], ())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def encode(vision_tower: Any, batch: "PackedBatch", *, deepstack: bool = False
           ) -> list["torch.Tensor"]:
    """Run a transformers vision tower on a packed batch: one embedding tensor per input image.

    ``batch`` must be on the tower's device; a uint8 batch is normalized there first
    (``normalize_on_device``). Dispatch on the tower's class (``SUPPORTED_TOWERS``):

    - Qwen2-VL / Qwen2.5-VL / Qwen3-VL vision models (``model.visual``; a full model is accepted
      and its ``visual`` used): called as ``visual(pixel_values, grid_thw, **qwen_vision_kwargs)``
      (positions, cu_seqlens, windows computed on the host). Returns the merger output,
      ``(t*h*w / merge^2, out_hidden_size)`` per image, what ``get_image_features`` splits.
      Compact rows (``row_form="compact"``, ``(N, C*P*P)``): the tower runs with its patch
      embedding's temporal kernel folded (``Conv3d`` over T identical frames == the convolution
      with the T weight slices summed, bias unchanged; ``adapters._fold``), through a shallow view
      of the tower that shares its weights: the tower itself is never modified, so concurrent
      calls are safe. Same embeddings up to float rounding (float32, a real-size Qwen2-VL tower:
      max difference 1.2e-6 relative, about the full path's own float32 error against float64;
      docs/how-to/transformers.md "Compact rows"); no full-size copy of the rows is made.
      Qwen3-VL also returns deepstack features (one ``(tokens, out_hidden)`` per
      ``deepstack_visual_indexes`` layer): left out by default; ``deepstack=True`` concatenates
      them on the last dim, ``(tokens, out_hidden * (1 + levels))`` (vLLM's image_embeds layout).
      GLM-4.1V / 4.5V (``Glm4vVisionModel``, ``Glm4vModel``, ...) run the same way: the grid is
      passed one ``(1, h, w)`` row per frame group, as ``Glm4vModel.get_video_features`` does.
    - ``SiglipVisionModel``, ``CLIPVisionModel`` (LLaVA-1.5), ``InternVLVisionModel``,
      ``Ovis2VisionModel``, ``Llama4VisionModel`` (``model.vision_model``; its pixel-shuffle
      adapter included): ``last_hidden_state`` per tile, ``(tiles_i, L, hidden)`` per image
      (CLIP / InternVL: L includes CLS; LLaVA takes ``hidden_states[-2][:, 1:]``: pass the full
      model for that).
    - ``InternVLModel`` / ``LlavaModel`` / ``Ovis2Model`` (or their
      ``*ForConditionalGeneration``):
      ``get_image_features`` (config's feature layer and select strategy, InternVL's pixel
      shuffle, the projector): ``(tiles_i, tokens_per_tile, text_hidden)``; ``.flatten(0, 1)`` is
      the order the LLM consumes.
    - ``LlavaNextModel`` / ``LlavaOnevisionModel`` (or their ``*ForConditionalGeneration``):
      ``get_image_features`` on the batch's transformers form: each image's crops through the
      tower and projector, packed as the model packs them (unpadding, ``image_newline``):
      ``(num_embeddings_i, text_hidden)`` per image, vLLM's embedding rows.
    - ``Siglip2VisionModel`` (NaFlex; also LFM2-VL's ``vision_tower``): padded to
      ``naflex_inputs``; the valid rows ``(patches_i, hidden)`` per image (an LFM2-VL image's
      tiles, then its thumbnail, concatenated).
    - ``Lfm2VlModel`` (or its ``*ForConditionalGeneration``): ``get_image_features`` on
      ``naflex_inputs`` (tower, unshuffle, projector): ``(num_embeddings_i, text_hidden)`` per
      image, its tiles' rows concatenated in placeholder order.
    Not run (docs/presets/<name>.md says why): MiniCPM-V 4.6, Phi-4-multimodal.

    Videos: pass ``batch.videos`` (the ``"video"`` PackedBatch of ``proc(images, videos=...)``):
    one tensor per video, what the model's ``get_video_features`` gives for it. Qwen: the merger
    output of the whole video, ``(t*h*w / merge^2, out_hidden)`` (the tower sees grid ``(t, h,
    w)``: per-frame-group attention segments and positions, as transformers computes them);
    tile towers: ``(frames_v, L, hidden)``, one tile per sampled frame (LLaVA-OneVision's 2x2
    pooling and newline are the model's, after the tower; InternVL's
    ``get_image_features`` per frame is what its model does with video frames). An image batch
    with videos encodes its images only; one with no image and videos raises (pass
    ``batch.videos``).

    Skipped images (``batch.errors``) get an empty tensor ``(0, ...)``. Note: transformers' SDPA /
    eager attention in Qwen towers reads ``cu_seqlens`` with ``.tolist()`` (one sync per layer);
    with ``attn_implementation="flash_attention_2"`` the precomputed ``max_seqlen`` avoids it.
    """
    name = type(vision_tower).__name__
    supported = _supported()
    kind = supported.get(name)
    if kind is None:
        raise NotImplementedError(
            f"encode: expected a transformers vision tower of one of the supported types "
            f"{sorted(supported)}, got {name}; for a plain ViT module use "
            f"vlmprep.adapters.vit.encode_packed(module, batch, patch_embed=...)")
    vids = getattr(batch, "videos", None)
    if batch.num_images == 0 and vids is not None and vids.num_images:
        raise ValueError(f"encode: expected a batch holding images, or the videos' batch, got an "
                         f"image batch with 0 images and {vids.num_images} videos in "
                         f"batch.videos; call encode(vision_tower, batch.videos)")
    _check_batch(batch)
    param = next(iter(vision_tower.parameters()), None)
    if param is not None and param.device != batch.device:
        raise ValueError(f"encode: expected the batch on the tower's device ({param.device}), got "
                         f"{batch.device}; call batch.to({str(param.device)!r}) first")
    batch = normalize_on_device(batch)
    if kind in ("qwen_tower", "qwen_model"):
        return _encode_qwen(vision_tower, batch, deepstack)
    if kind == "tile_tower":
        return _encode_tiles_tower(vision_tower, batch)
    if kind == "tile_model":
        return _encode_full_tiles(vision_tower, batch)
    if kind == "anyres_model":
        return _encode_anyres(vision_tower, batch)
    if kind == "naflex_model":
        return _encode_naflex_model(vision_tower, batch)
    return _encode_siglip2(vision_tower, batch)


def encode_packed(vit_module: Callable, batch: "PackedBatch",
                  patch_embed: Callable | None = None, *, positions: bool = False
                  ) -> list["torch.Tensor"]:
    """A plain ViT on all sequences at once, kept apart by a block-diagonal attention mask.

    Contract:
        ``patch_embed(pixel_values) -> (N, D)``: ``patches`` layout: gets ``(N, patch_dim)`` rows;
        ``tiles`` layout: gets ``(S, C, H, W)`` and may return ``(S, L, D)`` (flattened here;
        ``L`` must be the tile's ``gh * gw``). ``None``: the rows themselves are the input
        (``patches`` layout only).
        ``vit_module(x, attn_mask) -> (1, N, D')`` or ``(N, D')``, with ``x (1, N, D)`` and
        ``attn_mask (1, 1, N, N)`` bool (True = may attend; SDPA's convention); with
        ``positions=True`` also ``positions=(N, 2)`` int64 ``(row, col)`` (``patch_positions``).
    Returns one ``(tokens_i, D')`` tensor per input image (skipped: empty). A uint8 batch is
    normalized on its device first. Token-dropping or token-adding modules (CLS, mergers)
    are fine as long as the output rows are a uniform multiple or fraction of N per sequence.
    A compact batch (``row_form="compact"``) hands ``patch_embed`` its ``(N, C*P*P)`` rows as
    they are (fold the temporal kernel there, as ``encode`` does for Qwen towers, or pass
    ``dataclasses.replace(batch, pixel_values=batch.full_rows(), row_form="full")``).
    """
    import torch
    _check_batch(batch)
    batch = normalize_on_device(batch)
    pv = batch.pixel_values
    if patch_embed is None:
        if batch.layout != "patches":
            raise ValueError("encode_packed: expected a patch_embed for a tiles batch (its "
                             "pixel_values are (S, C, H, W) images), got None; pass "
                             "patch_embed=<module mapping tiles to (S, L, D)>")
        x = pv.float() if not pv.is_floating_point() else pv
    else:
        x = patch_embed(pv)
        if x.dim() == 3:                                  # (S, L, D) tile embeddings
            x = x.reshape(-1, x.shape[-1])
    n = sum(batch.seqlens)
    if x.dim() != 2 or x.shape[0] != n:
        raise ValueError(f"encode_packed: expected patch embeddings (N={n}, D), got "
                         f"{tuple(x.shape)}; patch_embed must give one row per patch in the "
                         f"batch's row order")
    kw = {"positions": patch_positions(batch)} if positions else {}
    y = vit_module(x[None], block_diagonal_mask(batch), **kw)
    if isinstance(y, (tuple, list)):
        y = y[0]
    if y.dim() == 3:
        y = y[0]
    return split_images(y, batch) if batch.num_seqs else [torch.empty(0)] * batch.num_images
