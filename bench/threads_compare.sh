#!/usr/bin/env bash
# Intra-op threads, tinyddp against PyTorch at the same thread count, taking turns so that both
# see the same machine load: one process at 1, 2, 4, ... up to the physical cores (and at each
# framework's default), for the MLP 784-1024-1024-10 and the digits CNN training steps
# (bench/train_step, torch_train_step.py), the example GPT's training tokens/s (train_gpt,
# torch_gpt_train.py) and a 1024 x 1024 matmul, each also in bfloat16 (the steps under autocast,
# the matmul's operands bfloat16: oneDNN's kernels under AVX-512 on both sides); then DDP on N
# ranks of 1 thread against one process of N threads, both frameworks. PyTorch's thread count is torch.set_num_threads(t)
# with OMP_NUM_THREADS=t and OPENBLAS_NUM_THREADS=t: Debian's OpenBLAS keeps a pool of its own
# that torch.set_num_threads does not reach. "default" is what each framework does unset.
# Prints RESULT lines. Usage: bash bench/threads_compare.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
bazel build -c opt //bench:train_step //bench:tensor_bench //examples:train_gpt //launcher:launch >/dev/null 2>&1
cores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
counts=()
for ((t = 1; t < cores; t *= 2)); do counts+=("$t"); done
counts+=("$cores")
gpt=(--steps 40 --batch 32 --eval_every 0 --eval_windows 1 --sample_tokens 0 --log_every 1000000)
torch_env() {  # threads: PyTorch's environment for that many (empty: its default)
  if [ -n "$1" ]; then echo "OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1"; fi
}
matmul_tinyddp() {  # threads [bf16]
  # The best of 5 repetitions of at least 0.3 s each, as bench/torch_matmul.py measures.
  local name=BM_Matmul${2:+Bf16}/1024
  TINYDDP_NUM_THREADS=$1 bazel-bin/bench/tensor_bench --benchmark_filter="$name\$" \
    --benchmark_repetitions=5 --benchmark_min_time=0.3 --benchmark_report_aggregates_only=false 2>/dev/null |
    awk -v t="$1" -v name="$name" -v work="matmul1024${2:+_bf16}" '$1 == name && (best == "" || $2 < best) { best = $2 }
      END { print "RESULT impl=tinyddp work=" work " threads=" t " ms=" best }'
}
gpt_tinyddp() {  # threads nproc [bf16]
  bazel-bin/launcher/launch --nproc_per_node "$2" -- bazel-bin/examples/train_gpt "${gpt[@]}" --threads "$1" \
    ${3:+--autocast bf16} 2>/dev/null |
    sed -n 's/.*done: .* s, \([0-9]*\) tokens\/s.*/RESULT impl=tinyddp work=gpt'"${3:+_autocast}"' nproc='"$2"' threads='"$1"' tokens_per_s=\1/p'
}
gpt_torch() {  # threads nproc [bf16]
  env $(torch_env "$1") /usr/bin/python3 bench/torch_gpt_train.py --nproc "$2" --steps 40 --threads "$1" \
    ${3:+--autocast} | sed "s/^RESULT /RESULT work=gpt${3:+_autocast} threads=$1 /"
}
for round in $(seq "$rounds"); do
  for t in "${counts[@]}"; do
    for autocast in "" --autocast; do
      for model in mlp cnn; do
        bazel-bin/bench/train_step --model "$model" --threads "$t" $autocast | grep RESULT
        env $(torch_env "$t") /usr/bin/python3 bench/torch_train_step.py --model "$model" --threads "$t" $autocast |
          grep RESULT
      done
    done
    for bf16 in "" bf16; do
      matmul_tinyddp "$t" $bf16
      env $(torch_env "$t") /usr/bin/python3 bench/torch_matmul.py "$t" ${bf16:+--dtype bfloat16}
      gpt_tinyddp "$t" 1 $bf16
      gpt_torch "$t" 1 $bf16
    done
  done
  # Each framework unset: tinyddp's default is the physical cores; PyTorch's, OpenMP over the
  # cores plus OpenBLAS's own threads.
  for model in mlp cnn; do
    bazel-bin/bench/train_step --model "$model" --threads 0 | grep RESULT | sed 's/ threads=/ default=1 threads=/'
    /usr/bin/python3 bench/torch_train_step.py --model "$model" --threads 0 | grep RESULT | sed 's/ threads=/ default=1 threads=/'
  done
  # DDP: the cores as ranks of one thread, against one process using them all.
  gpt_tinyddp 1 "$cores"
  gpt_torch 1 "$cores"
done
