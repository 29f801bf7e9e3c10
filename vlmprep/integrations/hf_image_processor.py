"""vlmprep as a transformers image processor's ``__call__``: what the engine plugins install.

``install(image_processor, switch)`` gives an image processor of a class vlmprep reproduces
(``SUPPORTED``) a ``__call__`` that answers with vlmprep's tensors, built from the image
processor's own config, bit-exact with it (``match="torchvision"`` for transformers' torchvision
backend, else Pillow-exact; ``VLMPREP_VLLM_PIXELS=pil``: Pillow-exact always), whenever
``switch()`` is true and the call asks for nothing else than the config; any other call goes to
the image processor itself. ``STATS`` counts both kinds of call in this process. The processor
around it (vLLM's, SGLang's, transformers') still writes the prompt.

``VLMPREP_VLLM_DEVICE=cuda`` (or ``cuda:N``) runs vlmprep on that GPU inside the engine's process
(the torch backend): Pillow-exact pixels there (the torchvision match is a CPU rule), handed back
on the host as the processor's are (the engine moves them to the model itself).
"""
from __future__ import annotations

import os
import re
import threading
from typing import Any, Callable, Mapping

__all__ = ["DEVICE_ENV", "FLOAT_DTYPE", "PIXELS_ENV", "SUPPORTED", "STATS", "install"]

PIXELS_ENV = "VLMPREP_VLLM_PIXELS"
DEVICE_ENV = "VLMPREP_VLLM_DEVICE"

#: transformers image processor class -> keywords its processors pass that vlmprep's form answers
#: beyond the config's own values (Idefics3's, SmolVLM's and LFM2-VL's processors ask for each
#: image's tile grid). Qwen2VLImageProcessor is Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's (patch 16).
SUPPORTED: dict[str, frozenset[str]] = {
    "Qwen2VLImageProcessor": frozenset(),
    "CLIPImageProcessor": frozenset(),
    "GotOcr2ImageProcessor": frozenset(),
    "LlavaNextImageProcessor": frozenset(),
    "LlavaOnevisionImageProcessor": frozenset(),
    "Idefics3ImageProcessor": frozenset({"return_row_col_info"}),
    "SmolVLMImageProcessor": frozenset({"return_row_col_info"}),
    "PixtralImageProcessor": frozenset(),
    "Gemma3ImageProcessor": frozenset(),
    "Glm4vImageProcessor": frozenset(),
    "Lfm2VlImageProcessor": frozenset({"return_row_col_info"}),
    "Llama4ImageProcessor": frozenset(),
    "MiniCPMV4_6ImageProcessor": frozenset(),
}

#: image processor class -> the dtype of its normalized pixels where it is not float32
#: (transformers' Llama4ImageProcessor rescales and normalizes in bfloat16)
FLOAT_DTYPE: dict[str, str] = {"Llama4ImageProcessor": "bfloat16"}

#: calls answered by vlmprep / passed to the image processor itself, and images vlmprep decoded
#: from the JPEG bytes vLLM's loader left undecoded (``vllm_media``), in this process
STATS = {"vlmprep": 0, "fallback": 0, "jpeg_bytes": 0}
_LOCK = threading.Lock()
_SUBCLASSES: dict[type, type] = {}


def install(image_processor: Any, switch: Callable[[], bool]) -> bool:
    """Give a transformers image processor vlmprep's ``__call__`` (its class becomes a subclass
    that overrides only ``__call__``: attributes, isinstance and the rest are its own). True when
    its class is in ``SUPPORTED``; other image processors are left as they are. ``switch``: asked
    at each call; vlmprep answers only while it is true."""
    image_processor.__dict__["_vlmprep_switch"] = switch
    return swap_call(image_processor, SUPPORTED, _call)


def swap_call(processor: Any, supported: Mapping[str, Any], call: Callable) -> bool:
    """Make ``processor``'s class a subclass of it that overrides only ``__call__`` with ``call``
    (one subclass per class, made once); True when its class is named in ``supported`` (or was
    swapped already), else False and the processor is left as it is."""
    cls = type(processor)
    if getattr(cls, "_vlmprep", False):
        return True
    if cls.__name__ not in supported:
        return False
    with _LOCK:
        sub = _SUBCLASSES.get(cls)
        if sub is None:
            sub = _SUBCLASSES[cls] = type(cls.__name__, (cls,), {
                "__call__": call, "_vlmprep": True, "__module__": cls.__module__,
                "__qualname__": cls.__qualname__})
    processor.__class__ = sub
    return True


