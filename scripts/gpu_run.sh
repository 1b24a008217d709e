#!/usr/bin/env bash
# Runs on the device machine (see scripts/gpu_bundle.sh). One part per call, each sized to
# end well inside the device tool's 600 s per command, and each leaving two files in
# $OUT (at most 8 come back): PART.txt (the machine, then one line per step) and PART.tar.gz
# (every log of the part); `tests` also leaves zero_overlap_nccl.json, PyTorch's fixture.
#   tests     the bundled test binaries, whose GPU cases skip elsewhere        (~5 min at most)
#   sanitize  compute-sanitizer memcheck, racecheck, initcheck and synccheck over our own kernels
#             (~6 min at most)
#   sanitize2 the same four tools over the convolutional ops, CUDA graphs and autocast
#             (cuda_conv_test, cuda_graph_test, cuda_autocast_test)
#   sanitize3 the same four tools over the GPU cases written since (flash attention, cross-entropy, the
#             fused Adam step, the foreach ops, the math ops, the F::
#             composites and layers, DataParallel; not cuda_plan_test and device_guard_test,
#             which make no CUDA call, so the tools exit 255), then memcheck over the
#             collectives' staging of CUDA tensors
#   bench     the training-step benchmarks against PyTorch on the same GPU    (~5 min at most)
#   cpu       the host's CPU: the kernels chosen, then the MLP and CNN steps, the 1024 matmul and
#             the example GPT on 1, 2, 4, 8 and 16 intra-op threads against PyTorch at the same
#             count (~5 min)
#   cpu_bf16  the host's bfloat16 products and autocast steps (AMX where it has it): the 1024
#             matmul and the example GPT's Linear products, 5 processes of each framework taking
#             turns at 1 thread and at every core (bench/bf16_matmul_compare.sh), then the MLP and
#             CNN steps under autocast at both counts against PyTorch's (~8 min; BF16_PROCESSES=3
#             takes 3 processes of each, for a call shared with other parts)
#   bench2    matmul 4096 and add/copy of 256 M floats, TF32 and bf16 autocast steps, the CNN,
#             the 4096-wide MLP at batch 256, the GPT at 32 x 256 tokens (and its peak GPU memory, both
#             frameworks), and a DDP timeline of
#             the GPT on the GPU (gpt_timeline.rank0.json, for scripts/plot_timeline.py)
#   gpt2      GPT-2 small (12 x 768, 1024 tokens, vocabulary 50304, biases) on random token ids:
#             ours in nanoGPT's mode, float32 (TF32, as nanoGPT) and bf16 autocast, batch 8 and 16,
#             eager and cuda_graph=True; PyTorch eager (SDPA, fused AdamW, as nanoGPT) the same, and
#             torch.compile at bf16 batch 8; tokens/s over the iterations after the fifth, MFU, peak
#             GPU memory (~6 min)
#   new       what landed since the last GPU run: attention_test's GPU cases (16-bit calls routed
#             to the tensor-core kernels), attention_layout_test's (heads read and written where
#             they lie), cuda_test, cuda_math_test and cuda_conv_test (the
#             elementwise kernels' 32-bit general path), the heads' transpose and a broadcast
#             subtraction beside PyTorch's, GPT-2 small bf16 batch 8 on the default route beside
#             PyTorch's, and its per-kind profile (~3 min)
#   profile   GPU time per kind of kernel (GEMM, attention, norm, elementwise, optimizer, copy,
#             ...), calls, and the GPU's idle gaps, tinyddp's op profiler (tensor/profiler.h)
#             beside torch.profiler's (scripts/profile_compare.py): the example GPT (float32,
#             bf16), GPT-2 small's shape (bf16; PyTorch's attention through SDPA), the
#             4096-wide MLP; the GPT's phases (device synchronised between them); ncu's time for
#             each kernel of one of tinyddp's GPT steps (scripts/kernel_profile.py)
#   short     for a session with one call to spend: the four CUDA op tests, threads_test and the
#             host's cores, the GPT's first steps on the GPU against PyTorch's, initcheck's control
#             over PyTorch's bf16 GEMM, then equivalence_test, in that order, in the time left
# Usage (device tool, carry [".gpu"]):  bash .gpu/gpu_run.sh tests   (then sanitize, sanitize2, bench, bench2)
#
# Library paths: NCCL and cuDNN come from PyTorch's wheels (the nvidia.* Python packages),
# cuBLAS and cudart from the toolkit. They are set for tinyddp's binaries only (`ours`), never
# for the PyTorch peer, which must load the libraries it was built with.
set -uo pipefail
part=${1:-}
case "$part" in
  tests|sanitize|sanitize2|sanitize3|bench|bench2|gpt2|new|cpu|cpu_bf16|profile|short) ;;
  *) echo "usage: gpu_run.sh tests|sanitize|sanitize2|sanitize3|bench|bench2|gpt2|new|cpu|cpu_bf16|profile|short   (one part per device call: each fits in 600 s)" >&2
    exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
