"""vlmprep: pure-Python install always works; compiled parts (csrc/) are built when they can be.

What is built (each step prints what it resolved; a failed step leaves the package usable):
- ``vlmprep/kernels/_vlmprep_torch.so``: the torch ops (torch.ops.vlmprep.*): the CPU twins
  whenever a C++ compiler and torch are present, plus the CUDA kernels when nvcc is found
  (architectures: VLMPREP_CUDA_ARCHS, default "80;90" with PTX of the last).
- ``vlmprep/kernels/libvlmprep_dali.so``: the DALI plugin, when nvidia-dali is importable.
- ``vlmprep/kernels/_build_info.json``: what was built, for ``vlmprep info`` and load errors.
All three go where the build puts the package: the build folder for a wheel or ``pip install .``
(so the wheel carries them), the source tree for ``pip install -e .`` and
``setup.py build_ext --inplace``. Nothing is written when this file is merely run for metadata.
torch is found at build time only without build isolation (``pip install --no-build-isolation .``):
the library is built for the torch that is installed, the one it will load into.
Set VLMPREP_NO_BUILD=1 for a pure-Python install; VLMPREP_REQUIRE_KERNELS=1 (CI) turns a failed
build into an error. A pure-Python build nobody asked for (torch hidden by pip's build isolation, no
compiler) prints a WARNING with the fix on stderr (``pure_warning``; pip shows it with -v).

VLMPREP_SANITIZE=1 (``make sanitize``): the torch ops' CPU code only, with AddressSanitizer and
UBSan, for ``setup.py build_ext --build-lib DIR``: the library and its build record go to DIR
(never over the package's own), no CUDA, no DALI plugin. Load it with VLMPREP_KERNELS_DIR and
libasan preloaded (see the Makefile).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
SANITIZE = os.environ.get("VLMPREP_SANITIZE") == "1"
# -fno-wrapv: Python's own flags carry -fwrapv, which would hide signed overflow from UBSan.
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all",
                  "-fno-wrapv"]
KERNELS_DIR = os.path.join(HERE, "vlmprep", "kernels")  # in-tree builds (editable, --inplace)
KERNELS_PKG = os.path.join("vlmprep", "kernels")  # under build_lib: what a wheel carries
INFO_NAME = "_build_info.json"
PLUGIN_NAME = "libvlmprep_dali.so"
PURE_STALE = (INFO_NAME, PLUGIN_NAME, "_vlmprep_torch*.so")  # a pure build ships none of them


def _read_version() -> str:
    """``__version__`` from vlmprep/__init__.py, read as text (the package is not imported:
    its dependencies may not be installed yet)."""
    with open(os.path.join(HERE, "vlmprep", "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if m is None:
        raise SystemExit('vlmprep setup: no `__version__ = "..."` line in vlmprep/__init__.py')
    return m.group(1)


def _sources() -> dict | None:
    """csrc/sources.json: each compiled part's sources, listed once (paths from the repo root);
    None where there is no csrc/ (e.g. an sdist without it: a pure-Python install)."""
    try:
        with open(os.path.join(HERE, "csrc", "sources.json"), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


SOURCES = _sources()
INCLUDE_DIRS = [os.path.join(HERE, d) for d in SOURCES["include_dirs"]] if SOURCES else []


def _log(msg: str) -> None:
    print(f"vlmprep setup: {msg}", flush=True)


def _cuda_home() -> str | None:
    """The toolkit folder (with include/cuda_runtime.h): CUDA_HOME, else next to nvcc, else
    /usr/local/cuda. An nvcc wrapper outside the toolkit makes torch's own guess wrong."""
    cands = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    cands.append("/usr/local/cuda")
    for c in cands:
        if c and os.path.exists(os.path.join(c, "include", "cuda_runtime.h")):
            return c
    return None


def _nvcc() -> str | None:
    home = _cuda_home()
    if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
        return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


