#!/usr/bin/env bash
# GPU check for a machine with one CUDA GPU and torch preinstalled, no network.
# Wheels for ipyparallel & co. may be carried in .whl/ (see bench/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
# The GPU-marked tests (skipped on machines without GPUs).
if [ -d tests/gpu ]; then python3 -m pytest -q -p no:cacheprovider --confcutdir=tests/gpu tests/gpu 2>&1 | tail -5 || true; fi
python3 bench/gpu_check.py
