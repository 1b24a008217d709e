#!/usr/bin/python3
"""Writes docs/torch_names.md: every PyTorch name tinyddp has, read from the headers (Tensor
methods from tensor/methods.inc and tensor.h, torch.* functions from the tensor headers, nn
modules, optimizers, schedulers and datasets from the classes of nn/ and ddp/, F.* from
nn/functional.h, nn.init.* and nn.utils.* from their headers, dist.* from comm/distributed.h),
each beside its tinyddp spelling and the header that declares it.

    python3 scripts/torch_names.py            # writes docs/torch_names.md
    python3 scripts/torch_names.py --check    # fails when docs/torch_names.md is stale
    /usr/bin/python3 scripts/torch_names.py --verify   # with PyTorch: every listed name exists there

A header name that is tinyddp's own (a helper, an options struct) is in OWN below; --verify (run
whenever the list changes) fails on a name PyTorch does not have and that OWN does not hold, so
the table lists PyTorch's names only. tests/docs:torch_names_test runs --check.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "torch_names.md")

# tinyddp's own names in the headers read below (helpers, spellings of its own, internals), bare
# or, where the name is PyTorch's elsewhere, qualified ("torch.normal_": torch has Tensor.normal_).
OWN = {
    "add_out", "mul_out", "div_out", "copy_into", "write_in_place", "fill_out", "accumulate_into", "scalar_like",
    "fused_sgd_step_", "fused_sgd_steps_", "fused_adam_step_", "fused_adam_steps_", "foreach_norm", "foreach_mul_", "arange_impl", "from_vector", "format_shape", "causal_softmax", "flash_attention", "cross_entropy_rows", "check_class_targets",
    "broadcast_shapes",
    "is_expandable_to", "infer_size", "contiguous_strides", "wrap_dim", "numel_of", "scaled_dot_product",
    "im2col", "col2im", "sum_to_size", "dropout_mask", "set_data", "raw_data_ptr", "use_count", "impl", "is_same",
    "shares_storage", "checked", "str", "to_vector", "item", "data_ptr", "is_placeholder", "is_stand_in",
    "autograd_meta", "check_dtype", "grad_accumulator", "impl_ptr", "make", "mutable_grad", "name_",
    "set_autograd_meta", "Tensor.maximum_", "Tensor.minimum_", "batch_norm_mean_var", "batch_norm_widens",
    "torch.bernoulli_", "torch.normal_", "torch.uniform_", "F.embedding_renorm_", "torch.repeat", "calculate_fan_in_and_fan_out", "MomentOptimizer", "NanoGptLR", "WarmupCosineLR",
    "BatchNorm", "Block", "CausalSelfAttention", "GPT", "InstanceNorm", "MLP", "NormBase", "ToyModel",
    # tensor/dtype.h's helpers (torch.is_floating_point takes a tensor; tinyddp's a dtype).
    "torch.bfloat16_bits_to_float", "torch.dtype_name", "torch.element_size", "torch.float_to_bfloat16_bits",
    "torch.float_to_half_bits", "torch.half_bits_to_float", "torch.is_16bit_float", "torch.is_floating_point",
    "torch.is_integral",
    "nn.utils.checkpoint",  # listed as torch.utils.checkpoint.checkpoint, its home (SINGLE_FUNCTIONS)
}
# Names of libtorch's C++ API that Python's torch spells otherwise (x.sizes() for x.size(),
# x.index({...}) for x[...], torch::gelu for F.gelu), and names newer than Debian's torch 1.13.
LIBTORCH = {"Tensor.defined", "Tensor.sizes", "Tensor.strides", "Tensor.index", "Tensor.slice", "Tensor.nbytes",
            "Tensor.suggest_memory_format", "Tensor.gelu", "torch.index", "torch.slice", "torch.unfold"}
NEWER = {"F.scaled_dot_product_attention", "distributed.fsdp.fully_shard"}

# Where each kind of name comes from: (section, torch prefix, tinyddp prefix, headers).
FUNCTION_SECTIONS = [
    ("torch functions", "torch.", "tensor::", ["tensor/ops.h", "tensor/fused.h", "tensor/factory.h", "tensor/random.h",
                                                "tensor/indexing.h", "tensor/grad_mode.h", "tensor/dtype.h"]),
    ("torch.nn.functional", "F.", "F::", ["nn/functional.h", "nn/embedding_bag.h"]),
    ("torch.nn.init", "nn.init.", "nn::init::", ["nn/init.h"]),
    ("torch.nn.utils", "nn.utils.", "nn::", ["nn/clip_grad.h", "nn/utils.h"]),
    ("torch.nn.utils.rnn", "nn.utils.rnn.", "nn::", ["nn/packed_sequence.h"]),
    ("torch.distributed", "dist.", "comm::", ["comm/distributed.h"]),
]
# Classes that derive from no kind's base: (torch name, tinyddp name, header), listed in the section of
# the torch prefix they start with.
PLAIN_CLASSES = [("nn.utils.rnn.PackedSequence", "nn::PackedSequence", "nn/packed_sequence.h")]
# Single functions of headers that hold mostly tinyddp's own: (torch name, tinyddp name, header).
SINGLE_FUNCTIONS = [("distributed.fsdp.fully_shard", "ddp::fully_shard", "ddp/fully_shard.h"),
                    ("utils.checkpoint.checkpoint", "nn::checkpoint", "nn/utils.h")]
CLASS_HEADERS = ["nn/" + f for f in sorted(os.listdir(os.path.join(ROOT, "nn"))) if f.endswith(".h")] + [
    "ddp/data_parallel.h", "ddp/distributed.h", "ddp/sync_batchnorm.h", "ddp/zero_redundancy_optimizer.h"]
# Classes whose PyTorch home is not their kind's: (torch prefix).
CLASS_HOMES = {"DistributedDataParallel": "nn.parallel.", "DataParallel": "nn.parallel.",
               "ZeroRedundancyOptimizer": "distributed.optim."}
CLASS_KINDS = [  # (base a class derives from, directly or not; section; torch prefix)
    ("Optimizer", "torch.optim", "optim."),
    ("LRScheduler", "torch.optim.lr_scheduler", "optim.lr_scheduler."),
    ("Dataset", "torch.utils.data", "utils.data."),
    ("Sampler", "torch.utils.data", "utils.data."),
    ("Module", "torch.nn", "nn."),
]

DECL = re.compile(r"^(?:template <[^>]*>\s*)?(?:inline |static |constexpr |explicit |virtual |friend )*"
                  r"(?:const )?[A-Za-z_][\w:<>, ]*?[\s&*]+(~?\w+)\s*\(")
KEYWORDS = {"return", "if", "while", "for", "switch", "sizeof", "decltype", "operator", "TDDP_CHECK", "static_assert"}


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def free_functions(path):
    """Names of the functions a header declares at namespace level (unindented), and the
    names it brings in with `using x::name;`."""
    names = set()
    for line in read(path).splitlines():
        m = DECL.match(line)
        if m and not line.startswith((" ", "\t", "//", "#")):
            names.add(m.group(1))
        u = re.match(r"^using (?:\w+::)+(\w+);", line)
        if u:
            names.add(u.group(1))
    return {n for n in names if n not in KEYWORDS and not n[0].isupper() and n not in OWN}


def tensor_methods():
    names = set(re.findall(r"TDDP_METHOD\([^,]+,\s*(\w+)", read("tensor/methods.inc")))
    names |= set(re.findall(r"TDDP_INPLACE\((\w+)", read("tensor/methods.inc")))
    body = read("tensor/tensor.h").split("class Tensor {", 1)[1].split("\n};", 1)[0]
    for line in body.splitlines():
        m = DECL.match(line.strip())
        if m and line.startswith("  ") and not line.startswith("   "):
            names.add(m.group(1))
    return {n for n in names if n not in KEYWORDS and n != "Tensor" and not n.startswith("~") and n not in OWN}


def classes():
    """{class: (base, header)} of the class headers' public classes."""
    found = {}
    for path in CLASS_HEADERS:
        for m in re.finditer(r"^(?:class|struct) (\w+)(?: final)? : (?:public )?(?:nn::)?(\w+)", read(path), re.M):
            found[m.group(1)] = (m.group(2), path)
        for m in re.finditer(r"^struct (\w+Loss) \{", read(path), re.M):  # the losses: callables, not Modules
            found[m.group(1)] = ("Module", path)
    return found


