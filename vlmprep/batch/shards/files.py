"""What the shard writers share: content hashes (``file_sha256``, ``ids_sha256``), the atomic
write (``replace_atomic``: temporary file, then rename), the hashing file wrapper, and
``need`` (an optional dependency, or a ValueError naming the extra)."""
from __future__ import annotations

import hashlib
import importlib
import json
import os
from pathlib import Path
from typing import Any, BinaryIO, Sequence

__all__ = ["need", "ids_sha256", "file_sha256", "replace_atomic", "Hashing"]

# the extra that installs each optional package (safetensors has none: it is installed alone)
_INSTALL = {"pyarrow": "pip install vlmprep[parquet] (or pip install pyarrow)",
            "safetensors": "pip install safetensors"}


def need(module: str, what: str) -> Any:
    """Import an optional dependency, or ValueError naming the extra."""
    try:  # deferred: pyarrow and safetensors are optional extras, imported when first used
        return importlib.import_module(module)
    except ImportError:
        pkg = module.split(".")[0]
        raise ValueError(f"{what}: expected the {pkg} package, got none installed; "
                         f"{_INSTALL.get(pkg, f'pip install {pkg}')}") from None


def ids_sha256(ids: Sequence[str]) -> str:
    """sha256 hex of the ids as a compact JSON list (unambiguous for any id text)."""
    text = json.dumps(list(ids), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 hex of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def replace_atomic(out_dir: Path, name: str, write) -> None:
    """``write(file)`` into ``name + ".tmp"``, then rename over ``name``; on any failure the
    temporary file is removed and the error re-raised (no partial file is ever visible)."""
    tmp = out_dir / (name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, out_dir / name)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class Hashing:
    """A write-only binary file that hashes what goes through it (no second read)."""

    def __init__(self, f: BinaryIO, h: Any):
        self._f, self._h, self._pos = f, h, 0
        self.closed = False

    def write(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        self._h.update(mv)
        self._f.write(mv)
        self._pos += mv.nbytes
        return mv.nbytes

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:  # the real file is closed by its owner
        self.closed = True

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False
