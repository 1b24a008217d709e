#!/usr/bin/python3
"""PyTorch side of `//bench:train_step --mode local|nosync|ddp --nproc 2`: the same models,
batches and steps with torch DistributedDataParallel (gloo), 2 processes, one thread each.
Prints "RESULT model=<m> mode=<mode> impl=torch median_us=<x>" from rank 0.

Run: OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_ddp_train_step.py
"""
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from torch_models import ToyModel, mlp


def run(rank, world, port, models, modes):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for name in models:
        for mode in modes:
            torch.manual_seed(0)
            if name == "toy":
                model, x, y, iters = ToyModel(), torch.randn(20, 10), torch.randn(20, 5), 2000
            elif name == "huge":
                model, x, y, iters = mlp([1024, 4096, 4096, 1024]), torch.randn(32, 1024), torch.randn(32, 1024), 8
            else:
                model, x, y, iters = mlp([784, 1024, 1024, 10]), torch.randn(128, 784), torch.randint(0, 10, (128,)), 30
            runner = model if mode == "local" else DDP(model)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

            def step():
                opt.zero_grad(set_to_none=True)
                ctx = runner.no_sync() if mode == "nosync" else contextlib.nullcontext()
                with ctx:
                    out = runner(x)
                    loss = F.cross_entropy(out, y) if name == "mlp" else F.mse_loss(out, y)
                    loss.backward()
                opt.step()

            for _ in range(5):
                step()
            times = []
            for _ in range(iters):
                start = time.perf_counter()
                step()
                times.append((time.perf_counter() - start) * 1e6)
            if rank == 0:
                print(f"RESULT model={name} mode={mode} impl=torch median_us={statistics.median(times):.1f}", flush=True)
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    models = sys.argv[1].split(",") if len(sys.argv) > 1 else ["toy", "mlp", "huge"]
    modes = sys.argv[2].split(",") if len(sys.argv) > 2 else ["local", "nosync", "ddp"]
    mp.spawn(run, args=(2, 29600 + os.getpid() % 1000, models, modes), nprocs=2)
