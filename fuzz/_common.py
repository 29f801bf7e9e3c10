"""Shared by the harnesses: which exceptions are clean, and atheris' entry."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def warm_on_first_seed(test_one_input, seeds: str):
    """A ``warm`` for ``main``: the harness on the first file of fuzz/seeds/<seeds>/ (first-use
    costs: decoders, workers), a failure left to the fuzzer, which reports it with its input."""
    def warm() -> None:
        import glob
        for f in sorted(glob.glob(os.path.join(ROOT, "fuzz", "seeds", seeds, "*")))[:1]:
            try:
                with open(f, "rb") as fh:
                    test_one_input(fh.read())
            except Exception:  # noqa: BLE001 (a failing seed is reported by the fuzzer)
                pass
    return warm


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


# -- batch inputs (fuzz_tar, fuzz_parquet) -------------------------------------------------------
_TMP: list[str] = []
_SEQ = [0]


def input_file(data: bytes, suffix: str) -> str:
    """``data`` written to a new file (a fresh name per input: the readers cache scans by path,
    size and mtime, and two inputs of one size can share an mtime tick) in this process's temp
    folder. libFuzzer exits without Python's atexit, so the folders of processes gone (a run
    ended, a crash) are removed here at first use instead."""
    if not _TMP:
        import shutil
        import tempfile
        top = os.path.join(tempfile.gettempdir(), f"vlmprep-fuzz-{os.getuid()}")
        os.makedirs(top, exist_ok=True)
        for old in os.listdir(top):
            try:
                os.kill(int(old), 0)
            except ProcessLookupError:
                shutil.rmtree(os.path.join(top, old), ignore_errors=True)
            except (ValueError, PermissionError):
                pass
        _TMP.append(os.path.join(top, str(os.getpid())))
        os.makedirs(_TMP[0], exist_ok=True)
    _SEQ[0] += 1
    path = os.path.join(_TMP[0], f"in{_SEQ[0]}{suffix}")
    with open(path, "wb") as f:
        f.write(data)
    return path


def check_input(path: str, kind: str, max_bytes: int, pick: int) -> list | None:
    """``discover([path])`` then the unit's ``count()`` and ``samples()``: a ValueError from
    discover names the input; count() is stable and equals the samples yielded; each sample has
    exactly one of data (bytes, at most ``max_bytes``) and error (a non-empty str); a slice
    ``samples(a, b)`` (chosen by ``pick``) is the same rows as ``samples()[a:b]``. -> the
    samples (None: discover refused the input)."""
    from vlmprep.batch.sources import Sample, discover
    try:
        units = discover([path], max_bytes=max_bytes)
    except ValueError as e:
        assert os.path.basename(path) in str(e), f"discover's ValueError does not name the input\n{e}"
        return None
    assert len(units) == 1 and units[0].kind == kind, f"expected one {kind} unit\n{units}"
    u = units[0]
    n = u.count()
    assert isinstance(n, int) and n >= 0, f"count() is not an int >= 0\n{n!r}"
    got = list(u.samples())
    assert len(got) == n, f"count() differs from the samples yielded\ncount() {n}, yielded {len(got)}: {got[:3]}"
    for s in got:
        assert isinstance(s, Sample), f"not a Sample\n{s!r}"
        assert isinstance(s.id, str) and s.id and isinstance(s.source, str), f"a sample without id or source\n{s!r}"
        assert (s.data is None) != (s.error is None), f"a sample without exactly one of data and error\n{s!r}"
        if s.data is not None:
            assert isinstance(s.data, bytes) and len(s.data) <= max_bytes, f"data not bytes or past max_bytes\n{s!r}"
        else:
            assert isinstance(s.error, str) and s.error, f"an empty error\n{s!r}"
    assert u.count() == n, f"count() changed between calls\n{n} then {u.count()}"
    a = pick % (n + 1)
    b = a + 1 + (pick >> 8) % 3
    part = list(u.samples(a, b))
    key = [(s.id, s.source, s.data) for s in part]  # messages may name stream states: not compared
    assert key == [(s.id, s.source, s.data) for s in got[a:b]], (
        f"samples(a, b) differs from samples()[a:b]\n{(a, b, part, got[a:b])}")
    return got
