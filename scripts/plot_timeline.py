#!/usr/bin/env python3
"""Draws one DDP iteration of a merged timeline (scripts/merge_timelines.py) as a PNG: per rank,
a compute row (forward, backward up to the last gradient, each gradient's copy into its bucket,
finalize) and a row per bucket (its allreduce, from launch to completion), so that one sees
the allreduces run while backward still computes.

    python3 scripts/plot_timeline.py /tmp/tl.json -o docs/timeline.png [--iteration N]

Without --iteration it draws a typical one: of median length among the later half.

Needs matplotlib (Debian's python3-matplotlib, installed by scripts/setup.sh).
"""
import argparse
import json
import re
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLOURS = {"forward": "#4c72b0", "backward": "#dd8452", "copy": "#8c4a1c", "finalize": "#55a868",
           "allreduce": "#c44e52", "launch": "#222222",
           "layer": "#8172b3"}
LAYER_TID = 999  # ddp/timeline.h's kLayerCollectives: SyncBatchNorm's allgathers and allreduces


def fail(message):
    sys.exit(f"plot_timeline: {message}")


def kind(event):
    """The colour key of a span on the compute row, or None for events not drawn."""
    name = event["name"]
    if name == "forward":
        return "forward"
    if name.startswith("backward"):
        return "backward"
    if name.startswith("into bucket"):
        return "copy"
    if name == "finalize":
        return "finalize"
    if name.startswith("allreduce bucket"):
        return "allreduce"
    if name.startswith("SyncBatchNorm"):
        return "layer"
    return None


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"cannot read {path}: {e}")
    if "ranks" not in trace.get("otherData", {}):
        fail(f"{path} is not a merged timeline (run scripts/merge_timelines.py first)")
    return [e for e in trace["traceEvents"] if e.get("ph") in ("X", "i")]


def typical_iteration(events, iterations):
    """The iteration of median length (first forward to last finalize over all ranks) among the
    later half: past the first ones (bucket rebuild, warm-up), and not an outlier."""
    later = iterations[len(iterations) // 2:]
    span = {}
    for e in events:
        it = e["args"]["iteration"]
        if it in later:
            lo, hi = span.get(it, (float("inf"), float("-inf")))
            span[it] = (min(lo, e["ts"]), max(hi, e["ts"] + e.get("dur", 0)))
    by_length = sorted(later, key=lambda it: span[it][1] - span[it][0])
    return by_length[len(by_length) // 2]


def plot(events, iteration, output, title):
    iterations = sorted({e["args"]["iteration"] for e in events if e["name"] == "finalize"})
    if not iterations:
        fail("the timeline holds no finished iteration")
    if iteration is None:
        iteration = typical_iteration(events, iterations)
    if iteration not in iterations:
        fail(f"no iteration {iteration} (finished iterations: {iterations[0]}..{iterations[-1]})")
    chosen = [e for e in events if e["args"]["iteration"] == iteration]
    ranks = sorted({e["pid"] for e in chosen})
    buckets = sorted({int(re.match(r"allreduce bucket (\d+)", e["name"]).group(1))
                      for e in chosen if e["name"].startswith("allreduce bucket")})
    t0 = min(e["ts"] for e in chosen)
    ms = lambda us: (us - t0) / 1000.0  # noqa: E731

    layered = any(e["tid"] == LAYER_TID for e in chosen)
    rows = []  # (label, rank, tid), top to bottom
    for r in ranks:
        rows.append((f"rank {r}: compute", r, 0))
        if layered:
            rows.append((f"rank {r}: SyncBatchNorm", r, LAYER_TID))
        rows += [(f"rank {r}: bucket {b}", r, 1 + b) for b in buckets]
    y_of = {(r, tid): len(rows) - 1 - k for k, (_, r, tid) in enumerate(rows)}

    fig, ax = plt.subplots(figsize=(11, 0.55 * len(rows) + 1.8))
    for e in chosen:
        key, y = kind(e), y_of.get((e["pid"], e["tid"]))
        if y is None:
            continue
        if e["ph"] == "X" and key is not None:
            height = 0.35 if key == "copy" else 0.7
            ax.broken_barh([(ms(e["ts"]), max(e["dur"] / 1000.0, 0.002))], (y - height / 2, height),
                           facecolors=COLOURS[key], edgecolor="none", alpha=0.9 if key != "backward" else 0.55)
        elif e["ph"] == "i" and e["name"].endswith("launched"):
            b = int(re.match(r"bucket (\d+) launched", e["name"]).group(1))
            ax.plot([ms(e["ts"])], [y_of[(e["pid"], 1 + b)] + 0.42], marker="v", color=COLOURS["launch"], markersize=6)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label for label, _, _ in reversed(rows)])
    for k in range(1, len(ranks)):
        ax.axhline(len(rows) - k * (1 + layered + len(buckets)) - 0.5, color="#999999", linewidth=0.8)
    ax.set_xlabel(f"milliseconds since iteration {iteration} began (one clock for all ranks)")
    ax.set_title(title or f"One DDP iteration on {len(ranks)} ranks: each bucket's allreduce starts while backward "
                 "still runs")
    ax.grid(axis="x", color="#dddddd")
    ax.set_axisbelow(True)
    fig.legend(handles=[Patch(color=COLOURS["forward"], label="forward"),
                       Patch(color=COLOURS["backward"], alpha=0.55, label="backward (to the last gradient)"),
                       Patch(color=COLOURS["copy"], label="gradient copied into its bucket (hook)"),
                       Patch(color=COLOURS["allreduce"], label="allreduce of a bucket"),
                       Patch(color=COLOURS["finalize"], label="finalize (wait, write .grad)"),
                       *([Patch(color=COLOURS["layer"], label="SyncBatchNorm's allgather (forward) / allreduce "
                                "(backward)")] if layered else []),
                       plt.Line2D([], [], marker="v", linestyle="", color=COLOURS["launch"], label="bucket launched")],
               loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.9 / fig.get_figheight(), 1, 1))
    fig.savefig(output, dpi=110)
    print(f"plot_timeline: iteration {iteration}, {len(ranks)} ranks, {len(buckets)} buckets -> {output}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a merged timeline from scripts/merge_timelines.py")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--iteration", type=int,
                        help="which iteration (default: the one of median length among the later half)")
    parser.add_argument("--title", help="the picture's title")
    args = parser.parse_args()
    plot(load(args.trace), args.iteration, args.output, args.title)


if __name__ == "__main__":
    main()