def kind_of(name, found):
    seen = set()
    while name in found and name not in seen:
        seen.add(name)
        base = found[name][0]
        for kind in CLASS_KINDS:
            if base == kind[0]:
                return kind
        name = base
    return None


def headers_of(name, paths):
    return ", ".join(p for p in paths if re.search(rf"\b{re.escape(name)}\(", read(p)) or
                     re.search(rf"using (?:\w+::)+{re.escape(name)};", read(p)))


def sections():
    out = []
    methods = sorted(tensor_methods())
    out.append(("torch.Tensor methods", [(f"Tensor.{n}", f"x.{n}(...)", "tensor/methods.inc, tensor/tensor.h")
                                         for n in methods if f"Tensor.{n}" not in OWN]))
    for title, torch_prefix, ours, paths in FUNCTION_SECTIONS:
        names = set()
        for p in paths:
            names |= free_functions(p)
        rows = [(f"{torch_prefix}{n}", f"{ours}{n}", headers_of(n, paths)) for n in sorted(names)
                if f"{torch_prefix}{n}" not in OWN]
        rows += [row for row in PLAIN_CLASSES if row[0].rsplit(".", 1)[0] + "." == torch_prefix and
                 re.search(rf"^class {row[1].split('::')[1]} ", read(row[2]), re.M)]
        out.append((title, rows))
    out.append(("torch.distributed.fsdp", [row for row in SINGLE_FUNCTIONS
                                           if re.search(rf"\b{row[1].split('::')[1]}\(", read(row[2]))]))
    found = classes()
    by_kind = {}
    for name, (_, path) in sorted(found.items()):
        kind = kind_of(name, found)
        if kind is None or name in OWN or name.endswith("Options") or name in {b for b, _, _ in CLASS_KINDS}:
            continue
        ns = "ddp::" if path.startswith("ddp/") else "nn::"
        by_kind.setdefault(kind, []).append((f"{CLASS_HOMES.get(name, kind[2])}{name}", f"{ns}{name}", path))
    for kind in CLASS_KINDS:
        if kind in by_kind:
            out.append((kind[1] + (" (samplers)" if kind[0] == "Sampler" else ""), by_kind[kind]))
    return out


