#!/usr/bin/env bash
# Per-rank memory over one training step under DDP, DDP + ZeroRedundancyOptimizer (ZeRO-1) and
# fully_shard (FSDP): the MLP 1024-4096-4096-1024 (25.2 M parameters, 101 MB in float32), Adam,
# batch 32 per rank, 2 processes, one intra-op thread each. //bench:train_step --memory_trace
# samples the bytes of live CPU tensors (tensor::cpu_memory_stats) every 100 µs through one
# step after the timed ones; this keeps rank 0's largest value in each millisecond.
# Prints a header line (date, machine, command), then per mode "== <label>" and the trace
# ("# phase <name> <t_ms>" lines, then "t_ms,allocated_mib").
# Usage: bash bench/fsdp_memory.sh > docs/fsdp_memory.txt   (then bash scripts/make_pictures.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //bench:train_step >/dev/null 2>&1
echo "# $(date -u +%Y-%m-%d) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores:" \
  "bash bench/fsdp_memory.sh > docs/fsdp_memory.txt"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TINYDDP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for run in "DDP=ddp adam" "ZeRO-1 (ZeroRedundancyOptimizer)=ddp zero_adam" "FSDP (fully_shard, each Linear a unit)=fsdp adam"; do
  label=${run%%=*}
  read -r mode optimizer <<<"${run#*=}"
  bazel-bin/bench/train_step --model huge --mode "$mode" --optimizer "$optimizer" --nproc 2 --iterations 3 \
    --warmup 2 --memory_trace "$work/trace.csv" >/dev/null
  echo "== $label"
  /usr/bin/python3 - "$work/trace.csv" <<'PY'
import sys
bins = {}
for line in open(sys.argv[1]):
    if line.startswith("#"):
        print(line, end="")
    elif not line.startswith("t_ms"):
        t, mib = map(float, line.split(","))
        bins[int(t)] = max(bins.get(int(t), 0.0), mib)
print("t_ms,allocated_mib")
for t in sorted(bins):
    print(f"{t},{bins[t]:.1f}")
PY
done
