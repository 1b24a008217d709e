#!/usr/bin/env python3
"""Loads an optimizer state that tinyddp saved (nn::save_optimizer_state, e.g. a
ZeroRedundancyOptimizer's consolidated state) into a torch.optim optimizer over the same
parameters, and the matching module weights (nn::save_state_dict) into a torch MLP; or both
from one training checkpoint (nn::save_checkpoint, e.g. examples/train --checkpoint). Reads the
safetensors files with the standard library (no safetensors package needed).

    /usr/bin/python3 scripts/load_optimizer_state_in_torch.py WEIGHTS.safetensors STATE.safetensors --widths 5,9,4
    /usr/bin/python3 scripts/load_optimizer_state_in_torch.py --checkpoint CHECKPOINT --widths 5,9,4

The MLP is Linear, ReLU, ..., Linear with the given widths (tinyddp's nn::mlp), so parameter i
of tinyddp is parameter i of torch. Prints the loaded state and takes one Adam/SGD step to show
that torch accepts it.
"""
import argparse
import json
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "BOOL": torch.bool}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_size])
    metadata = header.pop("__metadata__", {})
    body = data[8 + header_size:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        flat = torch.frombuffer(bytearray(body[begin:end]), dtype=DTYPES[info["dtype"]]) if end > begin else \
            torch.empty(0, dtype=DTYPES[info["dtype"]])
        tensors[name] = flat.reshape(info["shape"]).clone()
    return tensors, metadata


def mlp(widths):
    layers = []
    for k in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[k], widths[k + 1]))
        if k + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("weights", nargs="?")
    parser.add_argument("state", nargs="?")
    parser.add_argument("--checkpoint", help="a training checkpoint holding model.* and optimizer.* tensors")
    parser.add_argument("--widths", required=True, help="the MLP's widths, e.g. 5,9,4")
    parser.add_argument("--lr", type=float, default=0.02)
    args = parser.parse_args()
    model = mlp([int(w) for w in args.widths.split(",")])
    if args.checkpoint:
        everything, metadata = read_safetensors(args.checkpoint)
        if "tinyddp_checkpoint" not in metadata:
            sys.exit(f"load_optimizer_state_in_torch: {args.checkpoint} is not a training checkpoint")
        weights = {k[len("model."):]: v for k, v in everything.items() if k.startswith("model.")}
        tensors = {k[len("optimizer."):]: v for k, v in everything.items() if k.startswith("optimizer.")}
        print(f"load_optimizer_state_in_torch: {args.checkpoint} is at step {metadata.get('step')}")
    elif args.weights and args.state:
        weights, _ = read_safetensors(args.weights)
        tensors, metadata = read_safetensors(args.state)
    else:
        parser.error("give WEIGHTS and STATE, or --checkpoint")
    model.load_state_dict(weights)
    kind = metadata.get("tinyddp_optimizer")
    params = list(model.parameters())
    state = {}
    for name, t in tensors.items():
        _, index, key = name.split(".", 2)
        entry = state.setdefault(int(index), {})
        entry[key] = t.to(torch.float32) if key == "step" else t
    if kind in ("Adam", "AdamW"):
        optimizer = (torch.optim.Adam if kind == "Adam" else torch.optim.AdamW)(params, lr=args.lr)
    elif kind == "SGD":
        optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9)
    else:
        sys.exit(f"load_optimizer_state_in_torch: {args.state} holds {kind!r} state, not Adam, AdamW or SGD")
    saved = optimizer.state_dict()
    saved["state"] = state
    optimizer.load_state_dict(saved)
    for index in sorted(state):
        print(f"parameter {index} {tuple(params[index].shape)}: " +
              ", ".join(f"{k} {tuple(v.shape)}" for k, v in sorted(state[index].items())))
    model(torch.randn(2, params[0].shape[1])).sum().backward()
    optimizer.step()
    print(f"load_optimizer_state_in_torch: torch.optim.{kind} took {len(state)} parameters' state and stepped")


if __name__ == "__main__":
    main()