def render():
    lines = ["# PyTorch's names in tinyddp", "",
             "Generated by scripts/torch_names.py from the headers (do not edit; tests/docs:torch_names_test",
             "fails when it is stale). Each PyTorch name tinyddp has, its spelling here, and the header that",
             "declares it; docs/nn.md's table says how options and arguments translate, and its \"Not yet\"",
             "list what is missing.", ""]
    for title, rows in sections():
        lines += [f"## {title} ({len(rows)})", "", "| PyTorch | tinyddp | declared in |", "|---|---|---|"]
        lines += [f"| `{a}`{' (libtorch)' if a in LIBTORCH else ''} | `{b}` | {c} |" for a, b, c in rows]
        lines.append("")
    return "\n".join(lines)


def verify():
    import torch  # noqa: F401 (only here: the check and the writing need no PyTorch)
    import torch.distributed
    import torch.distributed.optim
    import torch.nn.functional
    import torch.nn.utils.rnn
    import torch.utils.checkpoint
    import torch.utils.data
    roots = {"Tensor.": torch.Tensor, "torch.": torch, "F.": torch.nn.functional, "nn.init.": torch.nn.init,
             "nn.utils.": torch.nn.utils, "nn.utils.rnn.": torch.nn.utils.rnn, "dist.": torch.distributed, "optim.lr_scheduler.": torch.optim.lr_scheduler,
             "optim.": torch.optim, "utils.data.": torch.utils.data, "nn.": torch.nn,
             "nn.parallel.": torch.nn.parallel, "distributed.optim.": torch.distributed.optim,
             "distributed.fsdp.": None,  # (FSDP2's fully_shard is newer than torch 1.13: NEWER)
             "utils.checkpoint.": torch.utils.checkpoint}
    missing = []
    for _, rows in sections():
        for name, _, _ in rows:
            if name in LIBTORCH or name in NEWER:
                continue
            if name.startswith("torch.") and hasattr(torch.nn.functional, name[len("torch."):]):
                continue  # torch::gelu, torch::linear: libtorch's functions of F's names
            prefix = next(p for p in sorted(roots, key=len, reverse=True) if name.startswith(p))
            attr = name[len(prefix):]
            if not hasattr(roots[prefix], attr):
                missing.append(name)
    return missing


def main():
    text = render()
    if "--check" in sys.argv:
        with open(OUT) as f:
            if f.read() != text:
                sys.exit("torch_names: docs/torch_names.md is stale; run python3 scripts/torch_names.py")
        print("torch_names: docs/torch_names.md is current")
        return
    if "--verify" in sys.argv:
        missing = verify()
        print("\n".join(missing))
        sys.exit(f"torch_names: {len(missing)} names PyTorch does not have" if missing else 0)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"torch_names: wrote {OUT}")


if __name__ == "__main__":
    main()
