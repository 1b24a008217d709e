#!/usr/bin/python3
"""examples/wgan_gp.cc's training loop in PyTorch, one process (DDP in a world of one, gloo),
timed: the peer for `time bazel-bin/examples/wgan_gp --nproc 1` at the same thread count.

    /usr/bin/python3 bench/torch_wgan_gp.py --threads 1 --steps 300
"""
import argparse
import math
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def real_batch(batch, gen):
    u = torch.rand(batch, generator=gen).tolist()
    jitter = torch.rand(batch, 2, generator=gen).tolist()
    points = []
    for i in range(batch):
        angle = 2.0 * math.pi * min(7, math.floor(u[i] * 8)) / 8
        points.append([2.0 * math.cos(angle) + 0.1 * (jitter[i][0] - 0.5),
                       2.0 * math.sin(angle) + 0.1 * (jitter[i][1] - 0.5)])
    return torch.tensor(points, dtype=torch.float32)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "init"), rank=0, world_size=1)
        torch.manual_seed(1337)
        h = a.hidden
        g = nn.Sequential(nn.Linear(2, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 2))
        d = nn.Sequential(nn.Linear(2, h), nn.LeakyReLU(0.2), nn.Linear(h, h), nn.LeakyReLU(0.2), nn.Linear(h, 1))
        generator, critic = DDP(g), DDP(d)
        opt_g = torch.optim.Adam(g.parameters(), lr=1e-4, betas=(0.5, 0.9))
        opt_d = torch.optim.Adam(d.parameters(), lr=1e-4, betas=(0.5, 0.9))
        gen = torch.Generator().manual_seed(1338)
        start = time.perf_counter()
        for _ in range(a.steps):
            for _ in range(5):
                real = real_batch(a.batch_size, gen)
                z = torch.rand(a.batch_size, 2, generator=gen) * 2.0 - 1.0
                alpha = torch.rand(a.batch_size, 1, generator=gen)
                with torch.no_grad():
                    fake = generator(z)
                opt_d.zero_grad()
                d_real, d_fake = critic(real).mean(), critic(fake).mean()
                mixed = (alpha * real + (1.0 - alpha) * fake).requires_grad_(True)
                (grad,) = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)
                loss = d_fake - d_real + ((grad.norm(2, dim=1) - 1.0) ** 2).mean() * 10.0
                loss.backward()
                opt_d.step()
            z = torch.rand(a.batch_size, 2, generator=gen) * 2.0 - 1.0
            opt_g.zero_grad()
            (-critic(generator(z)).mean()).backward()
            opt_g.step()
        elapsed = time.perf_counter() - start
        print(f"RESULT impl=torch threads={a.threads} steps={a.steps} seconds={elapsed:.3f}")
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
