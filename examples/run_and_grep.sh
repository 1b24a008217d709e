#!/usr/bin/env bash
# Runs a program and checks that it succeeds and prints a given text. Used by example tests.
set -euo pipefail
program="$1"
expected="$2"
output=$("$program")
echo "$output"
if ! grep -qF -- "$expected" <<<"$output"; then
  echo "run_and_grep: '$expected' not found in the output of $program" >&2
  exit 1
fi
