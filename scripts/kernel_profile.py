#!/usr/bin/env python3
"""Device time per kernel class from ncu's raw CSV pages (gpu_run.sh profile).

Each CSV holds one row per kernel launch with its gpu__time_duration. The launches are grouped
into classes by name (GEMM, attention and softmax, normalisation, loss, optimizer, reductions,
copies and indexing, elementwise, other) and printed side by side for the files given, then
the slowest kernels of each file. Host gaps are not in ncu's numbers: it runs each kernel alone.

Usage: scripts/kernel_profile.py [--top N] NAME=FILE.csv [NAME=FILE.csv ...]
"""
import argparse
import collections
import csv
import io
import re
import sys

# First match wins, so the specific names come before the general ones.
CLASSES = [
    ("gemm", r"gemm|gemv|cutlass|xmma|nvjet|sm90_|sm80_|cublas|matmul|dot_kernel|splitK"),
    ("attention/softmax", r"softmax|attention|flash|fmha|sdpa|attn"),
    ("norm", r"layer_?norm|batch_?norm|group_?norm|rms_?norm|norm_kernel"),
    ("loss", r"nll|cross_entropy|log_softmax|ClassNLL"),
    ("optimizer", r"adam|sgd|multi_tensor|foreach|fused_optim|clip"),
    ("reduction", r"reduce|sum_rows|sum_columns|max_rows|_sum_|norm2|argmax"),
    ("copy/index", r"copy|transpose|contiguous|gather|scatter|index|cat_|embedding|fill|memset|memcpy|permute"),
    ("elementwise", r"elementwise|vectorized|unary|binary|for_each|gelu|relu|add|mul|div|where|dropout"),
]


def kernel_class(name):
    for label, pattern in CLASSES:
        if re.search(pattern, name, re.IGNORECASE):
            return label
    return "other"


def read_launches(path):
    """(kernel name, duration in ns) for every launch in one ncu --csv --page raw log."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"kernel_profile.py: {path}: no CSV header (\"ID\",...) in ncu's log")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, units = rows[0], rows[1]
    name_col = header.index("Kernel Name")
    time_col = header.index("gpu__time_duration.sum")
    scale = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9}
    factor = scale.get(units[time_col].strip(), 1.0)
    launches = []
    for row in rows[2:]:
        if len(row) <= max(name_col, time_col):
            continue
        value = row[time_col].replace(",", "").strip()
        try:
            launches.append((row[name_col], float(value) * factor))
        except ValueError:
            continue
    return launches


def short_name(name, width=90):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=8, help="the slowest kernels listed per file")
    parser.add_argument("files", nargs="+", help="NAME=FILE.csv")
    args = parser.parse_args()
    runs = []
    for spec in args.files:
        label, _, path = spec.partition("=")
        if not path:
            sys.exit(f"kernel_profile.py: '{spec}' is not NAME=FILE.csv")
        runs.append((label, read_launches(path)))

    labels = [label for label, _ in CLASSES] + ["other"]
    print("| class | " + " | ".join(f"{name} ms (launches)" for name, _ in runs) + " |")
    print("|---|" + "---|" * len(runs))
    totals = []
    for name, launches in runs:
        per = collections.defaultdict(lambda: [0.0, 0])
        for kernel, ns in launches:
            entry = per[kernel_class(kernel)]
            entry[0] += ns
            entry[1] += 1
        totals.append(per)
    for label in labels:
        cells = [f"{per[label][0] / 1e6:.3f} ({per[label][1]})" if label in per else "-" for per in totals]
        print(f"| {label} | " + " | ".join(cells) + " |")
    cells = [f"{sum(ns for _, ns in launches) / 1e6:.3f} ({len(launches)})" for _, launches in runs]
    print("| **all** | " + " | ".join(cells) + " |")

    for name, launches in runs:
        per_kernel = collections.defaultdict(lambda: [0.0, 0])
        for kernel, ns in launches:
            per_kernel[kernel][0] += ns
            per_kernel[kernel][1] += 1
        print(f"\n{name}: the {args.top} kernels with the most device time")
        print("| ms | launches | µs each | class | kernel |")
        print("|---|---|---|---|---|")
        ranked = sorted(per_kernel.items(), key=lambda item: -item[1][0])[: args.top]
        for kernel, (ns, count) in ranked:
            print(f"| {ns / 1e6:.3f} | {count} | {ns / count / 1e3:.1f} | {kernel_class(kernel)} | `{short_name(kernel)}` |")


if __name__ == "__main__":
    main()
