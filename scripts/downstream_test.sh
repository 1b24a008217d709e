#!/usr/bin/env bash
# Builds and runs examples/downstream, a user's own Bazel workspace that depends on this
# checkout (local_repository "../.."), as a user would: its binary on 2 ranks under
# `bazel run @tinyddp//launcher:launch`, with a relative program path. Where nvcc exists it
# also builds the binary with --config=cuda. Last line: "downstream: PASSED" or
# "downstream: FAILED (why)"; exits 0 or 1. The workspace's Bazel server is shut down at the end.
set -uo pipefail
cd "$(dirname "$0")/../examples/downstream"

fail() {
  echo "downstream: FAILED ($*)"
  bazel shutdown >/dev/null 2>&1
  exit 1
}

bazel build //:regression //:regression_cxx17 || fail "bazel build //:regression //:regression_cxx17"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The program path is relative to this directory, where the command is typed.
timeout 300 bazel run @tinyddp//launcher:launch -- --nproc_per_node 2 -- bazel-bin/regression 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || fail "the 2-rank run exited with $status"
for rank in 0 1; do
  grep -q "^\[rank $rank\] rank $rank epoch 19 loss" "$log" || fail "rank $rank did not finish training"
done
# DDP keeps the ranks' parameters identical: both print the same sum.
sums=$(sed -n 's/^\[rank [01]\] rank [01] parameter sum \(.*\)$/\1/p' "$log" | sort -u | wc -l)
[ "$sums" -eq 1 ] || fail "the ranks' parameters differ"

if [ -x /usr/local/cuda/bin/nvcc ]; then
  bazel build --config=cuda //:regression || fail "bazel build --config=cuda //:regression"
else
  echo "downstream: no nvcc at /usr/local/cuda/bin; skipping the --config=cuda build"
fi
bazel shutdown >/dev/null 2>&1
echo "downstream: PASSED"
