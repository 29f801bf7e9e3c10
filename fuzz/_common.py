"""Shared by the harnesses: which exceptions are clean, and atheris' entry."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def main(test_one_input, instrument: tuple[str, ...] = (), funcs: tuple = (), warm=None) -> None:
    """atheris.Setup + Fuzz; ``instrument``: modules imported under coverage instrumentation
    (vlmprep's own Python code; the compiled decoders and kernels are not instrumented, so
    ``funcs``, the harness's own argument builders, are: their branches steer the fuzzer
    towards new argument shapes). ``warm()`` runs once before fuzzing (first-call costs are then
    not charged to the first input)."""
    import atheris
    with atheris.instrument_imports(include=list(instrument)):
        for mod in instrument:
            __import__(mod)
    for f in funcs:
        atheris.instrument_func(f)
    if warm is not None:
        warm()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
