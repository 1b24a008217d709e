#!/usr/bin/python3
"""The PyTorch side of `python3 bench/compare.py gpt`: the benchmarks of gpt_bench.cc, one thread
(or `python3 bench/torch_gpt_bench.py THREADS`).

The attention is the same module as nn::CausalSelfAttention (nanoGPT's, with the explicit
masked softmax: PyTorch 1.13 has no fused attention). Prints one JSON object per line:
{"name": ..., "ms": ...}, then {"name": "torch", ...}.
"""
import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_bench import timeit

EMBD, HEADS = 128, 4


class Attention(nn.Module):
    def __init__(self, block_size):
        super().__init__()
        self.c_attn = nn.Linear(EMBD, 3 * EMBD)
        self.c_proj = nn.Linear(EMBD, EMBD)
        self.register_buffer("future", torch.ones(block_size, block_size).tril() == 0, persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (m.view(b, t, HEADS, c // HEADS).transpose(1, 2) for m in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // HEADS))
        att = att.masked_fill(self.future[:t, :t], float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))


def main():
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    torch.manual_seed(0)
    for batch, seq in ((16, 64), (4, 256)):
        attn = Attention(seq)
        for which in (0, 1):
            x = torch.randn(batch, seq, EMBD, requires_grad=which == 1)
            grad = torch.randn(batch, seq, EMBD)

            def step():
                y = attn(x)
                if which == 1:
                    y.backward(grad)
                    attn.zero_grad()
                    x.grad = None

            print(json.dumps({"name": f"BM_Attention/batch:{batch}/T:{seq}/which:{which}", "ms": timeit(step)}))
    # Attention alone: PyTorch 1.13 has only the composed ops, so both of gpt_bench's rows
    # (composed, flash) are timed against them.
    for batch, heads, seq, head in ((32, 4, 256, 32), (4, 12, 1024, 64)):
        q, k, v = (torch.randn(batch, heads, seq, head, requires_grad=True) for _ in range(3))
        agrad = torch.randn(batch, heads, seq, head)
        future = torch.ones(seq, seq).tril() == 0

        def core_step():
            att = ((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head))).masked_fill(future, float("-inf"))
            (att.softmax(dim=-1) @ v).backward(agrad)
            q.grad = k.grad = v.grad = None

        ms = timeit(core_step)
        for flash in (0, 1):
            name = f"BM_AttentionCore/batch:{batch}/heads:{heads}/T:{seq}/head:{head}/flash:{flash}"
            print(json.dumps({"name": name, "ms": ms}))
    x = torch.randn(1024, EMBD, requires_grad=True)
    w, b = torch.randn(EMBD, requires_grad=True), torch.randn(EMBD, requires_grad=True)
    grad = torch.randn(1024, EMBD)

    def layer_norm_step():
        F.layer_norm(x, (EMBD,), w, b).backward(grad)
        x.grad = w.grad = b.grad = None

    print(json.dumps({"name": "BM_LayerNorm", "ms": timeit(layer_norm_step)}))
    for bf16, dtype in ((0, torch.float32), (1, torch.bfloat16)):
        h = torch.randn(1024, 4 * EMBD).to(dtype).requires_grad_()
        hgrad = torch.randn(1024, 4 * EMBD).to(dtype)

        def gelu_step():
            F.gelu(h).backward(hgrad)
            h.grad = None

        print(json.dumps({"name": f"BM_Gelu/bf16:{bf16}", "ms": timeit(gelu_step)}))
    future = torch.ones(64, 64).tril() == 0
    for bf16, dtype in ((0, torch.float32), (1, torch.bfloat16)):
        scores = torch.randn(128, 64, 64).to(dtype).requires_grad_()
        sgrad = torch.randn(128, 64, 64).to(dtype)

        def softmax_step():
            (scores * 0.25).masked_fill(future, float("-inf")).softmax(dim=-1).backward(sgrad)
            scores.grad = None

        print(json.dumps({"name": f"BM_CausalSoftmax/bf16:{bf16}", "ms": timeit(softmax_step)}))
    for rows, classes in ((8192, 65), (1024, 50304)):
        logits = torch.randn(rows, classes, requires_grad=True)
        targets = torch.randint(0, classes, (rows,))

        def loss_step():
            F.cross_entropy(logits, targets, ignore_index=-1).backward()
            logits.grad = None

        print(json.dumps({"name": f"BM_CrossEntropy/rows:{rows}/classes:{classes}", "ms": timeit(loss_step)}))
    print(json.dumps({"name": "torch", "version": torch.__version__,
                      "blas": torch.__config__.show().split("BLAS_INFO=")[1].split(",")[0]}))


if __name__ == "__main__":
    main()
