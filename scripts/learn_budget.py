#!/usr/bin/env python3
"""How long docs/learn.md's first pass takes, counted from the page itself: its words of prose,
the lines of code it shows, and the lines of every function it links to (from the anchor's line
to the function's closing brace), at stated reading speeds; plus the programs it asks the
reader to run. The page states its time; --check fails when the stated time is not what the
counts give, or when the first pass exceeds 60 minutes.

    python3 scripts/learn_budget.py            # the counts, section by section
    python3 scripts/learn_budget.py --check    # tests/docs:learn_budget_test

A code link followed by "(glance" is one the page says to glance at on a first pass: it counts
a minute, not its lines. Speeds: 200 words of prose a minute, 15 lines of code a minute (C++ read closely, as the walk
asks: between a quick 20 and a careful 10), a minute for each command the page asks the reader
to run and for each picture, measurement or data file it asks them to glance at.
"""
import argparse
import math
import os
import re
import sys

WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 15
LIMIT_MINUTES = 60
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "learn.md")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
CODE_ANCHOR = re.compile(r"^\.\./(.+)#L(\d+)$")
# The page's own statement: "The first pass takes about N minutes"
STATED = re.compile(r"[Tt]he first pass\s+takes\s+about\s+(\d+)\s+minutes")
# A command the page asks the reader to run (a line of a code block that starts a built
# program): a minute each, to start it and read what it prints.
RUN = re.compile(r"^(?:\$ )?bazel-bin/")
MINUTES_PER_RUN = 1
# What the page asks the reader to glance at: docs/ddp.md's pictures and measurements, the
# data files it links, and the code links marked "(glance)": a minute each.
GLANCE = re.compile(r"docs/ddp\.md|\]\([^)\s]+\.(?:png|txt)\)")
MINUTES_PER_GLANCE = 1


def function_lines(path, line):
    """Lines from `line` (1-based) to the brace that closes the first one opened there."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    depth, opened = 0, False
    for number in range(line - 1, len(lines)):
        text = re.sub(r"//.*", "", lines[number])
        text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
        text = re.sub(r"'(\\.|[^'\\])*'", "''", text)
        for char in text:
            if char == "{":
                depth += 1
                opened = True
            elif char == "}":
                depth -= 1
        if opened and depth <= 0:
            return number - line + 2
        if not opened and text.rstrip().endswith(";"):
            return number - line + 2  # a declaration
    sys.exit(f"learn_budget: {path}#L{line}: no closing brace")


def sections(text):
    """[(title, body)] for the preamble and each '## ' section."""
    parts = re.split(r"^## ", text, flags=re.M)
    out = [("preamble", parts[0])]
    for part in parts[1:]:
        title, _, body = part.partition("\n")
        out.append((title.strip(), body))
    return out


def count(body, seen):
    """Prose words, shown code lines, newly linked functions and their lines, and run minutes."""
    shown, runs = 0, 0
    prose = []
    in_code = False
    for line in body.split("\n"):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            shown += 1
            runs += 1 if RUN.match(line) else 0
        else:
            prose.append(line)
    prose_text = LINK.sub(lambda m: m.group(1), "\n".join(prose))
    words = len(re.findall(r"\S+", prose_text))
    linked, linked_lines = 0, 0
    glances = len(GLANCE.findall("\n".join(prose)))
    joined = "\n".join(prose)
    for link in LINK.finditer(joined):
        anchor = CODE_ANCHOR.match(link.group(2))
        if not anchor or (anchor.group(1), anchor.group(2)) in seen:
            continue
        seen.add((anchor.group(1), anchor.group(2)))
        linked += 1
        if joined.startswith(" (glance", link.end()):
            glances += 1  # the page says to glance at it on a first pass: a minute, not its lines
        else:
            linked_lines += function_lines(anchor.group(1), int(anchor.group(2)))
    return words, shown, linked, linked_lines, runs, glances


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail unless the page states what the counts give")
    args = parser.parse_args()
    with open(PAGE, encoding="utf-8") as f:
        text = f.read()
    seen = set()
    total = [0] * 6
    minutes_total = 0.0
    print(f"{'section':40} {'words':>6} {'shown':>6} {'links':>6} {'linked':>7} {'runs':>5} {'glance':>6} "
          f"{'minutes':>8}")
    for title, body in sections(text):
        if title.startswith("Where to go next"):
            continue  # the reference pages: after the first pass
        counts = count(body, seen)
        minutes = (counts[0] / WORDS_PER_MINUTE + (counts[1] + counts[3]) / CODE_LINES_PER_MINUTE +
                   counts[4] * MINUTES_PER_RUN + counts[5] * MINUTES_PER_GLANCE)
        minutes_total += minutes
        total = [a + b for a, b in zip(total, counts)]
        print(f"{title[:40]:40} " + " ".join(f"{c:{w}}" for c, w in zip(counts, (6, 6, 6, 7, 5, 6))) +
              f" {minutes:8.1f}")
    print(f"{'first pass':40} " + " ".join(f"{c:{w}}" for c, w in zip(total, (6, 6, 6, 7, 5, 6))) +
          f" {minutes_total:8.1f}")
    print(f"(words of prose at {WORDS_PER_MINUTE} a minute; lines of code shown, and lines of the functions "
          f"linked, at {CODE_LINES_PER_MINUTE} a minute; {MINUTES_PER_RUN} minute per command to run and "
          f"{MINUTES_PER_GLANCE} per picture or data file to glance at; the first build is not counted: the "
          "page starts it first and is read meanwhile)")
    stated_minutes = math.ceil(minutes_total / 5) * 5
    print(f"The page should say: the first pass takes about {stated_minutes} minutes")
    if not args.check:
        return
    stated = STATED.findall(text)
    if len(stated) != 1:
        sys.exit(f"learn_budget: docs/learn.md must say once 'the first pass takes about N minutes', found {stated}")
    if int(stated[0]) != stated_minutes:
        sys.exit(f"learn_budget: docs/learn.md says {stated[0]} minutes; its counts give {minutes_total:.1f}, "
                 f"so it should say {stated_minutes}")
    if minutes_total > LIMIT_MINUTES:
        sys.exit(f"learn_budget: the first pass takes {minutes_total:.1f} minutes, over {LIMIT_MINUTES}")
    print("learn_budget: docs/learn.md states its time, within the limit")


if __name__ == "__main__":
    main()
