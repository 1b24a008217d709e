#!/usr/bin/env python3
"""The size rule of tinyddp's sources: no C++ or CUDA file over 450 lines, and no function body
over 80 lines (the lines between a definition's opening and closing brace; its parameter list
does not count). Prints each file and function that breaks it and exits 1; run by
scripts/test.sh as one counted case.

Functions are found in clang-formatted code (scripts/check_format.sh): a definition starts at
column 0 (namespaces do not indent), its signature may continue on indented lines, its body
opens with "{" at the end of a line and closes with "}" alone at column 0. Tests' TEST_CASE
bodies count as functions. third_party/ is left out.
"""
import re
import subprocess
import sys

MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80
NOT_FUNCTIONS = re.compile(r"^(namespace|class|struct|enum|union|extern|template\s*<[^>]*>\s*(class|struct)\b|#|//|\})")


def long_functions(lines):
    """(line number, body lines, first line) of each function body over the limit."""
    found = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line and not line[0].isspace() and "(" in line and not NOT_FUNCTIONS.match(line) \
                and "=" not in line.split("(")[0]:
            k = i  # the signature's last line: the one that opens the body, unless it ends first
            while k < len(lines) and k - i < 12 and not lines[k].rstrip().endswith(("{", ";", "}")):
                k += 1
            if k < len(lines) and lines[k].rstrip().endswith("{"):
                end = k + 1
                while end < len(lines) and lines[end] != "}" and not lines[end].startswith(("};", "})")):
                    end += 1
                body = end - k - 1
                if body > MAX_FUNCTION_LINES:
                    found.append((i + 1, body, line.strip()))
                i = end
        i += 1
    return found


def main():
    files = subprocess.run(["git", "ls-files", "*.cc", "*.h", "*.cu", "*.cuh"], capture_output=True, text=True,
                           check=True).stdout.split()
    files = [f for f in files if not f.startswith("third_party/")]
    if not files:
        print("check_size: no C++ files found (not a git checkout?)")
        return 2
    problems = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        count = len(lines) - (1 if lines and lines[-1] == "" else 0)
        if count > MAX_FILE_LINES:
            problems.append(f"{path}: {count} lines (at most {MAX_FILE_LINES})")
        for number, body, first in long_functions(lines):
            problems.append(f"{path}:{number}: a function of {body} lines (at most {MAX_FUNCTION_LINES}): {first[:80]}")
    for p in problems:
        print("check_size: " + p)
    if problems:
        return 1
    print(f"check_size: all {len(files)} C++ and CUDA files within {MAX_FILE_LINES} lines, "
          f"functions within {MAX_FUNCTION_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
