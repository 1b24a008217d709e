#!/usr/bin/env python3
"""Draws docs/ring_bandwidth.png from bench/ring_bandwidth.sh's lines: the ring allreduce's bus
bandwidth against the message size on 2, 4 and 8 simulated machines, one panel per link rate,
with the link rate drawn as the line the bus bandwidth cannot cross; prints each run's share of
the wire at the largest size.

    sudo bash bench/ring_bandwidth.sh > docs/ring_bandwidth.txt
    python3 scripts/plot_ring.py docs/ring_bandwidth.txt -o docs/ring_bandwidth.png

Needs matplotlib (Debian's python3-matplotlib, installed by scripts/setup.sh).
"""
import argparse
import re

import bench_lines  # noqa: E402 (scripts/bench_lines.py)
import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

LINE = re.compile(r"^nodes=(\d+) rate=(\d+)gbit RESULT op=allreduce bytes=(\d+) median_us=([\d.e+-]+) "
                  r"algbw_gbps=([\d.e+-]+) busbw_gbps=([\d.e+-]+)$")


def read(path):
    """{(gbit, nodes): [(bytes, busbw GB/s), ...]} and the file's header line."""
    matches, header = bench_lines.read(path, LINE, "bench/ring_bandwidth.sh", "plot_ring")
    runs = {}
    for match in matches:
        nodes, gbit, size = int(match.group(1)), int(match.group(2)), int(match.group(3))
        runs.setdefault((gbit, nodes), []).append((size, float(match.group(6))))
    return runs, header


def label_size(size):
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="the output of bench/ring_bandwidth.sh")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    args = parser.parse_args()
    runs, header = read(args.results)
    rates = sorted({gbit for gbit, _ in runs})
    fig, axes = plt.subplots(1, len(rates), figsize=(6 * len(rates), 4.6), squeeze=False)
    for ax, gbit in zip(axes[0], rates):
        wire = gbit / 8.0  # GB/s
        for nodes in sorted(n for g, n in runs if g == gbit):
            points = sorted(runs[(gbit, nodes)])
            sizes = [s for s, _ in points]
            bus = [b for _, b in points]
            share = bus[-1] / wire
            print(f"plot_ring: {gbit} Gbit/s, {nodes} nodes: {bus[-1]:.3f} GB/s at {label_size(sizes[-1])}, "
                  f"{100 * share:.0f}% of the wire")
            ax.plot(sizes, bus, marker="o", label=f"{nodes} nodes ({100 * share:.0f}% of the wire at "
                    f"{label_size(sizes[-1])})")
        ax.axhline(wire, color="#444444", linestyle="--", linewidth=1.0, label=f"the link: {wire:g} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([label_size(s) for s in sizes])
        ax.set_ylim(0, wire * 1.15)
        ax.set_xlabel("allreduce size (float32)")
        ax.set_ylabel("bus bandwidth, GB/s  (bytes / time x 2 (k-1) / k)")
        ax.set_title(f"{gbit} Gbit/s links")
        ax.grid(color="#dddddd")
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("tinyddp's allreduce on simulated machines, one rank each (the TCP ring above 64 KiB; "
                 "below, one pair exchange or Gloo's chunked ring)" +
                 (f"\n({header})" if header else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"plot_ring: {len(runs)} runs -> {args.output}")


if __name__ == "__main__":
    main()
