#!/usr/bin/env bash
# One prepared script for the GPU machine: build, check every GPU path against the CPU
# reference, time it, print short tables and write JSON under bench/results/.
#   bash bench/gpu_check.sh            on the GPU machine (DEVICE=cpu: a dry run here)
# Steps: (1) the venv: reused if present; else built from bench/wheels/ when that folder holds
# the wheels (machines without a registry), else from the registry; csrc/ is compiled by the
# editable install (CUDA for sm_80/sm_90 + PTX); (2) the gpu-marked tests (kernel vs twin,
# dali and torch on CUDA); (3) bench/gpu_check.py: parity of every backend on CUDA vs the
# reference, batch invariance, kernel vs twin, kernel bandwidth vs a device copy, timings;
# (4) `vlmprep bench` at 720p/1080p/4K against transformers' torchvision processor on CUDA.
# Steps 2-4 all run even when one fails; the script then prints which failed and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  if ls bench/wheels/*.whl >/dev/null 2>&1; then
    .venv/bin/pip install -q --no-index --find-links bench/wheels -r requirements/test.txt
  else
    .venv/bin/pip install -q -r requirements/test.txt
  fi
fi
[ -e vlmprep/kernels/_build_info.json ] || \
  .venv/bin/pip install -q --no-deps --no-build-isolation -e .
.venv/bin/python -m vlmprep.cli.main info
mkdir -p bench/results
tag="$(hostname)_$(date +%Y%m%d)"
failed=()
# step NAME CMD...: run it; a failure is recorded (named in the summary), the next step still runs
step() {
  local name=$1; shift
  local rc=0
  "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "gpu_check: FAILED: $name (exit $rc)" >&2
    failed+=("$name (exit $rc)")
  fi
}
gpu_tests() {  # full log kept; the tail printed; pytest's own exit status returned
  local log="bench/results/gpu_tests_$tag.log"
  local rc=0
  .venv/bin/python -m pytest -q -m gpu -rA tests/kernels tests/backends -p no:warnings >"$log" 2>&1 || rc=$?
  tail -15 "$log"
  [ "$rc" -eq 0 ] || echo "gpu tests: pytest exited $rc; full log: $log" >&2
  return "$rc"
}
if [ "$DEVICE" != "cpu" ]; then
  step "gpu tests (pytest -m gpu tests/kernels tests/backends)" gpu_tests
fi
step "bench/gpu_check.py" \
  .venv/bin/python bench/gpu_check.py --device "$DEVICE" --json "bench/results/gpu_check_$tag.json"
if [ "$DEVICE" != "cpu" ]; then
  step "vlmprep bench" .venv/bin/python -m vlmprep.cli.main bench --preset qwen2-vl \
    --synthetic 720p,1080p,4k --backend dali,torch --device "$DEVICE" --batch-size 8 --compare hf \
    --json "bench/results/gpu_bench_$tag.json"
fi
echo "wrote bench/results/gpu_check_$tag.json"
if [ "${#failed[@]}" -ne 0 ]; then
  printf 'gpu_check: FAILED %d step(s):' "${#failed[@]}" >&2
  printf ' [%s]' "${failed[@]}" >&2
  echo >&2
  exit 1
fi
echo "gpu_check: all steps passed"
