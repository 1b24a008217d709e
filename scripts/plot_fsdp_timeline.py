#!/usr/bin/env python3
"""Draws one fully_shard iteration of a merged timeline (examples/train --fsdp --timeline, then
scripts/merge_timelines.py) as a PNG: per rank, a compute row (each unit's forward and backward;
the root's, which hold the others, as a pale band behind them; ticks where a unit's full
parameters are freed), an all-gather row (each unit's gather from issue to completion, hatched
when it was a prefetch issued while another unit computed) and a reduce-scatter row (from
launch, as the unit's backward ends, to completion), so that one sees the gathers travel
while the previous unit computes.

    python3 scripts/plot_fsdp_timeline.py /tmp/fsdp.json -o docs/timeline_fsdp.png [--iteration N]

Without --iteration it draws a typical training iteration: of median length among the later
half of those with a backward.

Needs matplotlib (Debian's python3-matplotlib, installed by scripts/setup.sh).
"""
import argparse
import re

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from plot_timeline import fail, load  # noqa: E402 (scripts/plot_timeline.py)

COLOURS = {"forward": "#4c72b0", "backward": "#dd8452", "gather": "#55a868", "reduce": "#c44e52", "root": "#e8e8e8"}
SPAN = re.compile(r"^(forward|backward|all-gather|reduce-scatter) (\S+)( \((.+)\))?$")


def parse(event):
    """(kind, unit, detail) of a span's name."""
    m = SPAN.match(event["name"])
    return (m.group(1), m.group(2), m.group(4) or "") if m else (None, None, "")


def training_iterations(events):
    return sorted({e["args"]["iteration"] for e in events if e["name"].startswith("reduce-scatter ")})


def typical(events, iterations):
    later = iterations[len(iterations) // 2:]
    length = {}
    for it in later:
        mine = [e for e in events if e["args"]["iteration"] == it]
        length[it] = max(e["ts"] + e.get("dur", 0) for e in mine) - min(e["ts"] for e in mine)
    ordered = sorted(later, key=lambda it: length[it])
    return ordered[len(ordered) // 2]


def draw(events, iteration, output, title):
    chosen = [e for e in events if e["args"]["iteration"] == iteration]
    ranks = sorted({e["pid"] for e in chosen})
    t0 = min(e["ts"] for e in chosen)
    rows = [(r, row) for r in ranks for row in ("compute", "all-gather", "reduce-scatter")]
    y = {key: len(rows) - 1 - i for i, key in enumerate(rows)}
    # The root: the unit whose forward span holds every other's.
    forwards = [e for e in chosen if parse(e)[0] == "forward"]
    root = max(forwards, key=lambda e: e["dur"]) if forwards else None
    root_unit = parse(root)[1] if root else None
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(rows) + 1.9))
    for e in chosen:
        kind, unit, detail = parse(e)
        row, x = e["pid"], (e["ts"] - t0) / 1000.0
        if e["ph"] == "i":
            if e["name"].startswith("free "):
                ax.plot([x, x], [y[(row, "compute")] - 0.38, y[(row, "compute")] - 0.2], color="#222222", lw=0.8)
            continue
        width = e["dur"] / 1000.0
        if kind in ("forward", "backward"):
            is_root = unit == root_unit
            ax.barh(y[(row, "compute")], width, left=x, height=0.75 if is_root else 0.5,
                    color=COLOURS["root"] if is_root else COLOURS[kind], edgecolor="white" if not is_root else "none",
                    lw=0.5, zorder=1 if is_root else 2)
            if not is_root and width > 1.5:
                ax.text(x + width / 2, y[(row, "compute")], unit, ha="center", va="center", fontsize=7, color="white",
                        zorder=3)
        elif kind in ("all-gather", "reduce-scatter"):
            key = "gather" if kind == "all-gather" else "reduce"
            ax.barh(y[(row, kind)], width, left=x, height=0.5, color=COLOURS[key], edgecolor="white", lw=0.5,
                    hatch="///" if "prefetched" in detail else None)
            if width > 1.5:
                ax.text(x + width / 2, y[(row, kind)], unit, ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks([y[k] for k in rows])
    ax.set_yticklabels([f"rank {r}: {row}" for r, row in rows], fontsize=8)
    ax.set_xlabel("ms since the iteration's first event")
    ax.grid(axis="x", color="#eeeeee")
    ax.set_title(title, fontsize=10)
    handles = [Patch(color=COLOURS["forward"], label="a unit's forward"),
               Patch(color=COLOURS["backward"], label="a unit's backward"),
               Patch(color=COLOURS["root"], label=f"the root's ({root_unit}) forward / backward, around the others"),
               Patch(facecolor=COLOURS["gather"], hatch="///", edgecolor="white",
                     label="all-gather, prefetched (issued while another unit computed)"),
               Patch(color=COLOURS["gather"], label="all-gather, issued when needed"),
               Patch(color=COLOURS["reduce"], label="reduce-scatter of a unit's gradients"),
               plt.Line2D([], [], color="#222222", lw=0.8, label="full parameters freed")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 1.0 / fig.get_figheight(), 1, 1))
    fig.savefig(output, dpi=110)
    print(f"plot_fsdp_timeline: iteration {iteration}, {len(ranks)} ranks -> {output}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a merged timeline from scripts/merge_timelines.py")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--iteration", type=int, help="which iteration (default: a typical training one)")
    parser.add_argument("--title", default="One fully_shard iteration", help="the picture's title")
    args = parser.parse_args()
    events = load(args.trace)
    iterations = training_iterations(events)
    if not iterations:
        fail("the timeline holds no iteration with a backward (no reduce-scatter)")
    iteration = args.iteration if args.iteration is not None else typical(events, iterations)
    if iteration not in iterations:
        fail(f"no training iteration {iteration} ({iterations[0]}..{iterations[-1]} have a backward)")
    draw(events, iteration, args.output, args.title)


if __name__ == "__main__":
    main()
