#!/usr/bin/env bash
# The main job: builds with optimisation and runs the tensor demo (later: DDP training).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel run -c opt //examples:tensor_demo -- "$@"
