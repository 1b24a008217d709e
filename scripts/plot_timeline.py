#!/usr/bin/env python3
"""Draws one DDP iteration of a merged timeline (scripts/merge_timelines.py) as a PNG: per rank,
a compute row (forward, the loss, backward up to the last gradient, each gradient's copy into
its bucket, finalize, the optimizer step; what no event covers between the loss and backward's
first hook is drawn hatched as backward's start) and a row per bucket (its allreduce, from
launch to completion), labelled with the bucket's parameters and size, so that one sees the
allreduces run while backward still computes.

    python3 scripts/plot_timeline.py /tmp/tl.json -o docs/timeline.png [--iteration N [M ...]]

Without --iteration it draws a typical one: of median length among the later half. Several
iterations are drawn one above the other on one time scale (docs/rebuild.png: before and after
the bucket rebuild), each with its --panel_titles entry.

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
           "layer": "#8172b3", "loss": "#937860", "logged": "#bbbbbb", "optimizer": "#64b5cd",
           "setup": "#dd8452"}
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
    if name == "loss":
        return "loss"
    if name.startswith("loss logged"):
        return "logged"
    if name == "optimizer step":
        return "optimizer"
    return None


def bucket_labels(chosen, buckets):
    """Bucket b -> "8.weight, 8.bias, 6.weight (4136 KiB)": its parameters, in the order their
    gradients arrived, and its size, from the copies and the allreduce of the drawn iteration."""
    names = {b: [] for b in buckets}
    size = {}
    for e in sorted(chosen, key=lambda e: e["ts"]):
        copy = re.match(r"into bucket (\d+): (.+)", e["name"])
        if copy and e["pid"] == chosen[0]["pid"] and copy.group(2) not in names[int(copy.group(1))]:
            names[int(copy.group(1))].append(copy.group(2))
        reduced = re.match(r"allreduce bucket (\d+) \((\d+ KiB)\)", e["name"])
        if reduced:
            size[int(reduced.group(1))] = reduced.group(2)
    return {b: ", ".join(names[b]) + (f" ({size[b]})" if b in size else "") for b in buckets}


def backward_setup(chosen, rank):
    """(start, end) on `rank` of what no event covers between the end of the loss (or of its
    logging) and backward's start: the engine's walk of the graph before the first gradient."""
    mine = [e for e in chosen if e["pid"] == rank and e["ph"] == "X" and e["tid"] == 0]
    before = [e["ts"] + e["dur"] for e in mine if kind(e) in ("loss", "logged")]
    backward = [e["ts"] for e in mine if kind(e) == "backward"]
    if not before or not backward or backward[0] - max(before) < 50:  # under 50 us: nothing to see
        return None
    return max(before), backward[0]


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


def legend_handles(marked, layered, gap):
    """The legend: what each colour means (train's own spans when `marked`, SyncBatchNorm's row
    when `layered`, backward's start when a `gap` was drawn)."""
    return [Patch(color=COLOURS["forward"], label="forward"),
            Patch(color=COLOURS["backward"], alpha=0.55, label="backward (to the last gradient)"),
            Patch(color=COLOURS["copy"], label="gradient copied into its bucket (hook)"),
            Patch(color=COLOURS["allreduce"], label="allreduce of a bucket"),
            Patch(color=COLOURS["finalize"], label="finalize (wait, write .grad)"),
            *([Patch(color=COLOURS["loss"], label="loss"),
               Patch(color=COLOURS["logged"], label="loss logged (its mean over ranks: an allreduce)"),
               Patch(color=COLOURS["optimizer"], label="optimizer step")] if marked else []),
            *([Patch(facecolor="none", edgecolor=COLOURS["setup"], hatch="////",
                     label="backward starts (graph walk, before the first gradient)")] if gap else []),
            *([Patch(color=COLOURS["layer"], label="SyncBatchNorm's allgather (forward) / allreduce "
                     "(backward)")] if layered else []),
            plt.Line2D([], [], marker="v", linestyle="", color=COLOURS["launch"], label="bucket launched")]


def rows_of(chosen):
    """(rows, y_of): the rows top to bottom as (label, rank, tid), and each (rank, tid)'s y."""
    ranks = sorted({e["pid"] for e in chosen})
    layered = any(e["tid"] == LAYER_TID for e in chosen)
    rows = []
    for r in ranks:
        rows.append((f"rank {r}: compute", r, 0))
        if layered:
            rows.append((f"rank {r}: SyncBatchNorm", r, LAYER_TID))
        rows += [(f"rank {r}: bucket {b}", r, 1 + b) for b in buckets_of(chosen)]
    return rows, {(r, tid): len(rows) - 1 - k for k, (_, r, tid) in enumerate(rows)}


def buckets_of(chosen):
    return sorted({int(re.match(r"allreduce bucket (\d+)", e["name"]).group(1))
                   for e in chosen if e["name"].startswith("allreduce bucket")})


def draw(ax, chosen, iteration, title):
    """One iteration on `ax`; returns whether a gap before backward was drawn."""
    ranks = sorted({e["pid"] for e in chosen})
    buckets = buckets_of(chosen)
    rows, y_of = rows_of(chosen)
    t0 = min(e["ts"] for e in chosen)
    ms = lambda us: (us - t0) / 1000.0  # noqa: E731
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
    gaps = {r: backward_setup(chosen, r) for r in ranks}
    for r, gap in gaps.items():
        if gap:
            ax.broken_barh([(ms(gap[0]), (gap[1] - gap[0]) / 1000.0)], (y_of[(r, 0)] - 0.35, 0.7), facecolors="none",
                           edgecolor=COLOURS["setup"], hatch="////", linewidth=0.0)
    labels = bucket_labels(chosen, buckets)
    for r in ranks:
        for b in buckets:
            ax.text(0.003, y_of[(r, 1 + b)], labels[b], transform=ax.get_yaxis_transform(), va="center", fontsize=7,
                    color="#444444")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label for label, _, _ in reversed(rows)])
    for k in range(1, len(ranks)):
        ax.axhline(len(rows) - k * (len(rows) // len(ranks)) - 0.5, color="#999999", linewidth=0.8)
    ax.set_xlabel(f"milliseconds since iteration {iteration} began (one clock for all ranks)")
    ax.set_title(title)
    ax.grid(axis="x", color="#dddddd")
    ax.set_axisbelow(True)
    return any(gaps.values())


def plot(events, wanted, output, title, panel_titles):
    """Draws the iterations `wanted` (None: a typical one) one above the other, on one time scale."""
    iterations = sorted({e["args"]["iteration"] for e in events if e["name"] == "finalize"})
    if not iterations:
        fail("the timeline holds no finished iteration")
    wanted = wanted or [typical_iteration(events, iterations)]
    for iteration in wanted:
        if iteration not in iterations:
            fail(f"no iteration {iteration} (finished iterations: {iterations[0]}..{iterations[-1]})")
    if panel_titles and len(panel_titles) != len(wanted):
        fail(f"{len(panel_titles)} panel titles for {len(wanted)} iterations")
    chosen = [[e for e in events if e["args"]["iteration"] == it] for it in wanted]
    heights = [len(rows_of(c)[0]) for c in chosen]
    fig, axes = plt.subplots(len(wanted), 1, figsize=(11, sum(0.55 * h + 0.9 for h in heights) + 0.9), sharex=True,
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    gap = False
    for k, (ax, c, it) in enumerate(zip(axes[:, 0], chosen, wanted)):
        ranks = sorted({e["pid"] for e in c})
        default = (title or f"One DDP iteration on {len(ranks)} ranks: each bucket's allreduce starts while backward "
                   "still runs") if len(wanted) == 1 else f"iteration {it}"
        gap |= draw(ax, c, it, panel_titles[k] if panel_titles else default)
    if len(wanted) > 1:
        fig.suptitle(title or "DDP iterations")
    flat = [e for c in chosen for e in c]
    handles = legend_handles(any(kind(e) in ("loss", "optimizer") for e in flat),
                             any(e["tid"] == LAYER_TID for e in flat), gap)
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    legend_rows = (len(handles) + 2) // 3
    fig.set_figheight(fig.get_figheight() + 0.22 * max(0, legend_rows - 3))
    fig.tight_layout(rect=(0, (0.3 + 0.22 * legend_rows) / fig.get_figheight(), 1, 1))
    fig.savefig(output, dpi=110)
    ranks = sorted({e["pid"] for e in flat})
    print(f"plot_timeline: iteration {', '.join(map(str, wanted))}, {len(ranks)} ranks, "
          f"{len(buckets_of(flat))} buckets -> {output}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="a merged timeline from scripts/merge_timelines.py")
    parser.add_argument("-o", "--output", required=True, help="the PNG to write")
    parser.add_argument("--iteration", type=int, nargs="+",
                        help="which iterations, one panel each (default: the one of median length among the later "
                        "half)")
    parser.add_argument("--title", help="the picture's title")
    parser.add_argument("--panel_titles", nargs="+", help="a title per iteration")
    args = parser.parse_args()
    plot(load(args.trace), args.iteration, args.output, args.title, args.panel_titles)


if __name__ == "__main__":
    main()
