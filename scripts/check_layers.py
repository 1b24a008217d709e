#!/usr/bin/env python3
"""Checks the dependency claims of docs/architecture.md against the code's #includes: the folders
of its layers table, in the table's order, include only themselves and the folders before them
("nothing points back up"), and every rule of its "Dependency rules (checked)" section, a list
item of the form "- `a/`, `b.h` never include `c/`, `d.h`: why", holds for every C++ and CUDA
file under the paths named first (a path ending in "/" is a folder, anything under it). Tests,
benchmarks and third_party/ are left out. Exit status 1, naming each include that breaks a
claim; scripts/test.sh runs it (one more case in the count).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = "docs/architecture.md"
INCLUDE = re.compile(r'^\s*#\s*include\s+"tinyddp/([^"]+)"', re.M)
TICKED = re.compile(r"`([^`]+)`")
SKIPPED = ("tests/", "bench/", "third_party/")


def layers(text):
    """The folders of the layers table, bottom up, up to and including examples/."""
    folders = []
    for line in text.split("\n"):
        m = re.match(r"\|\s*(?:`([\w]+/)`|\[([\w]+/)\]\([^)]*\))\s*\|", line)
        if m:
            folders.append(m.group(1) or m.group(2))
            if folders[-1] == "examples/":
                break
    return folders


def rules(text):
    """(sources, forbidden, line) for each rule of the checked section."""
    section = text.split("## Dependency rules (checked)", 1)
    if len(section) < 2:
        return []
    found = []
    for line in section[1].split("\n## ", 1)[0].split("\n"):
        if not line.startswith("- ") or " never include " not in line:
            continue
        left, right = line.split(" never include ", 1)
        found.append((TICKED.findall(left), TICKED.findall(right.split(":", 1)[0]), line.strip()))
    return found


def under(path, prefixes):
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in prefixes)


def main():
    text = open(os.path.join(ROOT, PAGE)).read()
    order = layers(text)
    checked_rules = rules(text)
    if len(order) < 2 or not checked_rules:
        print(f"check_layers: found {len(order)} layers and {len(checked_rules)} rules in {PAGE}; expected both")
        return 1
    files = subprocess.run(["git", "ls-files", "*.cc", "*.h", "*.cu", "*.cuh"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    problems, includes = [], 0
    for path in files:
        if path.startswith(SKIPPED):
            continue
        for target in INCLUDE.findall(open(os.path.join(ROOT, path), encoding="utf-8").read()):
            includes += 1
            mine, theirs = path.split("/")[0] + "/", target.split("/")[0] + "/"
            if mine in order and theirs in order and order.index(theirs) > order.index(mine):
                problems.append(f"{path} includes {target}: {theirs} is above {mine} in {PAGE}'s layers")
            for sources, forbidden, line in checked_rules:
                if under(path, sources) and under(target, forbidden):
                    problems.append(f"{path} includes {target}, against {PAGE}: {line}")
    for p in problems:
        print("check_layers: " + p)
    if problems:
        return 1
    print(f"check_layers: {includes} includes keep {PAGE}'s {len(order)} layers and {len(checked_rules)} rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