# The binaries and libraries travel packed (gpu_bundle.sh); unpacked here once.
if [ ! -d "$here/root" ]; then
  tar -C "$here" -xJf "$here/bundle.tar.xz" 2> /dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$here/bundle.tar.xz" "$here" ||
    { echo "gpu_run.sh: cannot unpack $here/bundle.tar.xz" >&2; exit 1; }
fi
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
logs=$(mktemp -d)
summary="$out/$part.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

# The machine first: a binary built against a newer glibc, or a driver older than the
# toolkit, fails before any test runs, and these two lines say which.
note "glibc: $(ldd --version 2>&1 | head -1)"
note "driver: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
wheel_libs=$(python3 - <<'EOF' 2>/dev/null
import os
import nvidia.cudnn, nvidia.nccl
print(":".join(os.path.join(list(m.__path__)[0], "lib") for m in (nvidia.nccl, nvidia.cudnn)))
EOF
)
ours_path="$here/lib:${wheel_libs:+$wheel_libs:}/usr/local/cuda/lib64"
note "tinyddp's LD_LIBRARY_PATH: $ours_path"
[ -n "$wheel_libs" ] || note "warning: python3 could not import nvidia.nccl and nvidia.cudnn; NCCL and cuDNN may not load"
# `ours COMMAND...` runs COMMAND with those paths. It is a small script on PATH, not a shell
# function, because step() runs commands through timeout(1), which cannot call functions.
mkdir -p "$logs/bin"
printf '#!/usr/bin/env bash\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$@"\n' "$ours_path" > "$logs/bin/ours"
chmod +x "$logs/bin/ours"
export PATH="$logs/bin:$PATH"
cd "$here/root" || exit 1

# Every part ends within 540 s of its start (or GPU_RUN_SECONDS, when a call has less to spend),
# whatever its steps do: each step gets its own limit or what is left of the part's, whichever
# is less.
part_seconds=${GPU_RUN_SECONDS:-540}
deadline=$((SECONDS + part_seconds))
step() {  # step NAME SECONDS COMMAND...: one log, one summary line, bounded in time
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS left=$((deadline - SECONDS))
  if [ "$left" -lt 10 ]; then note "$name: skipped (the part's $part_seconds s are spent)"; return; fi
  [ "$left" -lt "$limit" ] && limit=$left
  timeout --kill-after=10 "$limit" "$@" > "$logs/$name.log" 2>&1
  local status=$?
  [ "$status" -eq 124 ] && status="124 (stopped at its $limit s limit)"
  note "$name: exit $status ($((SECONDS - start)) s); $(grep -E 'test cases|passed|ERROR SUMMARY' "$logs/$name.log" | tail -1)"
}

sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
# The control for initcheck_autocast's reports (all in the bias add that reads what a bfloat16
# cuBLAS GEMM wrote, values right): PyTorch's own bfloat16 mm, then an add. If initcheck reports
# PyTorch's add too, the tool does not see those GEMMs' stores.
initcheck_control() {
  step initcheck_torch_bf16 60 "$sanitizer" --tool initcheck --report-api-errors no --error-exitcode 99 \
    python3 -c "import torch; o = dict(device='cuda', dtype=torch.bfloat16)
a, w, b = torch.randn(16, 40, **o), torch.randn(24, 40, **o), torch.randn(24, **o)
y = torch.mm(a, w.t()); z = y + b; torch.cuda.synchronize(); print('sum', float(z.float().sum()))"
}
host_cpu() {  # the host's CPU: model, cores, threads per core, AVX-512
  note "cpu: $(lscpu | grep -E '^(Model name|Thread|Core|Socket)' | sed 's/  */ /g' | tr '\n' ';') $(nproc) CPUs; $(grep -o -m1 'avx512[a-z]*' /proc/cpuinfo | head -1)"
}
# The same bits at 1-4 threads, bfloat16 products through oneDNN's row blocks included (the
# host's AVX-512; the CI machines take the float32 route).
threads_check() { step threads_test 60 ours ./tests/nn/threads_test; }
cuda_op_tests() {
  step cuda_test 120 ours ./tests/tensor/cuda_test --durations yes
  step cuda_conv_test 120 ours ./tests/tensor/cuda_conv_test --durations yes
  step cuda_autocast_test 60 ours ./tests/tensor/cuda_autocast_test --durations yes
  step cuda_graph_test 60 ours ./tests/tensor/cuda_graph_test --durations yes
  step cuda_math_test 60 ours ./tests/tensor/cuda_math_test --durations yes
  # The GPU cases of tests that are mostly CPU tests (their "[cuda]" tag picks them).
  for t in tensor/attention_test tensor/attention_layout_test tensor/cross_entropy_test tensor/foreach_test nn/fused_adam_test tensor/profiler_test examples/train_gpt_graph_test tensor/cuda_plan_test tensor/device_guard_test nn/functional_test nn/attention_interpolate_test \
    nn/conv_layers_test nn/transformer_encoder_test ddp/data_parallel_test; do
    step "${t#*/}" 60 ours "./tests/$t" "[cuda]" --durations yes
  done
}
gpt_cuda_args() {  # the GPT at 32 windows of 256 tokens on this repository's docs/ddp.md
  local repo
  repo=$(cd "$here/.." && pwd)
  echo --device cuda --block_size 256 --batch 32 --steps 30 --eval_every 0 --eval_windows 1 --sample_tokens 0 \
    --corpus "$repo/docs/ddp.md"
}

gpt2_dataset() {  # a directory of random GPT-2 token ids (train.bin, val.bin), printed
  local dir
  dir=$(mktemp -d)
  python3 -c "import numpy as np, sys; r = np.random.default_rng(0)
for s, n in (('train', 200000), ('val', 20000)): r.integers(0, 50257, n, dtype=np.uint16).tofile(sys.argv[1] + '/' + s + '.bin')" "$dir"
  echo "$dir"
}
gpt2_keys() {  # nanoGPT's keys for GPT-2 small on gpt2_dataset's directory $1, one GPU, no evaluation
  echo --dataset="$1" --n_layer=12 --n_head=12 --n_embd=768 --block_size=1024 --gradient_accumulation_steps=1 \
    --eval_interval=1000000 --eval_iters=1 --log_interval=1 --bias=True --device=cuda \
    --always_save_checkpoint=False --out_dir="$1/out"
}

