#!/usr/bin/python3
"""PyTorch side of //bench:allreduce: the same sizes and iterations with torch.distributed
(gloo backend), 2 local processes. Prints "RESULT op=allreduce mode=torch bytes=... median_us=...
algbw_gbps=... busbw_gbps=..." from rank 0.

Run: /usr/bin/python3 bench/torch_allreduce.py
"""
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [(4 << 10, 500), (1 << 20, 100), (25 << 20, 10), (100 << 20, 5)]
WARMUP = 3


def run(rank, world_size, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    for size, iterations in SIZES:
        data = torch.ones(size // 4)
        times = []
        for i in range(WARMUP + iterations):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(data)
            elapsed = (time.perf_counter() - start) * 1e6
            if i >= WARMUP:
                times.append(elapsed)
        median = statistics.median(times)
        algbw = size / (median * 1e-6) / 1e9
        busbw = algbw * 2 * (world_size - 1) / world_size
        if rank == 0:
            print(f"RESULT op=allreduce mode=torch bytes={size} median_us={median:.1f} algbw_gbps={algbw:.3f} "
                  f"busbw_gbps={busbw:.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2, 29500 + os.getpid() % 1000), nprocs=2)
