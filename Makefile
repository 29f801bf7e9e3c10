# The README's commands: `make demo` and `make test`. Both set up .venv first (idempotent).
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv demo test lint clean sanitize fuzz fuzz-short gpu-check-dry test-engines test-arm64

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

# Lint (ruff: pycodestyle, pyflakes, import order, bugbear), the type check (mypy on vlmprep/),
# the layering contracts (import-linter: the layers of docs/architecture.md, no circles) and
# the complexity budget (tools/complexity.py against its baseline), all configured in
# pyproject.toml; `make test` runs them first, so CI fails on any.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) tools/complexity.py

test: venv lint
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The long cases (marker `slow`: the hostile corpus in child processes, the GPU check's dry runs,
# the batcher soak, real bench runs), kept out of `make test` (under 15 minutes on 2 cores); CI
# runs them after it (.ci/run).
.PHONY: test-slow
test-slow: venv
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

# Fuzzing (fuzz/run.py; docs/reliability.md): atheris harnesses on probe, the whole per-image path,
# the kernels' entry points, the batch readers (tar, parquet), data: URIs, animated GIF/WebP and
# PDF documents, time-bounded; crashes land in fuzz/crashes/ with a replay command.
# atheris is kept out of requirements/test.txt: only these targets need it.
FUZZ_SECONDS ?= 900
FUZZ_STAMP := $(VENV)/.fuzz-installed

$(FUZZ_STAMP): requirements/fuzz.txt $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements/fuzz.txt
	touch $(FUZZ_STAMP)

fuzz: venv $(FUZZ_STAMP)
	$(PY) fuzz/run.py --seconds $(FUZZ_SECONDS)

# About 100 s in all (CI): 6 s of fuzzing for each of the 8 harnesses plus their start-ups
# (imports: 1.5-16 s each, ~50 s together on a loaded 2-core machine).
fuzz-short: venv $(FUZZ_STAMP)
	$(PY) fuzz/run.py --seconds 48

# The kernels built with AddressSanitizer + UBSan into build/sanitize (the package's own library
# is left alone; VLMPREP_KERNELS_DIR loads this one), then the kernel tests, the first-use thread
# stress (tests/io/test_first_use.py: fresh processes racing every decoder) (and tests/hostile
# when present; SANITIZE_TESTS to choose, SANITIZE_ARGS for more pytest arguments) under it, with
# libasan preloaded into Python. Any ASan report or UBSan finding fails the run. Memory is not
# a guarantee under ASan (redzones, a 256 MiB free quarantine): VLMPREP_UNDER_SANITIZER=1 tells
# tests with peak-memory bounds to skip those bounds.
SAN_DIR        := build/sanitize
SANITIZE_TESTS ?= tests/kernels $(wildcard tests/hostile) tests/io/test_first_use.py
SANITIZE_ARGS  ?=
# libstdc++ preloaded too: loaded later (by torch), ASan's __cxa_throw interceptor finds no real one.
SAN_ENV = LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0:protect_shadow_gap=0:detect_odr_violation=0:halt_on_error=1:abort_on_error=0 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 VLMPREP_UNDER_SANITIZER=1 \
	VLMPREP_KERNELS_DIR=$(CURDIR)/$(SAN_DIR)/vlmprep/kernels

sanitize:
	@test -x $(PY) || { echo "sanitize: no $(PY): run make venv first"; exit 1; }
	mkdir -p $(SAN_DIR)
	VLMPREP_SANITIZE=1 $(PY) setup.py -q build_ext --build-lib $(SAN_DIR) --build-temp $(SAN_DIR)/tmp \
	  > $(SAN_DIR).log 2>&1 || { tail -40 $(SAN_DIR).log; exit 1; }
	$(SAN_ENV) $(PY) -c "import vlmprep.kernels as k; assert k.available(), k.why_unavailable(); \
	  assert k.build_info()['torch_ext'].get('sanitize'), 'not the sanitizer build'; print('sanitizer build loaded')"
	@# --capture=sys: a report written to fd 2 by a dying process reaches the terminal
	$(SAN_ENV) $(PY) -m pytest -q -p no:cacheprovider --capture=sys $(SANITIZE_TESTS) $(SANITIZE_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache vlmprep/kernels/*.so vlmprep/kernels/_build_info.json

# The GPU test machine simulated (bench/README.md, issue 15): its Python 3.12 and torch 2.11 stack
# (requirements/gpu-machine.txt) in a venv made once from the registry; then, with no registry
# (PIP_NO_INDEX=1), no DALI and DEVICE=cpu, bench/gpu_check.sh in a copy of the tree (it builds
# csrc in place, CUDA for sm_90 when nvcc is here); then the same script with a failure injected,
# which must exit non-zero. Results in build/gpu-dry/results*.
PYTHON312 ?= python3.12
GPU_DRY   := build/gpu-dry
GPU_DRY_PY := $(CURDIR)/$(GPU_DRY)/venv/bin/python

gpu-check-dry: venv
	@test -x $(GPU_DRY_PY) || { $(PYTHON312) -m venv $(GPU_DRY)/venv && \
	  $(GPU_DRY_PY) -m pip install --quiet --disable-pip-version-check -r requirements/gpu-machine.txt; }
	test -d bench/.gpu_inputs || $(PY) bench/gpu_check.py --prepare-inputs
	rm -rf $(GPU_DRY)/tree $(GPU_DRY)/results $(GPU_DRY)/results-injected && mkdir -p $(GPU_DRY)/tree
	git ls-files -z --cached --others --exclude-standard | \
	  tar --null -T - --ignore-failed-read -cf - | tar -xf - -C $(GPU_DRY)/tree
	cp -r bench/.gpu_inputs $(GPU_DRY)/tree/bench/
	cd $(GPU_DRY)/tree && PIP_NO_INDEX=1 PYTHON=$(GPU_DRY_PY) DEVICE=cpu \
	  bash bench/gpu_check.sh --budget 1800 --out $(CURDIR)/$(GPU_DRY)/results
	cd $(GPU_DRY)/tree && ! PIP_NO_INDEX=1 VLMPREP_GPU_CHECK_INJECT=kernels PYTHON=$(GPU_DRY_PY) DEVICE=cpu \
	  bash bench/gpu_check.sh --skip-build --quick --only env,kernels,parity \
	  --out $(CURDIR)/$(GPU_DRY)/results-injected
	@echo "gpu-check-dry: the dry run passed and the injected failure failed the run"

# The install a user does (tests/test_wheel.py, issue 17): a wheel built from a copy of this tree
# carries the kernels, their build record and the DALI plugin; installed with its dependencies
# (CI's pins) into a fresh venv, its kernels load, `vlmprep info` reports them and the torch
# backend gives the reference's output; then `pip install --no-build-isolation .` in that venv.
# Opt-in in `make test` (VLMPREP_WHEEL_TEST): two kernel builds and a venv with torch, minutes.
# Opt-in stress runs (tests marked `stress`, skipped by `make test` to keep it under 15 minutes on
# 2 cores): the first-use thread race in 16 fresh processes beside CPU burners, the budget's and
# the animations' peak-memory runs, the docs' Ray Data example on 2 CPUs. Once per change that
# touches decoders, the budget or the batch engines; a few minutes.
.PHONY: stress
stress: venv
	VLMPREP_STRESS=1 VLMPREP_STRESS_PROCESSES=16 $(PY) -m pytest -q -p no:cacheprovider -m stress -rA tests

.PHONY: wheel-check
wheel-check: venv
	VLMPREP_WHEEL_TEST=1 VLMPREP_SLOW=1 $(PY) -m pytest -q -p no:cacheprovider -rs tests/test_wheel.py

# The real-engine suite (tests/integration, marker `engines`; issue 16): vlmprep's adapters fed to the
# real vLLM 0.33 and SGLang 0.5.23 input paths on the CPU (tiny local checkpoints, no weights). Its own
# venv, build/engines/venv, made once from requirements/engines.txt (vLLM pins torch 2.14.0; about
# 6 minutes and 9.4 GB); SGLang goes beside it with --no-deps (the file's `# no-deps:` line). vlmprep
# is taken from this tree (PYTHONPATH). `make test` skips these tests (vLLM / SGLang are not in .venv);
# here VLMPREP_REQUIRE_ENGINES=1 turns an engine that does not import into a failure.
ENGINES_VENV  := build/engines/venv
ENGINES_PY    := $(ENGINES_VENV)/bin/python
ENGINES_STAMP := $(ENGINES_VENV)/.installed

$(ENGINES_STAMP): requirements/engines.txt
	test -x $(ENGINES_PY) || $(PYTHON) -m venv $(ENGINES_VENV)
	$(ENGINES_PY) -m pip install --quiet --disable-pip-version-check -r requirements/engines.txt
	$(ENGINES_PY) -m pip install --quiet --disable-pip-version-check --no-deps \
	  $$(sed -n 's/^# no-deps: *//p' requirements/engines.txt)
	touch $(ENGINES_STAMP)

test-engines: $(ENGINES_STAMP)
	VLMPREP_REQUIRE_ENGINES=1 PYTHONPATH=$(CURDIR) $(ENGINES_PY) -m pytest -q -p no:cacheprovider -rs -m engines tests/integration $(PYTEST_ARGS)

# The CPU kernels built for aarch64 (NEON and scalar paths) and run under qemu-user against Pillow and
# the host kernels, buffers at PROT_NONE pages (tests/kernels/test_arm64.py; under a minute). Needs the
# apt packages g++-aarch64-linux-gnu qemu-user; here their absence fails (`make test` skips instead).
test-arm64: venv
	VLMPREP_REQUIRE_ARM64=1 $(PY) -m pytest -q -m arm64 tests/kernels/test_arm64.py

# The CPU kernels on every instruction-set path this host runs, beside Pillow and Pillow-SIMD
# (issue 28; bench/cpu_paths.py, docs/benchmarks.md). Pillow-SIMD is built from source with AVX2
# into its own venv, build/simd-venv (it replaces PIL, so never in .venv; about 2 minutes).
SIMD_VENV := build/simd-venv
$(SIMD_VENV)/.installed:
	test -x $(SIMD_VENV)/bin/python || $(PYTHON) -m venv $(SIMD_VENV)
	CC="cc -mavx2" $(SIMD_VENV)/bin/pip install --quiet --disable-pip-version-check pillow-simd numpy
	touch $@

.PHONY: simd-venv bench-cpu-paths
simd-venv: $(SIMD_VENV)/.installed

bench-cpu-paths: venv simd-venv
	$(PY) bench/cpu_paths.py --json bench/results/cpu_paths_$$(hostname -s).json
