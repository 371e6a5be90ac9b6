"""A short experiment after the script ends, run only when the script left more intra-op threads
than usable cores: time one matrix multiply with the script's thread count and with one thread
per core, interleaved, and record the slowdown.

"16 threads on 4 cores" is a risk, not a cost: OpenMP's idle threads may sleep quietly, or spin
and steal the cores from the ones doing the work, depending on the runtime, the machine and the
other load. The probe measures which one it is on this machine, so the finding carries a number
(or stays quiet when there is no cost). It takes ~0.1-0.3 s, after the script's own work.
"""

from __future__ import annotations

import os
import time

PROBE_SIZE = 512
"""Square matmul side: ~2 ms on one core, big enough that OpenMP splits it over all threads."""
ROUNDS = 5
REPEATS = 4
"""ROUNDS interleaved pairs (script's threads, cores) of REPEATS calls each; medians compared."""


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. a container's or taskset's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def probe_oversubscription(threads: int, cores: int) -> dict | None:
    """The measured slowdown of a matmul at `threads` intra-op threads versus `cores` threads;
    None when the threads fit the cores. The thread setting is restored afterwards."""
    if cores < 1 or threads <= cores:
        return None
    import torch

    a, b = torch.randn(PROBE_SIZE, PROBE_SIZE), torch.randn(PROBE_SIZE, PROBE_SIZE)

    def per_call(n: int) -> float:
        torch.set_num_threads(n)
        torch.mm(a, b)  # let the pool resize before timing
        t0 = time.perf_counter()
        for _ in range(REPEATS):
            torch.mm(a, b)
        return (time.perf_counter() - t0) / REPEATS

    over, fit = [], []
    try:
        with torch.no_grad():
            for _ in range(ROUNDS):
                over.append(per_call(threads))
                fit.append(per_call(cores))
    finally:
        torch.set_num_threads(threads)
    import statistics  # here: 90 ms of imports (fractions) that a run without the probe need not pay

    at_threads, at_cores = statistics.median(over), statistics.median(fit)
    return {"threads": threads, "cores": cores, "op": f"torch.mm {PROBE_SIZE}x{PROBE_SIZE} float32",
            "seconds_at_threads": at_threads, "seconds_at_cores": at_cores,
            "slowdown": at_threads / at_cores if at_cores > 0 else None, "rounds": ROUNDS}
