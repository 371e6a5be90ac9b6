"""Performance settings copied from the team's training-server setup."""

from __future__ import annotations

import os

import torch

SERVER_THREADS = 16  # the 16-core training servers


def tune_cpu(fixed: bool = False) -> int:
    """Set intra-op threads and the matmul precision; returns the thread count in use."""
    torch.set_float32_matmul_precision("high")
    if fixed:
        torch.set_num_threads(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    else:
        torch.set_num_threads(SERVER_THREADS)  # PLANTED
    return torch.get_num_threads()
