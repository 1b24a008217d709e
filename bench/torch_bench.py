#!/usr/bin/python3
"""The PyTorch side of bench/compare.py: the same operations as tensor_bench.cc, one thread.

Prints one JSON object per line: {"name": ..., "ms": ...}. Run with Debian's python3-torch
and OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 (compare.py sets them). Usage:
python3 bench/torch_bench.py [threads] [--filter REGEX] (at another thread count, set the
OMP_ and OPENBLAS_ variables to it too).
"""
import argparse
import json
import re
import time

import torch


# bench/tensor_bench.cc's BM_MlpGemm: (batch, in, out, which) with which 0 = x @ W^T,
# 1 = grad @ W, 2 = grad^T @ x.
MLP_GEMMS = [(128, 784, 1024, 0), (128, 1024, 1024, 0), (128, 1024, 10, 0), (128, 1024, 1024, 1),
             (128, 1024, 10, 1), (128, 784, 1024, 2), (128, 1024, 1024, 2), (128, 1024, 10, 2)]
# BM_ChunkGemm: the same products on one chunk of 16 rows (train --deterministic --chunk_size 16).
CHUNK_GEMMS = [(16,) + shape[1:] for shape in MLP_GEMMS]


def timeit(fn, min_seconds=0.4, repetitions=5):
    """Milliseconds per call: the fastest of `repetitions` runs of at least `min_seconds`
    (as compare.py takes tensor_bench's fastest repetition)."""
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(repetitions):
        reps, elapsed = 0, 0.0
        start = time.perf_counter()
        while elapsed < min_seconds:
            fn()
            reps += 1
            elapsed = time.perf_counter() - start
        best = min(best, elapsed / reps * 1e3)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("threads", nargs="?", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--filter", default="", help="only the benchmarks whose names this regex finds")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    def emit(name, fn):
        if re.search(args.filter, name):
            print(json.dumps({"name": name, "ms": timeit(fn)}))

    torch.manual_seed(0)
    for n in (256, 512, 1024):
        a, b = torch.randn(n, n), torch.randn(n, n)
        emit(f"BM_Matmul/{n}", lambda: torch.matmul(a, b))
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024).t()
    emit("BM_MatmulTransposedB/1024", lambda: torch.matmul(a, b))
    a, b = torch.randn(1024, 1024).t(), torch.randn(1024, 1024)
    emit("BM_MatmulTransposedA/1024", lambda: torch.matmul(a, b))
    for bench, shapes in (("BM_MlpGemm", MLP_GEMMS), ("BM_ChunkGemm", CHUNK_GEMMS)):
        for batch, fan_in, fan_out, which in shapes:
            x, w, g = torch.randn(batch, fan_in), torch.randn(fan_out, fan_in), torch.randn(batch, fan_out)
            fn = [lambda: torch.matmul(x, w.t()), lambda: torch.matmul(g, w), lambda: torch.matmul(g.t(), x)][which]
            emit(f"{bench}/batch:{batch}/in:{fan_in}/out:{fan_out}/which:{which}", fn)
    for n in (256, 512, 1024):  # bfloat16: oneDNN's kernels
        a, b = torch.randn(n, n).bfloat16(), torch.randn(n, n).bfloat16()
        emit(f"BM_MatmulBf16/{n}", lambda: torch.matmul(a, b))
    for batch, fan_in, fan_out, which in MLP_GEMMS:
        x, w, g = (torch.randn(batch, fan_in).bfloat16(), torch.randn(fan_out, fan_in).bfloat16(),
                   torch.randn(batch, fan_out).bfloat16())
        fn = [lambda: torch.matmul(x, w.t()), lambda: torch.matmul(g, w), lambda: torch.matmul(g.t(), x)][which]
        name = f"BM_MlpGemmBf16/batch:{batch}/in:{fan_in}/out:{fan_out}/which:{which}"
        emit(name, fn)
    n = 16 << 20
    a, b = torch.randn(n), torch.randn(n)
    dst = torch.empty(n)
    emit(f"BM_Memcpy/{n}", lambda: dst.copy_(a))
    c = torch.empty(n)
    emit(f"BM_AddOut/{n}", lambda: torch.add(a, b, out=c))
    emit(f"BM_Add/{n}", lambda: torch.add(a, b))
    emit(f"BM_AddInPlace/{n}", lambda: a.add_(b))
    a, b = (torch.randn(32, 64, 56, 56).contiguous(memory_format=torch.channels_last) for _ in range(2))
    emit("BM_AddInPlaceChannelsLast", lambda: a.add_(b))
    emit("BM_ReluChannelsLast", lambda: torch.relu(a))
    for n, dtype in ((1024, torch.float32), (1024, torch.bfloat16), (4096, torch.float32)):
        x = torch.randn(n, n).to(dtype)
        name = f"BM_TransposeCopy/{n}/{0 if dtype == torch.float32 else 1}"
        emit(name, lambda: x.t().contiguous())
    x = torch.randn(32, 64, 56, 56)
    emit("BM_ToChannelsLast", lambda: x.contiguous(memory_format=torch.channels_last))
    print(json.dumps({"name": "torch", "version": torch.__version__,
                      "blas": torch.__config__.show().split("BLAS_INFO=")[1].split(",")[0]}))


if __name__ == "__main__":
    main()
