#!/usr/bin/env bash
# The main job: builds with optimisation, then trains an MLP classifier (64-128-10) on real
# handwritten digits (python3-sklearn's 8x8 digits, installed by scripts/setup.sh)
# data-parallel on 2 processes (DDP over Gloo), started by tinyddp's launcher, printing
# progress from rank 0, the accuracy on the 297 held-out digits and DDP's statistics.
# Extra arguments go to the trainer, e.g. `bash scripts/main.sh --steps 2000 --lr 0.02` or
# `bash scripts/main.sh --dataset synthetic --widths 784,256,10`.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //launcher:launch //examples:train
bazel-bin/launcher/launch --nproc_per_node 2 -- bazel-bin/examples/train --dataset digits --steps 1000 --lr 0.05 \
  --momentum 0.9 --log_every 100 --stats "$@"
