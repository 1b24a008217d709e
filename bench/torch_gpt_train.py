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


def config(args):
    """CONFIG with --block_size (the GPU runs use 256)."""
    return GPTConfig(**{**CONFIG.__dict__, "block_size": args.block_size})


def run(rank, nproc, args, init_file):
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = config(args)
    device = torch.device(args.device)
    if device.type == "cuda":  # float32 products as on the CPU unless --tf32 (train_gpt --tf32)
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    if nproc > 1:
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=nproc,
                                timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(1337)
    model = GPT(cfg).to(device)
    wrapped = DDP(model) if nproc > 1 else model
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95))
    rows = args.batch // nproc
    g = torch.Generator().manual_seed(rank)
    data = torch.randint(0, cfg.vocab_size, (100000,), generator=g)
    start = time.perf_counter()
    for step in range(args.steps):
        offsets = torch.randint(0, data.numel() - cfg.block_size - 1, (rows,), generator=g)
        x = torch.stack([data[o:o + cfg.block_size] for o in offsets]).to(device)
        y = torch.stack([data[o + 1:o + 1 + cfg.block_size] for o in offsets]).to(device)
        for group in opt.param_groups:
            group["lr"] = get_lr(step, 1e-3, 100, args.steps, 1e-4)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, torch.bfloat16, enabled=args.autocast):
            _, loss = wrapped(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
    seconds = time.perf_counter() - start
    if rank == 0:
        tokens = args.steps * args.batch * cfg.block_size
        autocast = " autocast=bf16" if args.autocast else ""
        autocast += f" device={args.device} block_size={cfg.block_size}" if device.type == "cuda" else ""
        autocast += " tf32=1" if args.tf32 else ""
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
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads per process (default 1; 0: PyTorch's default)")
    parser.add_argument("--autocast", action="store_true", help="forward and loss under autocast (bfloat16)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: one process on cuda:0")
    parser.add_argument("--block_size", type=int, default=CONFIG.block_size)
    parser.add_argument("--tf32", action="store_true", help="float32 products on TF32 tensor cores (--device cuda)")
    args = parser.parse_args()
    if args.device == "cuda" and args.nproc != 1:
        parser.error("--device cuda runs one process")
    if args.nproc == 1:
        run(0, 1, args, None)
        return
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(run, args=(args.nproc, args, os.path.join(tmp, "init")), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
