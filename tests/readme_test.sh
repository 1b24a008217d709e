#!/usr/bin/env bash
# Checks that README.md's C++ example is exactly the code in examples/readme_snippet.cc
# (which //examples:readme_snippet_test compiles and runs), and that the README keeps its
# two commands at the top.
set -euo pipefail
readme="README.md"
snippet="examples/readme_snippet.cc"

shown=$(awk '/^```cpp$/{inside=1; next} inside && /^```$/{exit} inside && !/^\/\/ #include/' "$readme")
source=$(awk '/README snippet begin/{inside=1; next} /README snippet end/{inside=0} inside' "$snippet" | sed 's/^  //')
if [ "$shown" != "$source" ]; then
  echo "readme_test: the README's C++ block differs from $snippet:" >&2
  diff <(echo "$shown") <(echo "$source") >&2 || true
  exit 1
fi

commands=$(awk '/^```bash$/{inside=1; next} inside && /^```$/{exit} inside' "$readme")
expected_main='bash scripts/setup.sh && bash scripts/main.sh'
expected_test='bash scripts/setup.sh && bash scripts/test.sh'
if [ "$(echo "$commands" | wc -l)" -ne 2 ] || ! grep -qF "$expected_main" <<<"$commands" || ! grep -qF "$expected_test" <<<"$commands"; then
  echo "readme_test: the README must start with exactly the main and the test command" >&2
  exit 1
fi
if ! grep -qF "$expected_test" .ci/run; then
  echo "readme_test: .ci/run does not run the README's test command" >&2
  exit 1
fi
echo "readme_test: README example and commands are in sync"
