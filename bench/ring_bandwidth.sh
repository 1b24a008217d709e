#!/usr/bin/env bash
# The ring allreduce's bus bandwidth against the wire: //bench:allreduce (4 KiB to 100 MiB,
# float32) on 2, 4 and 8 simulated machines (scripts/sim_cluster.sh: one network namespace per
# node, one rank per node, each node's link shaped with tbf to 1 or 10 Gbit/s). In a ring each
# rank sends 2 (k - 1) / k of the data over its own link, so the bus bandwidth (algorithm
# bandwidth x 2 (k - 1) / k) can reach the link rate whatever k is. Prints one RESULT line per
# size, prefixed "nodes=K rate=R". Needs root. Takes about three minutes.
# Usage: sudo bash bench/ring_bandwidth.sh > docs/ring_bandwidth.txt
#        python3 scripts/plot_ring.py docs/ring_bandwidth.txt -o docs/ring_bandwidth.png
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //bench:allreduce //launcher:launch >/dev/null 2>&1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "# $(date -u +%Y-%m-%d) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores:" \
  "sudo bash bench/ring_bandwidth.sh"
for rate in 1gbit 10gbit; do
  for nodes in 2 4 8; do
    bash scripts/sim_cluster.sh --nodes "$nodes" --nproc_per_node 1 --rate "$rate" --port $((29500 + nodes)) -- \
      bazel-bin/bench/allreduce --warmup 2 | grep -o "RESULT.*" | sed "s/^/nodes=$nodes rate=$rate /"
  done
done