def _call(self: Any, images: Any = None, *args: Any, **kwargs: Any) -> Any:
    """The image processor's call, answered by vlmprep when it can (see the module docstring)."""
    real = super(type(self), self).__call__
    on = self.__dict__.get("_vlmprep_switch")
    dtype = _dtype(self, kwargs, SUPPORTED[type(self).__name__]) if on is not None and on() and not args else None
    flat, per_sample = _flatten(images) if dtype is not None else (None, None)
    proc = _processor(self, dtype) if dtype is not None and flat is not None else None
    if proc is None or flat is None:
        _count("fallback")
        return real(images, *args, **kwargs)
    batch = _run(proc, flat)
    grid = _ROW_COL[type(self).__name__](batch, per_sample) if kwargs.get("return_row_col_info") else {}
    if grid is None:  # a grid vlmprep's plan does not give: the image processor answers
        _count("fallback")
        return real(images, *args, **kwargs)
    # on the host, as the image processor returns them (a no-op on the CPU)
    out = batch.to_hf(images_per_sample=per_sample, device="cpu")
    out.update(grid)
    _count("vlmprep")
    return out


def _run(proc: Any, flat: list) -> Any:
    """``proc`` over the images; an image vLLM's loader left undecoded goes as its JPEG bytes
    (``vllm_media``: vlmprep decodes them, fused with the resize, into Pillow's pixels). Should
    vlmprep refuse those bytes, the images go again as Pillow decodes them, as without the
    deferred decode; errors="raise": a bad image is the request's ValueError (ImageError)."""
    from ..errors import ImageError
    from .vllm_media import encoded_jpeg
    items = [encoded_jpeg(x) or x for x in flat]
    deferred = [y for x, y in zip(items, flat) if x is not y]
    if not deferred:
        return proc(flat)
    try:
        batch = proc(items)
    except ImageError as refused:
        for im in deferred:
            try:
                im.load()
            except Exception:  # noqa: BLE001 (Pillow cannot decode it either: vlmprep's error says why)
                raise refused from None
        return proc(flat)
    _count("jpeg_bytes", len(deferred))
    return batch


def _count(key: str, n: int = 1) -> None:
    with _LOCK:  # vLLM's renderer may call from several threads
        STATS[key] += n


def _dtype(ip: Any, kwargs: dict, allowed: frozenset[str]) -> str | None:
    """vlmprep's dtype for this call: "float32" (rescale + normalize, the config's default;
    ``FLOAT_DTYPE``'s where the image processor normalizes in another dtype), "uint8" (both
    off: vLLM's ``mm_device_do_normalize``), or None when a keyword asks for something else than
    the config (then the image processor answers). ``allowed``: keywords the caller answers
    itself (whatever their value)."""
    kw = dict(kwargs)
    if kw.pop("return_tensors", "pt") not in ("pt", None):
        return None
    rescale, normalize = kw.pop("do_rescale", None), kw.pop("do_normalize", None)
    if rescale is False and normalize is False:
        dtype = "uint8"
    elif rescale in (None, True) and normalize in (None, True):
        dtype = FLOAT_DTYPE.get(type(ip).__name__, "float32")
    else:
        return None
    missing = object()
    for key, value in kw.items():
        if key in allowed:
            continue
        have = getattr(ip, key, missing)
        if have is missing or have != value:
            return None
    return dtype


def _flatten(images: Any) -> tuple[list | None, list[int] | None]:
    """(the images in order, images per sample when nested as a list of lists; else None), or
    (None, None) for what vlmprep does not take here (nothing, videos, other nesting)."""
    if images is None:
        return None, None
    items = images if isinstance(images, (list, tuple)) else [images]
    if items and all(isinstance(x, (list, tuple)) for x in items):
        flat = [y for x in items for y in x]
        per_sample: list[int] | None = [len(x) for x in items]
    else:
        flat, per_sample = list(items), None
    if not flat or not all(_is_image(x) for x in flat):
        return None, None
    return flat, per_sample


def _is_image(x: Any) -> bool:
    import numpy as np  # deferred: only when vLLM calls
    from PIL import Image  # deferred: only when vLLM calls
    return isinstance(x, Image.Image) or (isinstance(x, np.ndarray) and x.dtype == np.uint8)


