"""The optional decoders and lazily loaded libraries of the per-image path, loaded once per
process, under one lock, before any image is decoded (issue 33).

Why: a first import is not safe to race with decoding. The README's quickstart died with SIGSEGV
(2 of 8 runs under load) while one of its image threads imported OpenCV for the first time and
another was inside the compiled JPEG decoder. A first import also holds the GIL for its whole
length (OpenCV's, Pillow's plugins, the kernels' library: 100-350 ms in all), so a server's event
loop sharing the process stalls on the first request that needs it.

So ``warm_decoders()`` loads them all at once: Pillow's format plugins (``Image.init``), OpenCV
(PNG and 16-bit decodes, video capture), vlmprep's header readers (``io.probe``), the compiled
kernels (``kernels.load``), and torchvision's image io where torchvision is loaded already (the
torch backend's JPEG decoder without the kernels). ``vlmprep.Processor`` calls it when it is
built; ``Batcher`` again, off its loop, when it starts. Every decode entry
(``io.decode.decode``, ``encoded_bytes``, video ``decode_frames``) calls ``ensure()`` first, so
even without a Processor no thread can be decoding while another is still loading: the first
caller loads, the others wait on the lock.
``import vlmprep`` itself loads none of this.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
import warnings
from typing import Any

__all__ = ["warm_decoders", "ensure", "cv2", "loaded"]

log = logging.getLogger("vlmprep")

_lock = threading.Lock()
_done = False
_cv2: Any = None
_report: dict[str, float | None] = {}  # step -> ms it took, None: not available here


def ensure() -> None:
    """``warm_decoders()`` unless done (one global read once it is: free per image)."""
    if not _done:
        warm_decoders()


def cv2() -> Any:
    """The ``cv2`` module (loaded by ``warm_decoders``), or None when OpenCV is not importable."""
    ensure()
    return _cv2


def loaded() -> dict[str, float | None]:
    """What ``warm_decoders`` loaded: step -> ms it took (None: not available in this process);
    empty before it ran."""
    return dict(_report)


def warm_decoders() -> dict[str, float | None]:
    """Load, once per process and under one lock, every library an image decode may load lazily
    -> ``loaded()``. Later calls return at once. Never raises: a library that does not load is
    recorded as None, and the decode that needs it reports that per image (or falls back), as
    before."""
    global _done
    if _done:
        return dict(_report)
    with _lock:
        if not _done:
            _warm()
            _done = True
    return dict(_report)


def _step(name: str, fn: Any) -> Any:
    t = time.perf_counter()
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 (optional: the decode that needs it reports or falls back)
        log.debug("vlmprep: %s did not load (%s: %s)", name, type(e).__name__, e)
        _report[name] = None
        return None
    _report[name] = (time.perf_counter() - t) * 1e3
    return out


def _pil() -> None:
    from PIL import Image
    Image.init()  # every format plugin: Image.open of a WebP, TIFF, ... would import them all


def _opencv() -> Any:
    import cv2 as m
    return m


def _probe() -> None:
    from . import probe  # noqa: F401  deferred: importing them once, under the lock, is this step


def _kernels() -> None:
    from .. import kernels  # deferred: warm loads it once under its lock (kernels.load())
    why = kernels.load()  # the torch ops' library (None: loaded); never raises
    if why is not None:
        raise RuntimeError(why)


def _torchvision_io() -> None:
    if "torchvision" not in sys.modules:  # not the backend's: never imported for it (~1 s)
        raise RuntimeError("torchvision is not loaded in this process")
    with warnings.catch_warnings():  # torchvision 0.29 deprecates its image io (still there)
        warnings.simplefilter("ignore", DeprecationWarning)
        import torchvision.io  # noqa: F401


def _warm() -> None:
    global _cv2
    _step("PIL", _pil)
    _cv2 = _step("cv2", _opencv)
    _step("probe", _probe)
    _step("kernels", _kernels)
    _step("torchvision.io", _torchvision_io)
