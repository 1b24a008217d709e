"""Reading the RESULT lines a bench script wrote (imported by the plot scripts of docs/)."""
import sys


def read(path, pattern, script, program):
    """The regex matches of every line of `path` but comments, and its first comment (the
    header bench scripts write: date, machine, command). Exits naming `program` and the line
    when one is not a line of `script`."""
    matches, header = [], ""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        sys.exit(f"{program}: cannot read {path}: {e}")
    for number, line in enumerate(lines, start=1):
        if line.startswith("#"):
            header = header or line.lstrip("# ")
            continue
        match = pattern.match(line.strip())
        if not match:
            sys.exit(f"{program}: {path} line {number}: not a line of {script}: {line!r}")
        matches.append(match)
    if not matches:
        sys.exit(f"{program}: {path} holds no results")
    return matches, header
