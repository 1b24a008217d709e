#!/usr/bin/env python3
"""Counts Catch2 test cases from a `bazel test` run.

Usage: count_tests.py BAZEL_OUTPUT [--extra STATUS:NAME ...]
       (run from the workspace root, right after `bazel test`)

For every target in the run's summary ("//pkg:name  PASSED in 0.1s", "(cached) PASSED",
"FAILED", "FAILED TO BUILD", ...) it reads bazel-testlogs/<pkg>/<name>/test.log and takes
Catch2's closing summary ("All tests passed (A assertions in N test cases)" or
"test cases: N | P passed | F failed"). Cases that printed a "[tinyddp-skip]" marker move
from passed to skipped. A target without a Catch2 summary (it did not build, crashed or
timed out) counts as one failed case; a passing target that is not a Catch2 binary (an
sh_test) counts as one passed case. Each --extra adds one case run outside Bazel's tests
(STATUS is passed, failed or skipped; scripts/test.sh's downstream workspace). Prints "N passed, N failed, N skipped" last and exits
1 when anything failed.
"""
import os
import re
import sys

STATUS = re.compile(r"^(//\S+)\s+(?:\(cached\) )?(PASSED|FAILED TO BUILD|FAILED|FLAKY|TIMEOUT|NO STATUS|SKIPPED)\b",
                    re.MULTILINE)
ALL_PASSED = re.compile(r"All tests passed \((\d+) assertions? in (\d+) test cases?\)")
CASES = re.compile(r"^test cases:\s*(\d+)\s*\|(.*)$", re.MULTILINE)
SKIP = re.compile(r"^\[tinyddp-skip\] ", re.MULTILINE)


def count_log(target, status):
    """(passed, failed, skipped, problem) for one target's test.log."""
    package, _, name = target.lstrip("/").partition(":")
    log = os.path.join("bazel-testlogs", package, name, "test.log")
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return 0, 1, 0, f"{target}: no test log at {log}"
    skipped = len(SKIP.findall(text))
    match = ALL_PASSED.search(text)
    if match:
        return int(match.group(2)) - skipped, 0, skipped, None
    matches = CASES.findall(text)
    if matches:
        _, rest = matches[-1]
        passed = re.search(r"(\d+) passed", rest)
        failed = re.search(r"(\d+) failed", rest)
        p = int(passed.group(1)) if passed else 0
        f = int(failed.group(1)) if failed else 0
        return p - skipped, f, skipped, None
    if status == "PASSED":  # not a Catch2 binary (e.g. an sh_test): one case that passed
        return 1, 0, 0, None
    return 0, 1, 0, f"{target}: {status} with no Catch2 summary in {log} (crashed or timed out?)"


def main():
    args = sys.argv[1:]
    extras = []
    while len(args) >= 3 and args[-2] == "--extra":
        extras.insert(0, args[-1])
        args = args[:-2]
    if len(args) != 1 or any(e.partition(":")[0] not in ("passed", "failed", "skipped") for e in extras):
        print(__doc__)
        return 2
    with open(args[0], encoding="utf-8", errors="replace") as f:
        output = f.read()
    statuses = dict(STATUS.findall(output))
    passed = failed = skipped = 0
    if not statuses:
        print("count_tests: no test results in the bazel output")
        failed = 1
    for target, status in sorted(statuses.items()):
        if status == "SKIPPED":  # incompatible with this configuration
            skipped += 1
            continue
        if status in ("FAILED TO BUILD", "NO STATUS"):
            print(f"{target}: {status}")
            failed += 1
            continue
        p, f, s, problem = count_log(target, status)
        if status in ("FAILED", "TIMEOUT") and f == 0:
            problem, f = problem or f"{target}: {status} although Catch2 reported no failure", 1
        passed, failed, skipped = passed + p, failed + f, skipped + s
        if problem:
            print(problem)
    for extra in extras:
        status, _, name = extra.partition(":")
        if status == "passed":
            passed += 1
        elif status == "skipped":
            skipped += 1
        else:
            failed += 1
            print(f"{name}: FAILED")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
