"""``vlmprep info``: versions, backends usable here (and why not), devices, compiled kernels."""
from __future__ import annotations

import argparse
import platform
from importlib import metadata

from .. import __version__, backends, kernels, presets
from ..pipeline import Pipeline
from ._common import print_json

_PACKAGES = ("torch", "torchvision", "pillow", "numpy", "opencv-python-headless",
             "nvidia-dali-cuda130", "transformers")


def add_parser(sub) -> None:
    p = sub.add_parser("info", help="versions and which backends are available")
    p.add_argument("--preset", default=None, help="also print this preset's resolved pipeline")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(run=run)


def collect(preset: str | None = None) -> dict:
    versions: dict[str, str | None] = {"python": platform.python_version(), "vlmprep": __version__}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    info: dict = {
        "machine": {"platform": platform.platform(), "processor": platform.machine(),
                    "cpu_count": __import__("os").cpu_count()},
        "versions": versions,
        "backends": {n: {"available": backends.why_unavailable(n) is None,
                         "reason": backends.why_unavailable(n)} for n in backends.names()},
        "presets": presets.names(),
        "kernels": kernels.summary(),
    }
    try:
        import torch
        info["cuda"] = {"available": torch.cuda.is_available(),
                        "torch_cuda": torch.version.cuda,
                        "devices": [torch.cuda.get_device_name(i)
                                    for i in range(torch.cuda.device_count())]}
    except ImportError:
        info["cuda"] = {"available": False, "reason": "torch is not installed"}
    if preset:
        info["pipeline"] = presets.get(preset).to_dict()
    return info


def run(args: argparse.Namespace) -> int:
    info = collect(args.preset)
    if args.json:
        print_json(info)
        return 0
    print(f"vlmprep {info['versions']['vlmprep']} on {info['machine']['platform']}, "
          f"{info['machine']['cpu_count']} CPUs")
    print("versions:")
    for k, v in info["versions"].items():
        print(f"  {k:24s} {v or 'not installed'}")
    print("backends:")
    for k, v in info["backends"].items():
        print(f"  {k:24s} {'available' if v['available'] else 'unavailable: ' + v['reason']}")
    cuda = info["cuda"]
    print(f"cuda: {'available: ' + ', '.join(cuda['devices']) if cuda['available'] else 'not available'}")
    k = info["kernels"]
    if k["built"]:
        t = k["torch_ext"]
        cuda_kernels = f"for {t.get('cuda_archs')}" if t.get("cuda") else "not built (no nvcc)"
        jpeg = "built (libjpeg-turbo)" if t.get("libjpeg") else f"not built: {t.get('libjpeg_reason')}"
        d = k["dali_plugin"]
        dali = ("loaded" if k["dali_plugin_loaded"] else
                f"built for nvidia-dali {d.get('dali')}, not loaded here (is nvidia-dali installed? "
                f"pip install 'vlmprep[dali]')" if d.get("built") else f"not built: {d.get('reason')}")
        print(f"kernels: torch ops built for torch {t.get('torch')} (CUDA {t.get('torch_cuda')}), "
              f"CUDA kernels {cuda_kernels}; JPEG fast path {jpeg}; DALI plugin {dali}")
        paths = k["cpu_paths"]
        cap = f" (capped by VLMPREP_CPU_ISA={paths['cap']})" if paths["cap"] else ""
        print(f"cpu paths: resize {paths['resize']}, normalize_patchify {paths['normalize_patchify']}{cap}")
    else:
        print(f"kernels: not available: {k['reason']}")
    print(f"presets: {', '.join(info['presets'])}")
    if "pipeline" in info:
        print(Pipeline.from_dict(info["pipeline"]))
    return 0
