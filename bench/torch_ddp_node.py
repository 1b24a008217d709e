#!/usr/bin/python3
"""PyTorch's side of the multi-node figures: one process of a DDP job started by tinyddp's
launcher (it reads RANK, WORLD_SIZE, MASTER_ADDR; PyTorch's own store uses MASTER_PORT + 1,
as the launcher's store holds MASTER_PORT). Times DDP steps of the huge MLP (batch 32, MSE,
SGD with momentum) as //bench:train_step --model huge --mode ddp does and prints
"RESULT model=huge mode=ddp impl=torch [buckets=one] median_us=<x>" from rank 0.

    scripts/sim_cluster.sh --nodes 2 --rate 1gbit -- env GLOO_SOCKET_IFNAME=eth0 /usr/bin/python3 bench/torch_ddp_node.py [--one_bucket]
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from torch_models import mlp


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--one_bucket", action="store_true", help="one bucket for all gradients (no overlap)")
    parser.add_argument("--iterations", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    port = int(os.environ["MASTER_PORT"]) + 1
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{port}",
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    torch.manual_seed(0)
    model = mlp([1024, 4096, 4096, 1024])
    x, y = torch.randn(32, 1024), torch.randn(32, 1024)
    ddp = DDP(model, bucket_cap_mb=1000 if args.one_bucket else 25)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        F.mse_loss(ddp(x), y).backward()
        opt.step()

    for _ in range(5):
        step()
    times = []
    for _ in range(args.iterations):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e6)
    if dist.get_rank() == 0:
        print(f"RESULT model=huge mode=ddp impl=torch{' buckets=one' if args.one_bucket else ''} "
              f"median_us={statistics.median(times):.1f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
