#!/usr/bin/env bash
# Why buckets exist, measured: DDP steps of the MLP 784-1024-1024-10 (batch 128 per rank, 2
# ranks) with bucket_cap_mb (and first_bucket_cap_mb) swept from 0.001, a parameter per bucket
# (five buckets: the last layer's 40-byte bias, under the cap, shares its weight's), to 1000, one
# bucket for the whole model, on loopback and between two simulated
# machines on a 1 Gbit/s link (scripts/sim_cluster.sh, one rank per node). Each line is
# //bench:train_step's RESULT (median step, buckets, the share of communication hidden behind
# backward), prefixed "link=L cap=C round=R". Needs root for the simulated link. About a minute and a half.
# Usage: sudo bash bench/bucket_sweep.sh > docs/bucket_sweep.txt
#        python3 scripts/plot_bucket_sweep.py docs/bucket_sweep.txt -o docs/bucket_sweep.png
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //bench:train_step //launcher:launch >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
caps=(0.001 0.5 1 2 4 1000)
echo "# $(date -u +%Y-%m-%d) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores:" \
  "sudo bash bench/bucket_sweep.sh"
step=(--model mlp --mode ddp --iterations 20 --warmup 3)
for round in 1 2 3; do
  for cap in "${caps[@]}"; do
    bazel-bin/bench/train_step "${step[@]}" --nproc 2 --bucket_cap_mb "$cap" --first_bucket_cap_mb "$cap" |
      grep -o "RESULT.*" | sed "s/^/link=loopback cap=$cap round=$round /"
    bash scripts/sim_cluster.sh --nodes 2 --nproc_per_node 1 --rate 1gbit -- \
      bazel-bin/bench/train_step "${step[@]}" --bucket_cap_mb "$cap" --first_bucket_cap_mb "$cap" |
      grep -o "RESULT.*" | sed "s/^/link=1gbit cap=$cap round=$round /"
  done
done
