#!/usr/bin/env bash
# DDP across two simulated machines (scripts/sim_cluster.sh: network namespaces, each node's
# link shaped with tbf and delayed by DELAY each way: 0.5ms unless given, "none" for no delay): steps of the 25 M-parameter MLP on 2 nodes x 1 rank at 1 and 10 Gbit/s,
# tinyddp with default buckets, with one bucket (no overlap) and with bf16 compression, then
# PyTorch DDP (gloo) with default buckets and one bucket, in the same namespaces. Needs root.
# Usage: sudo bash bench/cluster_compare.sh [DELAY]
set -euo pipefail
cd "$(dirname "$0")/.."
delay="${1:-0.5ms}"
delay_option=("${delay_option[@]}")
[ "$delay" != none ] || delay_option=()
bazel build -c opt //bench:train_step //launcher:launch //scripts:link_delay >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for rate in 1gbit 10gbit; do
  for options in "" "--bucket_cap_mb 1000 --first_bucket_cap_mb 1000" "--comm_hook bf16"; do
    # shellcheck disable=SC2086
    bash scripts/sim_cluster.sh --nodes 2 --nproc_per_node 1 --rate "$rate" "${delay_option[@]}" -- \
      bazel-bin/bench/train_step --model huge --mode ddp $options | grep -E "RESULT|link_delay: held" | sed "s/^/$rate /"
  done
  for options in "" "--one_bucket"; do
    # shellcheck disable=SC2086
    bash scripts/sim_cluster.sh --nodes 2 --nproc_per_node 1 --rate "$rate" "${delay_option[@]}" -- \
      env GLOO_SOCKET_IFNAME=eth0 PYTHONPATH=bench /usr/bin/python3 bench/torch_ddp_node.py $options | grep -E "RESULT|link_delay: held" | sed "s/^/$rate /"
  done
done
