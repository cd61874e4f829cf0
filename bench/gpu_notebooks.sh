#!/usr/bin/env bash
# The teaching notebooks on a machine with torch preinstalled and no network: each runs once,
# the learner's path, on a fresh kernel with its own cluster (one rank per GPU), and is timed
# (bench.notebooks_gpu). Carry the wheels of ipyparallel & co. and of nbclient & co. in
# .whl/ (see bench/README.md). Arguments go to notebooks_gpu.py (e.g. --only 01,05, --cpu).
# With $OUT set, the log, the result JSON and the executed notebooks (a .tgz) land there.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/gpu_env.sh
keep=$(mktemp -d)
since=$(mktemp)
status=0
# Each notebook gets NB_TIMEOUT s, all of them NB_TOTAL s; the outer bound is a safety net.
timeout "$((${NB_TOTAL:-330} + 60))" "${PYTHON:-python3}" -m bench.notebooks_gpu \
  --timeout "${NB_TIMEOUT:-90}" --total "${NB_TOTAL:-330}" --keep "$keep" "$@" || status=$?
if [ -n "${OUT:-}" ]; then
  find bench/results -name 'notebooks_*.json' -newer "$since" -exec cp {} "$OUT"/ \;
  tar czf "$OUT/notebooks_executed.tgz" -C "$keep" . || true
fi
rm -rf "$keep" "$since"
exit "$status"
