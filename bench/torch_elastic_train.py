#!/usr/bin/python3
"""PyTorch's side of bench/elastic_recovery.sh: the job tinyddp's elastic tests train
(examples/train --widths 32,64,4 --batch 24: an MLP, SGD, a global batch of 24 split over the
ranks), as a torchrun worker: rank 0 writes a checkpoint every --checkpoint_every steps (to a
temporary file, then renamed), a restarted worker resumes from it at whatever world size it
now has, and rank 0 prints what the recovery timeline reads: "resuming from PATH after N steps"
and "step N/M" every --log_every steps.

    torchrun --nnodes 2:3 --rdzv_backend c10d --rdzv_endpoint HOST:PORT bench/torch_elastic_train.py --checkpoint PATH

With --stop_on_signal (bench/slurm_timing.py), SIGUSR1 or SIGTERM stops the job for a requeue as
a PyTorch user under Slurm would write it (PyTorch Lightning's SLURM handling does the same):
each rank notes the signal, the ranks agree on it after each step (an allreduce of the flag),
rank 0 writes the checkpoint and, under Slurm, runs scontrol requeue for the job; every rank
exits with status 75.
"""
import argparse
import datetime
import os
import signal
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=24, help="the global batch")
    parser.add_argument("--checkpoint_every", type=int, default=100)
    parser.add_argument("--log_every", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=10, help="seconds a collective may take")
    parser.add_argument("--stop_on_signal", action="store_true", help="SIGUSR1 or SIGTERM: checkpoint and requeue")
    args = parser.parse_args()
    received = []
    if args.stop_on_signal:
        for signo in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(signo, lambda number, frame: received.append(number))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert args.batch % world == 0, f"--batch {args.batch} does not split over {world} ranks"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first = 0
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        first = state["step"]
        if rank == 0:
            print(f"resuming from {args.checkpoint} after {first} steps", flush=True)
    ddp = DDP(model)
    rows = args.batch // world
    for step in range(first, args.steps):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(args.batch, 32, generator=g), torch.randint(0, 4, (args.batch,), generator=g)
        loss = F.cross_entropy(ddp(x[rank * rows:(rank + 1) * rows]), y[rank * rows:(rank + 1) * rows])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        done = step + 1
        stop = False
        if args.stop_on_signal:
            flag = torch.tensor([1.0 if received else 0.0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stop = flag.item() > 0 and done < args.steps
        if rank == 0 and (done % args.checkpoint_every == 0 or stop):
            temporary = f"{args.checkpoint}.tmp"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": done}, temporary)
            os.replace(temporary, args.checkpoint)
        if rank == 0 and done % args.log_every == 0:
            print(f"step {done}/{args.steps} loss {loss.item():.4f} on {world} ranks", flush=True)
        if stop:
            dist.barrier()  # the checkpoint is written
            if rank == 0:
                print(f"stopping after step {done} of {args.steps}: checkpoint {args.checkpoint} written", flush=True)
                if "SLURM_JOB_ID" in os.environ:
                    subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]], check=False)
            dist.destroy_process_group()
            sys.exit(75)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