def device() -> str:
    """Where vlmprep runs in the engine's process: ``VLMPREP_VLLM_DEVICE`` (cpu by default);
    raises ValueError for a value that names no device (the plugins ask at start-up)."""
    dev = os.environ.get(DEVICE_ENV, "").strip().lower() or "cpu"
    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", dev):
        raise ValueError(f"{DEVICE_ENV}: expected 'cpu', 'cuda' or 'cuda:N', got {dev!r}; "
                         f"fix: unset it (the CPU) or set {DEVICE_ENV}=cuda")
    return dev


def _processor(ip: Any, dtype: str) -> Any:
    """The vlmprep Processor for this image processor's config, dtype and device, made once; None
    when vlmprep does not know the config (then the image processor answers, every call)."""
    cache = ip.__dict__.setdefault("_vlmprep_processors", {})
    dev = device()
    pil = os.environ.get(PIXELS_ENV, "").strip().lower() == "pil" or dev != "cpu"
    match = "pil" if pil or getattr(ip, "backend", None) != "torchvision" else "torchvision"
    if (dtype, match, dev) not in cache:
        import vlmprep  # deferred: the integration layer loads the processor only when used
        try:
            pipeline = vlmprep.presets.from_config(ip.to_dict())
        except ValueError:  # a config of the class vlmprep does not reproduce
            cache[dtype, match, dev] = None
            return None
        # a bad VLMPREP_VLLM_DEVICE is the Processor's ValueError (expected / got / fix), raised
        # at the first request rather than hidden behind transformers' answer
        cache[dtype, match, dev] = vlmprep.Processor(
            pipeline, backend="auto" if dev == "cpu" else "torch", match=match, dtype=dtype, device=dev)
    return cache[dtype, match, dev]


def _split_grid(p: Any) -> tuple[int, int]:
    """(rows, cols) of an image plan's split tiles: those not on its last canvas (the global
    image / thumbnail, the last tile of every image); (0, 0) for an image not split."""
    split = [t for t, c in zip(p.tiles, p.tile_canvas) if c != p.tile_canvas[-1]]
    return len({t[0] for t in split}), len({t[1] for t in split})


def _idefics3_rows_cols(batch: Any, per_sample: list[int] | None) -> dict:
    """Idefics3's / SmolVLM's ``return_row_col_info`` keys: ``rows`` / ``cols`` per sample per
    image, the split grid ((0, 0) for an image not split)."""
    grids = [_split_grid(p) for p in batch.image_plans]
    rows: list = []
    cols: list = []
    k = 0
    for n in per_sample or [len(grids)]:
        rows.append([g[0] for g in grids[k:k + n]])
        cols.append([g[1] for g in grids[k:k + n]])
        k += n
    return {"rows": rows, "cols": cols}


def _lfm2_grid(batch: Any, per_sample: list[int] | None = None) -> dict | None:
    """LFM2-VL's ``image_rows`` / ``image_cols`` / ``image_sizes`` (flat over the images, tensors
    as its image processor returns them): the split grid (1 x 1 for an image not split) and the
    size of the image's last canvas (its thumbnail, or the one resized image). None for a split
    image without a thumbnail (its thumbnail size is not planned: the image processor answers)."""
    import torch  # deferred: only when vLLM calls
    rows, cols, sizes = [], [], []
    for p in batch.image_plans:
        r, c = _split_grid(p)
        if not r and len(p.tiles) > 1:
            return None
        rows.append(r or 1)
        cols.append(c or 1)
        sizes.append(list(p.canvases[p.tile_canvas[-1]].resize_hw))
    return {"image_rows": torch.tensor(rows), "image_cols": torch.tensor(cols),
            "image_sizes": torch.tensor(sizes)}


#: image processor class -> its answer to ``return_row_col_info`` (the keys it adds; None: the
#: image processor answers), for the classes whose ``SUPPORTED`` keywords name it
_ROW_COL: dict[str, Callable[[Any, "list[int] | None"], "dict | None"]] = {
    "Idefics3ImageProcessor": _idefics3_rows_cols, "SmolVLMImageProcessor": _idefics3_rows_cols,
    "Lfm2VlImageProcessor": _lfm2_grid,
}
