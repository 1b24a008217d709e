#!/usr/bin/env bash
# Why DDP and not DataParallel, measured: one training step of the MLP 784-1024-1024-10 on a
# global batch of 128 (cross-entropy, SGD with momentum), three ways, three rounds each:
#   one process (//bench:train_step --mode local),
#   DataParallel over 2 CPU replicas, threads of one process (//bench:data_parallel_step,
#   which also times each phase),
#   DDP over 2 processes of 64 rows each (//bench:train_step --mode ddp --nproc 2 --batch 64).
# Prints a header line (date, machine, command) and the RESULT lines.
# Usage: bash bench/data_parallel_compare.sh > docs/data_parallel_results.txt
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //bench:train_step //bench:data_parallel_step >/dev/null 2>&1
echo "# $(date -u +%Y-%m-%d) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores:" \
  "bash bench/data_parallel_compare.sh > docs/data_parallel_results.txt"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for round in 1 2 3; do
  bazel-bin/bench/train_step --model mlp --mode local
  bazel-bin/bench/data_parallel_step --replicas 2
  bazel-bin/bench/train_step --model mlp --mode ddp --nproc 2 --batch 64
done
