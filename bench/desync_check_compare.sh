#!/usr/bin/env bash
# The cost of desync detection (comm/desync_check.h): DDP training steps on 2 processes with the
# check on (the default) and off (TINYDDP_DESYNC_CHECK=0), alternately, for the toy model (one
# 660-byte bucket, whose call record travels with its data) and the mlp (several buckets).
# Usage: bash bench/desync_check_compare.sh [rounds] [models] (default 5 rounds, toy,mlp)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-5}"
models="${2:-toy,mlp}"
bazel build -c opt //bench:train_step >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for model in ${models//,/ }; do
  for round in $(seq "$rounds"); do
    for check in 1 0; do
      printf 'round=%s check=%s ' "$round" "$check"
      TINYDDP_DESYNC_CHECK="$check" bazel-bin/bench/train_step --model "$model" --mode ddp --nproc 2 | grep '^RESULT'
    done
  done
done
