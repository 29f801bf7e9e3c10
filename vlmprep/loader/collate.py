"""Collate helpers for transformers models (Qwen2-VL style: pixel_values + image_grid_thw).

``collate_hf(batch)`` turns a PackedBatch into the dict a model's forward takes;
``hf_collate_fn(proc)`` is the ``collate_fn`` for ``torch.utils.data.DataLoader`` that replaces
"call the HF image processor in collate"::

    loader = torch.utils.data.DataLoader(dataset, batch_size=8,
                                         collate_fn=vlmprep.loader.hf_collate_fn(proc))
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Sequence

from ..pack import PackedBatch

if TYPE_CHECKING:
    from ..pack import PackedBatch
    from ..processor import Processor

__all__ = ["collate_hf", "hf_collate_fn", "HFCollate"]

_OUT_KEYS = ("pixel_values", "image_grid_thw", "cu_seqlens")


def collate_hf(batch: "PackedBatch | tuple[list, PackedBatch]") -> dict[str, Any]:
    """PackedBatch -> ``{"pixel_values", "image_grid_thw", "cu_seqlens"}``.

    Returns:
        pixel_values: ``(total_patches, patch_dim)`` on the batch's device, as the family's
            transformers image processor returns it (``batch.to_hf()``).
        image_grid_thw: ``(num_images, 3)`` int64, skipped images absent.
        cu_seqlens: ``(num_seqs + 1,)`` int32, prefix sums of patches from 0: the vision
            tower's varlen attention bounds (transformers uses precomputed ones when given).

    Also takes the ``(ids, batch)`` pair that ``vlmprep.loader.DataLoader`` yields.
    """
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and isinstance(batch[1], PackedBatch):
        batch = batch[1]
    if not isinstance(batch, PackedBatch):
        raise TypeError(f"collate_hf: expected a PackedBatch (or the loader's (ids, batch)), got "
                        f"{type(batch).__name__}; for a list of images use hf_collate_fn(proc)")
    out = dict(batch.to_hf())
    out["cu_seqlens"] = batch.cu_seqlens
    return out


class HFCollate:
    """``collate_fn(samples) -> dict``: process a list of samples with ``proc`` in one call.

    A sample is an image (path, bytes, PIL, array, tensor) or a dict holding one under
    ``image_key``; the dicts' other keys present in every sample pass through as lists.
    With ``proc.errors="skip"`` the dict also has ``"skipped"``: the positions of skipped
    samples (their images are absent from ``image_grid_thw``). Picklable, so it works in
    ``torch.utils.data.DataLoader`` worker processes (use ``device="cpu"`` there: a CUDA
    processor belongs in the main process, e.g. ``vlmprep.loader.DataLoader``).
    """

    def __init__(self, proc: "Processor", image_key: str = "image"):
        if not (callable(proc) and hasattr(proc, "plan")):
            raise TypeError(f"hf_collate_fn: proc expected a vlmprep.Processor, got "
                            f"{type(proc).__name__}")
        self.proc = proc
        self.image_key = image_key

    def __repr__(self) -> str:
        return f"HFCollate({self.proc!r}, image_key={self.image_key!r})"

    def __call__(self, samples: Sequence[Any]) -> dict[str, Any]:
        if not isinstance(samples, (list, tuple)):
            raise TypeError(f"collate_fn: expected a list of samples, got "
                            f"{type(samples).__name__}")
        images = []
        for i, s in enumerate(samples):
            if isinstance(s, Mapping):
                if self.image_key not in s:
                    raise KeyError(f"collate_fn: sample {i} expected the image under "
                                   f"{self.image_key!r}, got keys {sorted(map(str, s))[:8]}; "
                                   f"pass image_key= to hf_collate_fn")
                img = s[self.image_key]
                if isinstance(img, Mapping):  # HF datasets Image(decode=False)
                    img = img.get("bytes") or img.get("path")
                images.append(img)
            else:
                images.append(s)
        batch = self.proc(images)
        out = collate_hf(batch)
        if samples and all(isinstance(s, Mapping) for s in samples):
            common = set(samples[0]).intersection(*samples[1:])
            for k in sorted(common, key=str):
                if k != self.image_key and k not in _OUT_KEYS and k != "skipped":
                    out[k] = [s[k] for s in samples]
        if self.proc.errors == "skip":
            out["skipped"] = sorted(batch.errors)
        return out


def hf_collate_fn(proc: "Processor", image_key: str = "image") -> HFCollate:
    """A ``collate_fn`` for ``torch.utils.data.DataLoader`` (see HFCollate)."""
    return HFCollate(proc, image_key)
