#!/usr/bin/python3
"""PyTorch's side of tensor_bench's BM_IndexPairs, BM_InPlaceViewBackward, BM_IndexAdd and
BM_IndexPairsBackward: x[rows, cols] picking 1 M elements of a [4096, 1024] float32 tensor;
y = x * 1; y[:, :512] *= w; y.sum().backward() with x [1024, 1024] and w [1024, 512];
x.index_add(0, index, src) with 16384 rows of 256 into [4096, 256]; x[rows, cols].sum().backward()
picking 64 K elements of a [1024, 256] tensor. Prints each one's best and median
of the timed runs, in ms, at the thread count given (default: all cores).

    /usr/bin/python3 bench/torch_indexing.py [--threads N] [--runs 30]
"""
import argparse
import statistics
import time

import torch


def timed(fn, runs):
    fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return min(times), statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 1024, generator=g)
    rows = torch.randint(0, 8192, (1 << 20,), generator=g) - 4096
    cols = torch.randint(0, 1024, (1 << 20,), generator=g)
    best, median = timed(lambda: x[rows, cols], args.runs)
    print(f"torch {torch.__version__} threads={args.threads} index_pairs best={best:.3f} median={median:.3f} ms")
    a = torch.randn(1024, 1024, generator=g, requires_grad=True)
    w = torch.randn(1024, 512, generator=g, requires_grad=True)

    def step():
        y = a * 1
        y[:, :512] *= w
        y.sum().backward()

    best, median = timed(step, args.runs)
    print(f"torch {torch.__version__} threads={args.threads} inplace_view_backward best={best:.3f} median={median:.3f} ms")
    g = torch.Generator().manual_seed(0)
    x, src = torch.randn(4096, 256, generator=g), torch.randn(16384, 256, generator=g)
    index = torch.randint(0, 4096, (16384,), generator=g)
    best, median = timed(lambda: x.index_add(0, index, src), args.runs)
    print(f"torch {torch.__version__} threads={args.threads} index_add best={best:.3f} median={median:.3f} ms")
    x = torch.randn(1024, 256, generator=g, requires_grad=True)
    rows, cols = torch.randint(0, 1024, (1 << 16,), generator=g), torch.randint(0, 256, (1 << 16,), generator=g)

    def pairs_backward():
        x[rows, cols].sum().backward()
        x.grad = None

    best, median = timed(pairs_backward, args.runs)
    print(f"torch {torch.__version__} threads={args.threads} index_pairs_backward best={best:.3f} median={median:.3f} ms")


if __name__ == "__main__":
    main()
