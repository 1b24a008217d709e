#!/usr/bin/env python3
"""Draws training loss curves from examples/train's --metrics CSVs ("step,loss") and, in a second
panel, each run's difference from the first, step by step: a run on two ranks with DDP should
give the curve of one process on the same global batches (a difference of float32 rounding),
and runs that reduce gradients wrongly on purpose (--wrong: summed instead of averaged, or not
sent at all) show what the averaging is for.

    python3 scripts/plot_loss.py "one process=/tmp/one.csv" "2 ranks (DDP)=/tmp/two.csv" \
        --wrong "2 ranks, gradients summed=/tmp/sum.csv" -o docs/loss.png

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


FLOOR = 1e-9  # a difference of exactly 0 is drawn here on the log scale


def parse_runs(items, wrong):
    runs = []
    for item in items:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            fail(f"expected LABEL=PATH, got {item!r}")
        runs.append((label, *read(path), wrong))
    return runs


def plot(runs, output, title):
    fig, (curves, gaps) = plt.subplots(1, 2, figsize=(12, 4.8))
    first_label, first_steps, first_losses, _ = runs[0]
    right, wrong = 0, 0
    for k, (label, steps, losses, is_wrong) in enumerate(runs):
        style = dict(linestyle=(0, (4, 2)) if is_wrong else STYLES[right % len(STYLES)],
                     linewidth=2.2 if k == 0 else 1.4, color=f"C{3 + wrong}" if is_wrong else f"C{right}")
        curves.plot(steps, losses, label=label, **style)
        if is_wrong:
            wrong += 1
        else:
            right += 1
        if k == 0:
            continue
        if steps != first_steps:
            fail(f"{label!r} has other steps than {first_label!r}: the runs cannot be compared")
        diffs = [max(abs(a - b), FLOOR) for a, b in zip(losses, first_losses)]
        largest = max(abs(a - b) for a, b in zip(losses, first_losses))
        print(f"plot_loss: {label}: largest difference from {first_label}: {largest:.3e}")
        gaps.plot(steps, diffs, label=f"{label} (largest {largest:.1e})", **dict(style, linewidth=1.0))
    curves.set_xlabel("step")
    curves.set_ylabel("loss (mean over the global batch)")
    curves.set_yscale("log")
    curves.set_title("training loss")
    gaps.set_xlabel("step")
    gaps.set_ylabel(f"|loss - loss of {first_label}|  (0 drawn at {FLOOR:.0e})")
    gaps.set_yscale("log")
    gaps.set_title(f"difference from {first_label}, step by step")
    for ax in (curves, gaps):
        ax.grid(color="#dddddd")
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    print(f"plot_loss: {len(runs)} run(s) -> {output}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=PATH of a --metrics CSV, one per run; the first is the reference")
    parser.add_argument("--wrong", nargs="*", default=[], help="LABEL=PATH of runs that reduce wrongly on purpose (dashed)")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--title", default="Training loss", help="the picture's title")
    args = parser.parse_args()
    plot(parse_runs(args.runs, False) + parse_runs(args.wrong, True), args.output, args.title)


if __name__ == "__main__":
    main()
