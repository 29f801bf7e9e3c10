"""Issue 17's rough edges a new user hits first: the doc paths after ``import vlmprep``, the
loader's batch sizes, logging without handlers, ``python -m vlmprep``.

Each check runs in a fresh interpreter where the point is what ``import vlmprep`` alone does.
"""
from __future__ import annotations

import subprocess
import sys


def _py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_doc_paths_resolve_after_import_vlmprep():
    """``vlmprep.adapters.vit.encode``, ``vlmprep.pack.concat``, ``vlmprep.kernels
    .set_num_threads`` (as the docs write them) after ``import vlmprep`` alone, while the import
    itself loads neither torch, numpy nor PIL."""
    r = _py("import sys, vlmprep\n"
            "heavy = [m for m in ('torch', 'numpy', 'PIL') if m in sys.modules]\n"
            "assert heavy == [], heavy\n"
            "fns = [vlmprep.adapters.vit.encode, vlmprep.pack.concat,\n"
            "       vlmprep.kernels.set_num_threads, vlmprep.loader.DataLoader,\n"
            "       vlmprep.serve.Batcher, vlmprep.cache.OutputCache,\n"
            "       vlmprep.adapters.transformers, vlmprep.plan.plan_image]\n"
            "assert all(callable(f) or f is not None for f in fns)\n"
            "assert {'pack', 'kernels', 'adapters'} <= set(dir(vlmprep))\n"
            "print('ok')")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_unknown_attributes_still_raise():
    r = _py("import vlmprep\n"
            "for mod, name in ((vlmprep, 'nope'), (vlmprep.adapters, 'nope')):\n"
            "    try:\n"
            "        getattr(mod, name)\n"
            "    except AttributeError as e:\n"
            "        assert 'nope' in str(e)\n"
            "    else:\n"
            "        raise SystemExit('no AttributeError')\n"
            "print('ok')")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_logging_installs_no_handlers():
    """The library logs through logging.getLogger('vlmprep') and its children, configures
    nothing: no handler on 'vlmprep' or the root logger after importing the heavy modules."""
    r = _py("import logging, vlmprep\n"
            "import vlmprep.loader, vlmprep.serve, vlmprep.backends, vlmprep.processor\n"
            "vlmprep.Processor('qwen2-vl', backend='reference')\n"
            "names = ['vlmprep'] + [n for n in logging.root.manager.loggerDict\n"
            "                       if n.startswith('vlmprep.')]\n"
            "assert {'vlmprep.loader', 'vlmprep.serve'} <= set(names), names\n"
            "bad = [n for n in names if logging.getLogger(n).handlers]\n"
            "assert not bad and not logging.root.handlers, (bad, logging.root.handlers)\n"
            "print('ok')")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_loader_defaults_batch_by_count_only():
    import inspect

    from vlmprep.loader import DataLoader
    params = inspect.signature(DataLoader).parameters
    assert params["max_batch_tokens"].default is None and params["progress"].default is None


def test_python_m_vlmprep_version():
    import vlmprep
    r = subprocess.run([sys.executable, "-m", "vlmprep", "--version"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"vlmprep {vlmprep.__version__}"
