#!/usr/bin/python3
"""PyTorch side of `//bench:train_step --mode local|nosync|ddp --nproc 2`: the same models,
batches and steps with torch DistributedDataParallel (gloo), 2 processes, one thread each.
Prints "RESULT model=<m> mode=<mode> impl=torch median_us=<x>" from rank 0. Optional third
argument: optimizers, sgd (default), adam, zero_adam (ZeroRedundancyOptimizer over Adam); fourth:
communication hooks, allreduce, powersgd1, powersgd4 (PowerSGD of rank 1 or 4 from the third step).

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
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as powerSGD
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from torch_models import ToyModel, digits_cnn, mlp


def make_optimizer(kind, model):
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(model.parameters(), lr=1e-4)
    return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-4)


def state_bytes(opt):
    """The optimizer state this rank holds (ZeRO: its shard's)."""
    local = opt.optim if isinstance(opt, ZeroRedundancyOptimizer) else opt
    return sum(t.numel() * t.element_size() for s in local.state.values() for t in s.values() if torch.is_tensor(t))


def register_hook(ddp, hook):
    """A communication hook on `ddp`; returns the PowerSGD state (None for the others)."""
    if hook == "allreduce":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
        return None
    rank = 4 if hook == "powersgd4" else 1
    state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=2)
    ddp.register_comm_hook(state, powerSGD.powerSGD_hook)
    return state


def run(rank, world, port, models, modes, optimizers, hooks):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for name, mode, kind, hook in [(n, m, k, h) for n in models for m in modes for k in optimizers for h in hooks]:
        if True:
            torch.manual_seed(0)
            if name == "toy":
                model, x, y, iters = ToyModel(), torch.randn(20, 10), torch.randn(20, 5), 2000
            elif name == "cnn":
                model, x, y, iters = digits_cnn(0.25), torch.randn(64, 1, 8, 8), torch.randint(0, 10, (64,)), 300
            elif name == "huge":
                model, x, y, iters = mlp([1024, 4096, 4096, 1024]), torch.randn(32, 1024), torch.randn(32, 1024), 8
            else:
                model, x, y, iters = mlp([784, 1024, 1024, 10]), torch.randn(128, 784), torch.randint(0, 10, (128,)), 30
            runner = model if mode == "local" else DDP(model)
            opt = make_optimizer(kind, model)
            psgd = register_hook(runner, hook) if hook else None
            grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

            def step():
                opt.zero_grad(set_to_none=True)
                ctx = runner.no_sync() if mode == "nosync" else contextlib.nullcontext()
                with ctx:
                    out = runner(x)
                    loss = F.cross_entropy(out, y) if name in ("mlp", "cnn") else F.mse_loss(out, y)
                    loss.backward()
                opt.step()

            for _ in range(5):
                step()
            sent_before = psgd.total_numel_after_compression if psgd else 0
            times = []
            for _ in range(iters):
                start = time.perf_counter()
                step()
                times.append((time.perf_counter() - start) * 1e6)
            if rank == 0:
                extra = "" if kind == "sgd" else f" optimizer={kind} state_bytes={state_bytes(opt)}"
                if hook:
                    wire = (psgd.total_numel_after_compression - sent_before) * 4 // iters if psgd else grad_bytes
                    extra += f" comm_hook={hook} wire_bytes_per_step={wire}"
                print(f"RESULT model={name} mode={mode}{extra} impl=torch median_us={statistics.median(times):.1f}", flush=True)
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    models = sys.argv[1].split(",") if len(sys.argv) > 1 else ["toy", "mlp", "huge"]
    modes = sys.argv[2].split(",") if len(sys.argv) > 2 else ["local", "nosync", "ddp"]
    optimizers = sys.argv[3].split(",") if len(sys.argv) > 3 else ["sgd"]
    hooks = sys.argv[4].split(",") if len(sys.argv) > 4 else [""]
    mp.spawn(run, args=(2, 29600 + os.getpid() % 1000, models, modes, optimizers, hooks), nprocs=2)
