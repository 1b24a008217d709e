#!/usr/bin/env bash
# Packs what a GPU session runs on the lent device machine into .gpu/ (git-ignored; the
# device tool carries it with `carry: [".gpu"]`): the GPU test binaries, the examples and the
# launcher that examples_test runs, and the training-step benchmark, built here with
# -c opt --config=cuda and linked statically against the project's libraries; the shared
# libraries they need that the device machine lacks (it has no Debian packages; CUDA, cuDNN
# and NCCL come from its own toolkit and PyTorch's wheels); the benchmark scripts; and
# gpu_run.sh, which runs one part per call there.
#
# What travels to the device (this bundle plus the repository's tracked and unignored files)
# must stay under 64 MiB: the script prints both sizes and fails, naming the largest files,
# when they would not fit. Only what gpu_run.sh runs goes in; the binaries are stripped, and
# the kernels carry sm_90 code alone (no PTX, which only GPUs newer than the H100/H200 need).
# Usage: bash scripts/gpu_bundle.sh   then, on the device: bash .gpu/gpu_run.sh tests|sanitize|bench
set -euo pipefail
cd "$(dirname "$0")/.."
limit_bytes=$((64 * 1024 * 1024))

binaries=(
  tests/tensor/cuda_test tests/tensor/cuda_conv_test tests/tensor/cuda_autocast_test tests/tensor/cuda_graph_test
  tests/comm/collectives_test
  tests/ddp/equivalence_test tests/ddp/zero_overlap_test tests/examples/examples_test
  examples/train examples/ddp_basic examples/ddp_checkpoint examples/ddp_join examples/ddp_zero_join launcher/launch
  bench/train_step
)
targets=()
for b in "${binaries[@]}"; do targets+=("//${b%/*}:${b##*/}"); done
bazel build -c opt --config=cuda --define=cuda_ptx=0 --dynamic_mode=off "${targets[@]}"

rm -rf .gpu
mkdir -p .gpu/root/bench .gpu/lib
for b in "${binaries[@]}"; do
  install -D -m 755 "bazel-bin/$b" ".gpu/root/$b"
  strip ".gpu/root/$b"
done
cp bench/torch_train_step.py bench/torch_models.py .gpu/root/bench/  # the PyTorch side imports torch_models
cp scripts/gpu_run.sh .gpu/

# Shared libraries outside glibc and outside the CUDA toolkit (fmt, Gloo, libstdc++, ...).
for b in "${binaries[@]}"; do ldd ".gpu/root/$b"; done | awk '/=> \// { print $3 }' | sort -u | while read -r lib; do
  case "$lib" in
    /usr/local/cuda/*|*/libc.so*|*/libm.so*|*/libdl.so*|*/librt.so*|*/libpthread.so*|*/ld-linux*) ;;
    *) cp -L "$lib" .gpu/lib/ && strip --strip-unneeded ".gpu/lib/$(basename "$lib")" ;;
  esac
done

bundle_bytes=$(du -sb .gpu | cut -f1)
repo_bytes=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2> /dev/null | tail -1 | cut -f1)
total=$((bundle_bytes + repo_bytes))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "gpu_bundle.sh: bundle $(mib "$bundle_bytes") + repository $(mib "$repo_bytes") = $(mib "$total") of the $(mib "$limit_bytes") that travel"
if [ "$total" -gt "$limit_bytes" ]; then
  echo "gpu_bundle.sh: error: too large to travel to the device machine; the largest files:" >&2
  find .gpu -type f -printf '%s %p\n' | sort -rn | head -8 | awk '{ printf "  %8.1f MiB  %s\n", $1 / 1048576, $2 }' >&2
  exit 1
fi
echo "gpu_bundle.sh: ready; on the device machine run, one call each: bash .gpu/gpu_run.sh tests | sanitize | bench"
