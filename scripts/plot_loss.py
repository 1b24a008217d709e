#!/usr/bin/env python3
"""Draws training loss curves from examples/train's --metrics CSVs ("step,loss") on one plot, and
says how far each run is from the first, step by step: a run on two ranks with DDP should give
the curve of one process on the same global batches.

    python3 scripts/plot_loss.py "one process=/tmp/one.csv" "2 ranks (DDP)=/tmp/two.csv" -o docs/loss.png

Needs matplotlib (Debian's python3-matplotlib, installed by scripts/setup.sh).
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

STYLES = ["-", "--", ":", "-."]


def fail(message):
    sys.exit(f"plot_loss: {message}")


def read(path):
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        fail(f"cannot read {path}: {e}")
    if not rows or rows[0] != ["step", "loss"]:
        fail(f"{path} is not a --metrics CSV (its header must be 'step,loss')")
    steps, losses = [], []
    for number, row in enumerate(rows[1:], start=2):
        try:
            steps.append(int(row[0]))
            losses.append(float(row[1]))
        except (ValueError, IndexError):
            fail(f"{path} line {number}: expected 'step,loss', got {','.join(row)!r}")
    if not steps:
        fail(f"{path} holds no steps")
    return steps, losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=PATH of a --metrics CSV, one per run")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--title", default="Training loss", help="the picture's title")
    args = parser.parse_args()
    runs = []
    for item in args.runs:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            fail(f"expected LABEL=PATH, got {item!r}")
        runs.append((label, *read(path)))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    _, first_steps, first_losses = runs[0]
    for k, (label, steps, losses) in enumerate(runs):
        if k > 0:
            if steps != first_steps:
                fail(f"{label!r} has other steps than {runs[0][0]!r}: the runs cannot be compared")
            gap = max(abs(a - b) for a, b in zip(losses, first_losses))
            label += f" (largest difference from {runs[0][0]}: {gap:.1e})"
            print(f"plot_loss: {runs[k][0]}: largest difference from {runs[0][0]}: {gap:.3e}")
        ax.plot(steps, losses, STYLES[k % len(STYLES)], linewidth=2.2 if k == 0 else 1.4, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (mean over the global batch)")
    ax.set_yscale("log")
    ax.set_title(args.title)
    ax.grid(color="#dddddd")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"plot_loss: {len(runs)} run(s) -> {args.output}")


if __name__ == "__main__":
    main()