def _archs() -> list[str]:
    """VLMPREP_CUDA_ARCHS="80;90" -> ["8.0", "9.0+PTX"] (TORCH_CUDA_ARCH_LIST form)."""
    raw = os.environ.get("VLMPREP_CUDA_ARCHS", "80;90")
    archs = [a.strip() for a in raw.replace(",", ";").split(";") if a.strip()]
    if not archs or not all(a.isdigit() for a in archs):
        raise SystemExit(f"vlmprep setup: VLMPREP_CUDA_ARCHS: expected e.g. '80;90', got {raw!r}")
    out = [f"{a[:-1]}.{a[-1]}" for a in archs]
    out[-1] += "+PTX"
    return out


def _libjpeg(cxx: str) -> tuple[bool, str]:
    """Whether libjpeg-turbo's headers and library link here (the CPU JPEG fast path), and why
    not. VLMPREP_NO_LIBJPEG=1 leaves it out."""
    if os.environ.get("VLMPREP_NO_LIBJPEG"):
        return False, "VLMPREP_NO_LIBJPEG is set"
    probe = "#include <cstdio>\n#include <jpeglib.h>\nint main() { jpeg_error_mgr e; jpeg_std_error(&e); }\n"
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([cxx, "-x", "c++", "-", "-ljpeg", "-o", os.path.join(d, "probe")],
                           input=probe, capture_output=True, text=True)
    if r.returncode != 0:
        return False, "jpeglib.h or libjpeg not found (install libjpeg-turbo's dev package)"
    return True, ""


def _not_built(reason: str) -> tuple[None, dict]:
    _log(f"{reason}: kernels not built (pure Python)")
    return None, {"reason": reason}


def pure_warning(cfg: dict) -> str | None:
    """The warning for a build without kernels that nobody asked for (cfg: ``_torch_extension``'s
    second value), or None (kernels built, or VLMPREP_NO_BUILD set). Printed to stderr by the
    build itself: pip shows the build's output with -v (and on a failure) only."""
    reason = cfg.get("reason")
    if reason is None or reason.startswith("VLMPREP_NO_BUILD"):
        return None
    return (f"WARNING: vlmprep is being built WITHOUT its compiled kernels (a pure-Python package: "
            f"correct, but the torch ops, the JPEG fast path and the DALI plugin are missing): "
            f"{reason}. Set VLMPREP_NO_BUILD=1 to build pure Python on purpose (no warning).")


def _torch_extension():
    """(the torch extension, its build config), or (None, {"reason": why}) when it cannot be
    built here (the reason is printed, and recorded by the build)."""
    if os.environ.get("VLMPREP_NO_BUILD"):
        return _not_built("VLMPREP_NO_BUILD is set")
    if SOURCES is None:
        return _not_built("no csrc/sources.json (no csrc/ in this source tree)")
    if _cuda_home():  # before torch.utils.cpp_extension reads it at import
        os.environ["CUDA_HOME"] = _cuda_home()
    try:
        import torch
        from torch.utils import cpp_extension as ce
    except ImportError as e:
        # pip's default build isolation hides the installed torch from this build
        return _not_built(f"torch was not importable at build time ({e}; pip's default build "
                          f"isolation hides an installed torch); fix: install torch, then build "
                          f"without isolation: pip wheel --no-build-isolation --no-deps . (or pip "
                          f"install --no-build-isolation ., -e . to edit)")
    cxx = shutil.which(os.environ.get("CXX", "c++"))
    if not cxx:
        return _not_built("no C++ compiler (c++ or $CXX) at build time")
    nvcc = None if SANITIZE else _nvcc()
    manifest = SOURCES["torch_ext"]
    sources = list(manifest["cpu"])
    cflags = ["-O3", "-g0", "-std=c++20", "-fvisibility=hidden"]  # torch 2.14 headers need C++20
    ldflags = []
    if SANITIZE:  # -O1 -g: readable reports at a bearable speed
        cflags = ["-O1", "-g", "-std=c++20", "-fvisibility=hidden", "-Wno-maybe-uninitialized",
                  *SANITIZE_FLAGS]
        ldflags = list(SANITIZE_FLAGS)
    cfg = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cxx": cxx,
           "python": sys.version.split()[0]}
    jpeg, why_not = _libjpeg(cxx)
    cfg["libjpeg"] = jpeg
    macros, libs = [], []
    if jpeg:
        sources += manifest["libjpeg"]
        macros.append(("VLMPREP_WITH_LIBJPEG", "1"))
        libs.append("jpeg")
    else:
        cfg["libjpeg_reason"] = why_not
        _log(f"libjpeg-turbo: {why_not}: the JPEG fast path is not built (decoding stays torchvision's)")
    if nvcc:
        os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(_archs())
        cfg.update(cuda=True, nvcc=nvcc, cuda_archs=os.environ["TORCH_CUDA_ARCH_LIST"])
        ext = ce.CUDAExtension(
            "vlmprep.kernels._vlmprep_torch", sources + manifest["cuda"], include_dirs=INCLUDE_DIRS,
            define_macros=[("VLMPREP_WITH_CUDA", "1")] + macros, libraries=libs,
            extra_compile_args={"cxx": cflags, "nvcc": ["-O3", "-std=c++20"]})
    else:
        cfg.update(cuda=False, nvcc=None, cuda_archs=None)
        ext = ce.CppExtension("vlmprep.kernels._vlmprep_torch", sources, include_dirs=INCLUDE_DIRS,
                              define_macros=macros, libraries=libs,
                              extra_compile_args={"cxx": cflags}, extra_link_args=ldflags)
    cfg["sanitize"] = SANITIZE
    _log(f"torch extension: torch {cfg['torch']} (CUDA {cfg['torch_cuda']}), C++ {cxx}, "
         f"nvcc {nvcc or 'none: CPU twins only'}, archs {cfg['cuda_archs'] or '-'}")
    return ext, cfg


