#!/usr/bin/env python3
"""Runs tinyddp's tensor benchmark (-c opt) and the same operations in PyTorch, taking turns,
and prints a markdown table of milliseconds per operation and the ratio.

Usage (from the repository root):  python3 bench/compare.py [tensor|conv|gpt]
(tensor: matmuls and elementwise ops, tensor_bench.cc; conv: conv2d, conv_bench.cc; gpt:
attention, layer_norm and gelu, gpt_bench.cc)
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
REPETITIONS = 5
ROUNDS = 3


SUITES = {
    "tensor": ("tensor_bench", "torch_bench.py"),
    "conv": ("conv_bench", "torch_conv_bench.py"),
    "gpt": ("gpt_bench", "torch_gpt_bench.py"),
}


def run_tinyddp(binary):
    peak = json.loads(subprocess.run([os.path.join(ROOT, "bazel-bin/bench/cpu_peak")], check=True,
                                     stdout=subprocess.PIPE, text=True).stdout)
    # Five repetitions of at least 0.4 s each; the fastest counts (the machine is shared: the
    # fastest repetition is the least disturbed one). torch_bench.py does the same.
    cmd = [os.path.join(ROOT, "bazel-bin/bench", binary), "--benchmark_format=json",
           "--benchmark_min_time=0.4", f"--benchmark_repetitions={REPETITIONS}"]
    env = dict(os.environ, TINYDDP_NUM_THREADS="1")  # one thread, as PyTorch's side
    report = json.loads(subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout)
    results = {}
    for b in report["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue  # the aggregates (mean, median, ...)
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        name = b.get("run_name", b["name"])
        results[name] = min(results.get(name, float("inf")), b["real_time"] * scale)
    return results, peak


def work(name):
    """("GFLOP", n) for a matmul, ("GB", n) for a memory-bound op, per call."""
    base, _, arg = name.partition("/")
    if base in ("BM_Matmul", "BM_MatmulTransposedA", "BM_MatmulTransposedB", "BM_MatmulBf16"):
        return "GFLOP", 2.0 * int(arg) ** 3 / 1e9
    if base in ("BM_MlpGemm", "BM_MlpGemmBf16", "BM_ChunkGemm"):
        fields = dict(part.split(":") for part in arg.split("/"))
        return "GFLOP", 2.0 * int(fields["batch"]) * int(fields["in"]) * int(fields["out"]) / 1e9
    if base == "BM_Conv2d":  # 3x3, padding 1; forward + backward is three such products
        f = {k: int(v) for k, v in (part.split(":") for part in arg.split("/"))}
        passes = 3 if f["which"] == 1 else 1
        return "GFLOP", 2.0 * f["batch"] * f["out"] * f["size"] ** 2 * f["in"] * 9 * passes / 1e9
    if base == "BM_Attention":  # projections 4 C^2 and scores + att @ v 2 T C per token
        f = {k: int(v) for k, v in (part.split(":") for part in arg.split("/"))}
        passes = 3 if f["which"] == 1 else 1
        return "GFLOP", 2.0 * f["batch"] * f["T"] * (4 * 128 ** 2 + 2 * f["T"] * 128) * passes / 1e9
    channels_last = {"BM_AddInPlaceChannelsLast": 3, "BM_ReluChannelsLast": 2}.get(base)
    if channels_last:  # [32, 64, 56, 56] floats per stream
        return "GB", channels_last * 4 * 32 * 64 * 56 * 56 / 1e9
    streams = {"BM_Memcpy": 2, "BM_AddOut": 3, "BM_AddInPlace": 3, "BM_Add": 3}.get(base)
    return ("GB", streams * 4 * int(arg) / 1e9) if streams else (None, 0)


def run_torch(script):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", script)], env=env, check=True,
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
    binary, script = SUITES[sys.argv[1] if len(sys.argv) > 1 else "tensor"]
    subprocess.run(["bazel", "build", "-c", "opt", "//bench:" + binary, "//bench:cpu_peak"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The two sides take turns, ROUNDS times, and each keeps its fastest figure: the machine's
    # speed drifts over seconds, and running one side first would hand it one phase of it.
    ours, theirs = {}, {}
    for _ in range(ROUNDS):
        mine, peak = run_tinyddp(binary)
        torch_round, info = run_torch(script)
        for name, ms in mine.items():
            ours[name] = min(ours.get(name, float("inf")), ms)
        for name, ms in torch_round.items():
            theirs[name] = min(theirs.get(name, float("inf")), ms)
    print(f"CPU kernels: {peak['summary']}; {os.cpu_count()} cores, {platform.system()} {platform.release()}")
    print(f"Peak ({peak['isa']}): {peak['peak_formula']} = {peak['peak_gflops']:.1f} GFLOP/s "
          f"(measured FMA chains: {peak['fma_avx2_gflops']:.1f} GFLOP/s on 256-bit registers"
          + (f", {peak['fma_avx512_gflops']:.1f} on 512-bit" if peak["fma_avx512_gflops"] else "") + ")")
    print(f"PyTorch {info.get('version')} (BLAS_INFO={info.get('blas')}), one thread\n")
    memcpy_gbs = None
    if "BM_Memcpy/16777216" in ours:
        memcpy_gbs = work("BM_Memcpy/16777216")[1] / (ours["BM_Memcpy/16777216"] / 1e3)
    print("| benchmark | tinyddp ms | PyTorch ms | tinyddp / PyTorch | tinyddp rate | PyTorch rate | tinyddp vs bound |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, ms in ours.items():
        ref = theirs.get(name)
        unit, amount = work(name)
        rate = f"{amount / (ms / 1e3):.1f} {unit}/s" if unit else ""
        ref_rate = f"{amount / (ref / 1e3):.1f} {unit}/s" if unit and ref else ""
        bound = ""
        if unit == "GFLOP" and "Bf16" in name:  # bfloat16 dot products: two multiply-adds per lane
            bound = f"{100 * amount / (ms / 1e3) / (2 * peak['peak_gflops']):.0f}% of 2x peak"
        elif unit == "GFLOP":
            bound = f"{100 * amount / (ms / 1e3) / peak['peak_gflops']:.0f}% of peak"
        elif unit == "GB" and memcpy_gbs:
            bound = f"{100 * amount / (ms / 1e3) / memcpy_gbs:.0f}% of memcpy"
        ratio = f"{ms / ref:.2f}" if ref else "n/a"
        ref_ms = f"{ref:.3f}" if ref else "n/a"
        print(f"| {name} | {ms:.3f} | {ref_ms} | {ratio} | {rate} | {ref_rate} | {bound} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
