#!/usr/bin/env python3
"""Draws docs/fsdp_memory.png from bench/fsdp_memory.sh's traces: the bytes of live CPU
tensors on rank 0 over one training step of the same model under DDP, ZeRO-1 and FSDP, one
panel each on one scale, the step's phases shaded; prints each run's peak and the level before
the step.

    bash bench/fsdp_memory.sh > docs/fsdp_memory.txt
    python3 scripts/plot_memory.py docs/fsdp_memory.txt -o docs/fsdp_memory.png

Needs matplotlib (Debian's python3-matplotlib, installed by scripts/setup.sh).
"""
import argparse
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

PHASES = {"forward": "#cfe2f3", "backward": "#fce5cd", "optimizer": "#d9ead3"}


def read(path):
    """[(label, {phase: t_ms}, [t_ms], [MiB]), ...] and the file's header line."""
    runs, header = [], ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            if line.startswith("== "):
                runs.append((line[3:], {}, [], []))
            elif line.startswith("# phase "):
                _, _, name, at = line.split()
                runs[-1][1][name] = float(at)
            elif line.startswith("#"):
                header = line.lstrip("# ")
            elif not line.startswith("t_ms"):
                t, mib = line.split(",")
                runs[-1][2].append(float(t))
                runs[-1][3].append(float(mib))
    if not runs:
        sys.exit(f"plot_memory: no traces in {path} (made by bash bench/fsdp_memory.sh)")
    return runs, header


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", help="bench/fsdp_memory.sh's output")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()
    runs, header = read(args.traces)
    top = 1.15 * max(max(mib) for _, _, _, mib in runs)
    right = max(max(t) for _, _, t, _ in runs)
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 2.3 * len(runs) + 0.8), sharex=True)
    for ax, (label, phases, t, mib) in zip(axes, runs):
        order = ["forward", "backward", "optimizer", "end"]
        for name, end in zip(order, order[1:]):
            if name in phases and end in phases:
                ax.axvspan(phases[name], phases[end], color=PHASES[name], lw=0)
                ax.text((phases[name] + phases[end]) / 2, top * 0.93, name, ha="center", va="top", fontsize=8)
        ax.plot(t, mib, color="#1f4e79", lw=1.3)
        peak = max(mib)
        before = mib[0]
        ax.axhline(peak, color="#999999", lw=0.8, ls="--")
        ax.text(right, peak, f"peak {peak:.0f} MiB ", ha="right", va="bottom", fontsize=8)
        ax.set_ylim(0, top)
        ax.set_ylabel("MiB", fontsize=9)
        ax.set_title(label, fontsize=9, loc="left")
        ax.grid(color="#eeeeee")
        print(f"plot_memory: {label}: {before:.0f} MiB before the step, peak {peak:.0f} MiB")
    axes[-1].set_xlabel("time in the step, ms (rank 0)")
    fig.suptitle("Live tensor memory of one rank over one step: MLP 1024-4096-4096-1024 (25.2 M parameters), "
                 "Adam, 2 ranks" + (f"\n({header})" if header else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"plot_memory: {len(runs)} traces -> {args.output}")


if __name__ == "__main__":
    main()
