#!/usr/bin/env bash
# Fails (exit 1) when a tracked C++ or CUDA file differs from what clang-format makes of it with
# the project's .clang-format, and names each such file. Run by scripts/test.sh as one counted
# case; to fix: clang-format -i FILE (or every file: scripts/check_format.sh --fix).
# third_party/ holds stand-ins for other projects' repositories and is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is missing (scripts/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | grep -v '^third_party/')
((${#files[@]} > 0)) || { echo "check_format: no C++ files found (not a git checkout?)" >&2; exit 2; }
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi
unformatted=()
for f in "${files[@]}"; do
  clang-format "$f" | cmp -s - "$f" || unformatted+=("$f")
done
if ((${#unformatted[@]} > 0)); then
  echo "check_format: ${#unformatted[@]} of ${#files[@]} files are not formatted ($(clang-format --version | head -n 1)):"
  printf '  %s\n' "${unformatted[@]}"
  echo "check_format: run 'bash scripts/check_format.sh --fix' (or clang-format -i FILE)"
  exit 1
fi
echo "check_format: all ${#files[@]} C++ and CUDA files are formatted"
