#!/usr/bin/python3
"""The PyTorch side of bench/compare.py: the same operations as tensor_bench.cc, one thread.

Prints one JSON object per line: {"name": ..., "ms": ...}. Run with Debian's python3-torch
and OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 (compare.py sets them).
"""
import json
import time

import torch


# bench/tensor_bench.cc's BM_MlpGemm: (batch, in, out, which) with which 0 = x @ W^T,
# 1 = grad @ W, 2 = grad^T @ x.
MLP_GEMMS = [(128, 784, 1024, 0), (128, 1024, 1024, 0), (128, 1024, 10, 0), (128, 1024, 1024, 1),
             (128, 1024, 10, 1), (128, 784, 1024, 2), (128, 1024, 1024, 2), (128, 1024, 10, 2)]


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
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for n in (256, 512, 1024):
        a, b = torch.randn(n, n), torch.randn(n, n)
        print(json.dumps({"name": f"BM_Matmul/{n}", "ms": timeit(lambda: torch.matmul(a, b))}))
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024).t()
    print(json.dumps({"name": "BM_MatmulTransposedB/1024", "ms": timeit(lambda: torch.matmul(a, b))}))
    a, b = torch.randn(1024, 1024).t(), torch.randn(1024, 1024)
    print(json.dumps({"name": "BM_MatmulTransposedA/1024", "ms": timeit(lambda: torch.matmul(a, b))}))
    for batch, fan_in, fan_out, which in MLP_GEMMS:
        x, w, g = torch.randn(batch, fan_in), torch.randn(fan_out, fan_in), torch.randn(batch, fan_out)
        fn = [lambda: torch.matmul(x, w.t()), lambda: torch.matmul(g, w), lambda: torch.matmul(g.t(), x)][which]
        name = f"BM_MlpGemm/batch:{batch}/in:{fan_in}/out:{fan_out}/which:{which}"
        print(json.dumps({"name": name, "ms": timeit(fn)}))
    for n in (256, 512, 1024):  # bfloat16: oneDNN's kernels
        a, b = torch.randn(n, n).bfloat16(), torch.randn(n, n).bfloat16()
        print(json.dumps({"name": f"BM_MatmulBf16/{n}", "ms": timeit(lambda: torch.matmul(a, b))}))
    for batch, fan_in, fan_out, which in MLP_GEMMS:
        x, w, g = (torch.randn(batch, fan_in).bfloat16(), torch.randn(fan_out, fan_in).bfloat16(),
                   torch.randn(batch, fan_out).bfloat16())
        fn = [lambda: torch.matmul(x, w.t()), lambda: torch.matmul(g, w), lambda: torch.matmul(g.t(), x)][which]
        name = f"BM_MlpGemmBf16/batch:{batch}/in:{fan_in}/out:{fan_out}/which:{which}"
        print(json.dumps({"name": name, "ms": timeit(fn)}))
    n = 16 << 20
    a, b = torch.randn(n), torch.randn(n)
    dst = torch.empty(n)
    print(json.dumps({"name": f"BM_Memcpy/{n}", "ms": timeit(lambda: dst.copy_(a))}))
    c = torch.empty(n)
    print(json.dumps({"name": f"BM_AddOut/{n}", "ms": timeit(lambda: torch.add(a, b, out=c))}))
    print(json.dumps({"name": f"BM_Add/{n}", "ms": timeit(lambda: torch.add(a, b))}))
    print(json.dumps({"name": f"BM_AddInPlace/{n}", "ms": timeit(lambda: a.add_(b))}))
    a, b = (torch.randn(32, 64, 56, 56).contiguous(memory_format=torch.channels_last) for _ in range(2))
    print(json.dumps({"name": "BM_AddInPlaceChannelsLast", "ms": timeit(lambda: a.add_(b))}))
    print(json.dumps({"name": "BM_ReluChannelsLast", "ms": timeit(lambda: torch.relu(a))}))
    print(json.dumps({"name": "torch", "version": torch.__version__,
                      "blas": torch.__config__.show().split("BLAS_INFO=")[1].split(",")[0]}))


if __name__ == "__main__":
    main()
