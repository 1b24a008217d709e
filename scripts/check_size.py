#!/usr/bin/env python3
"""The size rule of tinyddp's sources: no C++ or CUDA file over 450 lines, and no function body
over 80 lines (the lines between a body's opening and closing brace; its parameter list does
not count). Prints each file and function that breaks it and exits 1; run by scripts/test.sh as
one counted case.

Every function body counts, wherever it is: free functions, member functions defined inside a
class, constructors (after their initializer list) and lambdas; a lambda inside a function
counts on its own and in the function around it. A body is a "{" that follows a parameter list
(")", then perhaps const, override, noexcept, mutable, a trailing return type) whose name is
not if, for, while, switch or catch, or that follows a lambda's capture list ("]"). Comments,
strings and character literals are skipped. Tests' TEST_CASE bodies count as functions.
third_party/ is left out.
"""
import re
import subprocess
import sys

MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 80
CONTROL = {"if", "for", "while", "switch", "catch", "sizeof", "decltype", "alignof", "static_assert", "return"}
SPECIFIERS = re.compile(r"(\s*(const|override|final|noexcept(\s*\([^()]*\))?|mutable|constexpr|&|&&|"
                        r"->\s*[\w:<>,\s*&]+?))*\s*$")


def code_only(text):
    """`text` with comments, strings and character literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            close = ")" + (m.group(1) if m else "") + '"'
            j = text.find(close, i + 2)
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def opens_body(code, brace):
    """Whether the "{" at `brace` opens a function or lambda body."""
    before = SPECIFIERS.sub("", code[:brace].rstrip())
    if before.endswith("]"):
        return True  # [&] { ... }
    if not before.endswith(")"):
        return False
    depth, k = 0, len(before) - 1
    while k >= 0:  # the "(" that matches
        if before[k] == ")":
            depth += 1
        elif before[k] == "(":
            depth -= 1
            if depth == 0:
                break
        k -= 1
    name = re.search(r"([\w\]>]*)\s*$", before[:max(k, 0)])
    word = name.group(1) if name else ""
    return word not in CONTROL and word != ""


def long_functions(text):
    """(line number, body lines, first line) of each function body over the limit."""
    code = code_only(text)
    lines = text.split("\n")
    found, stack = [], []
    line = 0
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            stack.append((line, opens_body(code, i)))
        elif c == "}" and stack:
            start, is_body = stack.pop()
            body = line - start - 1
            if is_body and body > MAX_FUNCTION_LINES:
                found.append((start + 1, body, lines[start].strip()))
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
            text = f.read()
        lines = text.split("\n")
        count = len(lines) - (1 if lines and lines[-1] == "" else 0)
        if count > MAX_FILE_LINES:
            problems.append(f"{path}: {count} lines (at most {MAX_FILE_LINES})")
        for number, body, first in long_functions(text):
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
