"""PackedBatch: the output contract (API.md), and packing / splitting / to_hf.

cu_seqlens, a tiny example::

    Given  images A (grid 1x4x6 = 24 patches) and B (grid 1x2x2 = 4 patches)
    Output pixel_values (28, 1176); seqlens [24, 4]; cu_seqlens [0, 24, 28] (int32);
           max_seqlen 24; grid_thw [[1, 4, 6], [1, 2, 2]]; image_index [0, 1]
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from .errors import ImageError

if TYPE_CHECKING:
    import torch

    from .plan import ImagePlan
    from .spec.pipeline import Pipeline

__all__ = ["PackedBatch", "build", "concat"]


@dataclass
class PackedBatch:
    """All ViT sequences of a batch, concatenated in input order.

    Fields (shapes first):
        pixel_values: float32 / bfloat16 / uint8 on ``device``. ``layout="patches"``:
            ``(total_patches, patch_dim)``, a row is one patch in the family's layout (Qwen:
            ``[c, t, py, px]``, merge-grouped rows); ``layout="tiles"``:
            ``(num_seqs, C, H, W)``, one tile image per ViT sequence.
        cu_seqlens: ``(num_seqs + 1,)`` int32 on ``device``: prefix sums of ``seqlens`` from 0.
        seqlens: ``list[int]`` (host): patches per sequence; no device sync needed.
        max_seqlen: ``int``: the longest sequence (0 for an empty batch).
        grid_thw: ``(num_seqs, 3)`` int64 (host): ``(t, h, w)`` patch grid per sequence.
        image_index: ``(num_seqs,)`` int64 (host): the input image of each sequence.
        num_tokens: ``list[int]``, one per input image: LLM placeholder tokens (0 if skipped).
        errors: ``{input index: ImageError}`` of skipped images (``errors="skip"`` only).
        layout: ``"patches"`` or ``"tiles"``.
        pipeline: the resolved Pipeline that made this batch (decides ``to_hf`` keys).
        placeholders: ``list[str]``, one per input image: its prompt placeholder string.
        image_plans: ``list[ImagePlan]``, one per input image (index = position in this batch):
            the geometry ``to_hf`` forms need beyond the tiles (source size, tile arrangement);
            empty for a batch not made by ``build`` / ``split`` / ``concat``.
    """

    pixel_values: "torch.Tensor"
    cu_seqlens: "torch.Tensor"
    seqlens: list[int]
    max_seqlen: int
    grid_thw: "torch.Tensor"
    image_index: "torch.Tensor"
    num_tokens: list[int]
    errors: dict[int, ImageError] = field(default_factory=dict)
    layout: str = "patches"
    pipeline: "Pipeline | None" = field(default=None, repr=False)
    placeholders: list[str] = field(default_factory=list, repr=False)
    image_plans: list["ImagePlan"] = field(default_factory=list, repr=False)

    # -- basic facts ----------------------------------------------------------------------------
    @property
    def num_images(self) -> int:
        """Input images, skipped ones included."""
        return len(self.num_tokens)

    @property
    def num_seqs(self) -> int:
        return len(self.seqlens)

    @property
    def device(self) -> "torch.device":
        return self.pixel_values.device

    @property
    def dtype(self) -> "torch.dtype":
        return self.pixel_values.dtype

    def __repr__(self) -> str:
        return (f"PackedBatch(layout={self.layout!r}, pixel_values={tuple(self.pixel_values.shape)} "
                f"{str(self.pixel_values.dtype).replace('torch.', '')} on {self.device}, "
                f"num_seqs={self.num_seqs}, max_seqlen={self.max_seqlen}, "
                f"num_tokens={self.num_tokens}, errors={sorted(self.errors)})")

    # -- conversions ----------------------------------------------------------------------------
    def to(self, device: "str | torch.device", non_blocking: bool = False) -> "PackedBatch":
        """The same batch with its device tensors on ``device`` (host fields shared)."""
        return replace(self, pixel_values=self.pixel_values.to(device, non_blocking=non_blocking),
                       cu_seqlens=self.cu_seqlens.to(device, non_blocking=non_blocking))

    def split(self) -> Iterator["PackedBatch"]:
        """One PackedBatch per input image, in input order (views, no copy).

        A skipped image yields an empty batch whose ``errors`` is ``{0: error}``.
        """
        import torch
        row = 0
        seq = 0
        img_of_seq = self.image_index.tolist()
        for i in range(self.num_images):
            s0 = seq
            while seq < len(img_of_seq) and img_of_seq[seq] == i:
                seq += 1
            lens = self.seqlens[s0:seq]
            n = sum(lens) if self.layout == "patches" else len(lens)
            err = {0: _reindex(self.errors[i], 0)} if i in self.errors else {}
            yield _assemble(self.pixel_values[row:row + n], lens, self.grid_thw[s0:seq],
                            torch.zeros(seq - s0, dtype=torch.int64), [self.num_tokens[i]], err,
                            self.layout, self.pipeline, self.placeholders[i:i + 1],
                            _plans_from(self.image_plans[i:i + 1], 0))
            row += n

    def to_hf(self, images_per_sample: Sequence[int] | None = None) -> dict:
        """What the family's transformers image processor returns for the same images.

        By the pipeline's ``pack.hf_output`` ("auto": by layout):
          - ``qwen2_vl``: ``{"pixel_values": (total_patches, patch_dim), "image_grid_thw":
            (num_images, 3) int64}`` (``Qwen2VLImageProcessor``);
          - ``images``: ``{"pixel_values": (num_images, C, H, W)}`` (SigLIP, CLIP / LLaVA-1.5);
          - ``got_ocr2``: ``{"pixel_values": (total_tiles, C, H, W), "num_patches": (num_images,)
            int64}`` (InternVL's ``GotOcr2ImageProcessor`` with ``crop_to_patches``);
          - ``pixtral``: ``{"pixel_values": (num_images, 3, Hmax, Wmax), "image_sizes":
            (num_images, 2) int64}`` (zero-padded);
          - ``siglip2``: ``{"pixel_values": (num_images, max_num_patches, P*P*C),
            "pixel_attention_mask": int32, "spatial_shapes": (num_images, 2) int64}``.
        These processors flatten multi-image samples, so ``images_per_sample`` only checks the
        count. Forms in ``HF_NESTING_FORMS`` (e.g. ``idefics3``: ``pixel_values (B, max_tiles,
        C, M, M)`` + ``pixel_attention_mask``) nest the images into samples by it. Skipped images are absent.
        """
        n_ok = self.num_images - len(self.errors)
        if images_per_sample is not None:
            if any(int(k) < 0 for k in images_per_sample) or sum(images_per_sample) != n_ok:
                raise ValueError(f"to_hf: images_per_sample expected non-negative counts summing to "
                                 f"{n_ok} (the processed images), got {list(images_per_sample)}")
        form = hf_output(self.pipeline)
        if form in HF_NESTING_FORMS:  # forms that nest images into samples get the counts
            return HF_FORMS[form](self, images_per_sample)
        return HF_FORMS[form](self)


#: ``pack.hf_output`` name -> fn(batch) -> the transformers image processor's output dict.
HF_FORMS: dict[str, "Callable[[PackedBatch], dict]"] = {}
#: Forms called as fn(batch, images_per_sample) (None: the processor's reading of a flat list).
HF_NESTING_FORMS: set[str] = set()


def hf_form(name: str):
    """Decorator: register the ``to_hf()`` form called ``name``; loud on conflicts."""
    def deco(fn):
        if name in HF_FORMS:
            raise RuntimeError(f"to_hf form {name!r} defined twice")
        HF_FORMS[name] = fn
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


@hf_form("idefics3")
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


HF_NESTING_FORMS.add("idefics3")


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


@hf_form("llava_onevision")
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


HF_NESTING_FORMS.add("llava_onevision")


def _ok_plans(b: "PackedBatch", form: str) -> list:
    """The plans of the good images, in order; loud when the batch carries none."""
    if len(b.image_plans) != b.num_images:
        raise ValueError(f"to_hf ({form}): expected a batch made by a Processor (it carries one "
                         f"image plan per image), got {len(b.image_plans)} plans for "
                         f"{b.num_images} images; process the images with vlmprep.Processor")
    return [p for p in b.image_plans if p.index not in b.errors]


@hf_form("mllama")
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

    from .plan.mllama import aspect_ratio_id
    plans = _ok_plans(b, "mllama")
    max_tiles = b.pipeline.sizing.max_tiles  # type: ignore[union-attr]
    t = b.pipeline.tile_hw[0]  # type: ignore[union-attr,index]
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
            ch, cw = p.canvases[0].hw
            pv[s, j, :n] = b.pixel_values[row:row + n]
            ids[s, j] = aspect_ratio_id((ch // t, cw // t), max_tiles)
            mask[s, j, :n] = 1
            num_tiles[-1].append(n)
            row += n
    return {"pixel_values": pv, "aspect_ratio_ids": ids, "aspect_ratio_mask": mask,
            "num_tiles": num_tiles}


HF_NESTING_FORMS.add("mllama")


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
def _siglip2(b: "PackedBatch") -> dict:
    """``Siglip2ImageProcessor`` (NaFlex): ``pixel_values (B, max_num_patches, P*P*C)`` with each
    image's ``[py, px, c]`` rows first and zero rows after; ``pixel_attention_mask
    (B, max_num_patches)`` int32, 1 on a real patch; ``spatial_shapes (B, 2)`` int64 (host):
    ``(h_p, w_p)``. Multi-image samples are flattened, as the processor does.

    Given images of 12x20 and 2x106 patches, max_num_patches 256 -> pixel_values (2, 256, 768),
    mask rows [1]*240 + [0]*16 and [1]*212 + [0]*44, spatial_shapes [[12, 20], [2, 106]].
    """
    import torch
    width = getattr(b.pipeline.sizing, "max_num_patches", None) if b.pipeline is not None else None
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


def hf_output(pipeline: "Pipeline | None") -> str:
    """The resolved ``pack.hf_output`` of a pipeline ("auto" picks by the patchify layout)."""
    if pipeline is None:
        return "qwen2_vl"
    form = pipeline.pack.hf_output
    if form == "auto":
        return "images" if pipeline.patchify.layout == "tiles" else "qwen2_vl"
    return form


def _reindex(err: ImageError, index: int) -> ImageError:
    """The same error placed at ``index`` (its position in the batch that now holds it)."""
    out = ImageError(err.reason, index=index, source=err.source)
    out.__cause__ = err.__cause__
    return out


def _assemble(pixel_values, seqlens: list[int], grid_thw, image_index, num_tokens: list[int],
              errors: dict, layout: str, pipeline, placeholders: list[str],
              image_plans: Sequence["ImagePlan"] = ()) -> PackedBatch:
    import torch
    cu = [0]
    for n in seqlens:
        cu.append(cu[-1] + n)
    return PackedBatch(
        pixel_values=pixel_values,
        cu_seqlens=torch.tensor(cu, dtype=torch.int32).to(pixel_values.device),
        seqlens=list(seqlens), max_seqlen=max(seqlens, default=0), grid_thw=grid_thw,
        image_index=image_index, num_tokens=list(num_tokens), errors=dict(errors), layout=layout,
        pipeline=pipeline, placeholders=list(placeholders), image_plans=list(image_plans))


def build(pixel_values: "torch.Tensor", plans: Sequence["ImagePlan"], errors: dict[int, ImageError],
          pipeline: "Pipeline") -> PackedBatch:
    """Pack the rows of the good images of ``plans`` (in input order) into a PackedBatch.

    ``pixel_values`` holds exactly the rows (patches or tiles) of the images not in ``errors``.
    """
    import torch
    seqlens, grids, index = [], [], []
    for p in plans:
        if p.index in errors:
            continue
        for g in p.grid_thw:
            seqlens.append(g[0] * g[1] * g[2])
            grids.append(g)
            index.append(p.index)
    rows = sum(seqlens) if pipeline.patchify.layout != "tiles" else len(seqlens)
    assert rows == pixel_values.shape[0], "packed rows disagree with the plan"
    return _assemble(
        pixel_values, seqlens, torch.tensor(grids, dtype=torch.int64).reshape(len(grids), 3),
        torch.tensor(index, dtype=torch.int64), [0 if p.index in errors else p.num_tokens
                                                 for p in plans],
        errors, "tiles" if pipeline.patchify.layout == "tiles" else "patches", pipeline,
        ["" if p.index in errors else p.placeholder for p in plans], _plans_from(plans, 0))


def concat(batches: Sequence[PackedBatch]) -> PackedBatch:
    """Join batches as if their images had been one input list (inverse of ``split``)."""
    import torch
    if not batches:
        raise ValueError("concat: expected at least one PackedBatch, got none")
    layouts = {b.layout for b in batches}
    if len(layouts) != 1:
        raise ValueError(f"concat: expected one layout, got {sorted(layouts)}")
    offset = 0
    index, errors = [], {}
    for b in batches:
        index.append(b.image_index + offset)
        errors.update({k + offset: _reindex(v, k + offset) for k, v in b.errors.items()})
        offset += b.num_images
    return _assemble(
        torch.cat([b.pixel_values for b in batches]), [n for b in batches for n in b.seqlens],
        torch.cat([b.grid_thw for b in batches]), torch.cat(index),
        [n for b in batches for n in b.num_tokens], errors, batches[0].layout,
        batches[0].pipeline, [s for b in batches for s in b.placeholders],
        _concat_plans(batches))


def _plans_from(plans: Sequence["ImagePlan"], start: int) -> list["ImagePlan"]:
    """``plans`` re-indexed from ``start`` (their positions in the batch that now holds them)."""
    from dataclasses import replace as _replace
    return [p if p.index == start + k else _replace(p, index=start + k) for k, p in enumerate(plans)]


def _concat_plans(batches: Sequence[PackedBatch]) -> list["ImagePlan"]:
    """The joined ``image_plans``, or none when any part lacks them (no partial list)."""
    if any(len(b.image_plans) != b.num_images for b in batches):
        return []
    return _plans_from([p for b in batches for p in b.image_plans], 0)
