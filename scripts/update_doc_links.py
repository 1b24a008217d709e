#!/usr/bin/env python3
"""Keeps the line numbers of the docs' code links true: a link [`Name`](path/file.cc#L123) in
README.md or docs/*.md points at the line that defines Name, and this script moves the number to
wherever that definition now is. tests/docs/links_test.cc fails when a linked line no longer
holds the name; run this then:

    python3 scripts/update_doc_links.py          # rewrite the numbers in place
    python3 scripts/update_doc_links.py --check  # only list the stale ones (exit status 1 if any)

Name is a function (`Reducer::autograd_hook`, `hooks::allreduce`) or a class or struct
(`Reducer`); the definition is found by its name followed by "(" on a line that does not end
with ";" (a definition, not a declaration or a call), or by "class Name" / "struct Name".
"""
import argparse
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"\[`([A-Za-z_][\w:]*)(?:\(\))?`\]\(([^)#\s]+)#L(\d+)\)")


def definition_line(lines, name):
    """1-based line of `name`'s definition in `lines`, or None."""
    last = name.split("::")[-1]
    tiers = [
        re.compile(r"^\s*(?:template\s*<[^>]*>\s*)?(?:class|struct)\s+" + re.escape(last) + r"\b(?!.*;\s*$)"),
        re.compile(r"(?<![\w:])" + re.escape(name) + r"\s*\((?!.*;\s*$)"),
        re.compile(r"^\s*[\w:<>,\*&\s]*[\s\*&]" + re.escape(last) + r"\s*\((?!.*;\s*$)"),
    ]
    for tier in tiers:
        for number, line in enumerate(lines, start=1):
            if tier.search(line) and not line.lstrip().startswith(("//", "return ", "if ", "for ", "while ")):
                return number
    return None


def docs():
    return [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="list stale links without changing anything")
    args = parser.parse_args()
    stale, missing = [], []
    for doc in docs():
        with open(doc, encoding="utf-8") as f:
            text = f.read()

        def fix(match):
            name, target, number = match.group(1), match.group(2), int(match.group(3))
            path = os.path.normpath(os.path.join(os.path.dirname(doc), target))
            try:
                with open(path, encoding="utf-8") as f:
                    lines = f.read().split("\n")
            except OSError:
                missing.append(f"{os.path.relpath(doc, ROOT)}: {target} does not exist")
                return match.group(0)
            found = definition_line(lines, name)
            if found is None:
                missing.append(f"{os.path.relpath(doc, ROOT)}: no definition of {name} in {target}")
                return match.group(0)
            if found != number:
                stale.append(f"{os.path.relpath(doc, ROOT)}: {name} is at {target}#L{found}, not #L{number}")
            return match.group(0).replace(f"#L{number})", f"#L{found})")

        fixed = LINK.sub(fix, text)
        if fixed != text and not args.check:
            with open(doc, "w", encoding="utf-8") as f:
                f.write(fixed)
    for line in missing + stale:
        print(line)
    if missing or (args.check and stale):
        sys.exit(1)
    if not args.check:
        print(f"update_doc_links: {len(stale)} link(s) moved")


if __name__ == "__main__":
    main()
