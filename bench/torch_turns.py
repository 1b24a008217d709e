"""Thread counts taking turns inside one PyTorch process, for the --turns modes of
bench/torch_train_step.py and bench/torch_matmul.py (tinyddp's side: train_step --turns,
//bench:matmul_turns): R rounds, each measuring at 1 thread and then at `threads`, so that the
host's fast and slow phases hit both counts alike.
"""
import ctypes
import statistics

import torch


def set_threads(count):
    """torch's intra-op threads and the pool of the OpenBLAS it calls for float32 products."""
    torch.set_num_threads(count)
    try:
        ctypes.CDLL("libblas.so.3").openblas_set_num_threads(count)
    except (OSError, AttributeError):
        pass  # another BLAS: torch.set_num_threads is all there is


def in_turns(measure, threads, turns):
    """[(count, median of the rounds' figures, rounds in which it was lower)] for counts 1 and
    `threads`, measure() giving one round's figure at the count set."""
    counts, figures = [1, threads], [[], []]
    for _ in range(turns):
        for k, count in enumerate(counts):
            set_threads(count)
            figures[k].append(measure())
    return [(count, statistics.median(figures[k]), sum(a < b for a, b in zip(figures[k], figures[1 - k])))
            for k, count in enumerate(counts)]
