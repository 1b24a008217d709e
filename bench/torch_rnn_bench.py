#!/usr/bin/python3
"""PyTorch side of bench/rnn_bench.cc: nn.LSTM and nn.GRU forward + backward (batch_first) at
the same shapes, one thread by default (--threads N), best of 5 runs of at least a second each,
in ms per step.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_rnn_bench.py
"""
import sys
import time

import torch

SHAPES = [(2, 64, 32, 32, 128), (1, 32, 16, 256, 256)]  # layers, steps, batch, in, hidden


def step_ms(kind, layers, steps, batch, inp, hidden):
    torch.manual_seed(0)
    layer = getattr(torch.nn, kind)(inp, hidden, layers, batch_first=True)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, steps, inp, generator=g).requires_grad_()
    grad = torch.randn(batch, steps, hidden, generator=g)
    best = float("inf")
    for _ in range(5):
        reps, start = 0, time.perf_counter()
        while time.perf_counter() - start < 1.0:
            y, _ = layer(x)
            y.backward(grad)
            x.grad = None
            layer.zero_grad()
            reps += 1
        best = min(best, (time.perf_counter() - start) / reps * 1e3)
    return best


def main():
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 1
    torch.set_num_threads(threads)
    for kind in ("LSTM", "GRU"):
        for shape in SHAPES:
            print(f"{kind} layers/steps/batch/in/hidden {shape}: {step_ms(kind, *shape):.2f} ms ({threads} thread(s))")


if __name__ == "__main__":
    main()
