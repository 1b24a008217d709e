#!/usr/bin/env bash
# ZeroRedundancyOptimizer against plain Adam: DDP training steps of the 25 M-parameter MLP on 2
# processes, and the optimizer state each rank holds; tinyddp, then PyTorch (gloo), one thread
# per process. Usage: bash bench/zero_compare.sh [rounds] (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
bazel build -c opt //bench:train_step >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for _ in $(seq "$rounds"); do
  for optimizer in adam zero_adam; do
    bazel-bin/bench/train_step --model huge --mode ddp --nproc 2 --optimizer "$optimizer"
  done
  /usr/bin/python3 bench/torch_ddp_train_step.py huge ddp adam,zero_adam
done
