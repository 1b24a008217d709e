#!/usr/bin/env bash
# Why gradient accumulation under DDP uses no_sync: one training step of the MLP
# 784-1024-1024-10 (7.4 MB of gradients, cross-entropy, SGD with momentum) on 2 processes,
# as 4 micro-batches of 64 rows per rank whose gradients accumulate before one optimizer step:
# with the first 3 under no_sync (one allreduce per bucket per step; nanoGPT's
# require_backward_grad_sync), and with every micro-batch allreducing (--sync_each: 4 per step);
# and, for scale, one batch of 64 rows per step. Three alternating rounds, one intra-op thread
# per process. Prints a header line (date, machine, command) and the RESULT lines; the pages
# quote their medians through scripts/trace_facts.py.
# Usage: bash bench/accumulation.sh > docs/accumulation.txt
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //bench:train_step >/dev/null 2>&1
echo "# $(date -u +%Y-%m-%d) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores:" \
  "bash bench/accumulation.sh > docs/accumulation.txt"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TINYDDP_NUM_THREADS=1
step=(bazel-bin/bench/train_step --model mlp --mode ddp --nproc 2 --batch 64 --iterations 20)
for round in 1 2 3; do
  "${step[@]}" --accumulate 4
  "${step[@]}" --accumulate 4 --sync_each
  "${step[@]}"
done