def _build_dali_plugin(build_temp: str, out_dir: str) -> dict:
    """g++ (+ nvcc) the DALI plugin into ``out_dir`` (recipe: ../shared/reference/DALI.md)."""
    if os.environ.get("VLMPREP_NO_BUILD"):
        return {"built": False, "reason": "VLMPREP_NO_BUILD is set"}
    if SOURCES is None:
        return {"built": False, "reason": "no csrc/sources.json"}
    try:
        import nvidia.dali as dali
        import nvidia.dali.sysconfig as sc
    except ImportError as e:
        _log(f"DALI plugin: nvidia-dali is not importable ({e}): not built")
        return {"built": False, "reason": f"nvidia-dali not importable at build time: {e}"}
    cflags, lflags = sc.get_compile_flags(), sc.get_link_flags()
    nvcc = _nvcc()
    cuda_home = _cuda_home()
    inc = [f"-I{d}" for d in INCLUDE_DIRS] + ([f"-I{cuda_home}/include"] if cuda_home else [])
    os.makedirs(build_temp, exist_ok=True)
    objs = []
    common = ["-std=c++20", "-O3", "-fPIC", "-Wno-free-nonheap-object"]
    t0 = time.time()
    try:
        for src in SOURCES["dali_plugin"]["cpu"]:
            obj = os.path.join(build_temp, os.path.basename(src) + ".dali.o")
            defs = ["-DVLMPREP_WITH_CUDA=1"] if nvcc else []
            subprocess.run(["g++", *common, *defs, *cflags, *inc, "-c", src, "-o", obj], check=True)
            objs.append(obj)
        link_cuda = []
        if nvcc:
            gencode = []
            for a in _archs():
                num = a.replace(".", "").replace("+PTX", "")
                gencode += ["-gencode", f"arch=compute_{num},code=sm_{num}"]
                if a.endswith("+PTX"):
                    gencode += ["-gencode", f"arch=compute_{num},code=compute_{num}"]
            for src in SOURCES["dali_plugin"]["cuda"]:
                obj = os.path.join(build_temp, os.path.basename(src) + ".dali.o")
                subprocess.run([nvcc, "-std=c++20", "-O3", "-Xcompiler", "-fPIC,-Wno-free-nonheap-object",
                                *cflags, *inc, *gencode, "-c", src, "-o", obj], check=True)
                objs.append(obj)
            link_cuda = [f"-L{cuda_home}/lib64", "-lcudart_static", "-lrt", "-ldl", "-lpthread"]
        out = os.path.join(out_dir, PLUGIN_NAME)
        subprocess.run(["g++", "-shared", "-o", out, *objs, *lflags, *link_cuda], check=True)
    except (subprocess.CalledProcessError, OSError) as e:
        _log(f"DALI plugin: build failed ({e}); the dali backend uses stock ops instead")
        return {"built": False, "reason": f"build failed: {e}"}
    _log(f"DALI plugin: built against nvidia-dali {dali.__version__} "
         f"({'CPU + CUDA' if nvcc else 'CPU only'}) in {time.time() - t0:.1f} s")
    return {"built": True, "dali": dali.__version__, "cuda": bool(nvcc), "path": os.path.basename(out),
            "seconds": round(time.time() - t0, 1)}


