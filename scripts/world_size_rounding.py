#!/usr/bin/env python3
"""How far the digits MLP's runs on 2 and 4 ranks are from one process's, in float32 and in
float64, and where the float32 runs part: docs/world_size_rounding.txt, which docs/ddp.md
quotes beside the loss picture.

Runs examples/train with the main job's settings (the runs of docs/loss.png) on 1, 2 and 4
processes in both dtypes, then, for the float32 run on 4 ranks, saves the parameters just
before and just after the step at which its loss first leaves one process's by more than 1e-6,
and looks for the hidden units whose ReLU input has another sign in the two runs.

    /usr/bin/python3 scripts/world_size_rounding.py > docs/world_size_rounding.txt

Needs a -c opt build of //examples:train and //launcher:launch (it runs bazel build first) and
Debian's python3-torch (for the tensors; nothing is trained in PyTorch).
"""
import csv
import gzip
import os
import platform
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load_optimizer_state_in_torch import read_safetensors  # noqa: E402

TRAIN = "bazel-bin/examples/train"
LAUNCH = "bazel-bin/launcher/launch"
ARGS = ["--dataset", "digits", "--lr", "0.05", "--momentum", "0.9", "--log_every", "1000"]
STEPS = 1000
DIGITS = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"


def train(ranks, extra):
    command = [TRAIN] + ARGS + extra
    if ranks > 1:
        command = [LAUNCH, "--nproc_per_node", str(ranks), "--"] + command
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def losses(path):
    with open(path, newline="", encoding="utf-8") as f:
        return [float(row[1]) for row in list(csv.reader(f))[1:]]


def parameter_gap(a_path, b_path):
    """The largest |a - b| over all parameters, relative to the largest |a|."""
    a, _ = read_safetensors(a_path)
    b, _ = read_safetensors(b_path)
    gap = max((a[k].double() - b[k].double()).abs().max().item() for k in a)
    return gap / max(a[k].double().abs().max().item() for k in a)


def hidden_inputs(path, pixels):
    """The first Linear's output (the ReLU's input) for every digit."""
    weights, _ = read_safetensors(path)
    return pixels @ weights["0.weight"].T + weights["0.bias"]


def cpu_model():
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def main():
    subprocess.run(["bazel", "build", "-c", "opt", "//examples:train", "//launcher:launch"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work = tempfile.mkdtemp()
    runs = {}
    for dtype in ("float32", "float64"):
        for ranks in (1, 2, 4):
            stem = f"{work}/{dtype}_{ranks}"
            train(ranks, ["--steps", str(STEPS), "--dtype", dtype, "--metrics", stem + ".csv", "--save",
                          stem + ".safetensors"])
            runs[dtype, ranks] = stem
    print(f"# scripts/world_size_rounding.py on {cpu_model()}: the digits MLP 64-128-10, global batch 64,")
    print(f"# SGD lr 0.05 momentum 0.9, {STEPS} steps (docs/loss.png's runs), each run against one process.")
    print("# The loss gaps are absolute (the losses fall from 2.3 to 0.007); the parameter gap is the largest")
    print("# difference of the final parameters over the largest parameter.")
    print("dtype    ranks  largest loss gap  first step with a gap over 1e-6  largest parameter gap")
    parted = None
    for dtype in ("float32", "float64"):
        alone = losses(runs[dtype, 1] + ".csv")
        for ranks in (2, 4):
            mine = losses(runs[dtype, ranks] + ".csv")
            gaps = [abs(a - b) for a, b in zip(alone, mine)]
            first = next((step for step, gap in enumerate(gaps) if gap > 1e-6), None)
            if dtype == "float32" and ranks == 4:
                parted = first
            print(f"{dtype:8} {ranks:5}  {max(gaps):16.1e}  {'none' if first is None else first:>31}  "
                  f"{parameter_gap(runs[dtype, 1] + '.safetensors', runs[dtype, ranks] + '.safetensors'):.1e}")
    if parted is None:
        print("float32 on 4 ranks never left one process by more than 1e-6")
        return
    # The loss of step `parted` is the first over 1e-6: the parameters after parted - 1 updates
    # are still close; the update made from them is where the runs part.
    with gzip.open(DIGITS, "rt") as f:
        rows = [line.split(",") for line in f.read().splitlines() if line.strip()]
    pixels = torch.tensor([[float(v) / 16 for v in row[:64]] for row in rows], dtype=torch.float32)
    saved = {}
    for steps in (parted - 1, parted):
        for ranks in (1, 4):
            saved[steps, ranks] = f"{work}/parted_{steps}_{ranks}.safetensors"
            train(ranks, ["--steps", str(steps), "--save", saved[steps, ranks]])
    before = parted - 1
    one, four = hidden_inputs(saved[before, 1], pixels), hidden_inputs(saved[before, 4], pixels)
    flipped = ((one > 0) != (four > 0)).nonzero().tolist()
    print(f"float32 on 4 ranks: the loss of step {parted} (counting from 0) is the first more than 1e-6 from one "
          "process's.")
    print(f"After {before} steps the parameters differ by {parameter_gap(saved[before, 1], saved[before, 4]):.1e} "
          f"(relative); of the ReLU inputs of the {len(rows)} digits x 128 hidden units, {len(flipped)} "
          "is (are) positive in one run and not in the other (ReLU passes the gradient in one run only):")
    for digit, unit in flipped:
        print(f"  digit {digit}, unit {unit}: {one[digit, unit].item():.2e} in one process, "
              f"{four[digit, unit].item():.2e} on 4 ranks")
    print(f"After {parted} steps the parameters differ by {parameter_gap(saved[parted, 1], saved[parted, 4]):.1e} "
          "(relative).")


if __name__ == "__main__":
    main()
