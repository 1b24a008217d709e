#!/usr/bin/env bash
# GPT-2 small's shape (12 layers, 12 heads, 768 wide, 1024 tokens of context, vocabulary
# 50304: 124M parameters) trained for a few iterations on the CPU, train_gpt --dataset against
# nanoGPT's own train.py (PyTorch) on the same data and keys, taking turns: each iteration's
# time (tokens/s = 1024 x batch_size / time), train_gpt's MFU against this CPU's measured peak,
# and each process's peak memory (maximum resident set, from /usr/bin/time).
# The data: random GPT-2 token ids (no meta.pkl, so both take nanoGPT's 50304), made here.
# Usage: bash bench/gpt2_shape_compare.sh [iterations] [threads] [nanoGPT checkout]
#   defaults: 3 iterations, every core of this process, ../shared/nanogpt
# Prints each side's `iter` lines and a RESULT line per side.
set -euo pipefail
cd "$(dirname "$0")/.."
iters="${1:-3}"
threads="${2:-$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')}"
nanogpt="${3:-../shared/nanogpt}"
repo=$(pwd)
bazel build -c opt //examples:train_gpt > /dev/null 2>&1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/data/gpt2_shape"
/usr/bin/python3 - "$work/data/gpt2_shape" << 'PY'
import sys
import numpy as np
rng = np.random.default_rng(0)
for split, n in (("train", 400_000), ("val", 40_000)):
    rng.integers(0, 50257, n, dtype=np.uint16).tofile(f"{sys.argv[1]}/{split}.bin")
PY
cp "$nanogpt/model.py" "$nanogpt/train.py" "$nanogpt/configurator.py" "$work/"
keys=(--dataset=gpt2_shape --n_layer=12 --n_head=12 --n_embd=768 --block_size=1024 --batch_size=1
  --gradient_accumulation_steps=1 --max_iters="$iters" --eval_interval=1000000 --eval_iters=1 --log_interval=1
  --device=cpu --compile=False --dtype=float32 --always_save_checkpoint=False --out_dir=out)
# One side: its iter lines, then RESULT with the mean time of iterations 1.. (0 includes setup).
side() {
  local name=$1
  shift
  (cd "$work" && /usr/bin/time -f "maxrss_kb=%M" "$@" "${keys[@]}" 2>&1) | tee "$work/$name.log" |
    grep -E "^iter|maxrss|mfu against"
  awk -v name="$name" -v threads="$threads" '
    /^iter [1-9]/ { for (i = 1; i <= NF; ++i) if ($i == "time") { t = $(i + 1); sub(/ms,?/, "", t); sum += t; n++ } }
    /maxrss_kb=/ { split($0, kv, "="); rss = kv[2] }
    END { printf "RESULT impl=%s threads=%s ms_per_iter=%.0f tokens_per_s=%.0f maxrss_mb=%.0f\n", name, threads,
          sum / n, 1024 * 1000 / (sum / n), rss / 1024 }' "$work/$name.log"
}
side tinyddp env TINYDDP_NUM_THREADS="$threads" "$repo/bazel-bin/examples/train_gpt"
side torch env OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" /usr/bin/python3 train.py
