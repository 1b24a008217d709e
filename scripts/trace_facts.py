#!/usr/bin/env python3
"""The figures the pages quote from the committed traces, computed from those traces.

A trace changes every time scripts/make_pictures.sh runs, and a sentence that quotes it would
silently go stale. So each such sentence is made here, from the trace, and
scripts/picture_manifest.py check (tests/docs:pictures_test) fails when a page does not
contain it word for word: run this script after making the pictures, and paste what it
prints where the page quotes it.

    python3 scripts/trace_facts.py
"""
import collections
import json
import re
import sys


def events(path):
    with open(path, encoding="utf-8") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") in ("X", "i")]


def names(buckets):
    """[2, 3] -> "buckets 2 and 3"."""
    words = [str(b) for b in buckets]
    return ("bucket " if len(words) == 1 else "buckets ") + (
        words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1])


def still_running(path):
    """Which bucket allreduces are still running when backward reaches its last gradient: the
    most common set, in how many of the trace's rank-iterations."""
    by_iteration = collections.defaultdict(list)
    for e in events(path):
        by_iteration[(e["pid"], e["args"]["iteration"])].append(e)
    seen = collections.Counter()
    for group in by_iteration.values():
        backward = [e for e in group if e["name"].startswith("backward")]
        if not backward:
            continue
        end = backward[0]["ts"] + backward[0]["dur"]
        seen[tuple(sorted(int(e["name"].split()[2]) for e in group
                          if e["name"].startswith("allreduce bucket") and e["ts"] + e["dur"] > end))] += 1
    common, count = seen.most_common(1)[0]
    return (f"the allreduces of {names(common)} are still running in {count} of the trace's "
            f"{sum(seen.values())} rank-iterations")


def collective_times(path):
    """SyncBatchNorm's allgathers and allreduces: range and median, in ms."""
    times = collections.defaultdict(list)
    for e in events(path):
        if e["ph"] == "X" and e["name"].startswith("SyncBatchNorm "):
            times[e["name"].split()[1]].append(e["dur"] / 1000.0)
    parts = []
    for kind in ("allgather", "allreduce"):
        v = sorted(times[kind])
        if not v:
            sys.exit(f"trace_facts: {path} holds no SyncBatchNorm {kind}")
        parts.append(f"an {kind} took {v[0]:.2f}-{v[-1]:.2f} ms (median {v[len(v) // 2]:.2f} ms)")
    return " and ".join(parts)


def accumulation(path):
    """bench/accumulation.sh's step times: 4 micro-batches with no_sync, with an allreduce each,
    and one batch, each as its range and median over the rounds, in ms."""
    runs = collections.defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"RESULT model=mlp mode=ddp( accumulate=4)?( sync_each=1)? .*median_us=([\d.]+)$", line.strip())
            if m:
                runs[(bool(m.group(1)), bool(m.group(2)))].append(float(m.group(3)) / 1000.0)
    parts = []
    for key in ((True, False), (True, True), (False, False)):
        v = sorted(runs[key])
        if not v:
            sys.exit(f"trace_facts: {path} holds no run {key} (made by bash bench/accumulation.sh)")
        parts.append(f"{v[0]:.1f}-{v[-1]:.1f} ms (median {v[len(v) // 2]:.1f})")
    return (f"a step of 4 micro-batches took {parts[0]} with no_sync and {parts[1]} when every micro-batch "
            f"allreduced, against {parts[2]} for one micro-batch alone")


def bucket_sweep(path):
    """bench/bucket_sweep.sh's 1 Gbit/s runs: the range of the step over every cap and round, and
    the hidden share at the smallest cap (0.001 MiB: five buckets for the MLP's six parameters)."""
    steps, hidden = [], []
    for line in open(path, encoding="utf-8"):
        m = re.match(r"link=1gbit cap=([\d.]+) round=\d+ RESULT .* hidden=(\d+)% median_us=([\d.]+)$", line.strip())
        if m:
            steps.append(float(m.group(3)) / 1000.0)
            if float(m.group(1)) == 0.001:
                hidden.append(int(m.group(2)))
    if not steps or not hidden:
        sys.exit(f"trace_facts: {path} holds no 1 Gbit/s runs (made by sudo bash bench/bucket_sweep.sh)")
    return (f"on the 1 Gbit/s link the step took {min(steps):.1f}-{max(steps):.1f} ms whatever the cap, and the "
            f"smallest cap's five buckets hid {min(hidden)}-{max(hidden)}% of the communication")


def dp_backward(path):
    """bench/data_parallel_compare.sh's DataParallel phases: the backward of 128 rows of the MLP."""
    times = [float(m.group(1)) / 1000.0 for m in
             (re.search(r"mode=dp .*backward_us=(\d+)", line) for line in open(path, encoding="utf-8")) if m]
    if not times:
        sys.exit(f"trace_facts: {path} holds no DataParallel phases (bash bench/data_parallel_compare.sh)")
    return f"the backward of those 128 rows took {min(times):.1f}-{max(times):.1f} ms"


def memory_levels(path):
    """bench/fsdp_memory.sh's traces: each mode's level before the step and its peak, in MiB."""
    levels, label = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("== "):
                label = line[3:].split(" (")[0].strip()
                levels[label] = []
            elif label and line[0].isdigit():
                levels[label].append(float(line.split(",")[1]))
    if set(levels) != {"DDP", "ZeRO-1", "FSDP"}:
        sys.exit(f"trace_facts: {path} holds {sorted(levels)}, not DDP, ZeRO-1 and FSDP (bash bench/fsdp_memory.sh)")
    return ", ".join(f"{mode} {levels[mode][0]:.0f} MiB before the step and {max(levels[mode]):.0f} at its peak"
                     for mode in ("DDP", "ZeRO-1", "FSDP"))


def facts():
    """{page: [sentences it must contain]}."""
    return {
        "docs/ddp.md": [still_running("docs/timeline.json"), collective_times("docs/timeline_cnn.json"),
                        memory_levels("docs/fsdp_memory.txt")],
        "docs/learn.md": [accumulation("docs/accumulation.txt"), bucket_sweep("docs/bucket_sweep.txt"),
                          dp_backward("docs/data_parallel_results.txt")],
    }


def main():
    for page, sentences in facts().items():
        for sentence in sentences:
            print(f"{page}: {sentence}")


if __name__ == "__main__":
    main()
