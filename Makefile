# The README's commands: `make demo` and `make test`. Both set up .venv first (idempotent).
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv demo test clean fuzz fuzz-short

venv: $(STAMP)

# csrc/ is compiled by `pip install -e .` (setup.py: torch ops, CUDA when nvcc exists, DALI plugin);
# VLMPREP_REQUIRE_KERNELS=1 (CI) makes a kernel that does not compile fail the tests.
$(STAMP): requirements/runtime.txt requirements/test.txt setup.py $(shell find csrc -type f 2>/dev/null)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements/test.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@$(PY) -m vlmprep.cli.main info | grep '^kernels:'
	@$(PY) -c "import torch, torchvision, PIL, numpy, transformers; print('venv ok: torch', torch.__version__, 'torchvision', torchvision.__version__, 'Pillow', PIL.__version__, 'numpy', numpy.__version__, 'transformers', transformers.__version__)"
	touch $(STAMP)

demo: venv
	$(PY) bench/demo.py

test: venv
	$(PY) -m pytest -q $(PYTEST_ARGS)

# Fuzzing (fuzz/run.py; docs/reliability.md): atheris harnesses on probe, the whole per-image path
# and the kernels' entry points, time-bounded; crashes land in fuzz/crashes/ with a replay command.
# atheris is kept out of requirements/test.txt: only these targets need it.
FUZZ_SECONDS ?= 900
FUZZ_STAMP := $(VENV)/.fuzz-installed

$(FUZZ_STAMP): requirements/fuzz.txt $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements/fuzz.txt
	touch $(FUZZ_STAMP)

fuzz: venv $(FUZZ_STAMP)
	$(PY) fuzz/run.py --seconds $(FUZZ_SECONDS)

# Under a minute in all (CI): 14 s per harness plus start-up.
fuzz-short: venv $(FUZZ_STAMP)
	$(PY) fuzz/run.py --seconds 42

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache vlmprep/kernels/*.so vlmprep/kernels/_build_info.json
