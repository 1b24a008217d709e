#!/usr/bin/env bash
# Packs what a GPU session runs on the lent device machine into .gpu/ (git-ignored; the
# device tool carries it with `carry: [".gpu"]`): the GPU test binaries, the examples and the
# launcher they run, and the benchmarks, built here with -c opt --config=cuda and linked
# statically against the project's libraries; the shared libraries they need that the device
# machine lacks (it has no Debian packages; CUDA, cuDNN and NCCL come from its own toolkit
# and PyTorch wheels); the benchmark scripts; and gpu_run.sh, which runs it all there.
# Usage: bash scripts/gpu_bundle.sh   then, on the device: bash .gpu/gpu_run.sh [tests|bench|all]
set -euo pipefail
cd "$(dirname "$0")/.."

binaries=(
  tests/tensor/cuda_test tests/comm/collectives_test tests/ddp/ddp_test tests/examples/examples_test
  examples/train examples/ddp_basic examples/ddp_checkpoint examples/ddp_join launcher/launch
  bench/train_step bench/allreduce
)
targets=()
for b in "${binaries[@]}"; do targets+=("//${b%/*}:${b##*/}"); done
bazel build -c opt --config=cuda --dynamic_mode=off "${targets[@]}"

rm -rf .gpu
mkdir -p .gpu/root/bench .gpu/lib
for b in "${binaries[@]}"; do
  install -D -m 755 "bazel-bin/$b" ".gpu/root/$b"
  strip ".gpu/root/$b"
done
cp bench/*.py .gpu/root/bench/
cp scripts/gpu_run.sh .gpu/

# Shared libraries outside glibc and outside the CUDA toolkit (fmt, Gloo, libstdc++, ...).
for b in "${binaries[@]}"; do ldd ".gpu/root/$b"; done | awk '/=> \// { print $3 }' | sort -u | while read -r lib; do
  case "$lib" in
    /usr/local/cuda/*|*/libc.so*|*/libm.so*|*/libdl.so*|*/librt.so*|*/libpthread.so*|*/ld-linux*) ;;
    *) cp -L "$lib" .gpu/lib/ ;;
  esac
done
du -sh .gpu
echo "gpu_bundle.sh: ready; on the device machine run: bash .gpu/gpu_run.sh all"