case "$part" in
  tests)
    ours ldd tests/tensor/cuda_test > "$logs/ldd.log" 2>&1
    grep -q "not found" "$logs/ldd.log" && note "missing libraries: $(grep 'not found' "$logs/ldd.log" | tr -s ' \t\n' ' ')"
    cuda_op_tests
    # ZeRO's overlap_with_ddp against PyTorch's over NCCL: PyTorch (this machine's, 2.x) writes
    # the fixture into $OUT (commit it as tests/ddp/fixtures/zero_overlap_nccl.json), then
    # tinyddp runs the same iterations against it (and against the gloo one from the CPU).
    repo=$(cd "$here/.." && pwd)
    step zero_overlap_fixture 120 python3 "$repo/tests/ddp/fixtures/make_zero_overlap_fixture.py" --device cuda \
      --out_dir "$out"
    mkdir -p tests/ddp/fixtures
    cp "$repo/tests/ddp/fixtures/zero_overlap_gloo.json" "$out/zero_overlap_nccl.json" tests/ddp/fixtures/ 2> /dev/null
    step zero_overlap_test 60 ours ./tests/ddp/zero_overlap_test --durations yes
    step collectives_test 120 ours ./tests/comm/collectives_test --durations yes
    step desync_test 60 ours ./tests/comm/desync_test "[nccl]" --durations yes
    step equivalence_test 150 ours ./tests/ddp/equivalence_test --durations yes
    step ddp_cuda_graph_test 90 ours ./tests/ddp/cuda_graph_test --durations yes
    step examples_test 150 ours ./tests/examples/examples_test --durations yes
    ;;
  sanitize | sanitize2 | sanitize3)
    # check NAME SECONDS TOOL BINARY [quiet]: one tool over BINARY's "[cuda]" cases; `quiet`
    # leaves API errors unreported (the libraries' own probing, below).
    check() {
      local api=()
      [ "${5:-}" = quiet ] && api=(--report-api-errors no)
      step "$1" "$2" ours "$sanitizer" --tool "$3" "${api[@]}" --error-exitcode 99 "$4" "[cuda]"
    }
    if [ ! -x "$sanitizer" ]; then
      note "compute-sanitizer: not found"
    elif [ "$part" = sanitize3 ]; then
      # The GPU cases written after the last sanitizer runs, tool by tool (memcheck first for
      # all of them, should the time run out, then over the staging of strided CUDA tensors).
      sanitize3_tool() {
        check "${1}_flash" 120 "$1" ./tests/tensor/attention_test
        check "${1}_flash_layout" 60 "$1" ./tests/tensor/attention_layout_test
        check "${1}_cross_entropy" 40 "$1" ./tests/tensor/cross_entropy_test
        check "${1}_fused_adam" 90 "$1" ./tests/nn/fused_adam_test
        check "${1}_foreach" 30 "$1" ./tests/tensor/foreach_test
        check "${1}_profiler" 30 "$1" ./tests/tensor/profiler_test
        check "${1}_math" 60 "$1" ./tests/tensor/cuda_math_test
        check "${1}_functional" 40 "$1" ./tests/nn/functional_test quiet
        check "${1}_attention" 40 "$1" ./tests/nn/attention_interpolate_test quiet
        check "${1}_conv_layers" 30 "$1" ./tests/nn/conv_layers_test quiet
        check "${1}_transformer" 30 "$1" ./tests/nn/transformer_encoder_test quiet
        check "${1}_data_parallel" 30 "$1" ./tests/ddp/data_parallel_test quiet
      }
      sanitize3_tool memcheck
      check memcheck_collectives 120 memcheck ./tests/comm/collectives_test quiet
      for tool in initcheck racecheck synccheck; do sanitize3_tool "$tool"; done
    elif [ "$part" = sanitize ]; then
      # Our kernels and copies (the "[cuda]" cases); the library-heavy cases stay out, as
      # cuBLAS and cuDNN are not ours to check and slow the tools down tenfold.
      check memcheck 270 memcheck ./tests/tensor/cuda_test
      check racecheck 270 racecheck ./tests/tensor/cuda_test
      check initcheck 120 initcheck ./tests/tensor/cuda_test
      check synccheck 120 synccheck ./tests/tensor/cuda_test
      # DDP and the collectives on CUDA tensors (Gloo staging, NCCL), all four tools, each in the
      # time left. NCCL's initialisation probes its kernels for other architectures and gets
      # cudaErrorNoKernelImageForDevice back, which it expects; memcheck would count each probe
      # as an error (48 of them, all inside ncclInitKernelsForDevice), so API errors are not
      # reported here. What each tool checks (memory, races, ...) still is.
      check memcheck_ddp 120 memcheck ./tests/ddp/equivalence_test quiet
      check memcheck_collectives 120 memcheck ./tests/comm/collectives_test quiet
      for tool in racecheck initcheck synccheck; do
        check "${tool}_ddp" 60 "$tool" ./tests/ddp/equivalence_test quiet
        check "${tool}_collectives" 60 "$tool" ./tests/comm/collectives_test quiet
      done
    else
      # The "[cuda]" cases of the newer GPU tests, tool by tool, so that every test gets
      # memcheck first if the 540 s run out. cuDNN probes inside the convolution cases and
      # autocast's, so API errors are not reported there.
      for tool in memcheck initcheck racecheck synccheck; do
        check "${tool}_graph" 40 "$tool" ./tests/tensor/cuda_graph_test
        check "${tool}_autocast" 30 "$tool" ./tests/tensor/cuda_autocast_test quiet
        check "${tool}_conv" 60 "$tool" ./tests/tensor/cuda_conv_test quiet
      done
      initcheck_control
    fi
    ;;
  bench)
    for model in toy mlp huge; do
      for round in 1 2 3; do
        step "train_step_${model}_$round" 40 ours ./bench/train_step --device cuda --model "$model"
        if [ "$model" != huge ]; then
          step "torch_${model}_$round" 60 python3 bench/torch_train_step.py --device cuda --model "$model"
        fi
      done
    done
    # One step captured in a CUDA graph and replayed, both sides.
    for model in toy mlp; do
      for round in 1 2; do
        step "train_step_${model}_graph_$round" 40 ours ./bench/train_step --device cuda --model "$model" --cuda_graph
        step "torch_${model}_graph_$round" 60 python3 bench/torch_train_step.py --device cuda --model "$model" \
          --cuda_graph
      done
    done
    step train_step_huge_graph 40 ours ./bench/train_step --device cuda --model huge --cuda_graph
    # DDP on the GPU: a world of one over NCCL (NCCL refuses two ranks on one device).
    step train_step_mlp_ddp 40 ours ./bench/train_step --device cuda --model mlp --mode ddp
    step train_step_mlp_nosync 40 ours ./bench/train_step --device cuda --model mlp --mode nosync
    cat "$logs"/train_step_*.log "$logs"/torch_*.log 2> /dev/null | grep RESULT | tee -a "$summary"
    ;;
  cpu)
    repo=$(cd "$here/.." && pwd)
    host_cpu
    ours ./bench/train_step --model toy --iterations 1 --threads 0 2> /dev/null | grep RESULT | sed 's/^/default threads: /' | tee -a "$summary"
    threads_check
    gpt=(--device cpu --steps 12 --batch 32 --eval_every 0 --eval_windows 1 --sample_tokens 0 --log_every 1000000
      --corpus "$repo/docs/ddp.md")
    for t in 1 2 4 8 16; do
      torch_env=(env OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t")
      for model in mlp cnn; do
        step "train_step_${model}_t$t" 30 ours ./bench/train_step --model "$model" --threads "$t" --iterations 20
        step "torch_${model}_t$t" 40 "${torch_env[@]}" \
          python3 bench/torch_train_step.py --model "$model" --threads "$t" --iterations 20
      done
      # The 1024 matmul: the best of 5 repetitions of 0.3 s on both sides (as threads_compare.sh).
      step "matmul_t$t" 30 env TINYDDP_NUM_THREADS="$t" ours ./bench/tensor_bench --benchmark_filter='BM_Matmul/1024$' \
        --benchmark_repetitions=5 --benchmark_min_time=0.3 --benchmark_report_aggregates_only=false
      step "torch_matmul_t$t" 30 "${torch_env[@]}" python3 bench/torch_matmul.py "$t"
      step "train_gpt_t$t" 40 ours ./examples/train_gpt "${gpt[@]}" --threads "$t"
      step "torch_gpt_t$t" 40 "${torch_env[@]}" python3 bench/torch_gpt_train.py --steps 12 --threads "$t"
    done
    cat "$logs"/train_step_*.log "$logs"/torch_*.log "$logs"/train_gpt_*.log 2> /dev/null |
      grep -E "RESULT|tokens/s|cpu kernels|intra-op" | tee -a "$summary"
    for t in 1 2 4 8 16; do  # tensor_bench's repetitions, the best of them
      awk -v t="$t" '$1 == "BM_Matmul/1024" && (best == "" || $2 < best) { best = $2 }
        END { if (best != "") print "RESULT impl=tinyddp work=matmul1024 threads=" t " ms=" best }' \
        "$logs/matmul_t$t.log" 2> /dev/null | tee -a "$summary"
    done
    ;;
  cpu_bf16)
    repo=$(cd "$here/.." && pwd)
    host_cpu
    note "cpu flags: $(grep -o -E 'amx[a-z0-9_]*|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    step bf16_matmul 330 env TENSOR_BENCH="ours ./bench/tensor_bench" TORCH_PYTHON=python3 \
      bash "$repo/bench/bf16_matmul_compare.sh" "${BF16_PROCESSES:-5}"
    grep -E '^\|' "$logs/bf16_matmul.log" | tee -a "$summary"
    for t in 1 "$(nproc)"; do
      torch_env=(env OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t")
      for model in mlp cnn; do
        step "train_step_${model}_autocast_t$t" 30 ours ./bench/train_step --model "$model" --threads "$t" --autocast
        step "torch_${model}_autocast_t$t" 40 "${torch_env[@]}" \
          python3 bench/torch_train_step.py --model "$model" --threads "$t" --autocast
      done
    done
    cat "$logs"/train_step_*.log "$logs"/torch_*.log 2> /dev/null | grep RESULT | tee -a "$summary"
    ;;
  bench2)
    repo=$(cd "$here/.." && pwd)
    step cuda_ops 90 ours ./bench/cuda_ops
    step torch_cuda_ops 90 python3 bench/torch_cuda_ops.py
    for flags in "--model mlp --tf32" "--model mlp --autocast" "--model cnn" "--model huge --batch 256" \
      "--model huge --batch 256 --tf32" "--model huge --batch 256 --autocast"; do
      name=$(echo "$flags" | tr -d ' -')
      # shellcheck disable=SC2086  # the flags are words
      step "train_step_$name" 40 ours ./bench/train_step --device cuda $flags
      # shellcheck disable=SC2086
      step "torch_$name" 60 python3 bench/torch_train_step.py --device cuda $flags
    done
    # The GPT at 32 windows of 256 tokens: float32, TF32, bf16 autocast; tinyddp reads this
    # repository's docs/ddp.md as its corpus (no fortunes here).
    read -ra gpt <<< "$(gpt_cuda_args)"
    # --cuda_graph: ours only (PyTorch's whole-step capture of this loop is not in its script).
    for flags in "--cuda_graph" "--autocast bf16 --cuda_graph"; do
      # shellcheck disable=SC2086
      step "train_gpt$(echo "$flags" | tr -d ' -')" 60 ours ./examples/train_gpt "${gpt[@]}" $flags
    done
    for flags in "" "--tf32" "--autocast bf16"; do
      name=gpt$(echo "$flags" | tr -d ' -')
      # shellcheck disable=SC2086
      step "train_$name" 90 ours ./examples/train_gpt "${gpt[@]}" --report_memory $flags
      # shellcheck disable=SC2086,SC2046  # the flags are words
      step "torch_$name" 90 python3 bench/torch_gpt_train.py --device cuda --block_size 256 --steps 30 \
        $(echo "$flags" | sed 's/ bf16//')
    done
    # One DDP step of the GPT over NCCL (a world of one) with its timeline, for the picture.
    export TINYDDP_DDP_TIMELINE="$out/gpt_timeline"
    step gpt_timeline 60 ours ./launcher/launch --nproc_per_node 1 -- ./examples/train_gpt "${gpt[@]}" --steps 4
    unset TINYDDP_DDP_TIMELINE
    cat "$logs"/*.log 2> /dev/null | grep -E "RESULT|tokens/s|peak GPU" | tee -a "$summary"
    ;;
  gpt2)
    # GPT-2 small, 15 iterations each (the first 5 not timed), both frameworks, taking turns.
    gpt2_data=$(gpt2_dataset)
    for batch in 8 16; do
      for dtype in bfloat16 float32; do
        torch_flags="--tf32"
        [ "$dtype" = bfloat16 ] && torch_flags="--autocast"
        for graph in False True; do
          # shellcheck disable=SC2046  # the keys are words
          step "gpt2_${dtype}_b${batch}_graph$graph" 90 ours ./examples/train_gpt $(gpt2_keys "$gpt2_data") \
            --batch_size="$batch" --max_iters=14 --dtype="$dtype" --cuda_graph="$graph" --report_memory=True
        done
        if [ "$dtype" = bfloat16 ] && [ "$batch" = 8 ]; then  # the flash route alone: the tensor-core kernels
          # shellcheck disable=SC2046
          TINYDDP_CUDA_SDP=flash step "gpt2_${dtype}_b${batch}_flash" 90 ours ./examples/train_gpt \
            $(gpt2_keys "$gpt2_data") --batch_size="$batch" --max_iters=14 --dtype="$dtype" --report_memory=True
        fi
        step "torch_gpt2_${dtype}_b$batch" 90 python3 bench/torch_gpt_train.py --device cuda --n_layer 12 --n_head 12 \
          --n_embd 768 --block_size 1024 --vocab_size 50304 --batch "$batch" --steps 15 --warmup 5 --sdpa "$torch_flags"
      done
    done
    step torch_gpt2_bfloat16_b8_compile 240 python3 bench/torch_gpt_train.py --device cuda --n_layer 12 --n_head 12 \
      --n_embd 768 --block_size 1024 --vocab_size 50304 --batch 8 --steps 25 --warmup 10 --sdpa --autocast --compile
    rm -rf "$gpt2_data"
    # Ours: the median iteration time after the fifth as tokens/s, the last MFU, the peak.
    for f in "$logs"/gpt2_*.log; do
      python3 scripts/nanogpt_log_summary.py "$f" | tee -a "$summary"
    done
    grep -h -E "RESULT|peak GPU" "$logs"/torch_gpt2_*.log 2> /dev/null | tee -a "$summary"
    cp "$logs"/gpt2_*.log "$logs"/torch_gpt2_*.log "$out/" 2> /dev/null
    ;;
  new)
    # What landed since the last GPU run, most needed first: the 16-bit attention's route to the
    # tensor-core kernels (attention_test's routing case) and their strided heads
    # (attention_layout_test), the elementwise kernels' 32-bit
    # general path (the op tests against the CPU; the heads' transpose and a broadcast
    # subtraction beside PyTorch's), then GPT-2 small in bf16 at batch 8 on the default route
    # beside PyTorch's, and its per-kind profile beside torch.profiler's.
    step attention_test 60 ours ./tests/tensor/attention_test "[cuda]"
    step attention_layout_test 60 ours ./tests/tensor/attention_layout_test "[cuda]"
    step cuda_test 60 ours ./tests/tensor/cuda_test
    step cuda_math_test 60 ours ./tests/tensor/cuda_math_test
    step cuda_conv_test 60 ours ./tests/tensor/cuda_conv_test
    step cuda_ops 40 ours ./bench/cuda_ops --only strided
    step torch_cuda_ops 40 python3 bench/torch_cuda_ops.py --only strided
    grep -h RESULT "$logs/cuda_ops.log" "$logs/torch_cuda_ops.log" 2> /dev/null | tee -a "$summary"
    gpt2_data=$(gpt2_dataset)
    # shellcheck disable=SC2046  # the keys are words
    step gpt2_bfloat16_b8_default 60 ours ./examples/train_gpt $(gpt2_keys "$gpt2_data") --batch_size=8 --max_iters=14 \
      --dtype=bfloat16 --report_memory=True
    step torch_gpt2_bfloat16_b8 60 python3 bench/torch_gpt_train.py --device cuda --n_layer 12 --n_head 12 \
      --n_embd 768 --block_size 1024 --vocab_size 50304 --batch 8 --steps 15 --warmup 5 --sdpa --autocast
    python3 scripts/nanogpt_log_summary.py "$logs/gpt2_bfloat16_b8_default.log" | tee -a "$summary"
    grep -h -E "RESULT|peak GPU" "$logs/torch_gpt2_bfloat16_b8.log" 2> /dev/null | tee -a "$summary"
    # shellcheck disable=SC2046
    step ops_gpt2 60 ours ./examples/train_gpt $(gpt2_keys "$gpt2_data") --batch_size=8 --max_iters=5 \
      --dtype=bfloat16 --profile_ops=3 --profile_trace="$logs/ops_gpt2.json"
    rm -rf "$gpt2_data"
    step torch_ops_gpt2 40 python3 bench/torch_gpt_train.py --device cuda --n_layer 12 --n_head 12 --n_embd 768 \
      --block_size 1024 --vocab_size 50304 --batch 8 --steps 8 --sdpa --autocast --kinds_json "$logs/torch_ops_gpt2.json"
    [ -s "$logs/ops_gpt2.json" ] &&
      python3 scripts/profile_compare.py "$logs/ops_gpt2.json" "$logs/torch_ops_gpt2.json" 2>&1 | tee -a "$summary"
    ;;
  profile)
    # Per kind of kernel, both frameworks, a few steps after the warm-up (ours: --profile_ops;
    # PyTorch: torch.profiler's device events, bench/torch_kinds.py), side by side.
    compare_ops() {  # compare_ops NAME: ours NAME.json beside torch's torch_NAME.json
      [ -s "$logs/ops_$1.json" ] || return
      echo "== $1 (tinyddp beside PyTorch eager; per step)" | tee -a "$summary"
      python3 scripts/profile_compare.py "$logs/ops_$1.json" "$logs/torch_ops_$1.json" 2>&1 | tee -a "$summary"
    }
    read -ra gpt <<< "$(gpt_cuda_args)"
    for flags in "" "--autocast bf16"; do
      name=gpt$(echo "$flags" | tr -d ' -')
      # shellcheck disable=SC2086
      step "ops_$name" 60 ours ./examples/train_gpt "${gpt[@]}" --steps 6 --profile_ops 3 \
        --profile_trace "$logs/ops_$name.json" $flags
      # shellcheck disable=SC2086,SC2046
      step "torch_ops_$name" 90 python3 bench/torch_gpt_train.py --device cuda --block_size 256 --steps 8 --sdpa \
        --kinds_json "$logs/torch_ops_$name.json" $(echo "$flags" | sed 's/ bf16//')
      compare_ops "$name"
    done
    # GPT-2 small's shape: 12 x 768, 1024 tokens, batch 8, vocabulary 50304, biases (as the
    # PyTorch side's model), bf16 autocast; ours in nanoGPT's mode on random token ids.
    gpt2_data=$(gpt2_dataset)
    # shellcheck disable=SC2046  # the keys are words
    step ops_gpt2 120 ours ./examples/train_gpt $(gpt2_keys "$gpt2_data") --batch_size=8 --max_iters=5 \
      --dtype=bfloat16 --profile_ops=3 --profile_trace="$logs/ops_gpt2.json"
    step torch_ops_gpt2 120 python3 bench/torch_gpt_train.py --device cuda --n_layer 12 --n_head 12 --n_embd 768 \
      --block_size 1024 --vocab_size 50304 --batch 8 --steps 8 --sdpa --autocast --kinds_json "$logs/torch_ops_gpt2.json"
    compare_ops gpt2
    rm -rf "$gpt2_data"
    # The 4096-wide MLP (1024-4096-4096-1024, batch 256), float32.
    step ops_mlp 60 ours ./bench/train_step --device cuda --model huge --batch 256 --iterations 5 \
      --profile_trace "$logs/ops_mlp.json"
    step torch_ops_mlp 60 python3 bench/torch_train_step.py --device cuda --model huge --batch 256 --iterations 5 \
      --kinds_json "$logs/torch_ops_mlp.json"
    compare_ops mlp
    # The GPT's step phase by phase (--profile_phases: the device synchronised between batch,
    # forward, backward, clip, optimizer and the loss read back), both frameworks, float32.
    step phases_gpt 60 ours ./examples/train_gpt "${gpt[@]}" --profile_phases
    step torch_phases_gpt 90 python3 bench/torch_gpt_train.py --device cuda --block_size 256 --steps 30 --profile_phases
    # Then every kernel of one tinyddp step, timed by ncu (one metric, so one pass per launch:
    # about 15 ms each), for scripts/kernel_profile.py: launches 1200-3000 of two steps.
    ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    step ncu_gpt 120 ours "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
      --launch-skip 1200 --launch-count 1800 --log-file "$logs/gpt_kernels.csv" ./examples/train_gpt "${gpt[@]}" --steps 2
    cat "$logs"/ops_*.log "$logs"/*phases*.log 2> /dev/null | grep -E "RESULT|tokens/s|^step phases|^  [a-z]|^iter" |
      tee -a "$summary"
    [ -s "$logs/gpt_kernels.csv" ] && python3 scripts/kernel_profile.py --top 12 "tinyddp=$logs/gpt_kernels.csv" |
      tee -a "$summary"
    cp "$logs/ops_gpt2.json" "$out/" 2> /dev/null  # the rest in profile.tar.gz (8 files come back)
    ;;
  short)
    cuda_op_tests
    host_cpu
    threads_check
    read -ra gpt <<< "$(gpt_cuda_args)"
    step train_gpt 90 ours ./examples/train_gpt "${gpt[@]}"
    step torch_gpt 90 python3 bench/torch_gpt_train.py --device cuda --block_size 256 --steps 30
    initcheck_control
    step equivalence_test 150 ours ./tests/ddp/equivalence_test --durations yes
    cat "$logs"/*gpt*.log 2> /dev/null | grep -E "RESULT|tokens/s" | tee -a "$summary"
    ;;
esac
tar -C "$logs" -czf "$out/$part.tar.gz" .
rm -rf "$logs"
note "gpu_run.sh $part: done; logs in $part.tar.gz"
