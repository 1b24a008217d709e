#!/usr/bin/python3
"""The PyTorch side of `python3 bench/compare.py conv`: the convolutions and max pooling of conv_bench.cc, one thread.

Prints one JSON object per line: {"name": ..., "ms": ...}, then {"name": "torch", ...}.
"""
import itertools
import json

import torch
import torch.nn.functional as F

from torch_bench import timeit

# (batch, in, out, size): 3x3 kernels, padding 1.
SHAPES = [(64, 1, 16, 8), (64, 16, 32, 4), (64, 32, 64, 32)]


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for (bench, dtype), (batch, cin, cout, size), which in itertools.product(
            (("BM_Conv2d", torch.float32), ("BM_Conv2dBf16", torch.bfloat16)), SHAPES, (0, 1)):
        x = torch.randn(batch, cin, size, size).to(dtype).requires_grad_(which == 1)
        w = torch.randn(cout, cin, 3, 3).to(dtype).requires_grad_(which == 1)
        b = torch.randn(cout).to(dtype).requires_grad_(which == 1)
        grad = torch.randn(batch, cout, size, size).to(dtype)

        def step():
            y = F.conv2d(x, w, b, padding=1)
            if which == 1:
                y.backward(grad)
                x.grad = w.grad = b.grad = None

        name = f"{bench}/batch:{batch}/in:{cin}/out:{cout}/size:{size}/which:{which}"
        print(json.dumps({"name": name, "ms": timeit(step)}))
    # max_pool2d(2) forward + backward at the digits CNN's first pooling layer, and at its second
    # in channels-last (as oneDNN's convolutions leave a map).
    for bench, dtype, shape, layout in (
            ("BM_MaxPool2d", torch.float32, (64, 16, 8, 8), torch.contiguous_format),
            ("BM_MaxPool2dBf16", torch.bfloat16, (64, 16, 8, 8), torch.contiguous_format),
            ("BM_MaxPool2dChannelsLast", torch.float32, (64, 32, 4, 4), torch.channels_last),
            ("BM_MaxPool2dChannelsLastBf16", torch.bfloat16, (64, 32, 4, 4), torch.channels_last)):
        x = torch.randn(*shape).to(dtype).contiguous(memory_format=layout).requires_grad_()
        grad = torch.randn(shape[0], shape[1], shape[2] // 2, shape[3] // 2).to(dtype)

        def pool_step():
            F.max_pool2d(x, 2).backward(grad)
            x.grad = None

        print(json.dumps({"name": bench, "ms": timeit(pool_step)}))
    print(json.dumps({"name": "torch", "version": torch.__version__,
                      "blas": torch.__config__.show().split("BLAS_INFO=")[1].split(",")[0]}))


if __name__ == "__main__":
    main()
