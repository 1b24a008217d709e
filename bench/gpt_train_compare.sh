#!/usr/bin/env bash
# Training tokens/s of examples/train_gpt's model (4 layers, 4 heads, 128 wide, context 64,
# global batch 32 windows) in tinyddp and in PyTorch (bench/torch_gpt_train.py), one process
# and 2 DDP ranks, one thread per process, taking turns three times so that both sides see
# the same machine load. Prints RESULT lines; the model FLOPs per token are nanoGPT's
# estimate, 6 N + 12 L T C (N parameters without the position embedding), for the share of
# the core's peak (bench/cpu_peak). Usage: bash bench/gpt_train_compare.sh [steps] [bf16]
# (bf16: both sides' forward and loss under autocast, bfloat16).
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-60}"
autocast="${2:-}"
bazel build -c opt //examples:train_gpt //launcher:launch //bench:cpu_peak >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
args=(--steps "$steps" --batch 32 --eval_every 0 --eval_windows 1 --sample_tokens 0 --log_every 1000000)
torch_args=()
if [ -n "$autocast" ]; then
  args+=(--autocast "$autocast")
  torch_args+=(--autocast)
fi
tinyddp() {  # nproc
  local out
  if [ "$1" = 1 ]; then
    out=$(bazel-bin/examples/train_gpt "${args[@]}")
  else
    out=$(bazel-bin/launcher/launch --nproc_per_node "$1" -- bazel-bin/examples/train_gpt "${args[@]}")
  fi
  echo "$out" | sed -n 's/.*done: .* s, \([0-9]*\) tokens\/s.*/RESULT impl=tinyddp nproc='"$1"' steps='"$steps${autocast:+ autocast=$autocast}"' tokens_per_s=\1/p'
}
bazel-bin/bench/cpu_peak
for nproc in 1 2; do
  for round in 1 2 3; do
    tinyddp "$nproc"
    /usr/bin/python3 bench/torch_gpt_train.py --nproc "$nproc" --steps "$steps" "${torch_args[@]}"
  done
done
