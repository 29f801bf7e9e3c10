"""JobConfig: the small picklable description of a batch job (``vlmprep run``, Ray actors).

It names how every image of the job is processed (preset or checkpoint, backend, device, dtype,
pipeline field overrides), how its videos are sampled (``fps`` / ``num_frames``) and how the
output is cut (shard format, samples per shard). Workers
and Ray actors receive only this and build their own Processor with ``config.processor()``.

The manifest of an output folder stores ``to_json()`` and ``hash()``; ``--resume`` refuses a
config whose hash differs and names the differences with ``diff()``.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, fields
from typing import Any, Mapping

from .. import backends, presets
from ..errors import ImageError
from ..plan.video import MAX_SAMPLED_FRAMES, MAX_SOURCE_FPS
from ..processor import DEVICE_RE, DTYPES, Processor

__all__ = ["JobConfig", "FORMATS", "job_config"]

#: The shard formats: one writer each in ``vlmprep.batch.shards`` (``shards.parquet``,
#: ``shards.safetensors``). Kept here, with the job's other choices, so that the shards package
#: (whose manifest reader rebuilds a JobConfig) and this module do not import each other.
FORMATS = ("parquet", "safetensors")

_DEVICES = "'cpu', 'cuda' or 'cuda:N'"


def _frozen(v: Any) -> Any:
    """A JSON value as a hashable one: lists (and tuples) become tuples, recursively."""
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    return v


def _thawed(v: Any) -> Any:
    """The JSON form of an override value: tuples become lists, recursively."""
    if isinstance(v, (list, tuple)):
        return [_thawed(x) for x in v]
    return v


def _json_scalar_tree(v: Any) -> bool:
    if isinstance(v, (list, tuple)):
        return all(_json_scalar_tree(x) for x in v)
    return v is None or isinstance(v, (bool, int, float, str))


@dataclass(frozen=True)
class JobConfig:
    """How a batch job processes images and cuts its output.

    Args:
        preset: a preset name (``vlmprep.presets.names()``); exactly one of preset / checkpoint.
        checkpoint: what ``Processor.from_pretrained`` takes (a checkpoint folder, its
            ``preprocessor_config.json``, or a hub repo id).
        backend, device, dtype: as ``vlmprep.Processor`` takes them.
        overrides: pipeline field overrides, ``(("max_pixels", 1003520), ...)`` (a dict is
            accepted too); kept sorted by name, list values as tuples, so equal jobs compare,
            hash and pickle equal.
        format: the shard format, ``"parquet"`` or ``"safetensors"``.
        shard_size: images per output shard (the last shard of an input unit may hold fewer);
            a worker holds one shard's output in memory (a 1080p qwen2-vl image is ~50 MB in
            float32), hence 100 by default.
        input_root: the folder that paths inside the data (list lines, parquet ``path``
            values) must resolve under (``vlmprep.batch.sources.discover``); None: each
            input's own folder. Kept absolute. Left out of ``to_json()`` when None, so a
            config without it keeps the hash it had before the field existed.
        fps, num_frames: how each video sample is sampled, as ``vlmprep.Video(src, fps=...,
            num_frames=...)`` takes them (at most one; None: the checkpoint's video options,
            ``Processor.video_options``). Left out of ``to_json()`` when None, as input_root.
        dpi, pages, max_pages, max_tokens: how each PDF sample is read, as
            ``vlmprep.Document(data, pages=..., dpi=..., max_pages=..., max_tokens=...)``
            takes them (``pages`` a tuple of 0-based page indices; None: Document's default).
            Left out of ``to_json()`` when None, as input_root.

    Invalid values raise ValueError saying expected / got / fix at construction.
    """

    preset: str | None = None
    checkpoint: str | None = None
    backend: str = "auto"
    device: str = "cpu"
    dtype: str = "float32"
    overrides: tuple[tuple[str, Any], ...] = ()
    format: str = "parquet"
    shard_size: int = 100
    input_root: str | None = None
    fps: float | None = None
    num_frames: int | None = None
    dpi: float | None = None
    pages: tuple[int, ...] | None = None
    max_pages: int | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if (self.preset is None) == (self.checkpoint is None):
            raise ValueError(f"JobConfig: expected exactly one of preset= or checkpoint=, got "
                             f"preset={self.preset!r}, checkpoint={self.checkpoint!r}; pass one "
                             f"(vlmprep run --preset NAME or --checkpoint PATH)")
        for name in ("preset", "checkpoint"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise ValueError(f"JobConfig: {name}: expected a non-empty string, got {v!r}")
        if self.preset is not None:
            try:
                presets.family(self.preset)
            except KeyError as e:
                raise ValueError(f"JobConfig: preset: {e.args[0]}") from None
        known = ["auto", *backends.names()]
        if self.backend not in known:
            raise ValueError(f"JobConfig: backend: expected one of {known}, got {self.backend!r}")
        if not isinstance(self.device, str) or not DEVICE_RE.match(self.device):
            raise ValueError(f"JobConfig: device: expected {_DEVICES}, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"JobConfig: dtype: expected one of {list(DTYPES)}, got {self.dtype!r}")
        if self.format not in FORMATS:
            raise ValueError(f"JobConfig: format: expected one of {list(FORMATS)}, got "
                             f"{self.format!r}")
        if isinstance(self.shard_size, bool) or not isinstance(self.shard_size, int) \
                or self.shard_size < 1:
            raise ValueError(f"JobConfig: shard_size: expected a positive int (images per shard), "
                             f"got {self.shard_size!r}")
        if self.input_root is not None:
            if not isinstance(self.input_root, str) or not self.input_root or "\0" in self.input_root:
                raise ValueError(f"JobConfig: input_root: expected a folder path (a non-empty str) "
                                 f"or None, got {self.input_root!r}")
            # absolute: workers and Ray actors may run from another folder
            object.__setattr__(self, "input_root", os.path.abspath(self.input_root))
        self._check_sampling()
        self._check_document()
        object.__setattr__(self, "overrides", self._normalized_overrides(self.overrides))
        self._check_fields()

    def _check_sampling(self) -> None:
        """``fps`` / ``num_frames``: as ``vlmprep.Video`` takes them, at most one."""
        fps, n = self.fps, self.num_frames
        if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float))
                                or not math.isfinite(fps) or not 0 < fps <= MAX_SOURCE_FPS):
            raise ValueError(f"JobConfig: fps: expected a number in (0, {MAX_SOURCE_FPS:g}] "
                             f"(frames per second sampled from each video) or None, got {fps!r}")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int)
                              or not 1 <= n <= MAX_SAMPLED_FRAMES):
            raise ValueError(f"JobConfig: num_frames: expected an int in [1, "
                             f"{MAX_SAMPLED_FRAMES}] (frames sampled from each video) or None, "
                             f"got {n!r}")
        if fps is not None and n is not None:
            raise ValueError(f"JobConfig: expected at most one of fps and num_frames (as "
                             f"transformers' video processors take them), got fps={fps!r}, "
                             f"num_frames={n!r}; pass one (--fps or --num-frames)")
        if fps is not None:
            object.__setattr__(self, "fps", float(fps))  # 2 and 2.0: one job, one hash

    def _check_document(self) -> None:
        """``dpi`` / ``pages`` / ``max_pages`` / ``max_tokens``: as ``vlmprep.Document`` checks
        them (its own messages)."""
        if self.pages is not None:
            if isinstance(self.pages, (str, bytes)) or not hasattr(self.pages, "__iter__"):
                raise ValueError(f"JobConfig: pages: expected 0-based page indices (a list of "
                                 f"ints) or None, got {self.pages!r}")
            object.__setattr__(self, "pages", tuple(self.pages))
        if self.dpi is not None and isinstance(self.dpi, int) and not isinstance(self.dpi, bool):
            object.__setattr__(self, "dpi", float(self.dpi))  # 150 and 150.0: one job, one hash
        from ..io.document import Document  # deferred: the PDF module, light without pypdfium2
        try:
            Document(b"", **self.document_options())
        except ImageError as e:
            raise ValueError(f"JobConfig: {e.reason}") from None

    def document_options(self) -> dict[str, Any]:
        """The ``vlmprep.Document`` keywords of every PDF sample (only those set)."""
        kw = {"dpi": self.dpi, "pages": self.pages, "max_pages": self.max_pages,
              "max_tokens": self.max_tokens}
        return {k: v for k, v in kw.items() if v is not None}

    @staticmethod
    def _normalized_overrides(ov: Any) -> tuple[tuple[str, Any], ...]:
        items = list(ov.items()) if isinstance(ov, Mapping) else ov
        try:
            pairs = [(k, v) for k, v in items]
        except (TypeError, ValueError):
            raise ValueError(f"JobConfig: overrides: expected (field, value) pairs or a dict, got "
                             f"{ov!r}") from None
        seen: set[str] = set()
        for k, v in pairs:
            if not isinstance(k, str) or not k:
                raise ValueError(f"JobConfig: overrides: expected field names as strings, got "
                                 f"{k!r}")
            if k in seen:
                raise ValueError(f"JobConfig: overrides: field {k!r} given twice; give it once")
            seen.add(k)
            if not _json_scalar_tree(v):
                raise ValueError(f"JobConfig: overrides: {k}: expected a JSON-safe value (number, "
                                 f"string, bool, None or a list of those), got "
                                 f"{type(v).__name__} {v!r}")
        return tuple(sorted((k, _frozen(v)) for k, v in pairs))

    def _check_fields(self) -> None:
        """The overrides name real fields with valid values (checked on the preset's pipeline;
        a checkpoint's only when it is a local path, as it is read without the hub)."""
        try:
            if self.preset is not None:
                presets.get(self.preset, **dict(self.overrides))
            elif self.overrides and self.checkpoint is not None and os.path.exists(self.checkpoint):
                presets.from_config(presets.load_config(self.checkpoint)).replace(
                    **dict(self.overrides))
        except (TypeError, ValueError) as e:
            raise ValueError(f"JobConfig: overrides: {e}") from None

    # -- the Processor ---------------------------------------------------------------------------
    def processor(self) -> Processor:
        """The job's Processor, with ``errors="skip"`` (a bad image is a row with its reason,
        never the end of the job)."""
        kw: dict[str, Any] = dict(backend=self.backend, device=self.device, dtype=self.dtype,
                                  errors="skip", **dict(self.overrides))
        if self.preset is not None:
            return Processor(self.preset, **kw)
        assert self.checkpoint is not None
        return Processor.from_pretrained(self.checkpoint, **kw)

    # -- serialisation ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """JSON-safe dict (overrides as ``{field: value}``, lists for tuples)."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["overrides"] = {k: _thawed(v) for k, v in self.overrides}
        out["pages"] = _thawed(out["pages"])
        for name in ("input_root", "fps", "num_frames", "dpi", "pages", "max_pages", "max_tokens"):
            if out[name] is None:  # the hash of a config without it, as before the field
                del out[name]
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "JobConfig":
        """The config ``to_json()`` wrote (validated again)."""
        names = [f.name for f in fields(cls)]
        if not isinstance(d, Mapping):
            raise ValueError(f"JobConfig.from_json: expected a dict as written by to_json(), got "
                             f"{type(d).__name__}")
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ValueError(f"JobConfig.from_json: expected keys from {names}, got unknown "
                             f"{unknown}; was it written by a newer vlmprep?")
        kw = dict(d)
        if "overrides" in kw:
            ov = kw["overrides"]
            kw["overrides"] = tuple(ov.items()) if isinstance(ov, Mapping) else ov
        return cls(**kw)

    def hash(self) -> str:
        """sha256 hex of the canonical JSON form: equal configs, equal hashes (any process)."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def diff(self, other: "JobConfig") -> list[str]:
        """What changed from this config to ``other``, one ``"name: old -> new"`` per field
        (an override as ``"override NAME: old -> new"``, ``unset`` when absent); [] if equal."""
        out: list[str] = []
        for f in fields(self):
            if f.name == "overrides":
                continue
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a != b:
                out.append(f"{f.name}: {a!r} -> {b!r}")
        mine, theirs = dict(self.overrides), dict(other.overrides)
        for k in sorted(set(mine) | set(theirs)):
            a, b = mine.get(k, _UNSET), theirs.get(k, _UNSET)
            if a != b:
                out.append(f"override {k}: {a!r} -> {b!r}")
        return out


class _Unset:
    def __repr__(self) -> str:
        return "unset"


_UNSET = _Unset()


def job_config(config: Any) -> JobConfig:
    """A JobConfig from itself or its ``to_json()`` dict (what crosses to a Ray actor); any
    other value is a TypeError."""
    if isinstance(config, JobConfig):
        return config
    if isinstance(config, Mapping):
        return JobConfig.from_json(config)
    raise TypeError(f"config: expected a vlmprep.batch.config.JobConfig or its to_json() dict, "
                    f"e.g. {{'preset': 'qwen2-vl'}}, got {type(config).__name__}")
