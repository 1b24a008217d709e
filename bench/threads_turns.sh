#!/usr/bin/env bash
# Thread scaling measured inside one process: bench/train_step --turns and
# bench/torch_train_step.py --turns time R rounds at 1 thread and at every core taking turns,
# for the MLP and the digits CNN steps, each in float32 and under bfloat16 autocast, and
# //bench:matmul_turns and bench/torch_matmul.py --turns the same for the bfloat16 products of
# bench/bf16_matmul_compare.sh; tinyddp and PyTorch one after the other. Processes on a shared host land in fast or slow phases
# (bench/README.md), which across processes can hide or invent a speed-up; within one process
# both counts see the same phases. Prints RESULT lines: each count's median of the rounds'
# medians and the rounds it won. Usage: bash bench/threads_turns.sh [rounds]   (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-15}"
bazel build -c opt //bench:train_step //bench:matmul_turns >/dev/null 2>&1
cores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
for model in mlp cnn; do
  for autocast in "" --autocast; do
    bazel-bin/bench/train_step --model "$model" --threads "$cores" --turns "$rounds" $autocast | grep RESULT
    OMP_NUM_THREADS=$cores OPENBLAS_NUM_THREADS=$cores /usr/bin/python3 bench/torch_train_step.py --model "$model" \
      --threads "$cores" --turns "$rounds" $autocast | grep RESULT
  done
done
bazel-bin/bench/matmul_turns --threads "$cores" --turns "$rounds"
OMP_NUM_THREADS=$cores OPENBLAS_NUM_THREADS=$cores /usr/bin/python3 bench/torch_matmul.py "$cores" --dtype bfloat16 --gpt \
  --turns "$rounds"
