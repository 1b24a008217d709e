#!/usr/bin/env python3
"""Draws docs/bucket_sweep.png from bench/bucket_sweep.sh's lines: DDP's step time and the share
of communication hidden behind backward against bucket_cap_mb, from one parameter per bucket to
one bucket for the whole model, on loopback and on a simulated 1 Gbit/s link (the median of the
rounds, with their range); prints the figures it draws.

    sudo bash bench/bucket_sweep.sh > docs/bucket_sweep.txt
    python3 scripts/plot_bucket_sweep.py docs/bucket_sweep.txt -o docs/bucket_sweep.png

Needs matplotlib (Debian's python3-matplotlib, installed by scripts/setup.sh).
"""
import argparse
import re
import statistics
import sys

import bench_lines  # noqa: E402 (scripts/bench_lines.py)
import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

LINE = re.compile(r"^link=(\S+) cap=([\d.]+) round=(\d+) RESULT model=\S+ mode=ddp buckets=(\d+) hidden=(\d+)% "
                  r"median_us=([\d.e+-]+)$")
LINKS = {"loopback": "loopback (2 local processes)", "1gbit": "2 simulated machines, 1 Gbit/s link"}


def read(path):
    """{link: {cap: [(buckets, hidden %, step ms), ...]}} and the file's header line."""
    matches, header = bench_lines.read(path, LINE, "bench/bucket_sweep.sh", "plot_bucket_sweep")
    runs = {}
    for match in matches:
        link, cap = match.group(1), float(match.group(2))
        if link not in LINKS:
            sys.exit(f"plot_bucket_sweep: {path}: unknown link {link!r} in {match.group(0)!r}")
        runs.setdefault(link, {}).setdefault(cap, []).append(
            (int(match.group(4)), int(match.group(5)), float(match.group(6)) / 1000.0))
    return runs, header


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="the output of bench/bucket_sweep.sh")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    args = parser.parse_args()
    runs, header = read(args.results)
    fig, (steps, hidden) = plt.subplots(1, 2, figsize=(12, 4.6))
    caps = sorted({cap for by_cap in runs.values() for cap in by_cap})
    buckets = {cap: next(r[0] for by_cap in runs.values() if cap in by_cap for r in by_cap[cap]) for cap in caps}
    for link in [name for name in LINKS if name in runs]:
        mine = [cap for cap in caps if cap in runs[link]]
        ms = [[r[2] for r in runs[link][cap]] for cap in mine]
        share = [[r[1] for r in runs[link][cap]] for cap in mine]
        median_ms = [statistics.median(v) for v in ms]
        errors = [[m - min(v) for m, v in zip(median_ms, ms)], [max(v) - m for m, v in zip(median_ms, ms)]]
        at = [caps.index(cap) for cap in mine]  # evenly spaced: the caps are far apart
        steps.errorbar(at, median_ms, yerr=errors, marker="o", capsize=3, label=LINKS[link])
        hidden.plot(at, [statistics.median(v) for v in share], marker="o", label=LINKS[link])
        for cap, m, h in zip(mine, median_ms, share):
            print(f"plot_bucket_sweep: {link}, bucket_cap_mb {cap:g} ({buckets[cap]} buckets): step {m:.1f} ms, "
                  f"hidden {statistics.median(h):.0f}%")
    for ax in (steps, hidden):
        ax.set_xticks(range(len(caps)))
        ax.set_xticklabels([f"{cap:g}\n({buckets[cap]} bucket{'s' if buckets[cap] > 1 else ''})" for cap in caps],
                           fontsize=8)
        ax.set_xlabel("bucket_cap_mb (and first_bucket_cap_mb)")
        ax.grid(color="#dddddd")
        ax.legend(fontsize=8)
    steps.set_ylim(bottom=0)
    steps.set_ylabel("DDP step, ms (median of the rounds; bars: their range)")
    steps.set_title("step time")
    hidden.set_ylim(0, 100)
    hidden.set_ylabel("communication hidden behind backward, %")
    hidden.set_title("overlap")
    fig.suptitle("Why buckets exist: the MLP 784-1024-1024-10 (7.4 MB of gradients), 2 ranks, bucket size swept" +
                 (f"\n({header})" if header else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"plot_bucket_sweep: {sum(len(v) for v in runs.values())} settings -> {args.output}")


if __name__ == "__main__":
    main()
