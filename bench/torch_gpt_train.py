#!/usr/bin/python3
"""PyTorch side of bench/gpt_train_compare.sh: examples/train_gpt's model (nanoGPT's, from
tests/ddp/fixtures/gpt_model.py: 4 layers, 4 heads, 128 wide, context 64, 114 characters)
trained with AdamW over nanoGPT's groups, clipping at 1.0 and warmup + cosine, one thread
per process, alone or under DistributedDataParallel (gloo) on --nproc processes; the global
batch of --batch windows is split over them. Prints from rank 0:
RESULT impl=torch nproc=<n> steps=<s> tokens_per_s=<x>

Run: OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_gpt_train.py --nproc 2
"""
import argparse
import datetime
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ddp", "fixtures"))
from gpt_model import GPT, GPTConfig, get_lr  # noqa: E402

CONFIG = GPTConfig(block_size=64, vocab_size=114, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=True)


def run(rank, nproc, args, init_file):
    torch.set_num_threads(1)
    if nproc > 1:
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=nproc,
                                timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(1337)
    model = GPT(CONFIG)
    wrapped = DDP(model) if nproc > 1 else model
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95))
    rows = args.batch // nproc
    g = torch.Generator().manual_seed(rank)
    data = torch.randint(0, CONFIG.vocab_size, (100000,), generator=g)
    start = time.perf_counter()
    for step in range(args.steps):
        offsets = torch.randint(0, data.numel() - CONFIG.block_size - 1, (rows,), generator=g)
        x = torch.stack([data[o:o + CONFIG.block_size] for o in offsets])
        y = torch.stack([data[o + 1:o + 1 + CONFIG.block_size] for o in offsets])
        for group in opt.param_groups:
            group["lr"] = get_lr(step, 1e-3, 100, args.steps, 1e-4)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", torch.bfloat16, enabled=args.autocast):
            _, loss = wrapped(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
    seconds = time.perf_counter() - start
    if rank == 0:
        tokens = args.steps * args.batch * CONFIG.block_size
        autocast = " autocast=bf16" if args.autocast else ""
        print(f"RESULT impl=torch nproc={nproc} steps={args.steps}{autocast} tokens_per_s={tokens / seconds:.0f}",
              flush=True)
    if nproc > 1:
        dist.barrier()
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--autocast", action="store_true", help="forward and loss under autocast (bfloat16)")
    args = parser.parse_args()
    if args.nproc == 1:
        run(0, 1, args, None)
        return
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(run, args=(args.nproc, args, os.path.join(tmp, "init")), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
