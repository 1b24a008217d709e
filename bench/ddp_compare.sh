#!/usr/bin/env bash
# DDP overhead: //bench:train_step in every mode on 2 processes, then the same with PyTorch
# DDP (gloo), one thread per process. Usage: bash bench/ddp_compare.sh [models] (default toy,mlp,huge)
set -euo pipefail
cd "$(dirname "$0")/.."
models="${1:-toy,mlp,huge}"
bazel build -c opt //bench:train_step >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for model in ${models//,/ }; do
  for mode in local nosync ddp; do
    bazel-bin/bench/train_step --model "$model" --mode "$mode" --nproc 2
  done
done
/usr/bin/python3 bench/torch_ddp_train_step.py "$models"
