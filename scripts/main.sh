#!/usr/bin/env bash
# The main job: builds with optimisation and trains the seed's ToyModel single-process with
# //examples:train (it becomes DDP training across processes with the ddp and launcher issues).
# Extra arguments go to the trainer, e.g. `bash scripts/main.sh --model mlp --steps 50`.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel run -c opt //examples:train -- --model toy --steps 200 --log_every 20 "$@"
