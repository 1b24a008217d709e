#!/usr/bin/env bash
# Runs //bench:train_step (-c opt) and bench/torch_train_step.py alternately, three times per
# model, and prints every RESULT line, so that both sides are measured in one run under the
# same machine load. Usage: bash bench/train_step_compare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //bench:train_step >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for model in toy mlp cnn; do
  for round in 1 2 3; do
    bazel-bin/bench/train_step --model "$model"
    /usr/bin/python3 bench/torch_train_step.py --model "$model"
  done
done
# Mixed precision: the same steps with the forward and loss under autocast (bfloat16).
for model in mlp cnn; do
  for round in 1 2 3; do
    bazel-bin/bench/train_step --model "$model" --autocast
    /usr/bin/python3 bench/torch_train_step.py --model "$model" --autocast
  done
done
