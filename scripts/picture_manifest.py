#!/usr/bin/env python3
"""The record of how each picture of docs/ was made, and the check that none is stale.

docs/pictures.json holds, for every docs/*.png, the command that made it, the SHA-256 of the
picture, and the SHA-256 of each input it was made from (the scripts that ran, the data they
drew). The scripts that make pictures record them as they write them:

    python3 scripts/picture_manifest.py record docs/loss.png --made_by "bash scripts/make_pictures.sh" \\
        --inputs scripts/make_pictures.sh scripts/plot_loss.py

and tests/docs:pictures_test runs

    python3 scripts/picture_manifest.py check

which fails, naming the picture and the command to run again, when a picture has no record,
when the picture is not the one recorded (replaced or edited by hand), or when one of its
inputs changed since (a title or a setting edited in the script, new data): the picture no
longer shows what the committed script makes. It also fails when a page no longer contains a
sentence scripts/trace_facts.py makes from the committed traces (figures quoted from a trace
that was made again since), and when a page shows a picture whose record names what it shows
(`record ... --shows "MLP 64-128-10"`) without naming it in the paragraph before or after the
picture (a caption that speaks of another model).
"""
import argparse
import hashlib
import json
import os
import re
import sys

import trace_facts  # scripts/trace_facts.py: the sentences the pages quote from the traces

MANIFEST = "docs/pictures.json"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load():
    if not os.path.exists(MANIFEST):
        return {}
    with open(MANIFEST, encoding="utf-8") as f:
        return json.load(f)


def record(args):
    for path in [args.picture] + args.inputs:
        if not os.path.isfile(path):
            sys.exit(f"picture_manifest: {path} does not exist")
    manifest = load()
    manifest[args.picture] = {
        "made_by": args.made_by,
        "sha256": sha256(args.picture),
        "inputs": {path: sha256(path) for path in sorted(set(args.inputs))},
    }
    if args.shows:
        manifest[args.picture]["shows"] = args.shows
    with open(MANIFEST, "w", encoding="utf-8") as f:
        json.dump(dict(sorted(manifest.items())), f, indent=1)
        f.write("\n")
    print(f"picture_manifest: recorded {args.picture} ({len(args.inputs)} inputs)")


def problems(manifest, pictures):
    """Each stale or unrecorded picture, as a sentence that says what to run."""
    out = []
    for picture in pictures:
        entry = manifest.get(picture)
        if entry is None:
            out.append(f"{picture} has no record in {MANIFEST}: make it with a script that records it "
                       "(scripts/picture_manifest.py record)")
            continue
        again = f"run `{entry['made_by']}` again and commit its pictures and {MANIFEST}"
        if sha256(picture) != entry["sha256"]:
            out.append(f"{picture} is not the picture `{entry['made_by']}` made: {again}")
        for path, digest in entry["inputs"].items():
            if not os.path.isfile(path):
                out.append(f"{picture} was made from {path}, which no longer exists: {again}")
            elif sha256(path) != digest:
                out.append(f"{picture} is stale: {path} changed since it was made: {again}")
    for picture in sorted(set(manifest) - set(pictures)):
        out.append(f"{MANIFEST} records {picture}, which is not in docs/: remove its record")
    return out


def unquoted():
    """Each sentence of trace_facts that its page does not contain (line breaks and Markdown's
    emphasis aside)."""
    out = []
    for page, sentences in trace_facts.facts().items():
        with open(page, encoding="utf-8") as f:
            text = re.sub(r"\s+", " ", f.read())
        for sentence in sentences:
            if sentence not in text:
                out.append(f"{page} does not say what the committed trace says: \"{sentence}\" (run "
                           "python3 scripts/trace_facts.py and put its sentences where the page quotes the trace)")
    return out


def paragraph(lines, start, step):
    """The paragraph that begins next to lines[start] going by `step` (blank lines first skipped)."""
    i = start
    while 0 <= i < len(lines) and not lines[i].strip():
        i += step
    out = []
    while 0 <= i < len(lines) and lines[i].strip():
        out.append(lines[i])
        i += step
    return " ".join(out)


def uncaptioned(manifest):
    """Each place a page shows a picture whose record says what it shows ("shows") and neither
    the paragraph before the picture nor the one after names it."""
    out = []
    pages = ["README.md"] + sorted(os.path.join("docs", n) for n in os.listdir("docs") if n.endswith(".md"))
    for page in pages:
        with open(page, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for i, line in enumerate(lines):
            for match in re.finditer(r"!\[[^\]]*\]\(([^)]+\.png)\)", line):
                picture = os.path.join("docs", os.path.basename(match.group(1)))
                shows = manifest.get(picture, {}).get("shows")
                if not shows:
                    continue
                near = re.sub(r"\s+", " ", paragraph(lines, i - 1, -1) + " " + paragraph(lines, i + 1, 1))
                if shows.lower() not in near.lower():
                    out.append(f"{page}:{i + 1} shows {picture} but the text around it does not name what it "
                               f"shows, \"{shows}\" (its record in {MANIFEST}): say which model it is")
    return out


def check(_args):
    pictures = sorted(os.path.join("docs", name) for name in os.listdir("docs") if name.endswith(".png"))
    manifest = load()
    found = problems(manifest, pictures) + unquoted() + uncaptioned(manifest)
    for line in found:
        print(f"picture_manifest: {line}")
    if found:
        sys.exit(1)
    print(f"picture_manifest: all {len(pictures)} pictures of docs/ are what their recorded commands make, and the "
          "pages quote their traces as they are")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record a picture just made")
    rec.add_argument("picture")
    rec.add_argument("--made_by", required=True, help="the command that makes it, as a reader would run it")
    rec.add_argument("--inputs", nargs="+", required=True, help="the scripts and data it was made from")
    rec.add_argument("--shows", help="what it shows (a model's name), which the text around it must name")
    rec.set_defaults(run=record)
    chk = sub.add_parser("check", help="fail when a picture of docs/ is stale or unrecorded")
    chk.set_defaults(run=check)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
