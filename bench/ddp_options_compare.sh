#!/usr/bin/env bash
# What two DDP options cost and save, measured with //bench:train_step on 2 ranks (one thread
# each), three rounds, the settings alternating within each round:
#   find_unused_parameters: the graph walk after every forward and the allreduce of the
#     used-parameter map, against the default and against static_graph (which walks once);
#     models toy, mlp and cnn (the digits CNN: the longest graph of the three).
#   gradient_as_bucket_view: .grad as views of the buckets instead of tensors of their own,
#     with zero_grad setting .grad to none (the default) or zeroing it in place; the huge MLP
#     (100.7 MB of gradients), rank 0's peak resident memory over the timed steps (after three
#     warm-up steps, past the bucket rebuild), with glibc's own malloc settings
#     (TINYDDP_CPU_MALLOC=system), which return freed large blocks to the kernel.
# Usage: bash bench/ddp_options_compare.sh   (about a minute and a half)
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //bench:train_step >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
step=(bazel-bin/bench/train_step --mode ddp --nproc 2)
for round in 1 2 3; do
  for model in toy mlp cnn; do
    for flags in "" "--find_unused_parameters" "--static_graph" "--find_unused_parameters --static_graph"; do
      # shellcheck disable=SC2086
      "${step[@]}" --model "$model" $flags | grep -o "RESULT.*" | sed "s/^/round=$round /"
    done
  done
  for flags in "" "--gradient_as_bucket_view" "--zero_grad_in_place" "--zero_grad_in_place --gradient_as_bucket_view"; do
    # shellcheck disable=SC2086
    TINYDDP_CPU_MALLOC=system "${step[@]}" --model huge --iterations 4 --warmup 3 --report_memory $flags |
      grep -o "RESULT.*" | sed "s/^/round=$round /"
  done
done
