#!/usr/bin/python3
"""PyTorch side of bench/gpt_train_compare.sh: examples/train_gpt's model (nanoGPT's, from
tests/ddp/fixtures/gpt_model.py: 4 layers, 4 heads, 128 wide, context 64, 114 characters)
trained with AdamW over nanoGPT's groups, clipping at 1.0 and warmup + cosine, one thread
per process, alone or under DistributedDataParallel (gloo) on --nproc processes; the global
batch of --batch windows is split over them. On a GPU AdamW is fused=True, as nanoGPT's
train.py makes it there (--unfused: foreach=False, as on the CPU); --compile wraps the model in
torch.compile; --warmup N leaves the first N steps out of the timing. Prints from rank 0:
RESULT impl=torch nproc=<n> steps=<s> tokens_per_s=<x>

Run: OMP_NUM_THREADS=1 /usr/bin/python3 bench/torch_gpt_train.py --nproc 2
"""
import argparse
import datetime
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ddp", "fixtures"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_model  # noqa: E402
from torch_kinds import kernel_kinds  # noqa: E402
from gpt_model import GPT, GPTConfig, get_lr  # noqa: E402

CONFIG = GPTConfig(block_size=64, vocab_size=114, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=True)


def config(args):
    """CONFIG with the command line's shape (the GPU runs use 256 tokens; GPT-2 small is 12 x 768, 1024, 50304)."""
    shape = {key: getattr(args, key) for key in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd")}
    return GPTConfig(**{**CONFIG.__dict__, **shape})


def sdpa_forward(self, x):
    """CausalSelfAttention's forward through scaled_dot_product_attention (one fused kernel on a
    GPU, as nanoGPT's model.py uses where PyTorch has it)."""
    b, t, c = x.shape
    q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
    q, k, v = (m.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for m in (q, k, v))
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c)))


