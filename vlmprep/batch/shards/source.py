"""``ShardSource``: a ``vlmprep run`` output folder as the loader's map-style source (random
access by item, parquet row groups cached, safetensors rows read on demand)."""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..rows import batch_from_rows
from .manifest import manifest_pipeline
from .read import SafetensorsShard, check_sha256, open_folder, parquet_file, read_group, shard_rows_parquet

if TYPE_CHECKING:
    from ...pack import PackedBatch

__all__ = ["ShardSource"]


class ShardSource:
    """The samples of a ``vlmprep run`` output folder as a map-style source: already processed,
    so ``vlmprep.loader.DataLoader(ShardSource(dir), batch_size=...)`` reads shards and never
    decodes an image (no Processor).

    ``len(src)``: samples (good ones; error rows too with ``include_errors=True``), in job
    order. ``src.ids[i]`` / ``src.num_tokens[i]`` / ``src.modalities[i]`` ("image" or
    "video"): from the shards' small columns, read once here (pixels are not read). ``src[i]``
    -> ``(id, PackedBatch of one image)`` (a video: no image, the video in ``batch.videos``);
    ``src.read(indices)`` -> one PackedBatch of those samples in that order, bit-exact with
    ``Processor(errors="skip")`` over the same images (CPU tensors; move with ``.to()``), the
    videos among them in ``batch.videos``, in their order.
    The folder is validated as ``read_shards`` does; with ``verify=True`` a shard's sha256 is
    checked the first time it is read. Safe to share between threads. Parquet reads whole row
    groups (~64 MiB of pixels; the last few are kept), so a shuffled order costs more reads
    than a sequential one; safetensors reads only the rows asked for.
    """

    def __init__(self, out_dir: str | os.PathLike, *, include_errors: bool = False,
                 verify: bool = True, partial: bool = False, cache_groups: int = 4):
        self.out_dir, self.manifest, names = open_folder(out_dir, partial)
        self.pipeline = manifest_pipeline(self.manifest)
        self.include_errors = bool(include_errors)
        self.verify = bool(verify)
        self._lock = threading.Lock()
        self._verified: set[str] = set()
        self._groups: "OrderedDict[tuple[str, int], list[dict]]" = OrderedDict()
        self._cache_groups = max(1, int(cache_groups))
        self._st: dict[str, SafetensorsShard] = {}
        self.ids: list[str] = []
        self.num_tokens: list[int] = []
        self.modalities: list[str] = []
        # item -> (shard name, row group or -1, position in the group / shard)
        self._where: list[tuple[str, int, int]] = []
        for name in names:
            path = self.out_dir / name
            if path.suffix == ".parquet":
                self._index_parquet(name, path)
            else:
                self._index_safetensors(name, path)

    def __getstate__(self) -> dict:
        """Picklable for worker processes (torch DataLoader): without the lock and the caches."""
        state = self.__dict__.copy()
        del state["_lock"]
        state["_groups"] = OrderedDict()
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _keep(self, status: str) -> bool:
        return self.include_errors or status == "ok"

    def _index_parquet(self, name: str, path: Path) -> None:
        pf = parquet_file(path)
        cols = ["id", "status", "num_tokens"]
        cols += ["modality"] if "modality" in pf.schema_arrow.names else []  # schema "1": images
        for g in range(pf.num_row_groups):
            t = read_group(path, pf, g, cols).to_pydict()
            mods = t.get("modality") or ["image"] * len(t["id"])
            for k, (sid, status, tok) in enumerate(zip(t["id"], t["status"], t["num_tokens"])):
                if self._keep(status):
                    self.ids.append(str(sid))
                    self.num_tokens.append(int(tok) if status == "ok" else 0)
                    self.modalities.append(str(mods[k]))
                    self._where.append((name, g, k))

    def _index_safetensors(self, name: str, path: Path) -> None:
        sh = self._st[name] = SafetensorsShard(path)
        for k in range(len(sh)):
            status = sh.info["status"][k]
            if self._keep(status):
                self.ids.append(str(sh.info["ids"][k]))
                self.num_tokens.append(int(sh.num_tokens[k]) if status == "ok" else 0)
                self.modalities.append(sh.modality(k))
                self._where.append((name, -1, k))

    def __len__(self) -> int:
        return len(self._where)

    def __repr__(self) -> str:
        return (f"ShardSource({str(self.out_dir)!r}, {len(self)} samples, "
                f"pipeline={self.pipeline.name!r})")

    def __getitem__(self, i: int) -> "tuple[str, PackedBatch]":
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"ShardSource: index expected an int, got {type(i).__name__}")
        if not -len(self) <= i < len(self):
            raise IndexError(f"ShardSource: index {i} out of range for {len(self)} samples")
        i %= len(self)
        return self.ids[i], self.read([i])

    def _checked(self, name: str) -> None:
        if not self.verify or name in self._verified:
            return
        check_sha256(self.out_dir / name, self.manifest["shards"][name])
        with self._lock:
            self._verified.add(name)

    def _group(self, name: str, g: int) -> list[dict]:
        key = (name, g)
        with self._lock:
            hit = self._groups.get(key)
            if hit is not None:
                self._groups.move_to_end(key)
                return hit
        rows = next(shard_rows_parquet(self.out_dir / name, [g]))
        with self._lock:
            self._groups[key] = rows
            while len(self._groups) > self._cache_groups:
                self._groups.popitem(last=False)
        return rows

    def rows(self, indices: Sequence[int]) -> list[dict]:
        """The rows of items ``indices`` (positions in this source), in that order."""
        out: list[dict | None] = [None] * len(indices)
        st_wanted: dict[str, list[tuple[int, int]]] = {}
        for j, i in enumerate(indices):
            name, g, k = self._where[i]
            self._checked(name)
            if g >= 0:
                out[j] = self._group(name, g)[k]
            else:
                st_wanted.setdefault(name, []).append((j, k))
        for name, pairs in st_wanted.items():
            for (j, _), r in zip(pairs, self._st[name].rows([k for _, k in pairs])):
                out[j] = r
        return [r for r in out if r is not None]

    def read(self, indices: Sequence[int]) -> "PackedBatch":
        """One PackedBatch of items ``indices`` in that order (CPU tensors)."""
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self):
                raise IndexError(f"ShardSource.read: index expected 0 <= i < {len(self)}, got "
                                 f"{i!r}")
        return batch_from_rows(self.rows(indices), self.pipeline)
