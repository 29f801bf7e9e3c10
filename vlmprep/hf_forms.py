"""``PackedBatch.to_hf()`` forms: one function per transformers image processor's output, and
the video keys of each family's video processor (``VIDEO_HF_FORMS``, ``batch.videos``).

Each form takes a PackedBatch (and, for processors that read a flat list as one multi-image
sample, ``images_per_sample``) and returns exactly that processor's keys, shapes, dtypes and
padding. Register a new one with ``@hf_form(name)``; a pipeline picks it by ``pack.hf_output``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence, cast

from .plan.mllama import image_aspect_ratio_id

if TYPE_CHECKING:
    from .ops import canvas_tile
    from .pack import PackedBatch
    from .pipeline import Pipeline

__all__ = ["HF_FORMS", "HF_NESTING_FORMS", "HF_OUTPUTS", "VIDEO_HF_FORMS", "hf_form",
           "hf_video_form", "hf_output", "hf_outputs"]

#: ``pack.hf_output`` name -> fn(batch) -> the transformers image processor's output dict: the one
#: registry of forms (``@hf_form``); ``HF_OUTPUTS`` is "auto" and its names. What each gives:
#: "auto" (qwen2_vl or images, by patchify order); qwen2_vl (pixel_values + image_grid_thw);
#: images (pixel_values [N, C, H, W]); got_ocr2 (tiles + num_patches); pixtral ([B, 3, Hmax,
#: Wmax] + image_sizes); siglip2 ([B, max_num_patches, P*P*3] + pixel_attention_mask +
#: spatial_shapes); idefics3 ([B, max_imgs, C, M, M] + pixel_attention_mask); llava_next /
#: llava_onevision ([B, max_crops, C, T, T] + image_sizes, + batch_num_images for OneVision);
#: mllama ([B, max_imgs, max_tiles, C, T, T] + aspect ratio ids/mask); gemma3 ([sum(1 + crops),
#: C, S, S] + num_crops); ovis2 (tiles + grids [rows, cols]); lfm2_vl (siglip2's, a sequence
#: per tile); minicpmv ([1, C, P, L]: every tile's patches side by side, + target_sizes, grids,
#: num_patches_per_image).
HF_FORMS: dict[str, Callable[..., dict]] = {}
#: Forms called as fn(batch, images_per_sample) (None: the processor's reading of a flat list);
#: filled by ``hf_form(name, nesting=True)``.
HF_NESTING_FORMS: set[str] = set()


#: The names ``pack.hf_output`` may take: ``"auto"`` (by patchify order) and every registered
#: ``@hf_form`` (kept equal to ``hf_outputs()`` by ``hf_form``; also ``vlmprep.ops.HF_OUTPUTS``).
HF_OUTPUTS: tuple[str, ...] = ("auto",)


def hf_outputs() -> tuple[str, ...]:
    """``HF_OUTPUTS`` now: "auto" and the registered forms, in registration order."""
    return ("auto",) + tuple(HF_FORMS)


def hf_form(name: str, nesting: bool = False):
    """Decorator: register the ``to_hf()`` form called ``name`` (a snake_case name, then one of
    ``HF_OUTPUTS``, for ``pack(hf_output=name)``); ``nesting``: called as fn(batch,
    images_per_sample). Loud on a name defined twice or not a name."""
    def deco(fn):
        if name in HF_FORMS:
            raise RuntimeError(f"to_hf form {name!r} defined twice")
        if not isinstance(name, str) or not name.isidentifier() or name == "auto":
            raise RuntimeError(f"to_hf form {name!r}: expected a snake_case name other than "
                               f"'auto' (HF_OUTPUTS: {hf_outputs()}), got {name!r}; name it as "
                               f"pack(hf_output=...) will")
        global HF_OUTPUTS
        HF_FORMS[name] = fn
        HF_OUTPUTS = hf_outputs()
        if nesting:
            HF_NESTING_FORMS.add(name)
        return fn
    return deco


@hf_form("qwen2_vl")
def _qwen2_vl(b: "PackedBatch") -> dict:
    return {"pixel_values": b.pixel_values, "image_grid_thw": b.grid_thw}


@hf_form("images")
def _images(b: "PackedBatch") -> dict:
    return {"pixel_values": b.pixel_values}


@hf_form("got_ocr2")
def _got_ocr2(b: "PackedBatch") -> dict:
    import torch
    counts = torch.bincount(b.image_index, minlength=b.num_images)
    ok = [i for i in range(b.num_images) if i not in b.errors]
    return {"pixel_values": b.pixel_values, "num_patches": counts[ok]}


@hf_form("ovis2")
def _ovis2(b: "PackedBatch") -> dict:
    """``Ovis2ImageProcessor``: ``pixel_values (sum(tiles), C, T, T)`` (each image's thumbnail, if
    any, then its grid tiles) and ``grids (num_images, 2)`` int64: ``[rows, cols]`` per image.

    Given 1080x1920 and 1x1 -> pixel_values (14, 3, 448, 448), grids [[4, 3], [1, 1]].
    """
    import torch
    plans = _ok_plans(b, "ovis2")
    rows = [[p.canvases[0].resize_hw[0] // p.tiles[-1][2], p.canvases[0].resize_hw[1] // p.tiles[-1][3]]
            for p in plans]
    grids = torch.tensor(rows, dtype=torch.int64, device=b.image_index.device)
    return {"pixel_values": b.pixel_values, "grids": grids.reshape(len(rows), 2)}


@hf_form("minicpmv")
def _minicpmv(b: "PackedBatch") -> dict:
    """``MiniCPMV4_6ImageProcessor``: ``pixel_values (1, C, P, L)``: every tile's (each image's
    source, then its slices) ``P x P`` patches in raster order side by side along the last axis
    (patch k at columns ``[k*P, (k+1)*P)``), all images in one row as transformers concatenates
    them; ``target_sizes (tiles, 2)`` int32: each tile's ``(h / P, w / P)``; ``grids``: a list of
    ``[rows, cols]`` per image (``[0, 0]`` unsliced) and ``num_patches_per_image``: a list of
    tiles per image (both Python lists, as transformers returns them; its Processor drops them).

    Given 1080x1920 and 1x1 -> pixel_values (1, 3, 14, 14 * (1056 + 8 * 1024 + 1024)),
    target_sizes [[24, 44], [32, 32] * 8, [32, 32]], grids [[2, 4], [0, 0]], num_patches [9, 1].
    """
    import torch
    plans = _ok_plans(b, "minicpmv")
    p = b.pipeline.patchify.patch_size if b.pipeline is not None else 14
    c = b.pixel_values.shape[1] // (p * p)
    pv = b.pixel_values.reshape(-1, c, p, p).permute(1, 2, 0, 3).reshape(1, c, p, -1)
    grids = [[0, 0] if len(q.tiles) == 1 else
             [q.canvases[1].resize_hw[0] // q.tiles[-1][2], q.canvases[1].resize_hw[1] // q.tiles[-1][3]]
             for q in plans]
    return {"pixel_values": pv, "target_sizes": b.grid_thw[:, 1:].to(torch.int32),
            "grids": grids, "num_patches_per_image": [len(q.tiles) for q in plans]}


@hf_form("idefics3", nesting=True)
def _idefics3(b: "PackedBatch", images_per_sample: Sequence[int] | None) -> dict:
    """``Idefics3ImageProcessor`` (SmolVLM's too): ``pixel_values (B, max_tiles, C, M, M)``, each
    sample's tiles (its images' splits + global images) in order, zero-padded over the batch;
    ``pixel_attention_mask (B, max_tiles, M, M)`` int64, 1 on a real tile. A flat list is one
    sample (B = 1), as the processor reads it.

    Given images with 16 and 1 tiles and images_per_sample [1, 1] -> pixel_values (2, 16, 3, M, M),
    sample 1 holds its tile at slot 0 and zeros in slots 1..15 (mask 0 there).
    """
    import torch
    counts = torch.bincount(b.image_index, minlength=b.num_images).tolist()
    tiles = [counts[i] for i in range(b.num_images) if i not in b.errors]
    samples = [len(tiles)] if images_per_sample is None else [int(k) for k in images_per_sample]
    per_sample, k = [], 0
    for n in samples:
        per_sample.append(sum(tiles[k:k + n]))
        k += n
    width = max(per_sample, default=0)
    c, h, w = b.pixel_values.shape[1:]
    pv = b.pixel_values.new_zeros((len(samples), width, c, h, w))
    mask = torch.zeros((len(samples), width, h, w), dtype=torch.int64, device=b.pixel_values.device)
    row = 0
    for s, n in enumerate(per_sample):
        pv[s, :n] = b.pixel_values[row:row + n]
        mask[s, :n] = 1
        row += n
    return {"pixel_values": pv, "pixel_attention_mask": mask}


def _llava_crops(b: "PackedBatch") -> tuple[list[int], dict]:
    """LLaVA-NeXT / OneVision: ``(tiles per good image, {pixel_values (N, max_crops, C, T, T)
    zero-padded over the batch, image_sizes (N, 2) int64 source (H, W)})``."""
    import torch
    if len(b.image_plans) != b.num_images:
        raise ValueError("to_hf: this form needs the batch's image_plans (source sizes); expected a "
                         "batch made by Processor / split / concat, got one without them")
    counts = torch.bincount(b.image_index, minlength=b.num_images).tolist()
    ok = [i for i in range(b.num_images) if i not in b.errors]
    tiles = [counts[i] for i in ok]
    c, h, w = b.pixel_values.shape[1:]
    pv = b.pixel_values.new_zeros((len(ok), max(tiles, default=0), c, h, w))
    row = 0
    for k, n in enumerate(tiles):
        pv[k, :n] = b.pixel_values[row:row + n]
        row += n
    sizes = torch.tensor([list(b.image_plans[i].source_hw) for i in ok],
                         dtype=torch.int64).reshape(len(ok), 2)
    return tiles, {"pixel_values": pv, "image_sizes": sizes}


@hf_form("llava_next")
def _llava_next(b: "PackedBatch") -> dict:
    """``LlavaNextImageProcessor``: ``pixel_values (N, max_crops, C, T, T)`` (each image's base
    tile then its grid tiles, zero tiles after), ``image_sizes (N, 2)`` int64 original (H, W).
    The processor flattens multi-image samples, so samples change nothing.

    Given images of 1x1 (3 crops) and 1080x1920 (5 crops) -> pixel_values (2, 5, 3, 336, 336),
    image 0's slots 3..4 zero; image_sizes [[1, 1], [1080, 1920]].
    """
    return _llava_crops(b)[1]


@hf_form("llava_onevision", nesting=True)
def _llava_onevision(b: "PackedBatch", images_per_sample: Sequence[int] | None) -> dict:
    """``LlavaOnevisionImageProcessor``: as ``llava_next`` (N = images, not samples) plus
    ``batch_num_images (num_samples,)`` int64: ``images_per_sample`` without empty samples, or
    ``[1] * N`` for a flat list (the processor reads a flat list as single-image samples).

    The processor gives an image of a multi-image sample one padded-square tile
    (``anyres_tile(multi_image=True)``) and a single image its anyres tiles: the batch must
    have been made that way (1 tile vs >= 2), else this raises.
    """
    import torch
    tiles, out = _llava_crops(b)
    samples = [1] * len(tiles) if images_per_sample is None else [int(k) for k in images_per_sample]
    k = 0
    for n in samples:
        for j in range(k, k + n):
            if (n > 1) != (tiles[j] == 1):
                raise ValueError(
                    f"to_hf: processed image {j} has {tiles[j]} tiles, expected "
                    f"{'1 (a multi-image sample: padded square)' if n > 1 else '>= 2 (anyres)'} "
                    f"for a sample of {n} image(s); process the images of multi-image samples "
                    f"with multi_image=True and single images without, then concat the batches")
        k += n
    out["batch_num_images"] = torch.tensor([n for n in samples if n], dtype=torch.int64)
    return out


def _ok_plans(b: "PackedBatch", form: str) -> list:
    """The plans of the good images, in order; loud when the batch carries none."""
    if len(b.image_plans) != b.num_images:
        raise ValueError(f"to_hf ({form}): expected a batch made by a Processor (it carries one "
                         f"image plan per image), got {len(b.image_plans)} plans for "
                         f"{b.num_images} images; process the images with vlmprep.Processor")
    return [p for p in b.image_plans if p.index not in b.errors]


@hf_form("mllama", nesting=True)
def _mllama(b: "PackedBatch", images_per_sample: Sequence[int] | None) -> dict:
    """``MllamaImageProcessor``: ``pixel_values (B, max_imgs, max_tiles, C, T, T)`` with each
    image's real tiles first and 0 in unused tile and image slots; ``aspect_ratio_ids
    (B, max_imgs)`` int64 (1-based arrangement index, 0: no image); ``aspect_ratio_mask
    (B, max_imgs, max_tiles)`` int64 (1 on real tiles, and on tile 0 of every slot, as
    transformers does); ``num_tiles``: list (per sample) of lists (per image). A flat list is
    one sample (B = 1), as the processor reads it.

    Given 1080x1920 and 1x1 as one sample -> pixel_values (1, 2, 4, 3, 560, 560),
    aspect_ratio_ids [[6, 1]], aspect_ratio_mask [[[1, 1, 1, 1], [1, 0, 0, 0]]], num_tiles [[4, 1]].
    """
    import torch

    plans = _ok_plans(b, "mllama")
    op = cast("canvas_tile", b.pipeline["canvas_tile"])  # type: ignore[index]
    max_tiles = op.max_tiles
    samples = [len(plans)] if images_per_sample is None else [int(k) for k in images_per_sample]
    width = max(samples, default=0)
    dev = b.pixel_values.device
    pv = b.pixel_values.new_zeros((len(samples), width, max_tiles) + tuple(b.pixel_values.shape[1:]))
    ids = torch.zeros((len(samples), width), dtype=torch.int64, device=dev)
    mask = torch.zeros((len(samples), width, max_tiles), dtype=torch.int64, device=dev)
    mask[:, :, 0] = 1
    num_tiles: list[list[int]] = []
    row = k = 0
    for s, n_img in enumerate(samples):
        num_tiles.append([])
        for j in range(n_img):
            p = plans[k]
            k += 1
            n = len(p.tiles)
            pv[s, j, :n] = b.pixel_values[row:row + n]
            ids[s, j] = image_aspect_ratio_id(p, op)
            mask[s, j, :n] = 1
            num_tiles[-1].append(n)
            row += n
    return {"pixel_values": pv, "aspect_ratio_ids": ids, "aspect_ratio_mask": mask,
            "num_tiles": num_tiles}


@hf_form("gemma3")
def _gemma3(b: "PackedBatch") -> dict:
    """``Gemma3ImageProcessor``: ``pixel_values (sum(1 + crops), C, S, S)`` (each image, then its
    pan-and-scan crops) and ``num_crops (num_images,)`` int64. The processor flattens samples."""
    import torch
    counts = torch.bincount(b.image_index, minlength=b.num_images)
    ok = [i for i in range(b.num_images) if i not in b.errors]
    return {"pixel_values": b.pixel_values, "num_crops": counts[ok] - 1}


@hf_form("pixtral")
def _pixtral(b: "PackedBatch") -> dict:
    """``PixtralImageProcessor``: ``pixel_values (B, 3, Hmax, Wmax)``: each image's raster rows
    put back into its ``(3, H', W')`` image at the top left, zeros elsewhere (transformers pads
    after normalization); ``image_sizes (B, 2)`` int64 (host): ``(H', W')``. Multi-image samples
    are flattened, as the processor does (B = every processed image).

    Given images 32x64 and 80x32 (patch 16) -> pixel_values (2, 3, 80, 64); image 0 fills
    [:, :32, :64], image 1 [:, :80, :32]; image_sizes [[32, 64], [80, 32]].
    """
    import torch
    p = b.pipeline.patchify.patch_size if b.pipeline is not None else 16
    c = b.pixel_values.shape[1] // (p * p)
    grids = [(gh, gw) for _, gh, gw in b.grid_thw.tolist()]
    hmax = max((gh * p for gh, _ in grids), default=0)
    wmax = max((gw * p for _, gw in grids), default=0)
    pv = b.pixel_values.new_zeros((len(grids), c, hmax, wmax))
    row = 0
    for i, (gh, gw) in enumerate(grids):
        x = b.pixel_values[row:row + gh * gw].reshape(gh, gw, c, p, p)
        pv[i, :, :gh * p, :gw * p] = x.permute(2, 0, 3, 1, 4).reshape(c, gh * p, gw * p)
        row += gh * gw
    sizes = torch.tensor([[gh * p, gw * p] for gh, gw in grids], dtype=torch.int64)
    return {"pixel_values": pv, "image_sizes": sizes.reshape(len(grids), 2)}


@hf_form("siglip2")
def _siglip2(b: "PackedBatch", width: int | None = None) -> dict:
    """``Siglip2ImageProcessor`` (NaFlex): ``pixel_values (B, max_num_patches, P*P*C)`` with each
    image's ``[py, px, c]`` rows first and zero rows after; ``pixel_attention_mask
    (B, max_num_patches)`` int32, 1 on a real patch; ``spatial_shapes (B, 2)`` int64 (host):
    ``(h_p, w_p)``. Multi-image samples are flattened, as the processor does.

    Given images of 12x20 and 2x106 patches, max_num_patches 256 -> pixel_values (2, 256, 768),
    mask rows [1]*240 + [0]*16 and [1]*212 + [0]*44, spatial_shapes [[12, 20], [2, 106]].
    """
    import torch
    if width is None and b.pipeline is not None:
        width = getattr(b.pipeline.sizing, "max_num_patches", None)
    width = max([width or 0] + b.seqlens)
    pv = b.pixel_values.new_zeros((b.num_seqs, width, b.pixel_values.shape[1]))
    mask = torch.zeros((b.num_seqs, width), dtype=torch.int32, device=b.pixel_values.device)
    row = 0
    for i, n in enumerate(b.seqlens):
        pv[i, :n] = b.pixel_values[row:row + n]
        mask[i, :n] = 1
        row += n
    return {"pixel_values": pv, "pixel_attention_mask": mask,
            "spatial_shapes": b.grid_thw[:, 1:].clone()}


@hf_form("lfm2_vl")
def _lfm2_vl(b: "PackedBatch") -> dict:
    """``Lfm2VlImageProcessor``: SigLIP2 NaFlex's keys with one sequence per tile (each image's
    grid tiles row-major, then its thumbnail): ``pixel_values (tiles, max_num_patches, P*P*C)``,
    ``pixel_attention_mask`` int32, ``spatial_shapes`` int64; ``max_num_patches`` = 1024 for the
    checkpoints (``vlmprep.plan.lfm2_vl.lfm2_max_num_patches``).

    Given 1080x1920 and 500x500 (1.6B) -> pixel_values (10, 1024, 768), spatial_shapes
    [[32, 32]] * 8 + [[24, 42], [32, 32]].
    """
    from .plan.lfm2_vl import lfm2_max_num_patches
    pipe = b.pipeline
    if pipe is None or pipe.sizing.name != "lfm2_vl_tile":
        return _siglip2(b)
    pf = pipe.patchify
    width = lfm2_max_num_patches(pipe.sizing, pf.patch_size, pf.merge_size)  # type: ignore[arg-type]
    return _siglip2(b, width)


@hf_form("llama4")
def _llama4(b: "PackedBatch") -> dict:
    """``Llama4ImageProcessor``: ``pixel_values (sum(tiles), C, T, T)`` (each image's canvas tiles
    row-major, then its global view when it has more than one) and ``aspect_ratios
    (num_images, 2)`` int64: ``[rows, cols]`` of each image's canvas. transformers' pixels are
    bfloat16 (``Processor(dtype="bfloat16")``).

    Given 1080x1920 and 10x10 -> pixel_values (17, 3, 336, 336), aspect_ratios [[3, 5], [1, 1]].
    """
    import torch
    plans = _ok_plans(b, "llama4")
    rows = [[p.canvases[0].hw[0] // p.tiles[0][2], p.canvases[0].hw[1] // p.tiles[0][3]]
            for p in plans]
    ratios = torch.tensor(rows, dtype=torch.int64, device=b.image_index.device)
    return {"pixel_values": b.pixel_values, "aspect_ratios": ratios.reshape(len(rows), 2)}


@hf_form("phi4_multimodal")
def _phi4_multimodal(b: "PackedBatch") -> dict:
    """``Phi4MultimodalImageProcessor``: ``image_pixel_values (B, max_crops, C, T, T)`` (each
    image's global view, then its crops row-major; 0 in unused slots), ``image_sizes (B, 2)``
    int64 (the padded HD canvas ``[H', W']``), ``image_attention_mask (B, max_crops, m, m)``
    float32 (``m = T // patch_size``; 1 on the global view, on unmasked patches and in unused
    slots), ``num_img_tokens (B,)`` int64.

    Given 1080x1920 and 20x20 -> image_pixel_values (2, 16, 3, 448, 448), image_sizes
    [[1344, 2240], [448, 448]], image_attention_mask (2, 16, 32, 32), num_img_tokens [3918, 545].
    """
    import torch

    from .plan.phi4_multimodal import phi4_mask_valid
    plans = _ok_plans(b, "phi4_multimodal")
    op = b.pipeline.sizing if b.pipeline is not None else None
    if op is None or op.name != "phi4_hd":
        raise ValueError("to_hf (phi4_multimodal): expected a batch of a phi4_hd pipeline, got "
                         f"{getattr(op, 'name', None)!r}; use hf_output='images'")
    pv, dev = b.pixel_values, b.image_index.device
    t, m = op.tile_size, op.tile_size // op.patch_size  # type: ignore[attr-defined]
    n = max([len(p.tiles) for p in plans] + [1])
    out = pv.new_zeros((len(plans), n) + tuple(pv.shape[1:]))
    masks = torch.ones((len(plans), n, m, m), dtype=torch.float32, device=dev)
    start = 0
    for i, p in enumerate(plans):
        k, (h, w) = len(p.tiles), p.canvases[0].hw
        out[i, :k] = pv[start:start + k]
        start += k
        vr, vc = phi4_mask_valid(p.canvases[0].resize_hw, (h, w), op)  # type: ignore[arg-type]
        full = torch.zeros((h // t * m, w // t * m), dtype=torch.float32, device=dev)
        full[:vr, :vc] = 1
        masks[i, 1:k] = full.reshape(h // t, m, w // t, m).transpose(1, 2).reshape(-1, m, m)
    sizes = torch.tensor([list(p.canvases[0].hw) for p in plans], dtype=torch.int64, device=dev)
    tokens = torch.tensor([p.num_tokens for p in plans], dtype=torch.int64, device=dev)
    return {"image_pixel_values": out, "image_sizes": sizes.reshape(len(plans), 2),
            "image_attention_mask": masks, "num_img_tokens": tokens}


# -- videos ------------------------------------------------------------------------------------
#: image form name (``hf_output``) -> fn(video batch) -> the family's transformers video processor
#: output for the same videos (filled by ``hf_video_form``).
VIDEO_HF_FORMS: dict[str, Callable[..., dict]] = {}


def hf_video_form(*names: str):
    """Decorator: register the ``to_hf()`` video keys of the families whose image form is one of
    ``names`` (registered ``@hf_form`` names); fn(batch) gets the ``"video"`` PackedBatch."""
    def deco(fn):
        for name in names:
            if name in VIDEO_HF_FORMS:
                raise RuntimeError(f"to_hf video form {name!r} defined twice")
            if name not in HF_FORMS:
                raise RuntimeError(f"to_hf video form {name!r}: expected an image form "
                                   f"registered with @hf_form, one of {sorted(HF_FORMS)}, got "
                                   f"{name!r}; register the image form first")
            VIDEO_HF_FORMS[name] = fn
        return fn
    return deco


def _ok_video_plans(b: "PackedBatch") -> list:
    if len(b.video_plans) != b.num_images:
        raise ValueError(f"to_hf (videos): expected a video batch made by a Processor (one video "
                         f"plan per video), got {len(b.video_plans)} plans for {b.num_images} "
                         f"videos; process the videos with vlmprep.Processor(videos=...)")
    return [p for p in b.video_plans if p.index not in b.errors]


@hf_video_form("qwen2_vl")
def _qwen2_vl_video(b: "PackedBatch") -> dict:
    """``Qwen2VLVideoProcessor`` / ``Qwen3VLVideoProcessor``: ``pixel_values_videos
    (total_patches, C*T*P*P)`` and ``video_grid_thw (num_videos, 3)`` int64; Qwen2.5-VL's
    processor adds ``second_per_grid_ts (num_videos,)`` float32 (``temporal_patch_size /
    sampled fps``), present when the plans carry it (``VideoPlan.second_per_grid_ts``)."""
    import torch
    out = {"pixel_values_videos": b.pixel_values, "video_grid_thw": b.grid_thw}
    plans = _ok_video_plans(b)
    secs = [p.second_per_grid_ts for p in plans]
    if plans and all(s is not None for s in secs):
        out["second_per_grid_ts"] = torch.tensor([float(s) for s in secs if s is not None],
                                                 dtype=torch.float32)
    return out


@hf_form("glm4v")
def _glm4v(b: "PackedBatch") -> dict:
    """``Glm4vImageProcessor``: Qwen2-VL's keys (``pixel_values (patches, C*T*P*P)``,
    ``image_grid_thw``); a form of its own for GLM-4.1V's prompt tokens and engine facts."""
    return {"pixel_values": b.pixel_values, "image_grid_thw": b.grid_thw}


