"""Pipeline: an ordered, frozen, printable tuple of ops (stdlib only)."""
from __future__ import annotations

import warnings
from typing import Any, Iterable, Iterator, Mapping

from .ops import INTERPOLATIONS, OP_TYPES, Op, decode, normalize, pack, patchify

__all__ = ["Pipeline"]

_Normalize = normalize  # the op class, for annotations inside Pipeline (whose normalize is a property)

#: Old ``to_dict()`` spellings ``from_dict`` still reads (with a DeprecationWarning):
#: op name -> (new op name, {field that only had one value: that value});
#: (op name, old field) -> new field.
_OLD_OPS = {"tile": ("internvl_tile", {"rule": "internvl"})}
_OLD_FIELDS = {("patchify", "layout"): "order"}


def _upgrade(i: int, name: Any, od: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """An op dict written before a rename -> its current form, with a DeprecationWarning.

    Given {"op": "tile", "rule": "internvl", "tile_size": 448} -> ("internvl_tile", {"tile_size": 448});
    patchify's {"layout": "tiles"} -> {"order": "tiles"}.
    """
    if name in _OLD_OPS:
        new, dropped = _OLD_OPS[name]
        for k, only in dropped.items():
            got = od.pop(k, only)
            if got != only:
                raise ValueError(f"Pipeline.from_dict: op {i} ({name!r}): expected {k}={only!r} "
                                 f"(the only one there was), got {k}={got!r}")
        warnings.warn(f"Pipeline.from_dict: op {name!r} is now {new!r}; re-save the pipeline",
                      DeprecationWarning, stacklevel=3)
        name = new
    for (op, old), field in _OLD_FIELDS.items():
        if name == op and old in od:
            if field in od and od[field] != od[old]:
                raise ValueError(f"Pipeline.from_dict: op {i} ({name!r}): expected one of {old!r} "
                                 f"(old) or {field!r}, got both with different values")
            warnings.warn(f"Pipeline.from_dict: {name}.{old} is now {name}.{field}; re-save the "
                          f"pipeline", DeprecationWarning, stacklevel=3)
            od[field] = od.pop(old)
    return name, od


class Pipeline:
    """What to do to every image, in order; the same value for every backend.

    A pipeline is resolved on construction: a missing ``decode`` is put first and a
    missing ``pack`` last, so ``print(pipe)`` shows every value that will be used.

    Example::

        pipe = Pipeline([ops.decode(), ops.smart_resize(factor=28), ops.normalize(),
                         ops.patchify(patch_size=14, temporal_patch_size=2, merge_size=2),
                         ops.pack(image_token="<|image_pad|>")], name="my-qwen")
        pipe.replace(max_pixels=1_003_520)   # a changed copy
    """

    __slots__ = ("_ops", "_name")

    def __init__(self, ops: Iterable[Op], name: str = "custom"):
        ops = tuple(ops)
        for i, op in enumerate(ops):
            if not isinstance(op, Op):
                raise TypeError(f"Pipeline: op {i}: expected a vlmprep.ops.* instance, got "
                                f"{type(op).__name__}; build ops with vlmprep.ops.<name>(...)")
        if not ops or ops[0].name != "decode":
            ops = (decode(),) + ops
        if ops[-1].name != "pack":
            ops = ops + (pack(),)
        names = [op.name for op in ops]
        for n in set(names):
            if names.count(n) > 1:
                raise ValueError(f"Pipeline: op {n!r} appears {names.count(n)} times; expected at "
                                 f"most once; merge them into one op")
        sizing = [op.name for op in ops if op.sizing]
        if len(sizing) != 1:
            allowed = sorted(n for n, t in OP_TYPES.items() if t.sizing)
            raise ValueError(f"Pipeline: expected exactly one sizing op (one of {allowed}), got "
                             f"{sizing or 'none'}; add one, e.g. vlmprep.ops.smart_resize(...) "
                             f"or your own vlmprep.ops.SizingOp")
        size_op = next(op for op in ops if op.sizing)
        if getattr(size_op, "interpolation", None) not in INTERPOLATIONS:
            raise ValueError(f"Pipeline: sizing op {size_op.name!r} expected an interpolation field "
                             f"(one of {INTERPOLATIONS}: canvases without their own resize with "
                             f"it), got {getattr(size_op, 'interpolation', 'none')!r}; add "
                             f"interpolation: str = 'bicubic' to the op class")
        if "patchify" not in names:
            raise ValueError("Pipeline: expected a patchify op (it defines the ViT sequences), got "
                             "none; add vlmprep.ops.patchify(patch_size=...)")
        if names.index(sizing[0]) > names.index("patchify") or (
                "normalize" in names and names.index("normalize") > names.index("patchify")):
            raise ValueError(f"Pipeline: expected resize and normalize before patchify, got order "
                             f"{names}; reorder the ops")
        if "center_crop" in names:
            if not size_op.allows_center_crop:
                takes = sorted(n for n, t in OP_TYPES.items() if t.sizing and t.allows_center_crop)
                raise ValueError(f"Pipeline: expected center_crop only with a sizing op that keeps "
                                 f"one canvas ({takes}), got it with {size_op.name!r} (whose rule "
                                 f"makes its own tiles); remove the center_crop")
            if names.index("center_crop") < names.index(sizing[0]):
                raise ValueError(f"Pipeline: expected center_crop after the sizing op, got order "
                                 f"{names}; reorder the ops")
        self._ops = ops
        self._name = str(name)
        if self.patchify.order == "tiles" and self.tile_hw is None:
            raise ValueError(f"Pipeline: patchify order 'tiles' expected one tile size for every "
                             f"image (a tiling op such as ops.internvl_tile, ops.center_crop, "
                             f"ops.resize(mode='fixed'), or a SizingOp whose tile_hw is fixed), "
                             f"got {names}; add a crop or use order='merge_grouped'")

    # -- access ---------------------------------------------------------------------------------
    @property
    def ops(self) -> tuple[Op, ...]:
        return self._ops

    @property
    def name(self) -> str:
        return self._name

    def __iter__(self) -> Iterator[Op]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def get(self, op_name: str) -> Op | None:
        """The op called ``op_name`` or None."""
        for op in self._ops:
            if op.name == op_name:
                return op
        return None

    def __getitem__(self, op_name: str) -> Op:
        op = self.get(op_name)
        if op is None:
            raise KeyError(f"Pipeline {self._name!r} has no op {op_name!r}; it has "
                           f"{[o.name for o in self._ops]}")
        return op

    @property
    def sizing(self) -> Op:
        return next(op for op in self._ops if op.sizing)

    @property
    def tile_hw(self) -> tuple[int, int] | None:
        """``(h, w)`` every tile has, when the ops fix it: the ``center_crop``'s, else what the
        sizing op says (``Op.tile_hw``: tiling ops, fixed resize); None: per image."""
        crop = self.get("center_crop")
        return crop.tile_hw if crop is not None else self.sizing.tile_hw

    @property
    def patchify(self) -> patchify:
        return self["patchify"]  # type: ignore[return-value]

    @property
    def normalize(self) -> normalize | None:
        return self.get("normalize")  # type: ignore[return-value]

    @property
    def pack(self) -> pack:
        return self["pack"]  # type: ignore[return-value]

    # -- what an output dtype runs (the one place "uint8 means no normalize" is decided) --------
    def normalize_for(self, dtype: str) -> _Normalize | None:
        """The normalize op an output of ``dtype`` runs: the pipeline's, or None for ``"uint8"``
        (the resized, patchified pixels: normalize is left to the consumer, e.g. vLLM's
        ``mm_device_do_normalize`` or ``adapters.vit.normalize_on_device``) and for a pipeline
        without one. Every backend, executor and the video path ask this."""
        return None if dtype == "uint8" else self.normalize

    def executed_ops(self, dtype: str) -> tuple[Op, ...]:
        """The ops a backend lowers for an output of ``dtype``, in order: every op but ``pack``
        (the Processor packs), and without ``normalize`` where ``normalize_for(dtype)`` is None.

        Given qwen2-vl (decode, smart_resize, normalize, patchify, pack)
        Output "float32": (decode, smart_resize, normalize, patchify); "uint8": (decode,
               smart_resize, patchify)
        """
        norm = self.normalize_for(dtype)
        return tuple(op for op in self._ops
                     if op.name != "pack" and (op.name != "normalize" or norm is not None))

    # -- changes --------------------------------------------------------------------------------
    def replace(self, **overrides: Any) -> "Pipeline":
        """A copy with fields changed by name, e.g. ``replace(max_pixels=1_003_520)``.

        A field name must belong to exactly one op; ``<op>__<field>`` (e.g.
        ``resize__size``) picks the op explicitly.
        """
        if not overrides:
            return self
        changes: dict[int, dict[str, Any]] = {}
        for key, value in overrides.items():
            if "__" in key:
                op_name, fld = key.split("__", 1)
                owners = [i for i, op in enumerate(self._ops)
                          if op.name == op_name and fld in op.field_names()]
            else:
                fld = key
                owners = [i for i, op in enumerate(self._ops) if fld in op.field_names()]
            if len(owners) != 1:
                known = sorted({f for op in self._ops for f in op.field_names()})
                if not owners:
                    raise TypeError(f"Pipeline {self._name!r}: no op has a field {key!r}; "
                                    f"expected one of {known}")
                raise TypeError(f"Pipeline {self._name!r}: field {key!r} belongs to several ops "
                                f"{[self._ops[i].name for i in owners]}; write <op>__{fld}=...")
            changes.setdefault(owners[0], {})[fld] = value
        new = [op.replace(**changes[i]) if i in changes else op for i, op in enumerate(self._ops)]
        return Pipeline(new, name=self._name)

    # -- serialisation --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form: ``{"name": str, "ops": [{"op": name, field: value, ...}, ...]}``."""
        return {"name": self._name, "ops": [op.to_dict() for op in self._ops]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Pipeline":
        """The pipeline ``to_dict()`` wrote; dicts written before a rename (op ``tile`` with
        ``rule="internvl"``, patchify's ``layout``) are read with a DeprecationWarning."""
        if not isinstance(d, Mapping) or not isinstance(d.get("ops"), list):
            raise ValueError(f"Pipeline.from_dict: expected {{'name': str, 'ops': [...]}} as made by "
                             f"Pipeline.to_dict(), got {type(d).__name__} with keys "
                             f"{list(d) if isinstance(d, Mapping) else '-'}")
        ops = []
        for i, od in enumerate(d["ops"]):
            od = dict(od)
            name, od = _upgrade(i, od.pop("op", None), od)
            if name not in OP_TYPES:
                raise ValueError(f"Pipeline.from_dict: op {i}: expected one of {sorted(OP_TYPES)}, "
                                 f"got {name!r}")
            typ = OP_TYPES[name]
            unknown = set(od) - set(typ.field_names())
            if unknown:
                raise ValueError(f"Pipeline.from_dict: op {name!r} has no fields {sorted(unknown)}; "
                                 f"it has {list(typ.field_names())}")
            ops.append(typ(**{k: tuple(v) if isinstance(v, list) else v for k, v in od.items()}))
        return cls(ops, name=d.get("name", "custom"))

    # -- value semantics ------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pipeline) and self._ops == other._ops and self._name == other._name

    def __hash__(self) -> int:
        return hash((self._ops, self._name))

    def __repr__(self) -> str:
        lines = [f"Pipeline({self._name!r}, ["]
        lines += [f"    {op!r}," for op in self._ops]
        return "\n".join(lines + ["])"])
