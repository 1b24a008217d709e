#!/usr/bin/env bash
# Fails when docs/learn.md does not state the time its own counts give, or when its first pass
# takes over 60 minutes (scripts/learn_budget.py --check: words, code shown and linked, runs).
set -euo pipefail
exec python3 scripts/learn_budget.py --check