def _write_record(out_dir: str, info: dict) -> None:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, INFO_NAME)
    with open(path, "w") as f:
        json.dump(info, f, indent=1)
    _log(f"build record: {path}")


def _out_dir(cmd, in_tree: bool, stale: tuple[str, ...] = (INFO_NAME, PLUGIN_NAME)) -> str:
    """Where the compiled parts and their record go: the source tree (editable installs,
    build_ext --inplace), else build_lib, whose whole content a wheel and ``pip install .`` carry.
    In build_lib, ``stale`` (glob patterns) left by an earlier build are removed first."""
    if in_tree:
        return KERNELS_DIR
    out = os.path.join(cmd.build_lib, KERNELS_PKG)
    os.makedirs(out, exist_ok=True)  # a bare `build_ext --build-lib DIR` whose ext failed has none
    for pattern in stale:
        for path in glob.glob(os.path.join(out, pattern)):
            os.remove(path)
    return out


def _pure_record() -> dict:
    reason = TORCH_CFG.get("reason", "pure-Python install")
    return {"torch_ext": {"built": False, "reason": f"pure-Python install: {reason}"},
            "dali_plugin": {"built": False, "reason": "pure-Python install"}}


class BuildExt(build_ext):
    """torch's BuildExtension, then the DALI plugin, then the build record (into ``_out_dir``)."""

    def run(self):
        # setuptools' own run clears self.inplace while it builds: read it (and editable) first
        in_tree = bool(self.inplace or getattr(self, "editable_mode", False))
        if SANITIZE and in_tree:
            raise SystemExit("vlmprep setup: VLMPREP_SANITIZE=1 builds only into a separate folder "
                             "(setup.py build_ext --build-lib DIR; see `make sanitize`), never in place")
        if EXT is None:  # `setup.py build_ext` asked for explicitly, with nothing to build
            _write_record(_out_dir(self, in_tree, PURE_STALE), _pure_record())
            return
        # distutils skips an extension whose .so is newer than its sources (headers and the torch
        # it was built for are not compared): always build; ninja recompiles only what changed.
        self.force = True
        t0 = time.time()
        info = {"torch_ext": {"built": False, "reason": "not attempted"}, "dali_plugin": {}}
        try:
            super().run()
            info["torch_ext"] = dict(TORCH_CFG, built=True, seconds=round(time.time() - t0, 1))
        except Exception as e:  # a failed build leaves a working pure-Python package
            _log(f"torch extension: build failed ({e}); the package runs without it")
            info["torch_ext"] = dict(TORCH_CFG, built=False, reason=f"build failed: {e}")
        out_dir = _out_dir(self, in_tree)
        if SANITIZE:  # build_lib only (checked above): the package's own record stays
            info["dali_plugin"] = {"built": False, "reason": "not built by the sanitizer build"}
        else:
            info["dali_plugin"] = _build_dali_plugin(os.path.join(self.build_temp, "dali"), out_dir)
        _write_record(out_dir, info)
        _log(f"compiled parts: {time.time() - t0:.0f} s in all")
        if os.environ.get("VLMPREP_REQUIRE_KERNELS"):
            failed = [k for k in ("torch_ext", "dali_plugin")
                      if not info[k].get("built") and "not importable" not in str(info[k].get("reason"))]
            if failed:
                raise SystemExit(f"vlmprep setup: VLMPREP_REQUIRE_KERNELS is set and {failed} failed "
                                 f"to build: {[info[k].get('reason') for k in failed]}")


