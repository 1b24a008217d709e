#!/usr/bin/env python3
"""Checks that every file docs/architecture.md names exists: its links (relative to docs/)
and the paths it writes out (`tests/ddp/scenario_test.cc`, tensor/backends/cpu/isa/, relative to the
workspace root). Run from anywhere; exit status 1, naming the missing ones, if any is missing.
scripts/test.sh runs it (one more case in the count).
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["docs/architecture.md"]
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")
WHOLE_LINK = re.compile(r"\[[^\]]*\]\([^)]*\)")  # its text names the target too
# A written-out path: folders and a file name with an extension, or a folder ending in "/".
PATH = re.compile(r"(?<![\w./\]-])((?:[\w-]+/)+(?:[\w-]+\.(?:cc|h|cu|cuh|py|sh|md|json|txt|bzl))?)(?![\w/-])")


def named(text):
    """(kind, path) pairs: links, then written-out paths outside links."""
    for m in LINK.finditer(text):
        if "://" not in m.group(1):
            yield "link", m.group(1)
    for m in PATH.finditer(WHOLE_LINK.sub(" ", text)):
        yield "path", m.group(1)


def main():
    missing, checked = [], 0
    for page in PAGES:
        text = open(os.path.join(ROOT, page)).read()
        for kind, target in named(text):
            base = os.path.dirname(os.path.join(ROOT, page)) if kind == "link" else ROOT
            path = os.path.normpath(os.path.join(base, target))
            checked += 1
            if not os.path.exists(path):
                missing.append(f"{page}: {target} ({kind}) does not exist")
    for line in missing:
        print(line)
    print(f"check_doc_paths: {checked} names in {', '.join(PAGES)}, {len(missing)} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
