#!/usr/bin/env bash
# Checks that every C++ file is formatted (scripts/check_format.sh) and within the size rule
# (scripts/check_size.py), that the files docs/architecture.md names exist
# (scripts/check_doc_paths.py) and that the includes keep its dependency rules
# (scripts/check_layers.py; one more case in the count each),
# builds and runs every test with Bazel, then builds and runs examples/downstream (a user's own
# workspace that depends on this checkout; one more case in the count), then (when nvcc is
# present) builds the CUDA configuration so that CUDA code keeps compiling. Ends with one line
# "N passed, N failed, N skipped" counted from the Catch2 test cases that ran.
set -uo pipefail
cd "$(dirname "$0")/.."

format_result=failed
if bash scripts/check_format.sh; then format_result=passed; fi
size_result=failed
if python3 scripts/check_size.py; then size_result=passed; fi
doc_paths_result=failed
if python3 scripts/check_doc_paths.py; then doc_paths_result=passed; fi
layers_result=failed
if python3 scripts/check_layers.py; then layers_result=passed; fi

summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
bazel test //... --keep_going 2>&1 | tee "$summary"
test_status=${PIPESTATUS[0]}

# A user's workspace: its own training binary on 2 ranks under the launcher (and --config=cuda).
downstream_result=failed
if bash scripts/downstream_test.sh; then downstream_result=passed; fi

# Count from the targets this run reported, before anything else builds here.
counts=$(python3 scripts/count_tests.py "$summary" --extra "$format_result:formatting (scripts/check_format.sh)" \
  --extra "$size_result:size rule (scripts/check_size.py)" \
  --extra "$doc_paths_result:docs/architecture.md's paths (scripts/check_doc_paths.py)" \
  --extra "$layers_result:docs/architecture.md's dependency rules (scripts/check_layers.py)" \
  --extra "$downstream_result:examples/downstream (scripts/downstream_test.sh)")
count_status=$?

cuda_status=0
if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "test.sh: nvcc found; building --config=cuda //..."
  bazel build --config=cuda //... --keep_going || cuda_status=$?
  if [ "$cuda_status" -ne 0 ]; then echo "test.sh: the CUDA configuration FAILED to build"; fi
else
  echo "test.sh: no nvcc at /usr/local/cuda/bin; skipping the --config=cuda build"
fi

echo "$counts"
if [ "$test_status" -ne 0 ] || [ "$count_status" -ne 0 ] || [ "$cuda_status" -ne 0 ]; then exit 1; fi
exit 0
