#!/usr/bin/env bash
# Runs on the device machine (see scripts/gpu_bundle.sh): the bundled tests, with the GPU
# cases that skip elsewhere, compute-sanitizer's memcheck and racecheck over the CUDA tensor
# tests, and the training-step benchmarks against PyTorch on the same GPU. Logs and a summary
# go to $OUT (the device tool fetches it), else /tmp/gpu-out.
# Usage: bash .gpu/gpu_run.sh [tests|bench|all]
set -uo pipefail
what=${1:-all}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
summary="$out/summary.txt"

# The CUDA libraries wherever this machine keeps them (toolkit, PyTorch's wheels).
libdirs=$(find / -xdev \( -name 'libnccl.so.2' -o -name 'libcudnn.so.9' -o -name 'libcublas.so.13' \
  -o -name 'libcublasLt.so.13' -o -name 'libcudart.so.13' \) 2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd: -)
export LD_LIBRARY_PATH="$here/lib${libdirs:+:$libdirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{ echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; nvidia-smi 2>&1 | head -15; } > "$out/machine.txt"
cd "$here/root"

run() {  # run NAME COMMAND...: logs to $out/NAME.log, one summary line
  local name=$1
  shift
  local start=$SECONDS
  "$@" > "$out/$name.log" 2>&1
  local status=$?
  echo "$name: exit $status ($((SECONDS - start)) s); $(grep -E 'test cases|passed' "$out/$name.log" | tail -1)" | tee -a "$summary"
}

if [ "$what" = tests ] || [ "$what" = all ]; then
  for t in tests/tensor/cuda_test tests/comm/collectives_test tests/ddp/ddp_test tests/examples/examples_test; do
    run "$(basename "$t")" "./$t" --durations yes
  done
  if command -v compute-sanitizer > /dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    run memcheck "$sanitizer" --tool memcheck --error-exitcode 99 ./tests/tensor/cuda_test "[cuda]"
    run racecheck "$sanitizer" --tool racecheck --error-exitcode 99 ./tests/tensor/cuda_test "[cuda]"
  else
    echo "compute-sanitizer: not found" | tee -a "$summary"
  fi
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
  for model in toy mlp huge; do
    for round in 1 2 3; do
      ./bench/train_step --device cuda --model "$model" >> "$out/bench.log" 2>&1
      if [ "$model" != huge ]; then python3 bench/torch_train_step.py --device cuda --model "$model" >> "$out/bench.log" 2>&1; fi
    done
  done
  # DDP on the GPU: a world of one over NCCL (NCCL refuses two ranks on one device).
  ./bench/train_step --device cuda --model mlp --mode ddp >> "$out/bench.log" 2>&1
  ./bench/train_step --device cuda --model mlp --mode nosync >> "$out/bench.log" 2>&1
  grep RESULT "$out/bench.log" | tee -a "$summary"
fi
