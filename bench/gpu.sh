#!/usr/bin/env bash
# GPU check for a machine with one CUDA GPU and torch preinstalled, no network:
# the GPU tests (NCCL ranks, NVML metrics), then %%dist_train vs torchrun on GPT-small
# bf16 (samples/s, MFU, the NVML sampler's cost) and start to the first collective.
# Wheels for ipyparallel & co. may be carried in .whl/ (see bench/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
# The GPU-marked tests (skipped on machines without GPUs), and the sampler's CPU-side ones.
timeout "${GPU_TEST_TIMEOUT:-200}" "${PYTHON:-python3}" -m pytest -q -p no:cacheprovider --confcutdir=tests/gpu \
  -k "not cpu_ranks" tests/gpu tests/unit/test_gpu.py 2>&1 | tail -15 || true
timeout "${GPU_BENCH_TIMEOUT:-300}" "${PYTHON:-python3}" -m bench.gpu_check --reps "${GPU_REPS:-3}"
