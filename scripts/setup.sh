#!/usr/bin/env bash
# Installs every Debian package tinyddp builds against (idempotent: installs only what is
# missing; uses sudo only when not root). The CUDA toolkit is not a Debian package: the
# CPU build needs none of it, and --config=cuda uses /usr/local/cuda when it is there.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap     # Bazel 4.2.3
  bazel-platforms     # @platforms, not pulled in by bazel-bootstrap
  g++
  python3             # scripts/count_tests.py and the benchmark comparison
  libeigen3-dev       # CPU kernels, and GEMM where OpenBLAS lacks kernels for the chosen ISA
  libopenblas-dev     # float32/float64 GEMM, kernels picked at run time (tensor/backends/cpu/matmul.cc)
  libdnnl-dev         # oneDNN: bfloat16 GEMM on AVX512-BF16 / AMX (tensor/backends/cpu/onednn.cc)
  catch2              # tests (Catch2 v2)
  libfmt-dev          # error messages and printing
  libgloo-dev         # CPU collectives (comm/)
  libcli11-dev        # command lines of the examples and the launcher
  nlohmann-json3-dev  # checkpoint headers
  libbenchmark-dev    # bench/
  zlib1g-dev          # the digits reader of examples/train
  python3-sklearn     # the handwritten digits (sklearn/datasets/data/digits.csv.gz)
  fortunes            # the GPT's text: English fortune cookies (/usr/share/games/fortunes)
  python3-matplotlib  # the pictures of docs/ (scripts/plot_*.py) and their tests
  openmpi-bin         # mpirun, to test starting jobs with Open MPI's variables
  nftables            # packet loss on the simulated cluster's links (scripts/sim_cluster.sh)
  iptables            # and their delay without netem: NFQUEUE rules for scripts/link_delay
  slurm-wlm           # the simulated Slurm cluster (scripts/sim_slurm.sh): slurmctld, slurmd, sbatch
  munge               # Slurm's authentication, a munged of its own per simulated cluster
  libnetfilter-queue-dev  # scripts/link_delay
  clang-format        # scripts/check_format.sh (Debian 12: clang-format 14)
)

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -q
# Without recommended packages: the Python libraries would otherwise bring a desktop's worth.
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
