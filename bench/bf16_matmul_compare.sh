#!/usr/bin/env bash
# bfloat16 products, tinyddp against PyTorch, one process of each taking turns: the 1024 x 1024
# matmul and the example GPT's Linear products (tensor_bench's BM_MatmulBf16/1024 and
# BM_GptGemmBf16, bench/torch_matmul.py --dtype bfloat16 --gpt), each the best of 5 repetitions
# of at least 0.3 s within a process, at 1 thread and at every core. A process can land in a
# slower mode than the next one (issue 77: near 300 or near 700 GFLOP/s on an AMX Xeon), so
# what is compared is the median over `processes` processes of each, and every process's
# figure and oneDNN kernel is printed beside it (bench/result_medians.py's table).
# Usage: bash bench/bf16_matmul_compare.sh [processes]   (default 5)
# TENSOR_BENCH (a command) and TORCH_PYTHON name a tensor_bench built elsewhere and the Python
# with PyTorch (the GPU host's `gpu_run.sh cpu_bf16` sets both); unset: this checkout's, built
# here with -c opt, and Debian's /usr/bin/python3.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
processes="${1:-5}"
if [ -z "${TENSOR_BENCH:-}" ]; then
  (cd "$repo" && bazel build -c opt //bench:tensor_bench >/dev/null 2>&1)
  TENSOR_BENCH="$repo/bazel-bin/bench/tensor_bench"
fi
read -ra tensor_bench <<< "$TENSOR_BENCH"
python=${TORCH_PYTHON:-/usr/bin/python3}
cores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
results=$(mktemp)
trap 'rm -f "$results"' EXIT
tinyddp() {  # threads: RESULT lines, the best repetition per product
  TINYDDP_NUM_THREADS=$1 "${tensor_bench[@]}" --benchmark_filter='BM_MatmulBf16/1024$|BM_GptGemmBf16/' \
    --benchmark_repetitions=5 --benchmark_min_time=0.3 --benchmark_report_aggregates_only=false 2>/dev/null |
    awk -v t="$1" '$1 ~ /^BM_/ && $1 !~ /_(mean|median|stddev|cv)$/ {
        name = $1; ms = ($3 == "ms") ? $2 : $2 / 1000
        if (!(name in best) || ms < best[name]) { best[name] = ms; kernel[name] = $NF }
        if (!(name in seen)) { seen[name] = 1; names[++count] = name } }
      END { for (i = 1; i <= count; ++i) { n = names[i]; work = n
          if (n ~ /^BM_MatmulBf16/) work = "matmul1024_bf16"
          else { gsub(/BM_GptGemmBf16\/batch:|in:|out:|which:/, "", work); split(work, d, "/")
            work = "gpt_" d[1] "x" d[2] "x" d[3] "_" d[4] "_bf16"; flops = 2 * d[1] * d[2] * d[3] }
          if (n ~ /^BM_MatmulBf16/) flops = 2 * 1024 ^ 3
          printf "RESULT impl=tinyddp work=%s threads=%s ms=%.3f gflops=%.1f kernel=%s\n", work, t, best[n],
            flops / best[n] / 1e6, kernel[n] } }'
}
for t in 1 "$cores"; do
  for _ in $(seq "$processes"); do
    tinyddp "$t" | tee -a "$results"
    OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t MKL_NUM_THREADS=$t "$python" "$repo/bench/torch_matmul.py" "$t" \
      --dtype bfloat16 --gpt |
      tee -a "$results"
  done
done
python3 "$repo/bench/result_medians.py" < "$results"
