#!/usr/bin/env bash
# The main job: builds with optimisation, then trains the default MLP classifier on its
# synthetic dataset data-parallel on 2 processes (DDP over Gloo), started by tinyddp's
# launcher, printing progress from rank 0 and the held-out accuracy at the end.
# Extra arguments go to the trainer, e.g. `bash scripts/main.sh --steps 1000 --momentum 0.9 --lr 0.01`.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //launcher:launch //examples:train
bazel-bin/launcher/launch --nproc_per_node 2 -- bazel-bin/examples/train --steps 500 --log_every 50 "$@"
