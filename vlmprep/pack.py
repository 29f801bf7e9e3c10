"""PackedBatch: the output contract (API.md), and packing / splitting / to_hf.

cu_seqlens, a tiny example::

    Given  images A (grid 1x4x6 = 24 patches) and B (grid 1x2x2 = 4 patches)
    Output pixel_values (28, 1176); seqlens [24, 4]; cu_seqlens [0, 24, 28] (int32);
           max_seqlen 24; grid_thw [[1, 4, 6], [1, 2, 2]]; image_index [0, 1]

Videos (issue 19) travel in a second PackedBatch beside the images' one, ``batch.videos``
(``modality="video"``): its items are the input videos, a ViT sequence is a whole video for Qwen
(grid ``(t, h, w)``, t > 1: one cu_seqlens entry per video) and a frame for the tile families
(LLaVA-OneVision, InternVL, SmolVLM: ``image_index`` names the video of each frame), so image rows
and video rows never share a tensor and every images-only field keeps its meaning.
docs/concepts.md "Videos in a PackedBatch".
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterator, MutableMapping, Sequence

from .errors import ImageError
from .hf_forms import HF_FORMS, HF_NESTING_FORMS, VIDEO_HF_FORMS, hf_output
from .ops import pack
from .plan.plan import count_embeddings

if TYPE_CHECKING:
    import torch

    from .pipeline import Pipeline
    from .plan import ImagePlan
    from .plan.video import VideoPlan

__all__ = ["PackedBatch", "build", "build_videos", "concat", "expand_rows", "execution_pipeline",
           "RETURN_TENSORS", "MODALITIES", "ROW_FORMS"]

#: ``to_hf(return_tensors=...)`` values, as transformers' processors take them.
RETURN_TENSORS = ("pt", "np")
#: ``PackedBatch.modality``: what the batch's items are.
MODALITIES = ("image", "video")
#: ``PackedBatch.row_form`` / ``Processor(row_form=...)``: how image rows that repeat over time
#: are held. "full": as the model's processor gives them (Qwen ``[c, t, py, px]``, the still image
#: repeated ``temporal_patch_size`` times); "compact": one copy, ``[c, py, px]`` (the t=0 slice),
#: for pipelines whose rows repeat (``execution_pipeline``); ``expand_rows`` gives the full form
#: back. docs/concepts.md "Row forms".
ROW_FORMS = ("full", "compact")


@dataclass
class PackedBatch:
    """All ViT sequences of a batch, concatenated in input order.

    Fields (shapes first):
        pixel_values: float32 / bfloat16 / uint8 on ``device``. ``layout="patches"``:
            ``(total_patches, patch_dim)``, a row is one patch in the family's row order (Qwen:
            ``[c, t, py, px]``, merge-grouped rows); ``layout="tiles"``:
            ``(num_seqs, C, H, W)``, one tile image per ViT sequence.
        cu_seqlens: ``(num_seqs + 1,)`` int32 on ``device``: prefix sums of ``seqlens`` from 0.
        seqlens: ``list[int]`` (host): patches per sequence; no device sync needed.
        max_seqlen: ``int``: the longest sequence (0 for an empty batch).
        grid_thw: ``(num_seqs, 3)`` int64 (host): ``(t, h, w)`` patch grid per sequence.
        image_index: ``(num_seqs,)`` int64 (host): the input image of each sequence.
        num_tokens: ``list[int]``, one per input image: LLM placeholder tokens (0 if skipped).
            ``num_embeddings`` (a property beside it): the embedding rows an engine expects.
        errors: ``{input index: ImageError}`` of skipped images (``errors="skip"`` only), by index.
        layout: ``"patches"`` or ``"tiles"``.
        pipeline: the resolved Pipeline that made this batch (decides ``to_hf`` keys).
        placeholders: ``list[str]``, one per input image: its prompt placeholder string.
        image_plans: ``list[ImagePlan]``, one per input image (index = position in this batch):
            the geometry ``to_hf`` forms need beyond the tiles (source size, tile arrangement);
            empty for a batch not made by ``build`` / ``split`` / ``concat``.
        modality: ``"image"`` (the items are images) or ``"video"`` (``batch.videos``: the items
            are videos; every per-item field above is then per video, ``image_index`` the video
            of each sequence, ``video_plans`` their plans).
        video_plans: ``list[VideoPlan]``, one per input video of a ``"video"`` batch.
        videos: the call's videos as a ``"video"`` PackedBatch (``proc(images, videos=[...])``),
            or None when the call had no videos. ``to_hf()`` adds its keys
            (``pixel_values_videos``, ``video_grid_thw``, ...) to the images'.
        row_form: ``"full"`` (the default: rows as the model's processor gives them) or
            ``"compact"`` (``Processor(row_form="compact")``, Qwen-style image rows: one copy per
            patch, ``pixel_values (total_patches, C*P*P)``, the t=0 slice of the full ``[c, t,
            py, px]`` row; ``full_rows()`` / ``to_hf()`` give the full rows). Video batches are
            always ``"full"`` (their frames differ). ``ROW_FORMS``.

    Videos, a tiny example (qwen2-vl): ``proc([img], videos=[clip])`` with a 20-frame clip of
    720x1280 -> ``batch.videos.grid_thw [[10, 52, 92]]``, ``seqlens [47840]``, ``cu_seqlens
    [0, 47840]``, ``pixel_values (47840, 1176)``; ``batch`` itself holds the image as before.
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
    modality: str = "image"
    video_plans: list["VideoPlan"] = field(default_factory=list, repr=False)
    videos: "PackedBatch | None" = field(default=None, repr=False)
    row_form: str = "full"

    def __post_init__(self) -> None:
        if self.row_form not in ROW_FORMS:
            raise ValueError(f"PackedBatch: row_form expected one of {ROW_FORMS}, got "
                             f"{self.row_form!r}")

    # -- basic facts ----------------------------------------------------------------------------
    @property
    def num_images(self) -> int:
        """Input images, skipped ones included."""
        return len(self.num_tokens)

    def __len__(self) -> int:
        """Input images, skipped ones included (``num_images``)."""
        return len(self.num_tokens)

    @property
    def num_seqs(self) -> int:
        """ViT sequences (images or tiles) of the processed images."""
        return len(self.seqlens)

    @property
    def total_patches(self) -> int:
        """Patches over every sequence (``sum(seqlens)``), as ``Plan.total_patches``."""
        return sum(self.seqlens)

    @property
    def num_embeddings(self) -> list[int]:
        """``list[int]``, one per input image: the embedding rows an engine expects (the
        image-context tokens inside the image's placeholder, as ``ImagePlan.num_embeddings``;
        InternVL 7 tiles: 1792 of ``num_tokens`` 1794); 0 for a skipped image. For a video
        batch: ``VideoPlan.num_embeddings`` per video."""
        if self.modality == "video":
            return [0 if i in self.errors else p.num_embeddings
                    for i, p in enumerate(self.video_plans)]
        if len(self.placeholders) != self.num_images:
            raise ValueError(f"PackedBatch.num_embeddings: expected {self.num_images} placeholders "
                             f"(one per image), got {len(self.placeholders)}; make the batch with "
                             f"vlmprep.Processor (or pack.build / concat / split)")
        # no pipeline: a Pipeline's default pack (ops.pack's image_token)
        tok = (self.pipeline.pack if self.pipeline is not None else pack()).image_token
        return [0 if i in self.errors else count_embeddings(p, tok, n)
                for i, (p, n) in enumerate(zip(self.placeholders, self.num_tokens))]

    @property
    def total_tokens(self) -> int:
        """LLM placeholder tokens over every image (``sum(num_tokens)``), as ``Plan.total_tokens``."""
        return sum(self.num_tokens)

    @property
    def is_pinned(self) -> bool:
        """Whether ``pixel_values`` is in pinned (page-locked) host memory."""
        return self.pixel_values.device.type == "cpu" and self.pixel_values.is_pinned()

    @property
    def device(self) -> "torch.device":
        return self.pixel_values.device

    @property
    def dtype(self) -> "torch.dtype":
        return self.pixel_values.dtype

    def __repr__(self) -> str:
        head = "modality='video', " if self.modality == "video" else ""
        head += f"row_form={self.row_form!r}, " if self.row_form != "full" else ""
        tail = f", videos={self.videos!r}" if self.videos is not None else ""
        return (f"PackedBatch({head}layout={self.layout!r}, "
                f"pixel_values={tuple(self.pixel_values.shape)} "
                f"{str(self.pixel_values.dtype).replace('torch.', '')} on {self.device}, "
                f"num_seqs={self.num_seqs}, max_seqlen={self.max_seqlen}, "
                f"num_tokens={self.num_tokens}, errors={sorted(self.errors)}{tail})")

    # -- conversions ----------------------------------------------------------------------------
    def full_rows(self, device: "str | torch.device | None" = None) -> "torch.Tensor":
        """The full-form ``pixel_values`` on ``device`` (default: the batch's device).

        A ``"compact"`` batch: ``(total_patches, C*P*P)`` -> ``(total_patches, C*T*P*P)``, the
        compact rows moved to ``device`` first and expanded there (``expand_rows``: one copy on
        the consumer's device, never a full-size host copy for a GPU), bit-equal to what
        ``row_form="full"`` gives. A ``"full"`` batch: ``pixel_values`` (moved to ``device`` when
        given, else itself).
        """
        rows = self.pixel_values if device is None else self.pixel_values.to(device)
        if self.row_form == "full":
            return rows
        if self.pipeline is None:
            raise ValueError("PackedBatch.full_rows: expected a compact batch with its pipeline "
                             "(temporal_patch_size), got pipeline=None; make the batch with "
                             "vlmprep.Processor (or pack.build / concat / split)")
        return expand_rows(rows, self.pipeline.patchify.temporal_patch_size)

    def to(self, device: "str | torch.device", non_blocking: bool = False) -> "PackedBatch":
        """The same batch with its device tensors on ``device`` (host fields shared; ``videos``
        too)."""
        return replace(self, pixel_values=self.pixel_values.to(device, non_blocking=non_blocking),
                       cu_seqlens=self.cu_seqlens.to(device, non_blocking=non_blocking),
                       videos=None if self.videos is None
                       else self.videos.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "PackedBatch":
        """The same batch with its CPU tensors in pinned memory, for ``to(device,
        non_blocking=True)``; as ``torch.Tensor.pin_memory``: a copy of each tensor not yet
        pinned, the tensor itself when it is (device tensors are left as they are). torch's
        ``DataLoader(pin_memory=True)`` calls this. Needs an accelerator (torch raises
        without one)."""
        def pin(t: "torch.Tensor") -> "torch.Tensor":
            return t.pin_memory() if t.device.type == "cpu" else t
        return replace(self, pixel_values=pin(self.pixel_values), cu_seqlens=pin(self.cu_seqlens),
                       grid_thw=pin(self.grid_thw), image_index=pin(self.image_index),
                       videos=None if self.videos is None else self.videos.pin_memory())

    def split(self) -> Iterator["PackedBatch"]:
        """One PackedBatch per input image, in input order (views, no copy).

        A skipped image yields an empty batch whose ``errors`` is ``{0: error}``. The call's
        videos are not in these (``batch.videos.split()``: one per video).
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
            part = _assemble(self.pixel_values[row:row + n], lens, self.grid_thw[s0:seq],
                             torch.zeros(seq - s0, dtype=torch.int64), [self.num_tokens[i]], err,
                             self.layout, self.pipeline, self.placeholders[i:i + 1],
                             _plans_from(self.image_plans[i:i + 1], 0), self.row_form)
            if self.modality == "video":
                part = replace(part, modality="video",
                               video_plans=_plans_from(self.video_plans[i:i + 1], 0))
            yield part
            row += n

    def to_hf(self, images_per_sample: Sequence[int] | None = None,
              return_tensors: str = "pt", device: "str | torch.device | None" = None
              ) -> MutableMapping[str, Any]:
        """What the family's transformers image processor returns for the same images.

        Returns transformers' ``BatchFeature`` when transformers is installed (``.to(device)``,
        attribute access, as the processor's output), else a dict, with the same keys.
        ``return_tensors``: ``"pt"`` (torch tensors, the batch's own: no copy) or ``"np"``
        (numpy arrays on the host; bfloat16 has no numpy dtype: ask ``dtype="float32"``);
        values the processor gives as Python lists (mllama's ``num_tiles``) stay lists.

        By the pipeline's ``pack.hf_output`` ("auto": by patchify's order):
          - ``qwen2_vl``: ``{"pixel_values": (total_patches, patch_dim), "image_grid_thw":
            (num_images, 3) int64}`` (``Qwen2VLImageProcessor``);
          - ``images``: ``{"pixel_values": (num_images, C, H, W)}`` (SigLIP, CLIP / LLaVA-1.5);
          - ``got_ocr2``: ``{"pixel_values": (total_tiles, C, H, W), "num_patches": (num_images,)
            int64}`` (InternVL's ``GotOcr2ImageProcessor`` with ``crop_to_patches``);
          - ``pixtral``: ``{"pixel_values": (num_images, 3, Hmax, Wmax), "image_sizes":
            (num_images, 2) int64}`` (zero-padded);
          - ``siglip2``: ``{"pixel_values": (num_images, max_num_patches, P*P*C),
            "pixel_attention_mask": int32, "spatial_shapes": (num_images, 2) int64}``.
        Each form lives in ``vlmprep.hf_forms``. A ``"compact"`` batch gives the full rows
        (``full_rows(device)``): transformers' layout is never compact. ``device``: the pixel
        tensors (``pixel_values``, ``pixel_values_videos``, masks made beside them) are made there, compact rows moved
        first and expanded there (no full-size host copy for a GPU); other keys as without it;
        None: the batch's device.
        Processors that flatten multi-image samples only check the count of
        ``images_per_sample``; forms in ``HF_NESTING_FORMS`` (idefics3: ``pixel_values (B,
        max_tiles, C, M, M)`` + ``pixel_attention_mask``; mllama; llava-onevision) nest the images
        into samples by it. Skipped images are absent.

        Videos (``batch.videos``): their keys are added, as the family's transformers video
        processor returns them for the same videos (``hf_forms.VIDEO_HF_FORMS``): Qwen
        ``pixel_values_videos (total_patches, patch_dim)`` + ``video_grid_thw (num_videos, 3)``
        (+ ``second_per_grid_ts (num_videos,)`` float32 for Qwen2.5-VL, as its processor adds);
        LLaVA-OneVision / InternVL ``pixel_values_videos (num_videos, T, C, S, S)`` (a list of
        ``(T_i, C, S, S)`` when the videos' frame counts differ); SmolVLM ``pixel_values
        (num_videos, T_max, C, M, M)`` zero-padded + ``pixel_attention_mask``. A call with videos
        and no images gives the video keys only (as the processor does); ``images_per_sample``
        counts images only. SmolVLM's video keys are its image keys: a batch holding both
        raises (its processor takes one or the other).
        """
        n_ok = self.num_images - len(self.errors)
        if images_per_sample is not None and self.modality != "video":
            if any(int(k) < 0 for k in images_per_sample) or sum(images_per_sample) != n_ok:
                raise ValueError(f"to_hf: images_per_sample expected non-negative counts summing to "
                                 f"{n_ok} (the processed images), got {list(images_per_sample)}")
        if not isinstance(return_tensors, str) or return_tensors not in RETURN_TENSORS:
            raise ValueError(f"to_hf: return_tensors expected one of {RETURN_TENSORS}, got "
                             f"{return_tensors!r}; use 'pt' for torch tensors, 'np' for numpy")
        if device is not None or self.row_form != "full":
            # transformers' layout: the full rows, made on the consumer's device
            vids = self.videos
            if device is not None and vids is not None:
                vids = replace(vids, pixel_values=vids.pixel_values.to(device))
            return replace(self, pixel_values=self.full_rows(device), row_form="full",
                           videos=vids).to_hf(images_per_sample, return_tensors)
        if self.modality == "video":
            return _finish(self._video_hf(), return_tensors)
        form = hf_output(self.pipeline)
        out: dict[str, Any] = {}
        if self.videos is None or self.num_images > 0:
            if form in HF_NESTING_FORMS:  # forms that nest images into samples get the counts
                out = HF_FORMS[form](self, images_per_sample)
            else:
                out = HF_FORMS[form](self)
        if self.videos is not None and self.videos.num_images > 0:
            extra = self.videos._video_hf()
            both = sorted(set(out) & set(extra))
            if both:
                raise ValueError(f"to_hf: expected image and video keys that differ, got {both} "
                                 f"from both ({self.pipeline.name if self.pipeline else ''}: its "
                                 f"processor takes images or videos in one call, not both); "
                                 f"process the images and the videos in separate calls")
            out.update(extra)
        return _finish(out, return_tensors)

    def _video_hf(self) -> dict[str, Any]:
        """The video processor's keys for this ``"video"`` batch (``hf_forms.VIDEO_HF_FORMS``)."""
        form = hf_output(self.pipeline)
        fn = VIDEO_HF_FORMS.get(form)
        if fn is None:
            raise ValueError(f"to_hf: expected a family with a video form, one of "
                             f"{sorted(VIDEO_HF_FORMS)}, got form {form!r}")
        return fn(self)


def _finish(out: dict[str, Any], return_tensors: str) -> MutableMapping[str, Any]:
    """``out`` as numpy arrays when asked, wrapped in transformers' BatchFeature when installed."""
    if return_tensors == "np":
        out = {k: _to_numpy(k, v) for k, v in out.items()}
    feature = _batch_feature()
    return feature(out) if feature is not None else out


def _to_numpy(key: str, v: Any) -> Any:
    """A torch tensor -> a numpy array on the host; anything else (lists) as it is."""
    if not hasattr(v, "detach"):
        return v
    import torch
    if v.dtype == torch.bfloat16:
        raise ValueError(f"to_hf: return_tensors='np' expected a dtype numpy has, got {key!r} in "
                         f"bfloat16; use return_tensors='pt', or Processor(dtype='float32')")
    return v.detach().cpu().numpy()


@functools.lru_cache(maxsize=1)
def _batch_feature() -> Any:
    """transformers' ``BatchFeature`` class, or None where transformers is not installed."""
    import importlib.util
    if importlib.util.find_spec("transformers") is None:
        return None
    try:
        from transformers.feature_extraction_utils import BatchFeature
    except Exception:  # noqa: BLE001 (a broken install: a plain dict still carries every key)
        return None
    return BatchFeature


def _reindex(err: ImageError, index: int) -> ImageError:
    """The same error placed at ``index`` (its position in the batch that now holds it)."""
    out = ImageError(err.reason, index=index, source=err.source, item=err.item)
    out.__cause__ = err.__cause__
    return out


def _assemble(pixel_values, seqlens: list[int], grid_thw, image_index, num_tokens: list[int],
              errors: dict, layout: str, pipeline, placeholders: list[str],
              image_plans: Sequence["ImagePlan"] = (), row_form: str = "full") -> PackedBatch:
    import torch
    cu = [0]
    for n in seqlens:
        cu.append(cu[-1] + n)
    return PackedBatch(
        pixel_values=pixel_values,
        cu_seqlens=torch.tensor(cu, dtype=torch.int32).to(pixel_values.device),
        seqlens=list(seqlens), max_seqlen=max(seqlens, default=0), grid_thw=grid_thw,
        image_index=image_index, num_tokens=list(num_tokens), errors=dict(errors), layout=layout,
        pipeline=pipeline, placeholders=list(placeholders), image_plans=list(image_plans),
        row_form=row_form)


def _sequences(plans: Sequence[Any], errors: dict[int, ImageError]
               ) -> tuple[list[int], list[Any], list[int]]:
    """(seqlens, grids, item index) of every sequence of the good plans (images or videos), in
    input order."""
    seqlens, grids, index = [], [], []
    for p in plans:
        if p.index in errors:
            continue
        for g in p.grid_thw:
            seqlens.append(g[0] * g[1] * g[2])
            grids.append(g)
            index.append(p.index)
    return seqlens, grids, index


def build(pixel_values: "torch.Tensor", plans: Sequence["ImagePlan"], errors: dict[int, ImageError],
          pipeline: "Pipeline", row_form: str = "full") -> PackedBatch:
    """Pack the rows of the good images of ``plans`` (in input order) into a PackedBatch.

    ``pixel_values`` holds exactly the rows (patches or tiles) of the images not in ``errors``,
    in ``row_form`` (``ROW_FORMS``).
    """
    import torch
    seqlens, grids, index = _sequences(plans, errors)
    rows = sum(seqlens) if pipeline.patchify.order != "tiles" else len(seqlens)
    assert rows == pixel_values.shape[0], "packed rows disagree with the plan"
    return _assemble(
        pixel_values, seqlens, torch.tensor(grids, dtype=torch.int64).reshape(len(grids), 3),
        torch.tensor(index, dtype=torch.int64), [0 if p.index in errors else p.num_tokens
                                                 for p in plans],
        dict(sorted(errors.items())),  # by index, whatever order they were found in
        "tiles" if pipeline.patchify.order == "tiles" else "patches", pipeline,
        ["" if p.index in errors else p.placeholder for p in plans], _plans_from(plans, 0),
        row_form)


def build_videos(pixel_values: "torch.Tensor", plans: Sequence["VideoPlan"],
                 errors: dict[int, ImageError], pipeline: "Pipeline", layout: str) -> PackedBatch:
    """Pack the rows of the good videos of ``plans`` (in input order) into a ``"video"``
    PackedBatch (``batch.videos``): one sequence per ``grid_thw`` entry of each plan (Qwen: the
    video; tile families: each frame), ``image_index`` the video of each sequence.

    ``pixel_values`` holds exactly the rows (patches or frame tiles) of the videos not in
    ``errors``.
    """
    import torch
    seqlens, grids, index = _sequences(plans, errors)
    rows = sum(seqlens) if layout == "patches" else len(seqlens)
    assert rows == pixel_values.shape[0], "packed video rows disagree with the plan"
    out = _assemble(
        pixel_values, seqlens, torch.tensor(grids, dtype=torch.int64).reshape(len(grids), 3),
        torch.tensor(index, dtype=torch.int64),
        [0 if p.index in errors else p.num_tokens for p in plans], dict(sorted(errors.items())),
        layout, pipeline, ["" if p.index in errors else p.placeholder for p in plans])
    return replace(out, modality="video", video_plans=_plans_from(plans, 0))


def concat(batches: Sequence[PackedBatch]) -> PackedBatch:
    """Join batches as if their images had been one input list (inverse of ``split``); their
    ``videos`` are joined the same way (videos of later batches numbered after earlier ones)."""
    import torch
    if not batches:
        raise ValueError("concat: expected at least one PackedBatch, got none")
    layouts = {b.layout for b in batches}
    if len(layouts) != 1:
        raise ValueError(f"concat: expected one layout, got {sorted(layouts)}")
    modalities = {b.modality for b in batches}
    if len(modalities) != 1:
        raise ValueError(f"concat: expected batches of one modality, got {sorted(modalities)}; "
                         f"concat image batches (their .videos are joined too) or video batches")
    forms = {b.row_form for b in batches}
    if len(forms) != 1:
        raise ValueError(f"concat: expected batches of one row_form, got {sorted(forms)}; make "
                         f"them with one Processor row_form, or join full rows: "
                         f"replace(b, pixel_values=b.full_rows(), row_form='full')")
    offset = 0
    index, errors = [], {}
    for b in batches:
        index.append(b.image_index + offset)
        errors.update({k + offset: _reindex(v, k + offset) for k, v in b.errors.items()})
        offset += b.num_images
    out = _assemble(
        torch.cat([b.pixel_values for b in batches]), [n for b in batches for n in b.seqlens],
        torch.cat([b.grid_thw for b in batches]), torch.cat(index),
        [n for b in batches for n in b.num_tokens], errors, batches[0].layout,
        batches[0].pipeline, [s for b in batches for s in b.placeholders],
        _concat_plans(batches), batches[0].row_form)
    if batches[0].modality == "video":
        return replace(out, modality="video",
                       video_plans=_plans_from([p for b in batches for p in b.video_plans], 0))
    vids = [b.videos for b in batches if b.videos is not None]
    return replace(out, videos=concat(vids)) if vids else out


def _plans_from(plans: Sequence[Any], start: int) -> list[Any]:
    """``plans`` re-indexed from ``start`` (their positions in the batch that now holds them)."""
    from dataclasses import replace as _replace
    return [p if p.index == start + k else _replace(p, index=start + k) for k, p in enumerate(plans)]


def _concat_plans(batches: Sequence[PackedBatch]) -> list["ImagePlan"]:
    """The joined ``image_plans``, or none when any part lacks them (no partial list)."""
    if any(len(b.image_plans) != b.num_images for b in batches):
        return []
    return _plans_from([p for b in batches for p in b.image_plans], 0)


def expand_rows(rows: "torch.Tensor", temporal_patch_size: int, channels: int = 3
                ) -> "torch.Tensor":
    """Compact rows -> full rows: ``(N, C*P*P)`` ``[c, py, px]`` -> ``(N, C*T*P*P)`` ``[c, t, py,
    px]`` with the T copies of each channel's patch, on ``rows``' device and dtype (a new tensor;
    ``rows`` itself when T is 1). Bit-equal to the full form by construction (a copy, no
    arithmetic). The one expansion: ``PackedBatch.full_rows``, ``to_hf`` and the adapters call it.

        Given  rows (2, 588) (C=3, P=14), temporal_patch_size 2
        Output (2, 1176): out[n].view(3, 2, 196)[c, t] == rows[n].view(3, 196)[c] for t in 0, 1
    """
    import torch
    if not isinstance(rows, torch.Tensor) or rows.dim() != 2:
        got = f"shape {tuple(rows.shape)}" if isinstance(rows, torch.Tensor) else type(rows).__name__
        raise ValueError(f"expand_rows: expected rows as a 2-d tensor (N, C*P*P), got {got}; pass "
                         f"a compact batch's pixel_values")
    for name, v in (("temporal_patch_size", temporal_patch_size), ("channels", channels)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"expand_rows: {name} expected an int >= 1, got {v!r}")
    n, width = rows.shape
    if width % channels:
        raise ValueError(f"expand_rows: expected a row width that is a multiple of channels="
                         f"{channels} (C*P*P), got {width}; pass the compact rows and their "
                         f"channel count")
    if temporal_patch_size == 1:
        return rows
    per = width // channels
    return rows.reshape(n, channels, 1, per).expand(n, channels, temporal_patch_size, per) \
        .reshape(n, channels * temporal_patch_size * per)


def execution_pipeline(pipeline: "Pipeline", row_form: str) -> "Pipeline":
    """The pipeline a backend executes to write rows of ``row_form`` for ``pipeline``'s images
    (plans, grids and tokens always come from ``pipeline`` itself): ``pipeline`` for "full";
    for "compact" the same pipeline with ``patchify.temporal_patch_size=1`` (same order, same
    merge), whose rows are the full rows' t=0 slice. The one check of a row form against a
    pipeline: ValueError (expected / got / fix) for an unknown form, or "compact" where the rows
    do not repeat over time (``patchify.order`` other than "merge_grouped", or
    ``temporal_patch_size`` 1).
    """
    if not isinstance(row_form, str) or row_form not in ROW_FORMS:
        raise ValueError(f"row_form: expected one of {ROW_FORMS}, got {row_form!r}")
    if row_form == "full":
        return pipeline
    pf = pipeline.patchify
    if pf.order != "merge_grouped" or pf.temporal_patch_size <= 1:
        why = (f"patchify order {pf.order!r}" if pf.order != "merge_grouped"
               else "temporal_patch_size 1: its rows are already one copy")
        raise ValueError(f"row_form='compact': expected a pipeline whose image rows repeat over "
                         f"time (patchify order 'merge_grouped' with temporal_patch_size > 1: "
                         f"qwen2-vl, qwen3-vl, Qwen-style), got {pipeline.name!r} with {why}; use "
                         f"row_form='full'")
    return pipeline.replace(patchify__temporal_patch_size=1)
