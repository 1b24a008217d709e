#!/usr/bin/python3
"""PyTorch side of //bench:train_step: the same steps (zero_grad, forward, loss, backward,
SGD lr 0.01 momentum 0.9), one thread; with --cuda_graph, replays of one captured step. Prints "RESULT model=<name> mode=torch median_us=<x>".

Run: OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_train_step.py --model mlp
--turns R (as train_step's): R rounds at 1 thread and at --threads taking turns in this process,
torch.set_num_threads and OpenBLAS's own pool (openblas_set_num_threads) switched each time;
a RESULT line per count with the median of its rounds' medians and the rounds it won.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from torch_kinds import kernel_kinds
from torch_models import ToyModel, digits_cnn, mlp
from torch_turns import in_turns


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["toy", "mlp", "cnn", "huge"], default="toy")
    parser.add_argument("--iterations", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch", type=int, default=0, help="mlp or huge: the batch (default 128, huge 32)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--autocast", action="store_true", help="forward and loss under autocast (bfloat16)")
    parser.add_argument("--tf32", action="store_true", help="float32 matmuls and convolutions on TF32 (--device cuda)")
    parser.add_argument("--cuda_graph", action="store_true",
                        help="time replays of one step captured in a CUDA graph (--device cuda)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads (default 1; 0: PyTorch's default, the physical cores)")
    parser.add_argument("--kinds_json", default="",
                        help="after timing, profile 3 steps and write each kind of kernel's GPU time per step here")
    parser.add_argument("--turns", type=int, default=0,
                        help="rounds of 1 thread and --threads taking turns in this process (CPU)")
    args = parser.parse_args()
    if args.turns and (args.device != "cpu" or args.threads < 1):
        parser.error("--turns times the CPU at 1 thread against --threads (1 or more)")
    if (args.cuda_graph or args.tf32) and args.device != "cuda":
        parser.error("--cuda_graph and --tf32 need --device cuda")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    toy = args.model == "toy"
    mse = args.model in ("toy", "huge")
    iterations = args.iterations or (2000 if toy else 300 if args.model == "cnn" else 8 if args.model == "huge" else 30)
    if toy:
        model, inputs, targets = ToyModel(), torch.randn(20, 10), torch.randn(20, 5)
    elif args.model == "huge":
        batch = args.batch or 32
        model, inputs, targets = mlp([1024, 4096, 4096, 1024]), torch.randn(batch, 1024), torch.randn(batch, 1024)
    elif args.model == "cnn":
        model, inputs, targets = digits_cnn(0.25), torch.randn(64, 1, 8, 8), torch.randint(0, 10, (64,))
    else:
        model = mlp([784, 1024, 1024, 10])
        batch = args.batch or 128
        inputs, targets = torch.randn(batch, 784), torch.randint(0, 10, (batch,))
    gpu = args.device == "cuda"
    if gpu:  # float32 as on the CPU unless --tf32 (tinyddp's train_step sets the same switches)
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
    model, inputs, targets = model.to(args.device), inputs.to(args.device), targets.to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def queue_step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(args.device, torch.bfloat16, enabled=args.autocast):
            out = model(inputs)
            loss = F.mse_loss(out, targets) if mse else F.cross_entropy(out, targets)
        loss.backward()
        optimizer.step()

    graph = None

    def step():
        if graph is not None:
            graph.replay()
        else:
            queue_step()
        if gpu:
            torch.cuda.synchronize()

    if args.cuda_graph:
        # PyTorch's whole-network capture: the warm-up on a side stream, then one step captured.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(args.warmup, 3)):
                queue_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            queue_step()
    if args.turns:
        return time_in_turns(args, iterations, step)
    for _ in range(args.warmup):
        step()
    us = median_us(step, iterations)
    device = " device=cuda" if gpu else ""
    autocast = " autocast=bf16" if args.autocast else ""
    autocast += " cuda_graph=1" if args.cuda_graph else ""
    autocast += " tf32=1" if args.tf32 else ""
    autocast += f" threads={torch.get_num_threads()}"
    print(f"RESULT model={args.model} mode=torch{device}{autocast} median_us={us:.1f}")
    if args.kinds_json:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
        with open(args.kinds_json, "w") as f:
            json.dump(kernel_kinds(prof, 3), f, indent=1)


def median_us(step, iterations):
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def time_in_turns(args, iterations, step):
    def measure():
        for _ in range(max(args.warmup, 3)):
            step()
        return median_us(step, iterations)

    autocast = " autocast=bf16" if args.autocast else ""
    for count, us, faster in in_turns(measure, args.threads, args.turns):
        print(f"RESULT model={args.model} mode=torch{autocast} threads={count} turns={args.turns} "
              f"median_us={us:.1f} faster_rounds={faster}")

if __name__ == "__main__":
    main()
