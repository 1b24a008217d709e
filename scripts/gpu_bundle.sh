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
# when they would not fit. Only what gpu_run.sh runs goes in, packed with xz; the binaries are
# stripped, and the kernels carry sm_90 code alone (no PTX, which only GPUs newer than the
# H100/H200 need).
# Usage: bash scripts/gpu_bundle.sh   then, on the device: bash .gpu/gpu_run.sh tests|sanitize|sanitize2|sanitize3|bench|bench2|gpt2|cpu|cpu_bf16|profile|short
set -euo pipefail
cd "$(dirname "$0")/.."
limit_bytes=$((64 * 1024 * 1024))

binaries=(
  tests/tensor/cuda_test tests/tensor/cuda_conv_test tests/tensor/cuda_autocast_test tests/tensor/cuda_graph_test
  tests/tensor/cuda_math_test tests/tensor/cuda_plan_test tests/tensor/device_guard_test tests/tensor/attention_test
  tests/tensor/attention_layout_test
  tests/tensor/cross_entropy_test tests/tensor/foreach_test tests/nn/fused_adam_test tests/tensor/profiler_test
  tests/examples/train_gpt_graph_test
  tests/nn/functional_test tests/nn/attention_interpolate_test tests/nn/conv_layers_test tests/nn/transformer_encoder_test
  tests/ddp/data_parallel_test
  tests/comm/collectives_test tests/comm/desync_test tests/nn/threads_test
  tests/ddp/equivalence_test tests/ddp/cuda_graph_test tests/ddp/zero_overlap_test tests/examples/examples_test
  examples/train examples/ddp_basic examples/ddp_checkpoint examples/ddp_join examples/ddp_zero_join launcher/launch
  bench/train_step bench/cuda_ops bench/tensor_bench examples/train_gpt
)
targets=()
for b in "${binaries[@]}"; do targets+=("//${b%/*}:${b##*/}"); done
bazel build -c opt --config=cuda --define=cuda_ptx=0 --dynamic_mode=off "${targets[@]}"

# Staged in .gpu/stage, then packed into .gpu/bundle.tar.xz (gpu_run.sh unpacks it there on
# first use): the binaries and libraries are about 590 MiB as they are (each binary carries
# the same 7 MiB of CUDA kernels; oneDNN and OpenBLAS 73) and about 30 MiB packed.
rm -rf .gpu
stage=.gpu/stage
mkdir -p "$stage/root/bench" "$stage/lib"
for b in "${binaries[@]}"; do
  install -D -m 755 "bazel-bin/$b" "$stage/root/$b"
  strip "$stage/root/$b"
done
# The PyTorch sides (torch_train_step imports torch_models; torch_gpt_train the fixtures' gpt_model).
cp bench/torch_train_step.py bench/torch_models.py bench/torch_cuda_ops.py bench/torch_gpt_train.py bench/torch_matmul.py \
  bench/torch_kinds.py bench/torch_turns.py \
  "$stage/root/bench/"
mkdir -p "$stage/root/tests/ddp/fixtures" "$stage/root/tests/examples/fixtures/nanogpt_data"
cp tests/ddp/fixtures/gpt_model.py "$stage/root/tests/ddp/fixtures/"
# train_gpt_graph_test's nanoGPT-mode runs read the story data.
cp -r tests/examples/fixtures/nanogpt_data/story "$stage/root/tests/examples/fixtures/nanogpt_data/"
# The scripts examples_test runs on the timelines and results it makes.
mkdir -p "$stage/root/scripts"
cp scripts/merge_timelines.py scripts/plot_data_parallel.py scripts/plot_loss.py scripts/plot_timeline.py \
  scripts/profile_compare.py scripts/kernel_profile.py scripts/nanogpt_log_summary.py \
  "$stage/root/scripts/"

# Shared libraries outside glibc and outside the CUDA toolkit (fmt, Gloo, libstdc++, ...).
for b in "${binaries[@]}"; do ldd "$stage/root/$b"; done | awk '/=> \// { print $3 }' | sort -u | while read -r lib; do
  case "$lib" in
    /usr/local/cuda/*|*/libc.so*|*/libm.so*|*/libdl.so*|*/librt.so*|*/libpthread.so*|*/ld-linux*) ;;
    *) cp -L "$lib" "$stage/lib/" && strip --strip-unneeded "$stage/lib/$(basename "$lib")" ;;
  esac
done
unpacked_bytes=$(du -sb "$stage" | cut -f1)
# One xz stream with a window wider than a binary: every binary carries the same CUDA kernels
# (about 7 MiB of .nv_fatbin) and much of the same code, which a window of 192 MiB finds again
# from one binary to the next (-T0's blocks and -6's 8 MiB window cannot: 78 MiB packed).
tar -C "$stage" -cf - root lib | xz -T1 --lzma2=preset=6,dict=192MiB > .gpu/bundle.tar.xz
rm -rf "$stage"
cp scripts/gpu_run.sh .gpu/

bundle_bytes=$(du -sb .gpu | cut -f1)
repo_bytes=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2> /dev/null | tail -1 | cut -f1)
total=$((bundle_bytes + repo_bytes))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "gpu_bundle.sh: bundle $(mib "$bundle_bytes") ($(mib "$unpacked_bytes") unpacked) + repository $(mib "$repo_bytes") = $(mib "$total") of the $(mib "$limit_bytes") that travel"
if [ "$total" -gt "$limit_bytes" ]; then
  echo "gpu_bundle.sh: error: too large to travel to the device machine; the largest files:" >&2
  find .gpu -type f -printf '%s %p\n' | sort -rn | head -8 | awk '{ printf "  %8.1f MiB  %s\n", $1 / 1048576, $2 }' >&2
  exit 1
fi
echo "gpu_bundle.sh: ready; on the device machine run, one call each: bash .gpu/gpu_run.sh tests | sanitize | sanitize2 | sanitize3 | bench | bench2 | gpt2 | cpu | cpu_bf16 | profile | short"
