#!/usr/bin/python3
"""Whether channels_last pays on this CPU, as PyTorch implements it (oneDNN's NHWC paths): a
3x3 convolution and batch norm, forward and backward, in NCHW and in channels_last, at one
thread, best of 3 runs. The figures in bench/README.md ("Memory formats") come from it.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_channels_last.py
"""
import time, torch
torch.set_num_threads(1)
def bench(n, c, h, k, fmt, reps):
    x = torch.randn(n, c, h, h).requires_grad_()
    conv = torch.nn.Conv2d(c, k, 3, padding=1)
    bn = torch.nn.BatchNorm2d(k)
    if fmt == "cl":
        x = x.detach().to(memory_format=torch.channels_last).requires_grad_()
        conv = conv.to(memory_format=torch.channels_last)
    for _ in range(3):
        bn(conv(x)).sum().backward()
    t = time.perf_counter()
    for _ in range(reps):
        bn(conv(x)).sum().backward()
    return (time.perf_counter() - t) / reps * 1e3
for (n, c, h, k, reps) in [(64, 16, 8, 32, 50), (32, 64, 28, 64, 10), (8, 64, 56, 64, 5)]:
    a = [bench(n, c, h, k, "nchw", reps) for _ in range(3)]
    b = [bench(n, c, h, k, "cl", reps) for _ in range(3)]
    print(f"N{n} C{c} {h}x{h} -> {k}: NCHW {min(a):.2f} ms, channels_last {min(b):.2f} ms (conv+bn fwd+bwd, 1 thread)")
