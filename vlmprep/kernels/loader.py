"""Finding and loading the compiled ops; says what they were built for when they do not load.

``VLMPREP_KERNELS_DIR``: load the torch ops (``_vlmprep_torch*.so`` and its ``_build_info.json``)
from that folder instead of the package's, e.g. the AddressSanitizer build of ``make sanitize``
(build/sanitize/vlmprep/kernels), which needs libasan preloaded (the Makefile target does it).
"""
from __future__ import annotations

import copy
import functools
import glob
import json
import os
import threading

__all__ = ["load", "why_unavailable", "build_info", "dali_plugin", "dali_plugin_loaded", "DALI_OP"]

_HERE = os.path.dirname(os.path.abspath(__file__))

#: The DALI op the plugin registers (``fn.vlmprep_normalize_patchify``; csrc/dali).
DALI_OP = "VlmprepNormalizePatchify"


def _dir() -> str:
    """Where the torch ops are: VLMPREP_KERNELS_DIR (another build of them) or the package."""
    return os.environ.get("VLMPREP_KERNELS_DIR") or _HERE


_lock = threading.Lock()
_state: dict = {}


def build_info() -> dict:
    """What setup.py built (``_build_info.json``, next to the library: the build writes both into
    the wheel, or into the source tree for an editable install), or why nothing was. A copy of
    the record read once per folder: callers ask per image (fusion, jpeg_available), and the
    library a process has loaded does not change under it."""
    return copy.deepcopy(_record())


def built_with(part: str, key: str) -> bool:
    """Whether the build record says ``part`` ("torch_ext", "dali_plugin") has ``key`` (e.g.
    "libjpeg", "cuda"): the per-image question, answered without build_info's copy (0.1 ms)."""
    return bool(_record().get(part, {}).get(key))


def _record() -> dict:
    """The cached build record of the ops' folder (shared: callers must not change it)."""
    return _read_record(os.path.join(_dir(), "_build_info.json"))


@functools.lru_cache(maxsize=8)
def _read_record(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"torch_ext": {"built": False, "reason": "no build record: the package was not "
                              "built by setup.py (pip install --no-build-isolation ., or -e .)"},
                "dali_plugin": {"built": False, "reason": "no build record"}}


def _found() -> str:
    import torch
    return f"torch {torch.__version__} (CUDA {torch.version.cuda})"


def _once(key: str, fn):
    """``fn()``'s result, computed once per process (loading a library twice is not free, and
    for DALI not even safe)."""
    with _lock:
        if key not in _state:
            _state[key] = fn()
        return _state[key]


def load() -> str | None:
    """Load the torch ops once; None on success, else the reason (also kept for later calls)."""
    return _once("torch", _load_torch)


def _load_torch() -> str | None:
    if os.environ.get("VLMPREP_DISABLE_KERNELS"):
        return "disabled by VLMPREP_DISABLE_KERNELS"
    info = build_info()["torch_ext"]
    libs = sorted(glob.glob(os.path.join(_dir(), "_vlmprep_torch*.so")))
    if not libs or not info.get("built"):
        # A library left from an earlier build is not loaded when the last build failed.
        return f"not built ({info.get('reason', 'no library next to the package')})"
    try:
        import torch
    except ImportError as e:
        return f"torch is not importable: {e}"
    if hasattr(torch.ops, "vlmprep") and hasattr(torch.ops.vlmprep, "normalize_patchify"):
        return None  # already registered (e.g. loaded by another path)
    try:
        torch.ops.load_library(libs[0])
    except OSError as e:
        return (f"{os.path.basename(libs[0])} was built for torch {info.get('torch')} (CUDA "
                f"{info.get('torch_cuda')}), found {_found()}, and failed to load: {e}; rebuild "
                f"for this torch: `pip install --no-build-isolation .` (`-e .` or `make venv` in a "
                f"checkout)")
    try:
        from . import torch_ops  # noqa: F401  deferred: its fake kernels need the library loaded first
    except RuntimeError as e:  # the source declares an op the library lacks: a stale build
        return (f"{os.path.basename(libs[0])} is older than this source (it lacks an op the source "
                f"declares: {str(e).splitlines()[0]}); rebuild: `pip install --no-build-isolation "
                f"-e .` in a checkout")
    return None


def why_unavailable() -> str | None:
    return load()


def dali_plugin() -> str | None:
    """Load the DALI plugin once; returns its path, or None when it is not built / not loadable.

    Loading a second file that registers the same op aborts the process (DALI.md pitfall 8), so
    this loads only when ``VlmprepNormalizePatchify`` is not registered yet.
    """
    return _once("dali", _load_dali)


def _load_dali() -> str | None:
    if os.environ.get("VLMPREP_DISABLE_KERNELS"):
        return None
    path = os.path.join(_HERE, "libvlmprep_dali.so")
    if not os.path.exists(path) or not build_info()["dali_plugin"].get("built"):
        return None  # not built, or left from an earlier build when the last one failed
    try:
        import nvidia.dali.plugin_manager as pm
    except ImportError:
        return None
    if DALI_OP not in _registered_ops("cpu"):
        try:
            pm.load_library(path)
        except RuntimeError:
            return None
    return path


def dali_plugin_loaded(device: str = "cpu") -> bool:
    """Whether the csrc DALI plugin (``dali_plugin()``) is built and registered for ``device``
    (``"cpu"`` or ``"gpu"``: a CPU-only build has no GPU op)."""
    return dali_plugin() is not None and DALI_OP in _registered_ops(device)


def _registered_ops(device: str) -> list[str]:
    """The DALI ops registered for ``device`` ("gpu", else the CPU's)."""
    import nvidia.dali.backend as b  # compiled, no type information: hence the ignore
    return b.RegisteredGPUOps() if device == "gpu" else b.RegisteredCPUOps()  # type: ignore[attr-defined]
