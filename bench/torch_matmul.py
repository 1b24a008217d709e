"""PyTorch's side of the matrix products bench/threads_compare.sh, bench/bf16_matmul_compare.sh
and the GPU host's `gpu_run.sh cpu` time at each thread count: the best of 5 repetitions of at
least 0.3 s each (the statistic tinyddp's tensor_bench reports with --benchmark_repetitions=5).

Default: the 1024 x 1024 float32 matmul, one RESULT line "work=matmul1024". With --dtype
bfloat16 the work is "matmul1024_bf16"; --gpt adds the example GPT's Linear products (the
shapes of tensor_bench's BM_GptGemm, x @ W^T and the backward of the MLP's first layer) as
"work=gpt_<batch>x<in>x<out>_<which>". bfloat16 lines end with oneDNN's kernel for the
product (kernel=brg:avx512_core_bf16, ...; from its verbose log, taken on one call before the
timing). Usage: python3 bench/torch_matmul.py [threads] [--dtype bfloat16] [--gpt]
(threads 0: PyTorch's default). With --turns R (as //bench:matmul_turns): R rounds, each
timing every product for 0.2 s at 1 thread and then at `threads` in this one process
(torch.set_num_threads and OpenBLAS's own pool switched each time), printing per product and
count the median of the rounds' median call and the rounds it won.
"""
import argparse
import os
import statistics
import sys
import time

import torch

from torch_turns import in_turns

# batch, in, out, which (0: x @ W^T, 1: grad @ W, 2: grad^T @ x), as tensor_bench's gpt_shapes.
GPT_SHAPES = [(2048, 128, 384, 0), (2048, 128, 128, 0), (2048, 128, 512, 0), (2048, 512, 128, 0),
              (2048, 128, 512, 1), (2048, 128, 512, 2)]


def best_ms(product):
    for _ in range(3):
        product()
    best = float("inf")
    for _ in range(5):
        start, reps = time.perf_counter(), 0
        while time.perf_counter() - start < 0.3:
            product()
            reps += 1
        best = min(best, (time.perf_counter() - start) / reps)
    return best * 1e3


def median_ms(product):
    for _ in range(3):
        product()
    times, begin = [], time.perf_counter()
    while time.perf_counter() - begin < 0.2:
        start = time.perf_counter()
        product()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def report_turns(work, product, threads, turns):
    for count, ms, faster in in_turns(lambda: median_ms(product), threads, turns):
        print(f"RESULT impl=torch work={work} threads={count} turns={turns} ms={ms:.3f} faster_rounds={faster}",
              flush=True)


def onednn_kernel(product):
    """oneDNN's implementation name for one call of `product`, from its verbose log (written
    to file descriptor 1 by the library, so it is read through a pipe), or "none"."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(write_end, 1)
    try:
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            product()
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(write_end)
    with os.fdopen(read_end) as log:
        for line in log:
            # "dnnl_verbose,exec,cpu,matmul,<kernel>,..." (oneDNN 2);
            # "onednn_verbose,primitive,exec,cpu,matmul,<kernel>,..." (oneDNN 3)
            fields = line.strip().split(",")
            if "exec" in fields:
                at = fields.index("exec")
                if fields[at + 2:at + 3] == ["matmul"] and len(fields) > at + 3:
                    return fields[at + 3]
    return "none"


def report(work, dtype, threads, ms, flops, product):
    kernel = f" kernel={onednn_kernel(product)}" if dtype == torch.bfloat16 else ""
    print(f"RESULT impl=torch work={work} threads={threads} ms={ms:.3f} gflops={flops / ms / 1e6:.1f}{kernel}",
          flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("threads", type=int, nargs="?", default=0)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--gpt", action="store_true", help="also the example GPT's Linear products")
    parser.add_argument("--turns", type=int, default=0, help="rounds of 1 thread and `threads` taking turns")
    args = parser.parse_args()
    if args.turns and args.threads < 1:
        parser.error("--turns needs a thread count to set against 1")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    dtype = getattr(torch, args.dtype)
    suffix = "_bf16" if dtype == torch.bfloat16 else ""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(1024, 1024, generator=g).to(dtype), torch.randn(1024, 1024, generator=g).to(dtype)
    square = lambda: torch.matmul(a, b)  # noqa: E731
    if args.turns:
        report_turns(f"matmul1024{suffix}", square, threads, args.turns)
    else:
        report(f"matmul1024{suffix}", dtype, threads, best_ms(square), 2 * 1024**3, square)
    for batch, n_in, n_out, which in GPT_SHAPES if args.gpt else []:
        x = torch.randn(batch, n_in, generator=g).to(dtype)
        w = torch.randn(n_out, n_in, generator=g).to(dtype)
        grad = torch.randn(batch, n_out, generator=g).to(dtype)
        product = [lambda: x @ w.t(), lambda: grad @ w, lambda: grad.t() @ x][which]
        if args.turns:
            report_turns(f"gpt_{batch}x{n_in}x{n_out}_{which}{suffix}", product, threads, args.turns)
            continue
        report(f"gpt_{batch}x{n_in}x{n_out}_{which}{suffix}", dtype, threads, best_ms(product),
               2 * batch * n_in * n_out, product)


if __name__ == "__main__":
    main()
