#!/usr/bin/env python3
"""Side by side, per kind of kernel: tinyddp's op profile (train_gpt --profile_ops N
--profile_trace T.json, tensor/profiler.h) against PyTorch's (bench/torch_gpt_train.py
--kinds_json P.json, torch.profiler's device events over the same model's steps).

Each row is a kind (GEMM, attention, norm, elementwise, ...): its GPU time per step and its
calls per step (tinyddp: kernel calls through the backend interface, some of which launch more
than one kernel; PyTorch: kernel launches), then the GPU's busy time and its idle time between
its first and last kernel per step (where it waited for the host). A trace without GPU rows
(a CPU run) gives host times instead.

Usage: scripts/profile_compare.py T.json [P.json]   (gpu_run.sh profile)
"""
import json
import sys

GPU_ROW = 1000  # tensor/profiler.h's trace: GPU d's row is 1000 + d


def union_and_span(spans):
    """The length of the union of [start, end) spans, and from the first start to the last end."""
    if not spans:
        return 0.0, 0.0
    spans = sorted(spans)
    covered, reach = 0.0, spans[0][0]
    for start, end in spans:
        covered += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return covered, reach - spans[0][0]


def ours(path):
    """tinyddp's trace as kinds_json's form (per step, milliseconds)."""
    with open(path) as f:
        trace = json.load(f)
    steps = max(1, trace.get("otherData", {}).get("steps", 1))
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["args"].get("kind") != "user"]
    gpu = [e for e in spans if e["tid"] >= GPU_ROW]
    where = "GPU" if gpu else "host"
    kept = gpu or spans
    kinds = {}
    for e in kept:
        entry = kinds.setdefault(e["args"]["kind"], {"ms_per_step": 0.0, "kernels_per_step": 0.0})
        entry["ms_per_step"] += e["dur"] / 1e3 / steps
        entry["kernels_per_step"] += 1 / steps
    busy, span = union_and_span([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    return where, {"steps": steps, "kinds": kinds, "gpu_busy_ms_per_step": busy / 1e3 / steps,
                   "gpu_idle_ms_per_step": (span - busy) / 1e3 / steps}


def table(where, mine, theirs):
    names = sorted(set(mine["kinds"]) | set((theirs or {}).get("kinds", {})),
                   key=lambda k: -mine["kinds"].get(k, {}).get("ms_per_step", 0.0))
    head = f"{'kind':<12} {'tinyddp ' + where + ' ms/step':>22} {'calls/step':>11}"
    if theirs:
        head += f" {'PyTorch GPU ms/step':>20} {'kernels/step':>13} {'ratio':>7}"
    lines = [head]

    def row(name, a_ms, a_n, b_ms=None, b_n=None):
        line = f"{name:<12} {a_ms:>22.3f} {a_n:>11.1f}"
        if theirs:
            ratio = f"{a_ms / b_ms:.2f}x" if b_ms else ""
            line += f" {b_ms or 0:>20.3f} {b_n or 0:>13.1f} {ratio:>7}"
        lines.append(line)

    for name in names:
        a = mine["kinds"].get(name, {"ms_per_step": 0.0, "kernels_per_step": 0.0})
        b = (theirs or {}).get("kinds", {}).get(name, {"ms_per_step": 0.0, "kernels_per_step": 0.0})
        row(name, a["ms_per_step"], a["kernels_per_step"], b["ms_per_step"], b["kernels_per_step"])
    total = lambda d: sum(k["ms_per_step"] for k in d["kinds"].values())
    count = lambda d: sum(k["kernels_per_step"] for k in d["kinds"].values())
    row("all kernels", total(mine), count(mine), theirs and total(theirs), theirs and count(theirs))
    if where == "GPU":
        lines.append(f"GPU busy {mine['gpu_busy_ms_per_step']:.3f} ms/step, idle between kernels "
                     f"{mine['gpu_idle_ms_per_step']:.3f}" + (
                         f"; PyTorch busy {theirs['gpu_busy_ms_per_step']:.3f}, idle {theirs['gpu_idle_ms_per_step']:.3f}"
                         if theirs else ""))
    return "\n".join(lines)


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    where, mine = ours(argv[1])
    theirs = None
    if len(argv) == 3:
        with open(argv[2]) as f:
            theirs = json.load(f)
    print(table(where, mine, theirs))


if __name__ == "__main__":
    main(sys.argv)
