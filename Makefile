# The README's commands: `make demo` and `make test`. Both set up .venv first (idempotent).
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv demo test clean

venv: $(STAMP)

$(STAMP): requirements/runtime.txt requirements/test.txt setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements/test.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@$(PY) -c "import torch, torchvision, PIL, numpy, transformers; print('venv ok: torch', torch.__version__, 'torchvision', torchvision.__version__, 'Pillow', PIL.__version__, 'numpy', numpy.__version__, 'transformers', transformers.__version__)"
	touch $(STAMP)

demo: venv
	$(PY) bench/demo.py

test: venv
	$(PY) -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
