#!/usr/bin/env bash
# Whether each kernel's split over the intra-op threads pays, size by size: bench/grain_bench at
# TINYDDP_NUM_THREADS=1 and at every core, taking turns for `rounds` rounds, then a markdown
# table of the medians and the speed-up (1 thread's time over all cores'). Below twice the
# grain (65536 elements) a kernel runs on one thread whatever the count, so a speed-up near 1
# is expected there; at and above it, a speed-up below 1 is a split that costs.
# Usage: bash bench/grain_compare.sh [rounds]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
bazel build -c opt //bench:grain_bench >/dev/null 2>&1
cores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for _ in $(seq "$rounds"); do
  for t in 1 "$cores"; do
    TINYDDP_NUM_THREADS=$t bazel-bin/bench/grain_bench --benchmark_min_time=0.2 --benchmark_format=csv 2>/dev/null |
      awk -F, -v t="$t" '$1 ~ /BM_Grain/ { print t "," $1 "," $3 "," $8 }' >> "$results"
  done
done
python3 - "$results" "$cores" <<'PY'
import collections, re, statistics, sys
times = collections.defaultdict(list)
order = []
for line in open(sys.argv[1]):
    threads, name, us, label = line.strip().split(",", 3)
    m = re.search(r"op:(\d+)/numel:(\d+)", name)
    key = (label.strip('"'), int(m.group(2)))
    if key not in order:
        order.append(key)
    times[key + (threads,)].append(float(us))
cores = sys.argv[2]
print(f"| kernel | elements | 1 thread µs | {cores} threads µs | speed-up |")
print("|---|---:|---:|---:|---:|")
for op, numel in order:
    one, many = statistics.median(times[(op, numel, "1")]), statistics.median(times[(op, numel, cores)])
    print(f"| {op} | {numel} | {one:.1f} | {many:.1f} | {one / many:.2f} |")
PY
