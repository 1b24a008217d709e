#!/usr/bin/python3
"""PyTorch side of the autograd benchmarks (same graphs as autograd_bench.cc), one thread.

Times loss.backward() only and prints microseconds per backward and ns per node.
Run: OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_autograd_bench.py
"""
import time

import torch


def count_nodes(fn):
    seen, stack = {fn}, [fn]
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return len(seen)


def bench(name, build, min_seconds=1.0):
    loss = build()
    nodes = count_nodes(loss.grad_fn)
    total, reps = 0.0, 0
    while total < min_seconds:
        loss = build()
        start = time.perf_counter()
        loss.backward()
        total += time.perf_counter() - start
        reps += 1
    us = total / reps * 1e6
    print(f"{name}: {us:.1f} us per backward, {nodes} nodes, {us * 1e3 / nodes:.0f} ns per node")


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(16, requires_grad=True)
    c = torch.randn(16)

    def add_chain():
        y = x
        for _ in range(1000):
            y = y + c
        return y.sum()

    m = torch.full((16,), 1.0001)

    def mul_chain():
        y = x
        for _ in range(1000):
            y = y * m
        return y.sum()

    weights = [(torch.randn(16, 16) * 0.25).requires_grad_() for _ in range(10)]
    biases = [torch.zeros(16).requires_grad_() for _ in range(10)]
    inp = torch.randn(16, 16)

    def mlp():
        h = inp
        for w, b in zip(weights, biases):
            h = torch.relu(h @ w.t() + b)
        return h.sum()

    print(f"torch {torch.__version__}")
    bench("BM_BackwardAddChain/1000", add_chain)
    bench("BM_BackwardMulChain/1000", mul_chain)
    bench("BM_BackwardMlp/10", mlp)


if __name__ == "__main__":
    main()