@hf_video_form("glm4v")
def _glm4v_video(b: "PackedBatch") -> dict:
    """``Glm4vVideoProcessor``: ``pixel_values_videos (total_patches, C*T*P*P)`` and
    ``video_grid_thw (num_videos, 3)`` int64."""
    return {"pixel_values_videos": b.pixel_values, "video_grid_thw": b.grid_thw}


def _frames_per_video(b: "PackedBatch") -> list[int]:
    import torch
    counts = torch.bincount(b.image_index, minlength=b.num_images).tolist()
    return [counts[i] for i in range(b.num_images) if i not in b.errors]


@hf_video_form("llava_onevision", "got_ocr2")
def _frames_video(b: "PackedBatch") -> dict:
    """``LlavaOnevisionVideoProcessor`` / ``InternVLVideoProcessor``: ``pixel_values_videos
    (num_videos, T, C, S, S)``; when the videos' frame counts differ, the list of ``(T_i, C, S, S)``
    tensors the processor returns without ``return_tensors`` (with "pt" it cannot stack them and
    raises). InternVLProcessor then moves the frames into ``pixel_values`` for the model (the
    adapters' business); the video processor's key is kept here."""
    frames = _frames_per_video(b)
    parts, row = [], 0
    for n in frames:
        parts.append(b.pixel_values[row:row + n])
        row += n
    if len(set(frames)) <= 1:
        c, h, w = b.pixel_values.shape[1:]
        return {"pixel_values_videos": b.pixel_values.reshape(len(frames), frames[0] if frames
                                                              else 0, c, h, w)}
    return {"pixel_values_videos": parts}


