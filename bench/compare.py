#!/usr/bin/env python3
"""Runs tinyddp's tensor benchmark (-c opt) and the same operations in PyTorch in one go,
and prints a markdown table of milliseconds per operation and the ratio.

Usage (from the repository root):  python3 bench/compare.py
PyTorch comes from Debian's python3-torch (/usr/bin/python3); for BLAS-backed matmul install
libopenblas0-pthread, which Debian's torch then uses through libblas.so.3. Both sides run on
one thread (OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1, torch.set_num_threads(1)).
"""
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_tinyddp():
    cmd = ["bazel", "run", "-c", "opt", "//bench:tensor_bench", "--",
           "--benchmark_format=json", "--benchmark_min_time=1"]
    out = subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    report = json.loads(out)
    results = {}
    for b in report["benchmarks"]:
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        results[b["name"]] = b["real_time"] * scale
    return results


def run_torch():
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_bench.py")], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    results, info = {}, {}
    for line in out.splitlines():
        entry = json.loads(line)
        if "ms" in entry:
            results[entry["name"]] = entry["ms"]
        else:
            info = entry
    return results, info


def main():
    ours = run_tinyddp()
    theirs, info = run_torch()
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    print(f"CPU: {cpu} ({os.cpu_count()} cores), {platform.system()} {platform.release()}")
    print(f"PyTorch {info.get('version')} (BLAS_INFO={info.get('blas')}), one thread\n")
    print("| benchmark | tinyddp ms | PyTorch ms | tinyddp / PyTorch |")
    print("|---|---:|---:|---:|")
    for name, ms in ours.items():
        ref = theirs.get(name)
        ratio = f"{ms / ref:.2f}" if ref else "n/a"
        print(f"| {name} | {ms:.3f} | {ref:.3f} | {ratio} |" if ref else f"| {name} | {ms:.3f} | n/a | n/a |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
