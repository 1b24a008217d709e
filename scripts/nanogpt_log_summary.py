#!/usr/bin/python3
"""One RESULT line from a log of train_gpt in nanoGPT's mode (its `iter N: loss X, time T ms,
mfu M%` lines and, with report_memory=True, its peak line): the median iteration time over the
iterations from --skip on (the first ones warm up), as tokens/s for --tokens tokens an
iteration (default: the batch read from the log's name, `_b<batch>_`, times 1024), the last
MFU printed, and the peak tensor memory.

Run: python3 scripts/nanogpt_log_summary.py gpt2_bfloat16_b8_graphTrue.log
"""
import argparse
import os
import re
import statistics
import sys


def summary(text, name, tokens, skip):
    iters = [(int(i), float(ms), mfu)
             for i, ms, mfu in re.findall(r"^iter (\d+): loss [^,]+, time ([0-9.]+)ms(?:, mfu (-?[0-9.]+)%)?$",
                                          text, re.MULTILINE)]
    timed = [ms for i, ms, _ in iters if i >= skip]
    if not timed:
        return f"RESULT impl=tinyddp work={name} no iterations from {skip} on"
    ms = statistics.median(timed)
    peak = re.search(r"peak (?:GPU|CPU) tensor memory on rank 0: ([0-9.]+) MiB", text)
    mfu = iters[-1][2] or "?"
    return (f"RESULT impl=tinyddp work={name} iterations={len(timed)} ms_per_iter={ms:.1f} "
            f"tokens_per_s={tokens / ms * 1e3:.0f} mfu={mfu}% peak_mib={peak.group(1) if peak else '?'}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    parser.add_argument("--tokens", type=int, default=0, help="tokens an iteration (default: _b<batch>_ x 1024)")
    parser.add_argument("--skip", type=int, default=5, help="iterations before the timed ones (default 5)")
    args = parser.parse_args()
    name = os.path.splitext(os.path.basename(args.log))[0]
    tokens = args.tokens
    if tokens <= 0:
        batch = re.search(r"_b(\d+)_", name)
        if batch is None:
            sys.exit(f"{args.log}: pass --tokens (the name has no _b<batch>_)")
        tokens = int(batch.group(1)) * 1024
    with open(args.log) as f:
        print(summary(f.read(), name, tokens, args.skip))


if __name__ == "__main__":
    main()
