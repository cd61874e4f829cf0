#!/usr/bin/env bash
# GPU check for a machine with one CUDA GPU and torch preinstalled, no network:
# the GPU tests (NCCL ranks, NVML metrics), then %%dist_train vs torchrun on GPT-small
# bf16 (samples/s, MFU, the NVML sampler's cost) and start to the first collective.
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
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
# The GPU-marked tests (skipped on machines without GPUs), and the sampler's CPU-side ones.
timeout "${GPU_TEST_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider --confcutdir=tests/gpu \
  -k "not cpu_ranks" tests/gpu tests/unit/test_gpu.py 2>&1 | tail -15 || true
timeout "${GPU_BENCH_TIMEOUT:-300}" python3 bench/gpu_check.py --reps "${GPU_REPS:-3}"
