#!/usr/bin/env python3
"""Draws docs/elastic_timeline.png from bench/elastic_recovery.py's stamped lines: the step the
job has reached (its progress lines) against the time since node 2 was lost, tinyddp's launcher
beside torchrun, for a cut link and for a killed node; the resume from the last checkpoint is
marked. Prints the times it draws.

    sudo /usr/bin/python3 bench/elastic_recovery.py --out docs/elastic_recovery.csv
    python3 scripts/plot_elastic_timeline.py docs/elastic_recovery.csv -o docs/elastic_timeline.png

Needs matplotlib (Debian's python3-matplotlib, installed by scripts/setup.sh).
"""
import argparse
import csv
import re
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

STEP = re.compile(r"step +(\d+)/\d+")
RESUMED = re.compile(r"resuming from \S+ after (\d+) steps")
IMPLS = {"tinyddp": ("tinyddp launch", "tab:blue"), "torchrun": ("torchrun (PyTorch 1.13, c10d)", "tab:orange")}
FAULTS = {"cut": "node 2's link cut", "kill": "node 2 killed (launcher and workers)"}


def read(path, impl, fault_name):
    """[(seconds since the fault, step)] of the progress lines of one run, and [(seconds, step)]
    of its resumes."""
    with open(path, encoding="utf-8") as f:
        rows = [(float(t), int(n), line) for i, f_, t, n, line in list(csv.reader(f))[1:]
                if i == impl and f_ == fault_name]
    fault = next((t for t, _, line in rows if line.startswith("FAULT")), None)
    if fault is None:
        sys.exit(f"plot_elastic_timeline: {path} has no FAULT line for {impl} {fault_name} (not run, or the job "
                 "ended before step 1000?)")
    steps = [(t - fault, int(m.group(1))) for t, _, line in rows if (m := STEP.search(line))]
    resumes = [(t - fault, int(m.group(1))) for t, _, line in rows if (m := RESUMED.search(line))]
    return steps, resumes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv", help="bench/elastic_recovery.py --out FILE")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    fig, axes = plt.subplots(1, len(FAULTS), figsize=(12, 4.2), sharey=True)
    for ax, (fault, title) in zip(axes, FAULTS.items()):
        for impl, (label, color) in IMPLS.items():
            steps, resumes = read(args.csv, impl, fault)
            shown = [(t, s) for t, s in steps if -3 <= t <= 25]
            ax.plot([t for t, _ in shown], [s for _, s in shown], ".", ms=2.5, color=color, label=label)
            for t, step in resumes:
                again = next((u for u, _ in steps if u > t), t)
                ax.annotate(f"training again\n{again:.1f} s", (again, step), textcoords="offset points",
                            xytext=(8, -28), color=color, fontsize=8, arrowprops={"arrowstyle": "->", "color": color})
                print(f"{impl} {fault}: resumed from step {step}, training again {again:.2f} s after the fault")
        ax.axvline(0, color="gray", lw=1, ls="--")
        ax.text(0.2, ax.get_ylim()[0], " node 2 lost", color="gray", fontsize=8, va="bottom")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("seconds since node 2 was lost")
        ax.set_xlim(-3, 25)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("step (progress lines, every 20 steps)")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle("An elastic job of 3 nodes loses one at step 1000 and goes on at 2 ranks from its checkpoint "
                 "(simulated cluster, --monitor_interval 0.5, last call 2 s, collectives time out after 10 s)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)


if __name__ == "__main__":
    main()