class BuildPy(build_py):
    """A pure-Python build runs no build_ext: the record (why there are no kernels) is written here."""

    def run(self):
        super().run()
        if EXT is None:
            in_tree = bool(getattr(self, "editable_mode", False))
            _write_record(_out_dir(self, in_tree, PURE_STALE), _pure_record())
            warning = pure_warning(TORCH_CFG)
            if warning:  # the build itself, not a metadata run: once, on stderr and in the log
                _log(warning)
                print(f"vlmprep setup: {warning}", file=sys.stderr, flush=True)


# setup.py is also run only for metadata (pip, `setup.py --version`): nothing below writes a file.
EXT, TORCH_CFG = _torch_extension()
cmdclass: dict = {"build_py": BuildPy, "build_ext": BuildExt}
if EXT is not None:
    from torch.utils.cpp_extension import BuildExtension

    class _Build(BuildExt, BuildExtension):
        pass

    cmdclass["build_ext"] = _Build.with_options(no_python_abi_suffix=True)

setup(
    name="vlmprep",
    version=_read_version(),
    description="Exact, fast image preprocessing for vision-language models",
    long_description=open("README.md", encoding="utf-8").read() if os.path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["vlmprep", "vlmprep.*"]),
    # The compiled parts are not package data: the build writes them into build_lib (see BuildExt),
    # so a stale in-tree copy never reaches a wheel.
    package_data={"vlmprep": ["py.typed"], "vlmprep.presets": ["checkpoints/*.json"]},  # py.typed: PEP 561
    ext_modules=[EXT] if EXT is not None else [],
    cmdclass=cmdclass,
    python_requires=">=3.10",
    # Ranges, not pins: requirements/runtime.txt pins what CI tests (torch 2.14.1, torchvision 0.29.1,
    # numpy 2.4.6, pillow 13.0.0, opencv-python-headless 5.0.0.93); the GPU machine's stack
    # (requirements/gpu-machine.txt: torch 2.11, torchvision 0.26) is also tested. torch >= 2.4 for
    # torch.library.register_fake; numpy >= 2 (its type promotion is what the pixels are tested with);
    # opencv decodes 16-bit PNG/TIFF (vlmprep/io/decode.py: Pillow drops the low byte).
    install_requires=[
        "torch>=2.4",
        "torchvision>=0.19",
        "numpy>=2.0",
        "pillow>=10.1",
        "opencv-python-headless>=4.8",
    ],
    extras_require={
        # the dali backend; the plugin is built only when DALI is installed before vlmprep is built
        "dali": ["nvidia-dali-cuda130>=2.4"],
        # adapters (vlmprep.adapters), the comparisons with transformers' processors
        "hf": ["transformers>=5.0"],
        # `vlmprep bench` and vlmprep.bench: the transformers baseline, test images, plots
        "bench": ["transformers>=5.0", "scikit-image>=0.22", "matplotlib>=3.8"],
        "test": ["pytest>=8", "transformers>=5.0", "scikit-image>=0.22", "matplotlib>=3.8"],
        # `vlmprep run` over parquet inputs and into parquet shards (vlmprep.batch)
        "parquet": ["pyarrow>=15"],
        # vlmprep.integrations.ray and `vlmprep run --engine ray` (Ray Data writes parquet too)
        "ray": ["ray[data]>=2.50", "pyarrow>=15"],
        # vlmprep.Document: PDF pages as image items (issue 31), rendered by PDFium
        "pdf": ["pypdfium2>=4.30"],
    },
    entry_points={
        "console_scripts": ["vlmprep=vlmprep.cli.main:main"],
        # vLLM loads it in each of its processes; it acts only with VLMPREP_VLLM=1 (docs/how-to/vllm.md)
        "vllm.general_plugins": ["vlmprep = vlmprep.integrations.vllm_plugin:register"],
    },
)
