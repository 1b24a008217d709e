#!/usr/bin/env bash
# Fails when docs/torch_names.md is stale: scripts/torch_names.py --check rebuilds the table of
# PyTorch's names from the headers and compares it with the committed page.
set -euo pipefail
exec python3 scripts/torch_names.py --check
