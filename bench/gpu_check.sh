#!/usr/bin/env bash
# One prepared script for the GPU machine: set up, check every GPU path against the CPU
# reference, time it, print a short table and write JSON under bench/results/.
# Usage: bash bench/gpu_check.sh            (on the GPU machine; DEVICE=cpu for a dry run)
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q -r requirements/test.txt
  .venv/bin/pip install -q --no-deps --no-build-isolation -e .
fi
.venv/bin/python -m vlmprep.cli.main info
mkdir -p bench/results
out="bench/results/gpu_check_$(hostname)_$(date +%Y%m%d).json"
.venv/bin/python bench/gpu_check.py --device "$DEVICE" --json "$out"
echo "wrote $out"
