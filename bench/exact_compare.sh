#!/usr/bin/env bash
# What train --deterministic (the same bits at any world size: ddp::ExactGradientSum) costs
# against plain DDP, on 2 processes of one intra-op thread each: the MLP 784-1024-1024-10
# (1.86 M parameters, synthetic data, global batch 128, 60 steps) with DDP, and with the exact
# sum at chunks of 16, 32 and 64 rows (8, 4 and 2 chunks per step; each chunk is its own forward
# and backward, its gradient folded into int64 sums; the last chunk's sums travel during its
# backward); the digits MLP 64-128-10 (the main job's model) the same way; and the example GPT
# (train_gpt, 4 x 128, 64 tokens, global batch 32) under DDP and fully_shard, each plain and
# with the exact sums at chunks of 8 windows. Five alternating rounds; prints every run, then the
# median step time per configuration and its ratio to its group's first (DDP, or plain
# fully_shard). Usage: bash bench/exact_compare.sh [REGEX] (only the configurations it finds)
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //examples:train //examples:train_gpt //launcher:launch >/dev/null 2>&1
only=${1:-.}
echo "# $(date -u +%Y-%m-%d) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores:" \
  "bash bench/exact_compare.sh"
export TINYDDP_NUM_THREADS=1 OMP_NUM_THREADS=1
train=bazel-bin/examples/train
launch=bazel-bin/launcher/launch
run() {  # name, then the example and its arguments: one RESULT line with the milliseconds per step
  local name=$1
  shift
  [[ $name =~ $only ]] || return 0
  local seconds steps
  read -r steps seconds < <("$launch" --nproc_per_node 2 -- "$@" 2>&1 |
    sed -n 's/.*done: \([0-9]*\) steps in \([0-9.]*\) s.*/\1 \2/p')
  echo "RESULT config=$name ms_per_step=$(python3 -c "print(f'{1000 * $seconds / $steps:.2f}')")"
}
big=(--widths 784,1024,1024,10 --batch 128 --steps 60 --log_every 60)
digits=(--dataset digits --lr 0.05 --momentum 0.9 --batch 64 --steps 300 --log_every 300)
gpt=(bazel-bin/examples/train_gpt --n_layer 4 --n_embd 128 --n_head 4 --block_size 64 --batch 32 --steps 100
  --log_every 100 --sample_tokens 0 --threads 1)
for round in 1 2 3 4 5; do
  run mlp1024_ddp $train "${big[@]}"
  run mlp1024_exact_chunk16 $train "${big[@]}" --deterministic --chunk_size 16
  run mlp1024_exact_chunk32 $train "${big[@]}" --deterministic --chunk_size 32
  run mlp1024_exact_chunk64 $train "${big[@]}" --deterministic --chunk_size 64
  run digits_ddp $train "${digits[@]}"
  run digits_exact_chunk16 $train "${digits[@]}" --deterministic --chunk_size 16
  run digits_exact_chunk32 $train "${digits[@]}" --deterministic --chunk_size 32
  run gpt_ddp "${gpt[@]}"
  run gpt_exact_chunk8 "${gpt[@]}" --deterministic --chunk_size 8
  run gptfsdp_plain "${gpt[@]}" --fsdp
  run gptfsdp_exact_chunk8 "${gpt[@]}" --fsdp --deterministic --chunk_size 8
done | tee /dev/stderr | python3 -c '
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in sys.stdin:
    fields = dict(f.split("=", 1) for f in line.split()[1:])
    runs[fields["config"]].append(float(fields["ms_per_step"]))
print("| configuration | median ms per step (runs) | against the first of its group |")
print("|---|---|---|")
first = {}
for config in runs:
    first.setdefault(config.split("_")[0], config)
for config, values in runs.items():
    base = statistics.median(runs[first[config.split("_")[0]]])
    each = ", ".join(f"{v:.2f}" for v in values)
    print(f"| {config} | {statistics.median(values):.2f} ({each}) | {statistics.median(values) / base:.2f}x |")
'
