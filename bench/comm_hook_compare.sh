#!/usr/bin/env bash
# Communication hooks: DDP training steps of the 25 M-parameter MLP on 2 processes with plain
# allreduce, bf16 compression and PowerSGD of rank 1 and 4, and the gradient bytes each step
# sends; tinyddp, then PyTorch with plain allreduce (gloo). PyTorch 1.13's bf16 hook needs
# CUDA, and its powerSGD_hook aborts on gloo (Gloo's "op.preamble.length <= op.nbytes": the
# P and Q allreduces it chains from future callbacks interleave differently on the ranks), so
# those two are left out.
# Usage: bash bench/comm_hook_compare.sh [rounds] (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
bazel build -c opt //bench:train_step >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for _ in $(seq "$rounds"); do
  for hook in allreduce bf16 powersgd1 powersgd4; do
    bazel-bin/bench/train_step --model huge --mode ddp --nproc 2 --comm_hook "$hook"
  done
  /usr/bin/python3 bench/torch_ddp_train_step.py huge ddp sgd allreduce
done
