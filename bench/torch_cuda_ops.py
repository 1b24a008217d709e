#!/usr/bin/python3
"""PyTorch side of //bench:cuda_ops on the same GPU: matmul 4096 (float32 with TF32 off, TF32,
bfloat16), an add of 256 M floats into a third tensor and a same-device copy (cudaMemcpy),
causal attention at GPT-2 small's shape forward + backward (composed as nanoGPT's slow path,
and F.scaled_dot_product_attention as its flash path), the heads' transpose and a broadcast
subtraction (the general elementwise path), timed with CUDA events (median of --repeats after 3 untimed calls). Prints the same RESULT
lines with impl=torch.

Run on a GPU machine: python3 bench/torch_cuda_ops.py
"""
import argparse
import statistics

import torch


def median_ms(repeats, fn):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--elements", type=int, default=256 << 20)
    parser.add_argument("--only", choices=["attention", "strided"], help="time only this (the others first, by default)")
    args = parser.parse_args()
    if args.only is None:
        products_and_elementwise(args)
    if args.only != "strided":
        attention(args)
    if args.only != "attention":
        strided(args)


def products_and_elementwise(args):
    n = args.n
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    for mode in ("float32", "tf32", "bfloat16"):
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        x, y = (a.bfloat16(), b.bfloat16()) if mode == "bfloat16" else (a, b)
        ms = median_ms(args.repeats, lambda: torch.matmul(x, y))
        print(f"RESULT impl=torch op=matmul dtype={mode} n={n} ms={ms:.4f} tflops={2 * n ** 3 / (ms * 1e9):.1f}")
    torch.backends.cuda.matmul.allow_tf32 = False
    del a, b
    m = args.elements
    a, b, c = torch.full((m,), 1.5, device="cuda"), torch.full((m,), 2.5, device="cuda"), torch.empty(m, device="cuda")
    nbytes = m * 4
    ms = median_ms(args.repeats, lambda: torch.add(a, b, out=c))
    print(f"RESULT impl=torch op=add n={m} ms={ms:.4f} gbps={3 * nbytes / (ms * 1e6):.1f}")
    ms = median_ms(args.repeats, lambda: c.copy_(a))
    print(f"RESULT impl=torch op=copy n={m} ms={ms:.4f} gbps={2 * nbytes / (ms * 1e6):.1f}")
    del a, b, c


def attention(args):
    future = torch.ones(1024, 1024, device="cuda").tril() == 0
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        q, k, v = (torch.randn(8, 12, 1024, 64, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
        grad = torch.randn(8, 12, 1024, 64, device="cuda", dtype=dtype)
        for p in (0.0, 0.1):  # without and with attention dropout
            routes = {
                "composed": lambda: torch.nn.functional.dropout(
                    ((q @ k.transpose(-2, -1)) * 0.125).masked_fill(future, float("-inf")).softmax(-1), p) @ v,
                "flash": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True,
                                                                                  scale=0.125),
            }
            for route, fn in routes.items():
                def step():
                    fn().backward(grad)
                    q.grad = k.grad = v.grad = None
                ms = median_ms(args.repeats, step)
                print(f"RESULT impl=torch op=attention route={route} dropout={p} dtype={name} ms={ms:.4f}")


def strided(args):
    heads = torch.randn(8, 1024, 12, 64, device="cuda").bfloat16()
    dense = torch.empty(8, 12, 1024, 64, device="cuda", dtype=torch.bfloat16)
    nbytes = heads.numel() * heads.element_size()
    ms = median_ms(args.repeats, lambda: dense.copy_(heads.transpose(1, 2)))
    print(f"RESULT impl=torch op=transpose_copy ms={ms:.4f} gbps={2 * nbytes / (ms * 1e6):.1f}")
    x, column = torch.randn(8192, 768, device="cuda"), torch.randn(8192, 1, device="cuda")
    out = torch.empty(8192, 768, device="cuda")
    ms = median_ms(args.repeats, lambda: torch.sub(x, column, out=out))
    print(f"RESULT impl=torch op=broadcast_sub ms={ms:.4f} gbps={2 * x.numel() * 4 / (ms * 1e6):.1f}")


if __name__ == "__main__":
    main()
