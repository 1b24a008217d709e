#!/usr/bin/env python3
"""Merges the per-rank DDP timelines (or fully_shard's: examples/train --fsdp --timeline) into one
Chrome trace, a process per rank and in it a row for compute and one per bucket (fully_shard:
one for all-gathers, one for reduce-scatters), for Perfetto (ui.perfetto.dev) or chrome://tracing.

    examples/train ... --timeline /tmp/tl     # under launch: writes /tmp/tl.rank0.json, /tmp/tl.rank1.json, ...
    python3 scripts/merge_timelines.py /tmp/tl -o /tmp/tl.json [--last N]

The ranks' files already share one clock (DistributedDataParallel, or the first unit
fully_shard makes, aligns them on barriers at construction; ddp/timeline.h), so merging is putting their events side by side. The script
checks what it merges: every file a trace of one rank, on the aligned clock, ranks 0..W-1 all
present and none twice; it says which file is wrong otherwise.
"""
import argparse
import glob
import json
import re
import sys

ALIGNED = "aligned"


def fail(message):
    sys.exit(f"merge_timelines: {message}")


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"cannot read {path}: {e}")
    other = trace.get("otherData", {}) if isinstance(trace, dict) else {}
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list) or "rank" not in other:
        fail(f"{path} is not a tinyddp DDP timeline (no traceEvents and otherData.rank)")
    if not str(other.get("clock", "")).startswith(ALIGNED):
        fail(f"{path} is on its rank's own clock ({other.get('clock')!r}), not the aligned one; "
             "it cannot be lined up with the other ranks")
    rank = other["rank"]
    if any(e.get("pid") != rank for e in trace["traceEvents"]):
        fail(f"{path}: events of another process than rank {rank}")
    return rank, trace["traceEvents"]


def keep_last(events, count):
    """The events of the last `count` iterations that every rank finished (and the metadata): DDP's
    that reached finalize, fully_shard's that reduce-scattered (a training step's, not an
    evaluation's forward)."""
    finished = {}
    for e in events:
        if e.get("name") == "finalize" or e.get("name", "").startswith("reduce-scatter "):
            finished.setdefault(e["pid"], set()).add(e["args"]["iteration"])
    common = sorted(set.intersection(*finished.values())) if finished else []
    keep = set(common[-count:])
    return [e for e in events if e.get("ph") == "M" or e.get("args", {}).get("iteration") in keep]


def merge(paths):
    by_rank = {}
    for path in paths:
        rank, events = load(path)
        if rank in by_rank:
            fail(f"rank {rank} appears twice ({by_rank[rank][0]} and {path})")
        by_rank[rank] = (path, events)
    missing = sorted(set(range(max(by_rank) + 1)) - set(by_rank))
    if missing:
        fail(f"no timeline for rank(s) {missing} (have {sorted(by_rank)})")
    events = [e for rank in sorted(by_rank) for e in by_rank[rank][1]]
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"ranks": len(by_rank), "clock": "aligned on DDP's construction barrier",
                          "sources": [by_rank[r][0] for r in sorted(by_rank)]}}


def expand(inputs):
    """PREFIX -> PREFIX.rank*.json in rank order; files as given."""
    paths = []
    for item in inputs:
        if item.endswith(".json"):
            paths.append(item)
            continue
        found = glob.glob(glob.escape(item) + ".rank*.json")
        if not found:
            fail(f"no files {item}.rank<r>.json")
        paths += sorted(found, key=lambda p: int(re.search(r"\.rank(\d+)\.json$", p).group(1)))
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="per-rank trace files, or the --timeline PATH given to train")
    parser.add_argument("-o", "--output", required=True, help="the merged trace (JSON)")
    parser.add_argument("--last", type=int, help="keep only the last N iterations that every rank finished")
    args = parser.parse_args()
    merged = merge(expand(args.inputs))
    if args.last is not None:
        if args.last < 1:
            fail(f"--last must be at least 1, got {args.last}")
        merged["traceEvents"] = keep_last(merged["traceEvents"], args.last)
        merged["otherData"]["last_iterations"] = args.last
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(merged, f)
    print(f"merge_timelines: {merged['otherData']['ranks']} ranks, {len(merged['traceEvents'])} events -> {args.output}")


if __name__ == "__main__":
    main()
