#!/usr/bin/env bash
# //bench:allreduce (-c opt) and bench/torch_allreduce.py, alternately, twice each, so that
# both are measured in one run on the same machine. Usage: bash bench/allreduce_compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //bench:allreduce >/dev/null 2>&1
for round in 1 2 3; do
  echo "round $round"
  bazel-bin/bench/allreduce
  OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_allreduce.py
done