@hf_video_form("idefics3")
def _smolvlm_video(b: "PackedBatch") -> dict:
    """``SmolVLMVideoProcessor``: ``pixel_values (num_videos, T_max, C, M, M)``, each video's
    frames first and zero frames after (padded after normalization), and ``pixel_attention_mask
    (num_videos, T_max, M, M)`` int64, 1 on a real frame."""
    import torch
    frames = _frames_per_video(b)
    width = max(frames, default=0)
    c, h, w = b.pixel_values.shape[1:]
    pv = b.pixel_values.new_zeros((len(frames), width, c, h, w))
    mask = torch.zeros((len(frames), width, h, w), dtype=torch.int64, device=b.pixel_values.device)
    row = 0
    for k, n in enumerate(frames):
        pv[k, :n] = b.pixel_values[row:row + n]
        mask[k, :n] = 1
        row += n
    return {"pixel_values": pv, "pixel_attention_mask": mask}


def hf_output(pipeline: "Pipeline | None") -> str:
    """The resolved ``pack.hf_output`` of a pipeline ("auto" picks by the patchify order)."""
    if pipeline is None:
        return "qwen2_vl"
    form = pipeline.pack.hf_output
    if form == "auto":
        return "images" if pipeline.patchify.order == "tiles" else "qwen2_vl"
    if form not in HF_FORMS:
        raise ValueError(f"to_hf: pack.hf_output expected one of {hf_outputs()} (the registered "
                         f"forms), got {form!r} in pipeline {pipeline.name!r}; register it with "
                         f"@vlmprep.hf_forms.hf_form({form!r}) or pick one of those")
    return form
