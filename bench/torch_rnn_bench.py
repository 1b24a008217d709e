#!/usr/bin/python3
"""PyTorch side of bench/rnn_bench.cc: nn.LSTM and nn.GRU forward + backward (batch_first) at
the same shapes, plain and over a packed batch (lengths falling from T to about T/2, packing and
unpacking included), one thread by default (--threads N), best of 5 runs of at least a second
each, in ms per step.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_rnn_bench.py
"""
import sys
import time

import torch

SHAPES = [(2, 64, 32, 32, 128), (1, 32, 16, 256, 256)]  # layers, steps, batch, in, hidden


def step_ms(kind, layers, steps, batch, inp, hidden, packed=False):
    torch.manual_seed(0)
    layer = getattr(torch.nn, kind)(inp, hidden, layers, batch_first=True)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, steps, inp, generator=g).requires_grad_()
    grad = torch.randn(batch, steps, hidden, generator=g)
    lengths = [steps - k * steps // (2 * batch) for k in range(batch)]
    pack, unpack = torch.nn.utils.rnn.pack_padded_sequence, torch.nn.utils.rnn.pad_packed_sequence
    best = float("inf")
    for _ in range(5):
        reps, start = 0, time.perf_counter()
        while time.perf_counter() - start < 1.0:
            if packed:
                y = unpack(layer(pack(x, lengths, batch_first=True))[0], batch_first=True)[0]
            else:
                y, _ = layer(x)
            y.backward(grad)
            x.grad = None
            layer.zero_grad()
            reps += 1
        best = min(best, (time.perf_counter() - start) / reps * 1e3)
    return best


def proj_ms(steps, proj, batch=32, inp=32, hidden=128):
    """BM_LSTM_proj's step: one LSTM layer with proj_size, batch_first."""
    torch.manual_seed(0)
    layer = torch.nn.LSTM(inp, hidden, batch_first=True, proj_size=proj)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, steps, inp, generator=g).requires_grad_()
    grad = torch.randn(batch, steps, proj, generator=g)
    best = float("inf")
    for _ in range(5):
        reps, start = 0, time.perf_counter()
        while time.perf_counter() - start < 1.0:
            layer(x)[0].backward(grad)
            x.grad = None
            layer.zero_grad()
            reps += 1
        best = min(best, (time.perf_counter() - start) / reps * 1e3)
    return best


def main():
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 1
    torch.set_num_threads(threads)
    for steps in (64, 256):
        print(f"LSTM proj steps/proj ({steps}, 64): {proj_ms(steps, 64):.2f} ms ({threads} thread(s))")
    for packed in (False, True):
        for kind in ("LSTM", "GRU"):
            for shape in SHAPES:
                ms = step_ms(kind, *shape, packed=packed)
                print(f"{kind}{' packed' if packed else ''} layers/steps/batch/in/hidden {shape}: {ms:.2f} ms "
                      f"({threads} thread(s))")


if __name__ == "__main__":
    main()
