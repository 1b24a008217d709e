"""torch.profiler's device events in train_gpt --profile_ops's kinds (tensor/profiler.h), for
scripts/profile_compare.py: bench/torch_gpt_train.py and bench/torch_train_step.py --kinds_json."""
import re

# Kernel names to train_gpt --profile_ops's kinds (tensor/profiler.h), first match wins. The
# log-softmax and NLL kernels are cross-entropy's in this model (its attention's softmax is
# inside the fused attention kernel with --sdpa, else "attention" by its name alone).
KINDS = [
    ("attention", r"flash|fmha|attention|sdpa|softmax_warp|masked_fill"),
    ("GEMM", r"gemm|cutlass|cublas|nvjet|xmma|sm90_|sm80_|ampere_|s16816|s1688|splitK"),
    ("norm", r"layer_norm|LayerNorm|batch_norm|rms_norm"),
    ("loss", r"nll_loss|cross_entropy|log_softmax|softmax"),
    ("optimizer", r"adam|Adam|multi_tensor|foreach|lpnorm|l2norm"),
    ("embedding", r"embedding|Embedding|indexSelect|index_select|radix|sort|segment"),
    ("copy", r"[Cc]opy|[Mm]emcpy|[Mm]emset|cat_|CatArray"),
    ("reduction", r"reduce"),
    ("elementwise", r"elementwise|vectorized|unrolled|[Ff]ill|gelu|Gelu|pointwise"),
]


def kernel_kinds(prof, steps):
    """Each kind's GPU time and kernel count per step, and the GPU's busy and idle time between
    its first and last kernel, from torch.profiler's device events."""
    spans, per_kind = [], {}
    for e in prof.events():
        if "CUDA" not in str(getattr(e, "device_type", "")):
            continue
        start, end = e.time_range.start, e.time_range.end
        spans.append((start, end))
        kind = next((k for k, pattern in KINDS if re.search(pattern, e.name)), "other")
        ms, count = per_kind.get(kind, (0.0, 0))
        per_kind[kind] = (ms + (end - start) / 1e3, count + 1)
    spans.sort()
    busy, reach = 0.0, spans[0][0] if spans else 0.0
    for start, end in spans:
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    span = reach - spans[0][0] if spans else 0.0
    return {"steps": steps, "kinds": {k: {"ms_per_step": ms / steps, "kernels_per_step": n / steps}
                                      for k, (ms, n) in per_kind.items()},
            "gpu_busy_ms_per_step": busy / 1e3 / steps, "gpu_idle_ms_per_step": (span - busy) / 1e3 / steps}
