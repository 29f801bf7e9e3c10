"""Where a benchmark ran: the machine, the library versions, and the process's resource use."""
from __future__ import annotations

import os
import platform
import re
import resource
import sys
from importlib import metadata

from .. import __version__
from ..kernels.threads import usable_cpus

__all__ = ["machine", "machine_name", "versions", "PeakRss"]

# short name -> distribution names to try (the first installed one wins)
_DISTS = {
    "torch": ("torch",), "torchvision": ("torchvision",), "pillow": ("pillow", "Pillow"),
    "numpy": ("numpy",),
    "opencv": ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless",
               "opencv-contrib-python"),
    "dali": ("nvidia-dali-cuda130", "nvidia-dali-cuda120", "nvidia-dali-cuda110", "nvidia-dali"),
    "transformers": ("transformers",),
}


def _dist_version(names: tuple[str, ...]) -> str | None:
    for n in names:
        try:
            return metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return None


def versions() -> dict[str, str | None]:
    """``{python, vlmprep, torch, torchvision, pillow, numpy, opencv, dali, transformers}``:
    installed versions (None where a package is missing), read without importing them."""
    out: dict[str, str | None] = {"python": platform.python_version(), "vlmprep": __version__}
    out.update({k: _dist_version(v) for k, v in _DISTS.items()})
    return out


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _gpus() -> list[str]:
    if "torch" not in sys.modules:  # only asked once torch is loaded anyway (the harness loads it)
        return []
    import torch  # deferred: heavy (already loaded here)
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def machine_name() -> str:
    """A short, stable name for result files: the first GPU's model (``nvidia-h200``) or
    ``cpu<N>`` (usable cores) on a machine without one."""
    gpus = _gpus()
    if gpus:
        return re.sub(r"[^a-z0-9]+", "-", gpus[0].lower()).strip("-")
    return f"cpu{usable_cpus()}"


def machine() -> dict:
    """``{name, platform, processor, cpu_model, cpu_count, usable_cpus, memory_gib, gpus}``."""
    return {"name": machine_name(), "platform": platform.platform(),
            "processor": platform.machine(), "cpu_model": _cpu_model(),
            "cpu_count": os.cpu_count(), "usable_cpus": usable_cpus(),
            "memory_gib": _memory_gib(), "gpus": _gpus()}


class PeakRss:
    """Peak resident memory of this process over a measured span.

    On Linux the kernel's high-water mark (``VmHWM``) is reset at ``start()`` by writing 5 to
    ``/proc/self/clear_refs``, so ``peak_mib()`` is the span's own peak (``scope == "span"``);
    elsewhere it is the process's peak since it started (``scope == "process"``).
    """

    def __init__(self) -> None:
        self.scope = "process"

    def start(self) -> None:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.scope = "span" if self._hwm_kib() is not None else "process"
        except OSError:
            self.scope = "process"

    @staticmethod
    def _hwm_kib() -> int | None:
        try:
            with open("/proc/self/status", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return None

    def peak_mib(self) -> float:
        kib = self._hwm_kib() if self.scope == "span" else None
        if kib is None:
            kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
            if sys.platform == "darwin":
                kib //= 1024  # bytes there
        return round(kib / 1024, 1)
