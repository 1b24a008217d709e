"""PyTorch's side of the 1024 x 1024 float32 matmul that bench/threads_compare.sh and the GPU
host's `gpu_run.sh cpu` time at each thread count: the best of 5 repetitions of at least 0.3 s
each (the statistic tinyddp's tensor_bench reports with --benchmark_repetitions=5).
Prints one RESULT line. Usage: python3 bench/torch_matmul.py [threads]   (0: PyTorch's default)
"""
import sys
import time

import torch


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if threads > 0:
        torch.set_num_threads(threads)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    for _ in range(3):
        torch.matmul(a, b)
    best = float("inf")
    for _ in range(5):
        start, reps = time.perf_counter(), 0
        while time.perf_counter() - start < 0.3:
            torch.matmul(a, b)
            reps += 1
        best = min(best, (time.perf_counter() - start) / reps)
    print(f"RESULT impl=torch work=matmul1024 threads={torch.get_num_threads()} ms={best * 1e3:.2f}")


if __name__ == "__main__":
    main()
