"""vlmprep: pure-Python install always works; compiled parts (csrc/) are optional.

The compiled kernels (csrc/) are built by their own issue's recipe; until they exist this
setup prints that it resolved a pure-Python build, so `pip install -e .` needs no compiler.
"""
import os
import shutil

from setuptools import find_packages, setup


def _print_config() -> None:
    nvcc = shutil.which("nvcc")
    cxx = shutil.which(os.environ.get("CXX", "c++"))
    print(f"vlmprep setup: C++ compiler: {cxx or 'none'}; nvcc: {nvcc or 'none'}; "
          f"compiled kernels: not part of this build (pure Python)")


_print_config()

setup(
    name="vlmprep",
    version="0.1.0",
    description="Exact, fast image preprocessing for vision-language models",
    long_description=open("README.md", encoding="utf-8").read() if os.path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["vlmprep", "vlmprep.*"]),
    python_requires=">=3.10",
    install_requires=["numpy", "pillow", "opencv-python-headless"],
    extras_require={
        "torch": ["torch", "torchvision"],
        "dali": ["nvidia-dali-cuda130"],
        "test": ["pytest", "transformers", "scikit-image", "matplotlib"],
    },
    entry_points={"console_scripts": ["vlmprep=vlmprep.cli.main:main"]},
)
