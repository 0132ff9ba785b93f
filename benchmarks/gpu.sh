#!/usr/bin/env bash
# The whole GPU measurement in one script (see benchmarks/README.md):
#   bash benchmarks/gpu.sh [--out FILE] [--budget-s S]   # on one CUDA GPU, under 10 minutes
#   bash benchmarks/gpu.sh --cpu-smoke                   # the same steps on CPU with tiny models (CI)
# gymnasium, minigrid and their pure-Python dependencies (plus the pygame-ce wheel minigrid imports)
# are installed, only when missing, from benchmarks/wheels/ into benchmarks/.deps/ with --no-deps:
# the torch already there is never touched. glamrl itself runs from this tree (PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi
DEPS=$ROOT/benchmarks/.deps
export PYTHONPATH="$ROOT:$DEPS${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import gymnasium, minigrid" 2>/dev/null; then
  if ! ls benchmarks/wheels/*.whl >/dev/null 2>&1; then
    echo "gpu.sh: gymnasium/minigrid are missing and benchmarks/wheels/ holds no wheels; download them first (benchmarks/README.md)" >&2
    exit 2
  fi
  "$PY" -m pip install --quiet --no-index --find-links benchmarks/wheels --no-deps --target "$DEPS" \
    gymnasium minigrid farama-notifications cloudpickle pygame-ce
fi
exec "$PY" benchmarks/gpu_bench.py "$@"
