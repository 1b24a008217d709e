#!/usr/bin/env python3
"""Medians of RESULT lines over processes, for the benchmarks that alternate one process of
each framework per round (bench/bf16_matmul_compare.sh): reads lines such as
"RESULT impl=torch work=matmul1024_bf16 threads=1 ms=9.9 gflops=216.9 kernel=brg:avx512_core_bf16"
on stdin and prints, per work and thread count, each framework's median and every process's
value (GFLOP/s where given, else ms) in the order run, the ratio of the medians (tinyddp's
time over PyTorch's: below 1 is faster) and the oneDNN kernels the processes reported, as a
markdown table. Usage: ... | python3 bench/result_medians.py
"""
import collections
import statistics
import sys


def parse(line):
    fields = dict(item.split("=", 1) for item in line.split()[1:] if "=" in item)
    return fields


def main():
    runs = collections.defaultdict(list)  # (work, threads, impl) -> [fields]
    order = []
    for line in sys.stdin:
        if not line.startswith("RESULT"):
            continue
        f = parse(line)
        key = (f["work"], f["threads"])
        if key not in order:
            order.append(key)
        runs[key + (f["impl"],)].append(f)
    print("| work | threads | tinyddp ms (median) | PyTorch ms (median) | tinyddp / PyTorch | "
          "tinyddp GFLOP/s, each process | PyTorch GFLOP/s, each process | kernels |")
    print("|---|---|---|---|---|---|---|---|")
    for work, threads in order:
        ours, theirs = runs[(work, threads, "tinyddp")], runs[(work, threads, "torch")]
        if not ours or not theirs:
            continue
        ms_ours = statistics.median(float(f["ms"]) for f in ours)
        ms_theirs = statistics.median(float(f["ms"]) for f in theirs)
        each = lambda fs: ", ".join(f.get("gflops", f["ms"]) for f in fs)  # noqa: E731
        kernels = sorted({f.get("kernel", "-") for f in ours + theirs})
        print(f"| {work} | {threads} | {ms_ours:.3f} | {ms_theirs:.3f} | {ms_ours / ms_theirs:.2f} | "
              f"{each(ours)} | {each(theirs)} | {' '.join(kernels)} |")


if __name__ == "__main__":
    main()
