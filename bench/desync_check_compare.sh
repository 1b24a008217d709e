#!/usr/bin/env bash
# The cost of desync detection (comm/desync_check.h): DDP training steps on 2 processes with the
# check on (the default) and off (TINYDDP_DESYNC_CHECK=0), alternately, for the toy model (one
# 660-byte bucket, whose call record travels with its data) and the mlp (several buckets).
# Usage: bash bench/desync_check_compare.sh [rounds] [models] [binaries]
# (default 5 rounds, toy,mlp, and bazel-bin/bench/train_step built now). `binaries`, a comma
# list of train_step binaries (e.g. one built from an earlier commit and copied aside), are
# run in turn within each round, so that a before/after comparison shares the machine's mood.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-5}"
models="${2:-toy,mlp}"
binaries="${3:-}"
if [[ -z "$binaries" ]]; then
  bazel build -c opt //bench:train_step >/dev/null 2>&1
  binaries=bazel-bin/bench/train_step
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for model in ${models//,/ }; do
  for round in $(seq "$rounds"); do
    for binary in ${binaries//,/ }; do
      for check in 1 0; do
        printf 'round=%s binary=%s check=%s ' "$round" "$binary" "$check"
        TINYDDP_DESYNC_CHECK="$check" "$binary" --model "$model" --mode ddp --nproc 2 | grep '^RESULT'
      done
    done
  done
done