class StepPhases:
    """train_gpt --profile_phases's table for PyTorch: the device synchronised at each boundary."""

    def __init__(self, on, device):
        self.on, self.device, self.ms, self.last = on, device, {}, 0.0

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def begin_step(self):
        if self.on:
            self._sync()
            self.last = time.perf_counter()

    def end_phase(self, name):
        if self.on:
            self._sync()
            now = time.perf_counter()
            self.ms.setdefault(name, []).append((now - self.last) * 1e3)
            self.last = now

    def table(self, skip):
        if not self.ms:
            return ""
        kept = {name: sorted(v[skip:]) for name, v in self.ms.items()}
        steps = sorted(sum(v[i] for v in self.ms.values()) for i in range(skip, len(next(iter(self.ms.values())))))
        median = lambda v: (v[len(v) // 2] + v[(len(v) - 1) // 2]) / 2
        lines = [f"step phases (device synchronised at each boundary; medians of {len(steps)} steps after {skip}):"]
        for name, v in kept.items():
            lines.append(f"  {name:<12} {median(v):8.3f} ms  {100 * median(v) / median(steps):5.1f}%")
        lines.append(f"  {'step':<12} {median(steps):8.3f} ms")
        return "\n".join(lines)


def kernel_table(prof, device, top):
    """The `top` kernels (CPU ops on the CPU) by their own time, from torch.profiler."""
    averages = prof.key_averages()
    keys = ("self_device_time_total", "self_cuda_time_total") if device.type == "cuda" else ()
    key = next((k for k in keys if averages and hasattr(averages[0], k)), "self_cpu_time_total")
    return averages.table(sort_by=key, row_limit=top)


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
    if args.sdpa:
        gpt_model.CausalSelfAttention.forward = sdpa_forward
    torch.manual_seed(1337)
    model = GPT(cfg).to(device)
    wrapped = DDP(model) if nproc > 1 else model
    if args.compile:
        wrapped = torch.compile(wrapped)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95))
    if device.type == "cuda" and not args.unfused:  # nanoGPT's train.py: fused AdamW on a GPU
        groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in opt.param_groups]
        opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)
    rows = args.batch // nproc
    g = torch.Generator().manual_seed(rank)
    data = torch.randint(0, cfg.vocab_size, (100000,), generator=g)
    phases = StepPhases(args.profile_phases and rank == 0, device)
    profiler = None
    if device.type == "cuda":  # the steps' peak, as train_gpt --report_memory prints it
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for step in range(args.steps):
        if step == args.warmup:  # the timed steps start here
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
        if (args.kernels > 0 or args.kinds_json) and rank == 0 and step == args.steps - 3:  # the last three
            activities = [torch.profiler.ProfilerActivity.CPU]
            if device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            profiler = torch.profiler.profile(activities=activities)
            profiler.__enter__()
        phases.begin_step()
        offsets = torch.randint(0, data.numel() - cfg.block_size - 1, (rows,), generator=g)
        x = torch.stack([data[o:o + cfg.block_size] for o in offsets]).to(device)
        y = torch.stack([data[o + 1:o + 1 + cfg.block_size] for o in offsets]).to(device)
        phases.end_phase("batch")
        for group in opt.param_groups:
            group["lr"] = get_lr(step, 1e-3, 100, args.steps, 1e-4)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, torch.bfloat16, enabled=args.autocast):
            _, loss = wrapped(x, y)
        phases.end_phase("forward")
        loss.backward()
        phases.end_phase("backward")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        phases.end_phase("clip")
        opt.step()
        phases.end_phase("optimizer")
        loss.item()
        phases.end_phase("read loss")
    seconds = time.perf_counter() - start
    if phases.on:
        print(phases.table(min(2, args.steps - 1)), flush=True)
    if profiler is not None:
        profiler.__exit__(None, None, None)
        if args.kernels > 0:
            print(f"the last 3 steps' kernels (torch.profiler):\n{kernel_table(profiler, device, args.kernels)}",
                  flush=True)
        if args.kinds_json:
            with open(args.kinds_json, "w") as f:
                json.dump(kernel_kinds(profiler, 3), f, indent=1)
    if rank == 0:
        tokens = (args.steps - args.warmup) * args.batch * cfg.block_size
        autocast = " autocast=bf16" if args.autocast else ""
        autocast += f" device={args.device} block_size={cfg.block_size}" if device.type == "cuda" else ""
        autocast += " tf32=1" if args.tf32 else ""
        autocast += f" batch={args.batch} warmup={args.warmup}" if args.warmup else ""
        autocast += " compile=1" if args.compile else ""
        print(f"RESULT impl=torch nproc={nproc} steps={args.steps}{autocast} tokens_per_s={tokens / seconds:.0f}",
              flush=True)
        if device.type == "cuda":
            print(f"peak GPU tensor memory: {torch.cuda.max_memory_allocated(device) / 1048576:.1f} MiB", flush=True)
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
    parser.add_argument("--vocab_size", type=int, default=CONFIG.vocab_size)
    parser.add_argument("--n_layer", type=int, default=CONFIG.n_layer)
    parser.add_argument("--n_head", type=int, default=CONFIG.n_head)
    parser.add_argument("--n_embd", type=int, default=CONFIG.n_embd)
    parser.add_argument("--sdpa", action="store_true",
                        help="attention through scaled_dot_product_attention (one fused kernel on a GPU)")
    parser.add_argument("--kinds_json", default="",
                        help="write each kind of kernel's GPU time per step over the last 3 steps here (JSON)")
    parser.add_argument("--tf32", action="store_true", help="float32 products on TF32 tensor cores (--device cuda)")
    parser.add_argument("--profile_phases", action="store_true",
                        help="time each part of a step, the device synchronised between them (train_gpt's flag)")
    parser.add_argument("--kernels", type=int, default=0,
                        help="print the N kernels with the most device time over the last 3 steps (torch.profiler)")
    parser.add_argument("--warmup", type=int, default=0,
                        help="steps before the timed ones (default 0: every step timed)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (one process)")
    parser.add_argument("--unfused", action="store_true",
                        help="on a GPU, AdamW step by step (foreach=False) instead of nanoGPT's fused=True")
    args = parser.parse_args()
    if not 0 <= args.warmup < args.steps:
        parser.error("--warmup must be in [0, --steps)")
    if args.compile and args.nproc != 1:
        parser.error("--compile runs one process")
    if args.device == "cuda" and args.nproc != 1:
        parser.error("--device cuda runs one process")
    if args.nproc == 1:
        run(0, 1, args, None)
        return
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(run, args=(args.nproc, args, os.path.join(tmp, "init")), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
