#!/usr/bin/env bash
# The one prepared check for the GPU test machine, as that machine is: its own python3 and torch
# (no venv, nothing from a package registry), csrc/ built in place for that torch, every GPU path
# checked against the CPU reference and timed, in one 10-minute command (bench/gpu_check.py says
# what each step does). Exit 1 if any step failed; the results go to bench/results/ and $OUT.
#
#   bash bench/gpu_check.sh                   on the GPU machine (bench/README.md: the standing rule)
#   DEVICE=cpu bash bench/gpu_check.sh ...    a dry run here (make gpu-check-dry)
#
# Environment: PYTHON (default python3), DEVICE (default cuda), OUT (the device tool's return
# folder: the JSON, table and log are copied there). Arguments go to bench/gpu_check.py
# (e.g. --skip-build, --quick, --only parity,timing, --budget 540).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export DEVICE=${DEVICE:-cuda}
export PYTHONUNBUFFERED=1
# The package is used from this tree (nothing is installed); DALI, when bench/dali_transfer.sh
# installed it on that machine, from its --target folder.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d bench/.dali/site ]; then
  export PYTHONPATH="$PWD/bench/.dali/site:$PYTHONPATH"
fi
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "gpu_check: expected $PY to import torch (the machine's own environment), got an ImportError;" \
       "fix: PYTHON=/path/to/python3 bash bench/gpu_check.sh" >&2
  exit 2
fi
exec "$PY" bench/gpu_check.py --device "$DEVICE" "$@"
