#!/usr/bin/env python3
"""Draws docs/data_parallel.png from bench/data_parallel_compare.sh's RESULT lines: the training
step of one process, of DataParallel over 2 CPU replicas (its phases stacked: scatter,
replicate, forward, gather and loss, backward, optimizer) and of DDP over 2 processes, the
median of the rounds for each.

    bash bench/data_parallel_compare.sh > /tmp/dp.txt
    python3 scripts/plot_data_parallel.py /tmp/dp.txt -o docs/data_parallel.png

Needs matplotlib (Debian's python3-matplotlib, installed by scripts/setup.sh).
"""
import argparse
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

PHASES = ["scatter", "replicate", "forward", "gather", "backward", "optimizer"]


def fail(message):
    sys.exit(f"plot_data_parallel: {message}")


def read(path):
    """{(mode, ...): [fields of each RESULT line]} from the file."""
    runs = {"local": [], "dp": [], "ddp": []}
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    for line in lines:
        if not line.startswith("RESULT "):
            continue
        fields = dict(part.split("=", 1) for part in line.split()[1:] if "=" in part)
        if fields.get("mode") in runs:
            runs[fields["mode"]].append(fields)
    for mode, found in runs.items():
        if not found:
            fail(f"{path} has no RESULT line of mode={mode}")
    return runs


def median(rows, key):
    try:
        return statistics.median(float(r[key]) for r in rows) / 1000.0  # ms
    except KeyError:
        fail(f"a RESULT line lacks {key}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    runs = read(args.results)
    fig, ax = plt.subplots(figsize=(9.5, 3.6))
    labels = ["one process\n(batch 128)", "DataParallel\n2 CPU replicas (threads)", "DDP\n2 processes (64 each)"]
    ax.barh(0, median(runs["local"], "median_us"), color="0.6")
    left = 0.0
    colors = plt.get_cmap("tab10").colors
    for i, phase in enumerate(PHASES):
        width = median(runs["dp"], f"{phase}_us")
        ax.barh(1, width, left=left, color=colors[i], label=phase)
        left += width
    ax.barh(2, median(runs["ddp"], "median_us"), color="0.3")
    ax.set_yticks([0, 1, 2])
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.set_xlabel("ms per training step (median of the rounds)")
    ax.set_title("MLP 784-1024-1024-10, global batch 128: one step three ways")
    ax.legend(title="DataParallel's phases", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


if __name__ == "__main__":
    main()
