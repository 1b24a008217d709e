#!/usr/bin/env bash
# The main job: builds with optimisation, then trains a small CNN (Conv2d, BatchNorm2d, ReLU,
# MaxPool2d twice, Dropout, Linear) on real handwritten digits (python3-sklearn's 8x8 digits,
# installed by scripts/setup.sh) data-parallel on 2 processes (DDP over Gloo), started by
# tinyddp's launcher, printing progress from rank 0, the accuracy on the 297 held-out digits
# and DDP's statistics. Extra arguments go to the trainer (a later option wins), e.g.
# `bash scripts/main.sh --sync_bn`, `bash scripts/main.sh --steps 2000 --lr 0.02` or
# `bash scripts/main.sh --model mlp --dataset synthetic --widths 784,256,10`.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //launcher:launch //examples:train
bazel-bin/launcher/launch --nproc_per_node 2 -- bazel-bin/examples/train --model cnn --dataset digits --steps 1000 --lr 0.05 \
  --momentum 0.9 --log_every 100 --stats "$@"
